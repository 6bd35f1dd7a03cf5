// SPDX-License-Identifier: MIT
// ibpshim: which kernels ibp_decode_launch() enqueues for each kind of plan, with and without the
// scratch, against the fake CUDA (whose kernels decode on the CPU, and whose counting and fix-up
// kernels check that the scratch holds a record for every CTA of their grid).  Every decode is
// compared byte for byte with the data.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "codec/format.h"
#include "ibpshim/codec.h"
#include "kernels/decode_abi.h"
#include "kernels/driver.h"
#include "kernels/module.h"
#include "tests/fakecuda/fakecuda.h"
}

namespace
{

typedef void (*StatsFn)(FakecudaStats *);
typedef int (*LastLaunchFn)(char *, size_t, unsigned *, unsigned *);
typedef int (*KernelGridFn)(const char *, unsigned *);
typedef void (*FailFn)(const char *, unsigned, unsigned, int);

// Under the registration that sets it: how many of the module's requests for dynamic shared
// memory (8-, 4-, then 2-byte words) the driver refuses.
unsigned refused_smem()
{
    const char *v = std::getenv("DECODE_LAUNCH_REFUSE_SMEM");
    return v ? (unsigned)std::atoi(v) : 0u;
}

// Under the registration that sets it: the driver's occupancy queries fail, so the segmented
// kernels get no segment buffer.
bool refused_occupancy()
{
    return std::getenv("DECODE_LAUNCH_REFUSE_OCCUPANCY") != nullptr;
}

// A plan of w-byte words (4 or 8) and `columns` columns, rows of 1024 words, one mask set keeping
// the low 12 bits of every column variant; every column delta-coded (and zigzag) or none.
IbpCodecPlan *make_plan(uint32_t columns, bool delta, uint32_t block_size, uint32_t w = 4)
{
    const uint32_t xform_off = 32, mask_off = xform_off + ((columns + 15) & ~15u);
    std::vector<uint8_t> blob(mask_off + ((columns * 2 * w + 15) & ~15u), 0);
    IbpPlanHeader h = {};
    h.magic = IBP_PLAN_MAGIC;
    h.version = IBP_FORMAT_VERSION;
    h.word_size = (uint8_t)w;
    h.nsets = 1;
    h.columns = columns;
    h.row_words = 1024;
    h.block_size = block_size;
    h.blob_len = (uint32_t)blob.size();
    h.xform_off = xform_off;
    h.mask_off = mask_off;
    std::memcpy(blob.data(), &h, sizeof(h));
    const uint64_t mask = ~(uint64_t)0xfff; // little-endian: its first w bytes are the w-byte mask
    for (uint32_t c = 0; c < columns; c++) {
        blob[xform_off + c] = delta ? (uint8_t)(IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG) : 0;
        std::memcpy(&blob[mask_off + c * 2 * w], &mask, w); // value 0
    }
    IbpCodecPlan *plan = nullptr;
    EXPECT_EQ(ibp_codec_plan_from_blob(blob.data(), blob.size(), &plan), 0);
    return plan;
}

class DecodeLaunch : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        drv_ = ibp_driver_get();
        if (!drv_ || !ibp_kernels_built())
            GTEST_SKIP() << "needs a driver and embedded kernels";
        void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        stats_ = lib ? (StatsFn)dlsym(lib, "fakecuda_stats") : nullptr;
        last_launch_ = lib ? (LastLaunchFn)dlsym(lib, "fakecuda_last_launch") : nullptr;
        kernel_grid_ = lib ? (KernelGridFn)dlsym(lib, "fakecuda_kernel_grid") : nullptr;
        if (!stats_)
            GTEST_SKIP() << "needs the fake CUDA driver (it counts kernel launches)";
        if (refused_smem()) // before the first module load of the process
            ((FailFn)dlsym(lib, "fakecuda_fail_calls"))("cuFuncSetAttribute", 0, refused_smem(), 0);
        else if (refused_occupancy()) // every query of the module load
            ((FailFn)dlsym(lib, "fakecuda_fail_calls"))("cuOccupancyMaxActiveBlocksPerMultiprocessor", 0,
                                                        IBP_KERNEL_COUNT * 3, 0);
        ASSERT_EQ(drv_->cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuDevicePrimaryCtxRetain(&ctx_, dev_), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuCtxPushCurrent(ctx_), CUDA_SUCCESS);
        pushed_ = true;
        ASSERT_EQ(ibp_module_get(ctx_, &mod_), 0);
        ASSERT_EQ(drv_->cuMemAlloc(&scratch_, ibp_decode_scratch_bytes(mod_)), CUDA_SUCCESS);
    }

    void TearDown() override
    {
        for (CUdeviceptr p : allocs_)
            drv_->cuMemFree(p);
        if (scratch_)
            drv_->cuMemFree(scratch_);
        if (pushed_) {
            CUcontext popped;
            drv_->cuCtxPopCurrent(&popped);
            drv_->cuDevicePrimaryCtxRelease(dev_);
        }
    }

    // n bytes of device memory, holding src's when given.
    CUdeviceptr device_copy(const void *src, size_t n)
    {
        CUdeviceptr p = 0;
        EXPECT_EQ(drv_->cuMemAlloc(&p, n ? n : 1), CUDA_SUCCESS);
        if (src && n) {
            EXPECT_EQ(drv_->cuMemcpyHtoD(p, src, n), CUDA_SUCCESS);
        }
        allocs_.push_back(p);
        return p;
    }

    // Encodes `nblocks` blocks of columns that grow row by row (what delta predicts), but for
    // those whose bit is set in float_blocks_: float weights (what top-byte coding takes).
    void encode(IbpCodecPlan *plan, uint32_t nblocks)
    {
        plan_ = plan;
        bs_ = ibp_codec_plan_block_size(plan);
        IbpCodecPlanInfo info;
        ibp_codec_plan_info(plan, &info);
        columns_ = info.columns;
        nsets_ = info.nsets;
        word_size_ = info.word_size;
        data_.resize((size_t)nblocks * bs_);
        uint32_t x = 2463534242u;
        for (size_t j = 0; j < data_.size() / 4; j++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            const uint32_t v = (uint32_t)(j / columns_) * 3u + (x & 0x3ffu);
            const float f = (float)((double)(x & 0xffffffu) / 16777216.0 - 0.5) * 0.1f;
            const size_t block = j * 4 / bs_;
            if (block < 32 && ((float_blocks_ >> block) & 1u))
                std::memcpy(&data_[j * 4], &f, 4);
            else
                std::memcpy(&data_[j * 4], &v, 4);
        }
        std::vector<uint8_t> run, tmp(ibp_codec_block_bound(plan, bs_));
        std::vector<uint64_t> offs;
        for (uint32_t b = 0; b < nblocks; b++) {
            size_t comp = 0;
            ASSERT_EQ(
                ibp_codec_block_encode(plan, &data_[b * bs_], bs_, b * bs_, tmp.data(), tmp.size(), &comp),
                0);
            offs.push_back(run.size());
            run.insert(run.end(), tmp.begin(), tmp.begin() + comp);
            IbpBlockHeader h;
            std::memcpy(&h, tmp.data(), sizeof(h));
            flagged_ += (h.flags & IBP_BLOCK_SELFLAGS) != 0;
            top_ += (h.flags & IBP_BLOCK_TOPCODED) != 0;
        }
        offs.push_back(run.size());
        size_t blob_len = 0;
        const void *blob = ibp_codec_plan_blob(plan, &blob_len);
        args_ = {};
        args_.comp = device_copy(run.data(), run.size());
        args_.offsets = device_copy(offs.data(), offs.size() * sizeof(uint64_t));
        args_.plan = device_copy(blob, blob_len);
        args_.dst = device_copy(nullptr, data_.size());
        args_.len = data_.size();
        args_.nblocks = nblocks;
        args_.block_size = (uint32_t)bs_;
    }

    // Decodes the run and checks every byte; returns the kernels it launched.
    uint64_t decode(unsigned flags, bool with_scratch, unsigned max_ctas = 0)
    {
        FakecudaStats before, after;
        EXPECT_EQ(drv_->cuMemsetD8(args_.dst, 0xa5, data_.size()), CUDA_SUCCESS);
        if (args_.selx) {
            EXPECT_EQ(drv_->cuMemsetD8(args_.selx, 0x5a,
                                       ibp_decode_selx_bytes(word_size_, (uint32_t)bs_, args_.nblocks)),
                      CUDA_SUCCESS);
        }
        IbpDecodeArgs a = args_;
        a.scratch = with_scratch ? scratch_ : 0;
        stats_(&before);
        EXPECT_EQ(ibp_decode_launch(mod_, &a, word_size_, columns_, nsets_, flags, max_ctas, nullptr), 0);
        EXPECT_EQ(drv_->cuCtxSynchronize(), CUDA_SUCCESS);
        stats_(&after);
        std::vector<uint8_t> out(data_.size());
        EXPECT_EQ(drv_->cuMemcpyDtoH(out.data(), args_.dst, out.size()), CUDA_SUCCESS);
        EXPECT_TRUE(out == data_) << "decoded bytes differ";
        return after.kernel_launches - before.kernel_launches;
    }

    // The last launch was `kernel`, over `nblocks` blocks of 262144 bytes of w-byte words on a
    // device that holds per_sm of its CTAs a multiprocessor: with every CTA it holds where the
    // groups are more (balanced false), else with as few as the fewest rounds need.
    // shared: the dynamic shared memory it was launched with.
    void expect_grid(const char *kernel, uint32_t nblocks, uint32_t w, unsigned per_sm, bool balanced,
                     unsigned shared = 0)
    {
        char name[64];
        unsigned grid = 0, shared_bytes = ~0u;
        ASSERT_TRUE(last_launch_(name, sizeof(name), &grid, &shared_bytes));
        EXPECT_STREQ(name, kernel);
        EXPECT_EQ(shared_bytes, shared) << kernel;
        const uint64_t resident = (uint64_t)mod_->sm_count * per_sm;
        const uint64_t groups =
            (uint64_t)nblocks * (262144u / w / IBP_DECODE_SEG_WORDS / (IBP_DECODE_THREADS / 32u));
        const uint64_t rounds = (groups + resident - 1u) / resident;
        EXPECT_EQ(grid, balanced ? (groups + rounds - 1u) / rounds : std::min(groups, resident))
            << kernel << ", " << nblocks << " blocks";
        EXPECT_LE(grid, resident);
    }

    const IbpDriver *drv_ = nullptr;
    StatsFn stats_ = nullptr;
    LastLaunchFn last_launch_ = nullptr;
    KernelGridFn kernel_grid_ = nullptr;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
    bool pushed_ = false;
    const IbpModule *mod_ = nullptr;
    CUdeviceptr scratch_ = 0;
    std::vector<CUdeviceptr> allocs_;
    IbpCodecPlan *plan_ = nullptr;
    size_t bs_ = 0;
    uint32_t columns_ = 0;
    uint32_t nsets_ = 0;
    uint32_t word_size_ = 4;
    std::vector<uint8_t> data_;
    uint32_t flagged_ = 0; // blocks of flagged selectors encode() wrote
    uint32_t top_ = 0;     // top-byte coded blocks encode() wrote
    uint32_t float_blocks_ = 0;
    IbpDecodeArgs args_ = {};
};

