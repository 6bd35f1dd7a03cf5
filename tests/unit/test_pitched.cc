/* SPDX-License-Identifier: MIT
 * ibpshim: the host bytes a pitched copy or memset may write (interpose/pitched.h). */
#include <gtest/gtest.h>

#include <cstdint>

#include "interpose/pitched.h"

namespace
{

size_t span(IbpPitched d, uintptr_t *lo)
{
    return ibp_pitched_span(d, lo);
}

TEST(Pitched, RowIsItsBytes)
{
    uintptr_t lo = 0;
    EXPECT_EQ(span(ibp_pitched_row(reinterpret_cast<void *>(0x1000), 77), &lo), 77u);
    EXPECT_EQ(lo, 0x1000u);
    EXPECT_EQ(span(ibp_pitched_row(reinterpret_cast<void *>(0x1000), 0), &lo), 0u) << "an empty write";
}

TEST(Pitched, TwoDimensionsFromFirstToLastByte)
{
    uintptr_t lo = 0;
    /* 40 rows of 3000 bytes, 8197 apart: the last row starts 39 pitches in. */
    EXPECT_EQ(span(ibp_pitched_2d(reinterpret_cast<void *>(0x10000), 8197, 3000, 40), &lo),
              39u * 8197 + 3000);
    EXPECT_EQ(lo, 0x10000u);
    EXPECT_EQ(span(ibp_pitched_2d(reinterpret_cast<void *>(0x10000), 8197, 3000, 0), &lo), 0u);
}

TEST(Pitched, ThreeDimensionsStartAtTheirPosition)
{
    cudaMemcpy3DParms p = {};
    p.dstPtr = cudaPitchedPtr{reinterpret_cast<void *>(0x100000), 4096, 4096, 30};
    p.dstPos = cudaPos{17, 2, 1};
    p.extent = cudaExtent{2000, 12, 3};
    uintptr_t lo = 0;
    const size_t n = span(ibp_pitched_memcpy3d(&p), &lo);
    EXPECT_EQ(lo, 0x100000u + 17 + 2 * 4096 + 4096 * 30);
    EXPECT_EQ(n, 2u * 4096 * 30 + 11 * 4096 + 2000);
    p.dstArray = reinterpret_cast<cudaArray_t>(0x1);
    EXPECT_EQ(span(ibp_pitched_memcpy3d(&p), &lo), 0u) << "an array destination is not host memory";
    EXPECT_EQ(span(ibp_pitched_memcpy3d(nullptr), &lo), 0u);
}

TEST(Pitched, ExtentFromAnArrayCountsElementsAtTheWidest)
{
    cudaMemcpy3DParms p = {};
    p.srcArray = reinterpret_cast<cudaArray_t>(0x1);
    p.dstPtr = cudaPitchedPtr{reinterpret_cast<void *>(0x100000), 65536, 65536, 1};
    p.extent = cudaExtent{100, 1, 1};
    uintptr_t lo = 0;
    EXPECT_EQ(span(ibp_pitched_memcpy3d(&p), &lo), 100u * IBP_ARRAY_ELEMENT_MAX);
}

TEST(Pitched, SlicesAreAtLeastTheExtentsRowsApart)
{
    // A pitched pointer with ysize 0 and three slices: taken as slices of the extent's 4 rows.
    uintptr_t lo = 0;
    const IbpPitched d =
        ibp_pitched_3d(nullptr, cudaPitchedPtr{reinterpret_cast<void *>(0x10000), 512, 512, 0},
                       cudaPos{0, 0, 0}, cudaExtent{100, 4, 3}, 0);
    EXPECT_EQ(span(d, &lo), 2u * 4 * 512 + 3 * 512 + 100);
}

TEST(Pitched, DriverCopiesTakeTheirDestinationByItsMemoryType)
{
    uintptr_t lo = 0;
    void *const host = reinterpret_cast<void *>(0x200000);
    const CUdeviceptr dev = 0x300000;
    // Host memory by dstHost; device and unified (a pinned region's unified address) by dstDevice.
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_HOST, host, dev, 5, 1, 0, 1000, 0, 10, 2, 1), &lo),
              1000u + 10);
    EXPECT_EQ(lo, 0x200000u + 5 + 1000);
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_UNIFIED, host, dev, 0, 0, 0, 1000, 0, 10, 1, 1), &lo),
              10u);
    EXPECT_EQ(lo, 0x300000u);
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_DEVICE, host, dev, 0, 0, 0, 1000, 0, 10, 1, 1), &lo),
              10u);
    EXPECT_EQ(lo, 0x300000u);
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_ARRAY, host, dev, 0, 0, 0, 1000, 0, 10, 1, 1), &lo), 0u)
        << "an array destination is not host memory";
    // Three slices of a copy of 4 rows, dstHeight 0: slices the copy's rows apart.
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_HOST, host, dev, 0, 0, 0, 512, 0, 100, 4, 3), &lo),
              2u * 4 * 512 + 3 * 512 + 100);
}

