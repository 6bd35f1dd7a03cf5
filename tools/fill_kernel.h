/* SPDX-License-Identifier: MIT
 * ibpshim: small kernels in PTX, which the driver compiles for any device (and the fake CUDA runs
 * by name): ibp_test_fill(uint32_t *dst, uint32_t value, uint64_t words) stores value into
 * dst[0, words); ibp_test_fill_struct takes the same in one structure passed by value,
 * {uint64_t tag; uint32_t *dst; uint32_t value; uint32_t words;}, as kernels taking arrays of
 * pointers do.  Each stores through the generic address space, so dst may be pinned host memory
 * by its unified address. */
#ifndef IBP_TOOLS_FILL_KERNEL_H
#define IBP_TOOLS_FILL_KERNEL_H

/* A grid-stride loop's start: rd3 the thread's index in the grid, rd4 the grid's threads. */
#define IBP_PTX_GRID_STRIDE                                                                                  \
    "    mov.u32 r2, %ctaid.x;\n"                                                                            \
    "    mov.u32 r3, %ntid.x;\n"                                                                             \
    "    mov.u32 r4, %tid.x;\n"                                                                              \
    "    mad.lo.u32 r5, r2, r3, r4;\n"                                                                       \
    "    cvt.u64.u32 rd3, r5;\n"                                                                             \
    "    mov.u32 r2, %nctaid.x;\n"                                                                           \
    "    mul.lo.u32 r3, r2, r3;\n"                                                                           \
    "    cvt.u64.u32 rd4, r3;\n"

#define IBP_FILL_LOOP(n)                                                                                     \
    IBP_PTX_GRID_STRIDE                                                                                      \
    "LOOP" n ":\n"                                                                                           \
    "    setp.ge.u64 p, rd3, rd2;\n"                                                                         \
    "    @p bra DONE" n ";\n"                                                                                \
    "    shl.b64 rd5, rd3, 2;\n"                                                                             \
    "    add.s64 rd6, rd1, rd5;\n"                                                                           \
    "    st.u32 [rd6], r1;\n"                                                                                \
    "    add.s64 rd3, rd3, rd4;\n"                                                                           \
    "    bra LOOP" n ";\n"                                                                                   \
    "DONE" n ":\n"                                                                                           \
    "    ret;\n"

/* ibp_test_copy16(const void *src, void *dst, uint64_t vecs) copies vecs 16-byte vectors, one load
 * and one store a thread a round over a grid-stride loop: with src pinned host memory by its
 * unified address, the rate at which the multiprocessors alone read across the link. */
#define IBP_COPY16_PTX                                                                                       \
    ".visible .entry ibp_test_copy16(.param .u64 src, .param .u64 dst, .param .u64 vecs)\n"                  \
    "{\n"                                                                                                    \
    "    .reg .pred p;\n"                                                                                    \
    "    .reg .b32 r<6>, v<4>;\n"                                                                            \
    "    .reg .b64 rd<9>;\n"                                                                                 \
    "    ld.param.u64 rd1, [src];\n"                                                                         \
    "    ld.param.u64 rd7, [dst];\n"                                                                         \
    "    ld.param.u64 rd2, [vecs];\n" IBP_PTX_GRID_STRIDE "LOOPC:\n"                                         \
    "    setp.ge.u64 p, rd3, rd2;\n"                                                                         \
    "    @p bra DONEC;\n"                                                                                    \
    "    shl.b64 rd5, rd3, 4;\n"                                                                             \
    "    add.s64 rd6, rd1, rd5;\n"                                                                           \
    "    ld.v4.u32 {v0, v1, v2, v3}, [rd6];\n"                                                               \
    "    add.s64 rd8, rd7, rd5;\n"                                                                           \
    "    st.v4.u32 [rd8], {v0, v1, v2, v3};\n"                                                               \
    "    add.s64 rd3, rd3, rd4;\n"                                                                           \
    "    bra LOOPC;\n"                                                                                       \
    "DONEC:\n"                                                                                               \
    "    ret;\n"                                                                                             \
    "}\n"

static const char ibp_fill_ptx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry ibp_test_fill(.param .u64 dst, .param .u32 value, .param .u64 words)\n"
    "{\n"
    "    .reg .pred p;\n"
    "    .reg .b32 r<7>;\n"
    "    .reg .b64 rd<7>;\n"
    "    ld.param.u64 rd1, [dst];\n"
    "    ld.param.u32 r1, [value];\n"
    "    ld.param.u64 rd2, [words];\n" IBP_FILL_LOOP(
        "A") "}\n"
             "\n"
             ".visible .entry ibp_test_fill_struct(.param .align 8 .b8 a[24])\n"
             "{\n"
             "    .reg .pred p;\n"
             "    .reg .b32 r<7>;\n"
             "    .reg .b64 rd<7>;\n"
             "    ld.param.u64 rd1, [a+8];\n"
             "    ld.param.u32 r1, [a+16];\n"
             "    ld.param.u32 r6, [a+20];\n"
             "    cvt.u64.u32 rd2, r6;\n" IBP_FILL_LOOP("B") "}\n"
                                                             "\n" IBP_COPY16_PTX;

/* ibp_test_fill_struct's parameter. */
typedef struct IbpFillArgs {
    uint64_t tag;
    uint32_t *dst;
    uint32_t value;
    uint32_t words;
} IbpFillArgs;

#endif /* IBP_TOOLS_FILL_KERNEL_H */