TEST_F(DecodeLaunch, PredictorPlansSegmentedWithScratch)
{
    if (refused_smem())
        GTEST_SKIP() << "the device refused the predictor decode its shared memory";
    IbpCodecPlan *plan = make_plan(3, true, 262144);
    ASSERT_NE(plan, nullptr);
    encode(plan, 4); // 64 groups of 8 segments: shares of one group, a sixteenth of a block
    EXPECT_EQ(decode(IBP_DECODE_PRED, true), 3u) << "count, segmented decode, fix-up";
    EXPECT_EQ(decode(IBP_DECODE_PRED | IBP_DECODE_INDEXED, true), 1u)
        << "blocks with the group index and its carries: no counting pass, no fix-up";
    EXPECT_EQ(decode(IBP_DECODE_PRED, true, 8), 2u) << "shares of two blocks: no counting pass";
    EXPECT_EQ(decode(IBP_DECODE_PRED, false), 1u) << "no scratch: a CTA per block";
    EXPECT_EQ(decode(IBP_DECODE_PRED | IBP_DECODE_BLOCK, true), 1u);
    ibp_codec_plan_destroy(&plan);
}

// The predictor kernel's grid: every group a CTA where the device holds that many CTAs at once,
// else as few CTAs as the fewest rounds need (30 blocks: 480 groups, two rounds of 240), never
// more than the device holds.
TEST_F(DecodeLaunch, PredictorGridsTakeTheFewestRoundsWithTheFewestCtas)
{
    ASSERT_NE(last_launch_, nullptr);
    if (refused_smem())
        GTEST_SKIP() << "the device refused the predictor decode its shared memory";
    for (const uint32_t columns : {1u, 3u}) {
        IbpCodecPlan *plan = make_plan(columns, true, 262144);
        ASSERT_NE(plan, nullptr);
        for (const uint32_t nblocks : {4u, 30u, 200u}) {
            encode(plan, nblocks);
            EXPECT_EQ(decode(IBP_DECODE_PRED | IBP_DECODE_INDEXED, true), 1u);
            expect_grid("ibp_k_decode_segp", nblocks, 4, IBP_DECODE_SEGP_CTAS_PER_SM, true,
                        IBP_DECODE_SEGP_BYTES(4));
        }
        ibp_codec_plan_destroy(&plan);
    }
}