TEST(Pitched, AHeightOfZeroIsTheCopysRowsPastItsFirst)
{
    // As the H200's driver wrote it: 2 rows at row 1 of slice 3, pitch 256, dstHeight 0, from
    // (3 * 3 + 1) * 256 on; the runtime's ysize taken the same way.
    uintptr_t lo = 0;
    void *const host = reinterpret_cast<void *>(0x200000);
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_HOST, host, 0, 0, 1, 3, 256, 0, 16, 2, 1), &lo),
              256u + 16);
    EXPECT_EQ(lo, 0x200000u + 10 * 256);
    // Two slices of 2 rows from slice 1, dstHeight 0: slices 2 rows apart, from 512 to 1295.
    EXPECT_EQ(span(ibp_pitched_driver(CU_MEMORYTYPE_HOST, host, 0, 0, 0, 1, 256, 0, 16, 2, 2), &lo),
              1295u - 512 + 1);
    EXPECT_EQ(lo, 0x200000u + 512);
    const IbpPitched d =
        ibp_pitched_3d(nullptr, cudaPitchedPtr{host, 256, 256, 0}, cudaPos{0, 1, 3}, cudaExtent{16, 2, 1}, 0);
    EXPECT_EQ(span(d, &lo), 256u + 16);
    EXPECT_EQ(lo, 0x200000u + 10 * 256);
}

TEST(Pitched, BatchOperandsTakeTheirRowsAndLayersOrTheExtents)
{
    uintptr_t lo = 0;
    void *const p = reinterpret_cast<void *>(0x200000);
    /* rows 4100 bytes apart, layers of 10 rows: the last row of layer 2 ends there. */
    EXPECT_EQ(span(ibp_pitched_batch_op(1, 0, p, 4100, 10, 2600, 7, 3), &lo), 2u * 41000 + 6u * 4100 + 2600);
    EXPECT_EQ(lo, 0x200000u);
    /* 0 takes the extent's width and height: the copy is contiguous. */
    EXPECT_EQ(span(ibp_pitched_batch_op(1, 0, p, 0, 0, 2600, 7, 3), &lo), 3u * 7 * 2600);
    /* From an array the extent counts elements, taken at the widest. */
    EXPECT_EQ(span(ibp_pitched_batch_op(1, 1, p, 0, 0, 10, 1, 1), &lo), 10u * IBP_ARRAY_ELEMENT_MAX);
    EXPECT_EQ(span(ibp_pitched_batch_op(0, 0, p, 4100, 10, 2600, 7, 3), &lo), 0u) << "an array destination";
    EXPECT_EQ(span(ibp_pitched_batch_op(1, 1, p, SIZE_MAX / 8, 0, 1, 2, 1), &lo), UINTPTR_MAX - 0x200000u)
        << "an overflowing pitch takes the rest of the address space";
}

TEST(Pitched, MemsetCountsElements)
{
    uintptr_t lo = 0;
    EXPECT_EQ(span(ibp_pitched_memset(reinterpret_cast<void *>(0x2000), 1024, 4, 100, 3), &lo),
              2u * 1024 + 400);
}

TEST(Pitched, OverflowTakesTheRestOfTheAddressSpace)
{
    uintptr_t lo = 0;
    const IbpPitched huge = ibp_pitched_2d(reinterpret_cast<void *>(0x1000), SIZE_MAX / 2, 10, 5);
    const size_t n = span(huge, &lo);
    EXPECT_EQ(lo, 0x1000u);
    EXPECT_EQ(n, UINTPTR_MAX - 0x1000u) << "never wraps";
    IbpPitched far = ibp_pitched_row(reinterpret_cast<void *>(UINTPTR_MAX - 10), 100);
    EXPECT_EQ(span(far, &lo), 10u) << "clipped at the end of the address space";
    EXPECT_EQ(span(ibp_pitched_memset(reinterpret_cast<void *>(0x1000), 0, 8, SIZE_MAX / 2, 1), &lo),
              UINTPTR_MAX - 0x1000u);
}

} // namespace
