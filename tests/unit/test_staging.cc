// SPDX-License-Identifier: MIT
// ibpshim: the device staging pool against the fake CUDA: size classes, the bound on bytes held,
// reuse only after the stream that released a buffer got past it, and what an exhausted pool does.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>

extern "C" {
#include "kernels/driver.h"
#include "kernels/staging.h"
}

namespace
{

constexpr size_t MiB = (size_t)1 << 20;

TEST(StagingSizeClass, PowersOfTwoThenEighths)
{
    EXPECT_EQ(ibp_staging_size_class(0), MiB);
    EXPECT_EQ(ibp_staging_size_class(1), MiB);
    EXPECT_EQ(ibp_staging_size_class(MiB), MiB);
    EXPECT_EQ(ibp_staging_size_class(MiB + 1), 2 * MiB);
    EXPECT_EQ(ibp_staging_size_class(3 * MiB), 4 * MiB);
    EXPECT_EQ(ibp_staging_size_class(8 * MiB), 8 * MiB);
    EXPECT_EQ(ibp_staging_size_class(8 * MiB + 1), 9 * MiB);
    // A 68 MiB run of an 87 MiB copy: 72 MiB, where powers of two gave 128.
    EXPECT_EQ(ibp_staging_size_class(68 * MiB + 5), 72 * MiB);
    EXPECT_EQ(ibp_staging_size_class(128 * MiB), 128 * MiB);
    EXPECT_EQ(ibp_staging_size_class(129 * MiB), 144 * MiB);
    // Never more than an eighth above what was asked, past 8 MiB.
    for (size_t s = 8 * MiB + 1; s < 600 * MiB; s += 7 * MiB + 12345) {
        const size_t c = ibp_staging_size_class(s);
        EXPECT_GE(c, s);
        EXPECT_LE(c - s, s / 8) << s;
        EXPECT_EQ(ibp_staging_size_class(c), c) << "a class is its own class";
    }
}

class Staging : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        drv_ = ibp_driver_get();
        if (!drv_)
            GTEST_SKIP() << "needs a CUDA driver (the fake one in CI)";
        ASSERT_EQ(drv_->cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuDevicePrimaryCtxRetain(&ctx_, dev_), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuCtxPushCurrent(ctx_), CUDA_SUCCESS);
        pushed_ = true;
        ASSERT_EQ(drv_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    }

    void TearDown() override
    {
        if (stream_)
            drv_->cuStreamDestroy(stream_);
        if (pushed_) {
            CUcontext popped;
            drv_->cuCtxPopCurrent(&popped);
            drv_->cuDevicePrimaryCtxRelease(dev_);
        }
    }

    const IbpDriver *drv_ = nullptr;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
    CUstream stream_ = nullptr;
    bool pushed_ = false;
};

// One test: the pool is per context and lives as long as the process.
TEST_F(Staging, BoundReuseAndExhaustion)
{
    ibp_staging_configure(24 * MiB, 0);
    IbpStagingBuf *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 9 * MiB + 512 * 1024, &a), 0);
    EXPECT_EQ(a->size, 10 * MiB);
    EXPECT_EQ(a->waited_ns, 0u);
    ASSERT_EQ(ibp_staging_acquire(ctx_, 10 * MiB, &b), 0);
    EXPECT_NE(a->ptr, b->ptr);
    // 20 MiB held, both in use: a third does not fit, and this pool may not wait.
    EXPECT_EQ(ibp_staging_acquire(ctx_, 9 * MiB, &c), -EBUSY);
    // Above the bound on its own: never.
    EXPECT_EQ(ibp_staging_acquire(ctx_, 25 * MiB, &c), -EBUSY);

    // Released on a stream with work queued: reused once the stream got past it.
    ASSERT_EQ(drv_->cuMemcpyDtoDAsync(a->ptr + a->size / 2, a->ptr, a->size / 2, stream_), CUDA_SUCCESS);
    const CUdeviceptr a_ptr = a->ptr;
    ASSERT_EQ(ibp_staging_release(a, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    ASSERT_EQ(ibp_staging_acquire(ctx_, 9 * MiB, &c), 0);
    EXPECT_EQ(c->ptr, a_ptr);
    EXPECT_EQ(c->waited_ns, 0u);

    // A pool that waits: with both buffers released on a stream that is still busy, an acquire
    // waits for the oldest and gets a buffer; the time it waited is on the buffer.
    ibp_staging_configure(24 * MiB, 1);
    ASSERT_EQ(drv_->cuMemcpyDtoDAsync(b->ptr + b->size / 2, b->ptr, b->size / 2, stream_), CUDA_SUCCESS);
    ASSERT_EQ(ibp_staging_release(b, stream_), 0);
    ASSERT_EQ(ibp_staging_release(c, stream_), 0);
    IbpStagingBuf *d = nullptr, *e = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 10 * MiB, &d), 0);
    ASSERT_EQ(ibp_staging_acquire(ctx_, 10 * MiB, &e), 0);
    EXPECT_NE(d->ptr, e->ptr);
    EXPECT_LT(d->waited_ns + e->waited_ns, 10ull * 1000 * 1000 * 1000);

    // A larger class than any idle buffer: the idle small ones are freed to make room.
    ASSERT_EQ(ibp_staging_release(d, stream_), 0);
    ASSERT_EQ(ibp_staging_release(e, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    IbpStagingBuf *big = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 18 * MiB + 1, &big), 0);
    EXPECT_EQ(big->size, 20 * MiB);
    ASSERT_EQ(ibp_staging_release(big, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
}

} // namespace