// Predictor plans of 2- and 4-byte words with more table entries than IBP_DECODE_PARTS_ENTRIES_MAX
// (one mask set: two entries a column) take the kernel whose table is sliced, with the same grid
// and shared memory; 8-byte words keep the parts.
TEST_F(DecodeLaunch, PredictorPlansOfManyEntriesTakeTheSlicedTable)
{
    ASSERT_NE(last_launch_, nullptr);
    if (refused_smem())
        GTEST_SKIP() << "the device refused the predictor decode its shared memory";
    static_assert(IBP_DECODE_PARTS_ENTRIES_MAX % 2 == 0, "one mask set: two entries a column");
    const struct {
        uint32_t columns, w;
        const char *kernel;
    } cases[] = {{IBP_DECODE_PARTS_ENTRIES_MAX / 2, 4, "ibp_k_decode_segp"},
                 {IBP_DECODE_PARTS_ENTRIES_MAX / 2 + 1, 4, "ibp_k_decode_segps"},
                 {IBP_DECODE_PRED_MAX_COLUMNS, 4, "ibp_k_decode_segps"},
                 {IBP_DECODE_PARTS_ENTRIES_MAX / 2 + 1, 8, "ibp_k_decode_segp"}};
    for (const auto &c : cases) {
        IbpCodecPlan *plan = make_plan(c.columns, true, 262144, c.w);
        ASSERT_NE(plan, nullptr);
        encode(plan, 4);
        EXPECT_EQ(nsets_, 1u);
        EXPECT_EQ(decode(IBP_DECODE_PRED | IBP_DECODE_INDEXED, true), 1u) << c.columns << " columns";
        expect_grid(c.kernel, 4, c.w, IBP_DECODE_SEGP_CTAS_PER_SM, true, IBP_DECODE_SEGP_BYTES(c.w));
        ibp_codec_plan_destroy(&plan);
    }
}

TEST_F(DecodeLaunch, PlansOfSeveralColumnsCountShortShares)
{
    IbpCodecPlan *plan = make_plan(5, false, 262144);
    ASSERT_NE(plan, nullptr);
    encode(plan, 4);
    EXPECT_EQ(decode(0, true), 2u) << "count, segmented decode";
    EXPECT_EQ(decode(IBP_DECODE_INDEXED, true), 1u) << "indexed blocks: the decode alone";
    EXPECT_EQ(decode(0, false), 1u) << "no scratch: each CTA counts its block's earlier segments";
    EXPECT_EQ(decode(0, true, 8), 1u);
    EXPECT_EQ(decode(IBP_DECODE_BLOCK, true), 1u);
    ibp_codec_plan_destroy(&plan);
}

// Runs of blocks of flagged selectors: ibp_k_decode_unflag first, then what the plan takes anyway.
// The fake decodes such blocks with the selectors found in the run's selx, poisoned before each
// launch, so a decode not preceded by the rewrite fails.
TEST_F(DecodeLaunch, FlaggedSelectorsAreRewrittenFirst)
{
    ASSERT_NE(kernel_grid_, nullptr);
    for (const uint32_t columns : {1u, 3u}) {
        IbpCodecPlan *base = make_plan(columns, true, 262144);
        ASSERT_NE(base, nullptr);
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_with_selector_flags(base, 1, &plan), 0);
        ibp_codec_plan_destroy(&base);
        flagged_ = 0;
        encode(plan, 4);
        EXPECT_EQ(flagged_, 4u) << "every block of small deltas takes the flagged form";
        args_.selx = device_copy(nullptr, ibp_decode_selx_bytes(word_size_, (uint32_t)bs_, 4));
        const unsigned f = IBP_DECODE_SELFLAGS | IBP_DECODE_PRED;
        EXPECT_EQ(decode(f | IBP_DECODE_INDEXED, true), 2u) << "unflag, segmented decode";
        EXPECT_EQ(decode(f | IBP_DECODE_INDEXED | IBP_DECODE_BLOCK, true), 2u) << "unflag, a CTA per block";
        EXPECT_EQ(decode(f, false), 2u) << "unflag, a CTA per block (no scratch)";
        // The rewrite: a CTA a share of a block, no more than the device holds or max_ctas allows,
        // in the largest shares that still fill the device.
        const unsigned resident = (unsigned)mod_->sm_count * IBP_DECODE_UNFLAG_CTAS_PER_SM;
        const uint32_t words = ibp_decode_unflag_words(word_size_, (uint32_t)bs_, 4, resident);
        const unsigned shares = ibp_decode_unflag_shares(word_size_, (uint32_t)bs_, words);
        EXPECT_EQ(shares, 262144u / word_size_ / 16u / words) << "2 bits a word, 32 a thread";
        unsigned grid = 0;
        ASSERT_TRUE(kernel_grid_("ibp_k_decode_unflag", &grid));
        EXPECT_EQ(grid, std::min<uint64_t>(4u * shares, resident));
        EXPECT_EQ(decode(f, false, 3), 2u) << "unflag within max_ctas";
        ASSERT_TRUE(kernel_grid_("ibp_k_decode_unflag", &grid));
        EXPECT_EQ(grid, 3u);
        if (columns > 1 && !refused_smem()) {
            EXPECT_EQ(decode(f, true), 4u) << "unflag, count, segmented decode, fix-up";
        }
        IbpDecodeArgs a = args_;
        a.selx = 0;
        EXPECT_EQ(ibp_decode_launch(mod_, &a, word_size_, columns_, nsets_, f, 0, nullptr), -EINVAL)
            << "no selx";
        a.selx = args_.selx + 8;
        EXPECT_EQ(ibp_decode_launch(mod_, &a, word_size_, columns_, nsets_, f, 0, nullptr), -EINVAL)
            << "misaligned";
        ibp_codec_plan_destroy(&plan);
    }
}

// Top-byte coded blocks go to ibp_k_decode_top: alone where the run holds no packed block, else
// after the packed decode, which leaves them alone, as a CTA a block or segmented.
TEST_F(DecodeLaunch, TopCodedBlocksTakeTheirOwnKernel)
{
    ASSERT_NE(kernel_grid_, nullptr);
    IbpCodecPlan *base = make_plan(1, true, 262144);
    ASSERT_NE(base, nullptr);
    size_t blob_len = 0;
    const void *blob = ibp_codec_plan_blob(base, &blob_len);
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_from_blob_flags(blob, blob_len, IBP_CODEC_PLAN_TOP_CODED, &plan), 0);
    ibp_codec_plan_destroy(&base);
    float_blocks_ = 0xf;
    encode(plan, 4);
    EXPECT_EQ(top_, 4u) << "float weights take the top-byte form";
    const unsigned f = IBP_DECODE_INDEXED | IBP_DECODE_PRED;
    EXPECT_EQ(decode(f | IBP_DECODE_TOP_ONLY, true), 1u) << "the top-byte decode alone";
    unsigned grid = 0;
    ASSERT_TRUE(kernel_grid_("ibp_k_decode_top", &grid));
    EXPECT_EQ(grid, 4u) << "a CTA a block";
    EXPECT_EQ(decode(f | IBP_DECODE_TOP_ONLY, true, 3), 1u);
    ASSERT_TRUE(kernel_grid_("ibp_k_decode_top", &grid));
    EXPECT_EQ(grid, 3u) << "within max_ctas";
    EXPECT_EQ(decode(f | IBP_DECODE_TOPCODED, true), 2u) << "segmented decode, then the top-byte one";
    top_ = 0;
    float_blocks_ = 0x5;
    encode(plan, 4);
    EXPECT_EQ(top_, 2u) << "the deltas stay packed";
    EXPECT_EQ(decode(f | IBP_DECODE_TOPCODED, true), 2u) << "segmented decode, then the top-byte one";
    EXPECT_EQ(decode(f | IBP_DECODE_TOPCODED | IBP_DECODE_BLOCK, false), 2u) << "a CTA a block, then top";
    char name[64];
    ASSERT_TRUE(last_launch_(name, sizeof(name), nullptr, nullptr));
    EXPECT_STREQ(name, "ibp_k_decode_top");
    ibp_codec_plan_destroy(&plan);
}

// The rewrite's share size: the largest power of two from MIN to MAX words whose shares of the
// run fill the device, MIN where none does.
TEST(DecodeUnflagWords, LargestSharesThatFillTheDevice)
{
    for (const uint32_t w : {2u, 4u, 8u})
        for (const uint32_t bs : {4096u, 65536u, 262144u, 1u << 20})
            for (const uint32_t nblocks : {1u, 3u, 16u, 257u, 4096u})
                for (const uint32_t resident : {1u, 132u, 528u, 4096u}) {
                    const uint32_t words = ibp_decode_unflag_words(w, bs, nblocks, resident);
                    SCOPED_TRACE(::testing::Message() << "w " << w << " block " << bs << " blocks " << nblocks
                                                      << " resident " << resident << " -> " << words);
                    ASSERT_GE(words, IBP_DECODE_UNFLAG_WORDS_MIN);
                    ASSERT_LE(words, IBP_DECODE_UNFLAG_WORDS_MAX);
                    EXPECT_EQ(words & (words - 1), 0u) << "a power of two";
                    const uint64_t ctas = (uint64_t)nblocks * ibp_decode_unflag_shares(w, bs, words);
                    if (words > IBP_DECODE_UNFLAG_WORDS_MIN) {
                        EXPECT_GE(ctas, resident) << "its shares fill the device";
                    }
                    if (words < IBP_DECODE_UNFLAG_WORDS_MAX) {
                        EXPECT_LT((uint64_t)nblocks * ibp_decode_unflag_shares(w, bs, words * 2), resident)
                            << "twice the size would not";
                    }
                    // every word of the block's selectors is in some share
                    EXPECT_GE((uint64_t)ibp_decode_unflag_shares(w, bs, words) * words * 4,
                              ibp_decode_selx_stride(w, bs));
                }
}

TEST_F(DecodeLaunch, OneColumnPlansNeverCount)
{
    IbpCodecPlan *plan = make_plan(1, false, 262144);
    ASSERT_NE(plan, nullptr);
    encode(plan, 4);
    EXPECT_EQ(decode(0, true), 1u);
    EXPECT_EQ(decode(0, false), 1u);
    ibp_codec_plan_destroy(&plan);
}

// 8-byte words have kernels of their own, with their own CTAs a multiprocessor, for one column and
// for several; 4-byte words keep theirs.  50 blocks are more groups of segments than any of the
// grids holds at once: the one-column kernels take every CTA the device holds, those of several
// columns as few as the fewest rounds need.  Each stores its segments through shared memory where
// the device holds as many CTAs with it (the fake, which counts no static shared memory, does),
// and from the lanes' runs where the occupancy query failed.
TEST_F(DecodeLaunch, EightByteWordsHaveKernelsOfTheirOwn)
{
    ASSERT_NE(last_launch_, nullptr);
    static const struct {
        uint32_t columns, w;
        const char *kernel;
        unsigned per_sm, via_words;
    } cases[] = {{1, 4, "ibp_k_decode_seg1", IBP_DECODE_SEG1_CTAS_PER_SM, IBP_DECODE_SEG1_VIA_WORDS},
                 {1, 8, "ibp_k_decode_seg1w8", IBP_DECODE_SEG1W8_CTAS_PER_SM, IBP_DECODE_SEG1W8_VIA_WORDS},
                 // one mask set: two table entries a column, up to and past IBP_DECODE_PARTS_ENTRIES_MAX
                 {IBP_DECODE_PARTS_ENTRIES_MAX / 2, 4, "ibp_k_decode_seg", IBP_DECODE_SEG_CTAS_PER_SM,
                  IBP_DECODE_SEG_VIA_WORDS},
                 {IBP_DECODE_PARTS_ENTRIES_MAX / 2 + 1, 4, "ibp_k_decode_segs", IBP_DECODE_SEG_CTAS_PER_SM,
                  IBP_DECODE_SEG_VIA_WORDS},
                 {IBP_DECODE_PARTS_ENTRIES_MAX / 2 + 1, 8, "ibp_k_decode_segw8", IBP_DECODE_SEGW8_CTAS_PER_SM,
                  IBP_DECODE_SEGW8_VIA_WORDS},
                 {5, 8, "ibp_k_decode_segw8", IBP_DECODE_SEGW8_CTAS_PER_SM, IBP_DECODE_SEGW8_VIA_WORDS}};
    for (const auto &c : cases) {
        IbpCodecPlan *plan = make_plan(c.columns, false, 262144, c.w);
        ASSERT_NE(plan, nullptr);
        encode(plan, 50);
        EXPECT_EQ(word_size_, c.w);
        EXPECT_EQ(decode(IBP_DECODE_INDEXED, true), 1u);
        expect_grid(c.kernel, 50, c.w, c.per_sm, c.columns > 1,
                    refused_occupancy() || !(c.via_words & c.w) ? 0u : IBP_DECODE_VIA_BYTES(c.w));
        ibp_codec_plan_destroy(&plan);
    }
    // The kernel follows the word size the caller gives: one the kernels do not decode is refused
    // (the caller then copies raw), never launched.
    FakecudaStats before, after;
    stats_(&before);
    for (const unsigned bad : {0u, 1u, 3u, 16u})
        EXPECT_EQ(ibp_decode_launch(mod_, &args_, bad, 1, 1, 0, 0, nullptr), -EINVAL) << bad;
    stats_(&after);
    EXPECT_EQ(after.kernel_launches, before.kernel_launches);
}

TEST_F(DecodeLaunch, PredictorPlansACtaPerBlockWithoutTheSharedMemory)
{
    // The driver granted dynamic shared memory for 2-byte words only: the module still loads, and
    // predictor plans of 4-byte words decode a CTA per block.
    if (refused_smem() != 2)
        GTEST_SKIP() << "runs in the decode-launch-small-smem registration";
    EXPECT_EQ(mod_->segp_max_dynamic, IBP_DECODE_SEGP_BYTES(2));
    IbpCodecPlan *plan = make_plan(3, true, 262144);
    ASSERT_NE(plan, nullptr);
    encode(plan, 4);
    EXPECT_EQ(decode(IBP_DECODE_PRED, true), 1u);
    ibp_codec_plan_destroy(&plan);
}

TEST_F(DecodeLaunch, LongPredictorPeriodsGoACtaPerBlock)
{
    IbpCodecPlan *plan = make_plan(IBP_DECODE_PRED_MAX_COLUMNS + 1, true, 262144);
    ASSERT_NE(plan, nullptr);
    encode(plan, 2);
    EXPECT_EQ(decode(IBP_DECODE_PRED, true), 1u);
    ibp_codec_plan_destroy(&plan);
}

} // namespace
