// SPDX-License-Identifier: MIT
// ibpshim: the shadow store never hands out a compressed block that differs from the source:
// random writes, plans, recompressions and invalidations, with both tracking backends.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

extern "C" {
#include "ibpshim/codec.h"
#include "policy/registry.h"
#include "policy/shadow.h"
#include "policy/track.h"
}

namespace {

struct TestFence {
    std::atomic<int> done{0};
    std::atomic<int> released{0};
};

int test_alloc(void *, size_t size, void **host)
{
    *host = aligned_alloc(16, (size + 15) & ~(size_t)15);
    return *host ? 0 : -ENOMEM;
}
void test_free(void *, void *host, size_t)
{
    free(host);
}
int test_fence_done(void *, void *fence)
{
    return static_cast<TestFence *>(fence)->done.load();
}
void test_fence_wait(void *, void *fence)
{
    while (!static_cast<TestFence *>(fence)->done.load())
        std::this_thread::yield();
}
void test_fence_release(void *, void *fence)
{
    static_cast<TestFence *>(fence)->released.fetch_add(1);
}

const IbpShadowOps kOps = {test_alloc, test_free, test_fence_done, test_fence_wait, test_fence_release, nullptr};

// Weights-like float32 data: compresses with IBP, so blocks are VALID after a build.
void fill_weights(uint8_t *p, size_t n, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.05f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float v = dist(rng);
        memcpy(p + i, &v, 4);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)rng();
}

class ShadowTest : public ::testing::TestWithParam<IbpTrackBackend> {
protected:
    void SetUp() override
    {
        if (GetParam() == IBP_TRACK_UFFD) {
            const char *why = nullptr;
            if (!ibp_track_uffd_available(&why))
                GTEST_SKIP() << "userfaultfd write-protect unavailable: " << (why ? why : "?");
        }
        size_ = (8u << 20) + 12345; // odd tail: the last block is short and ends mid-page
        map_len_ = (size_ + 4095) & ~(size_t)4095;
        mem_ = static_cast<uint8_t *>(mmap(nullptr, map_len_, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        ASSERT_NE(mem_, MAP_FAILED);
        fill_weights(mem_, size_, 7);
        ASSERT_GT(ibp_registry_add(mem_, size_, IBP_REGION_PINNED_ALLOC, 0, &region_), 0);
        IbpTrackBackend got;
        ASSERT_EQ(ibp_track_region(region_, GetParam(), &got), 0);
        ASSERT_EQ(got, GetParam());
        tracker_ = ibp_region_tracker(region_);
        ASSERT_NE(tracker_, nullptr);
        ASSERT_EQ(ibp_tracker_arm(tracker_), 0);
        IbpCodecPlanOptions opts = {};
        opts.block_size = 64 * 1024;
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(mem_, size_, &opts, &plan), 0);
        ASSERT_EQ(ibp_shadow_create(&kOps, mem_, size_, &plan, &shadow_), 0);
        EXPECT_EQ(plan, nullptr);
    }
    void TearDown() override
    {
        ibp_shadow_destroy(&shadow_);
        if (region_) {
            ibp_region_put(&region_);
            ibp_registry_remove(mem_);
        }
        if (mem_ && mem_ != MAP_FAILED)
            munmap(mem_, map_len_);
    }

    // Plans [off, off + len), decodes the pieces on the CPU and compares with the source now.
    void expect_exact(size_t off, size_t len, size_t min_run = 0)
    {
        IbpPiece pieces[512];
        uint64_t ticket = 0;
        const int n = ibp_shadow_plan(shadow_, tracker_, off, len, min_run, pieces, 512, &ticket);
        ASSERT_GT(n, 0);
        size_t covered = 0;
        for (int i = 0; i < n; i++) {
            EXPECT_EQ(pieces[i].off, off + covered);
            covered += pieces[i].len;
        }
        EXPECT_EQ(covered, len);
        std::vector<uint8_t> out(len, 0xcd);
        ASSERT_EQ(ibp_shadow_decode_pieces(shadow_, pieces, (size_t)n, out.data()), 0);
        ibp_shadow_plan_end(shadow_, ticket, nullptr);
        ASSERT_EQ(memcmp(out.data(), mem_ + off, len), 0) << "off=" << off << " len=" << len;
    }

    uint8_t *mem_ = nullptr;
    size_t size_ = 0, map_len_ = 0;
    IbpRegion *region_ = nullptr;
    IbpTracker *tracker_ = nullptr;
    IbpShadow *shadow_ = nullptr;
};

TEST_P(ShadowTest, BuildPublishesEveryCleanBlock)
{
    double ratio = 0;
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, &ratio), 0);
    EXPECT_LT(ratio, 0.98);
    IbpShadowStats st;
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(st.stale, 0u);
    EXPECT_EQ(st.empty, 0u);
    EXPECT_GT(st.valid, st.nblocks / 2);
    EXPECT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, &ratio), -EALREADY);
    IbpPiece pieces[4];
    uint64_t ticket = 0;
    const int n = ibp_shadow_plan(shadow_, tracker_, 0, size_, 0, pieces, 4, &ticket);
    ASSERT_GE(n, 1);
    EXPECT_EQ(pieces[0].kind, IBP_PIECE_COMPRESSED);
    ibp_shadow_plan_end(shadow_, ticket, nullptr);
    expect_exact(0, size_);
}

// A shadow says whether its runs may hold flagged selectors: never for a plan that does not write
// them, from the build on for one that does (weights: their columns' selectors mostly agree).
TEST_P(ShadowTest, ShadowsSayWhetherTheyHoldFlaggedSelectors)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    EXPECT_FALSE(ibp_shadow_any_flagged(shadow_));
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_with_selector_flags(ibp_shadow_codec_plan(shadow_), 1, &plan), 0);
    ibp_shadow_destroy(&shadow_);
    ASSERT_EQ(ibp_shadow_create(&kOps, mem_, size_, &plan, &shadow_), 0);
    EXPECT_FALSE(ibp_shadow_any_flagged(shadow_)) << "nothing encoded yet";
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    EXPECT_TRUE(ibp_shadow_any_flagged(shadow_));
    expect_exact(0, size_);
}

TEST_P(ShadowTest, WritesMakeExactlyTheirBlocksStale)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    mem_[3 * bs + 100] ^= 0x55;          // block 3
    mem_[10 * bs - 1] ^= 0x01;           // last byte of block 9: its page also holds nothing else
    expect_exact(0, size_);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_STALE);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 9), IBP_BLOCK_STALE);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 4), IBP_BLOCK_VALID);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 10), IBP_BLOCK_VALID);
    // Recompression brings them back, and the bytes still match.
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 2);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_VALID);
    expect_exact(0, size_);
}

// A block rewritten while the build encodes it (here: before the build, after tracking was
// armed, so the encoder reads the new bytes and the build's query sees the write) is STALE, not
// INCOMPRESSIBLE: what was encoded says nothing about what the block holds when it is copied.
// Random bytes over blocks [first, first + count).
void fill_random(uint8_t *p, size_t bs, size_t first, size_t count, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    for (size_t i = first * bs; i < (first + count) * bs; i += 8) {
        const uint64_t v = rng();
        memcpy(p + i, &v, 8);
    }
}

TEST_P(ShadowTest, BlocksRewrittenDuringTheBuildAreStaleNotIncompressible)
{
    const size_t bs = 64 * 1024;
    fill_random(mem_, bs, 3, 5, 11); // longer than a stretch kept in the slab
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    ASSERT_EQ(ibp_shadow_block_size(shadow_), bs);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_STALE);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 8), IBP_BLOCK_VALID);
    IbpShadowStats st;
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(st.stale, 5u);
    EXPECT_EQ(st.discarded, 5u);
    // Their slots are empty: recompression tries the content once and finds it does not fit.
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 0);
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(st.misfit, 5u);
    expect_exact(0, size_);
}

// A few blocks that do not compress between blocks that do are kept in the slab as raw blocks, so
// a copy over them is one compressed run; longer stretches take no slab space and go raw.
TEST_P(ShadowTest, ShortIncompressibleStretchesRideInTheRun)
{
    const size_t bs = 64 * 1024;
    fill_random(mem_, bs, 3, 2, 12);
    fill_random(mem_, bs, 10, 6, 13);
    ASSERT_EQ(ibp_tracker_arm(tracker_), 0); // written before the build: clean, not stale
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    for (uint32_t b : {3u, 4u})
        EXPECT_EQ(ibp_shadow_block_state(shadow_, b), IBP_BLOCK_VALID) << b;
    for (uint32_t b = 10; b < 16; b++)
        EXPECT_EQ(ibp_shadow_block_state(shadow_, b), IBP_BLOCK_INCOMPRESSIBLE) << b;
    IbpPiece pieces[8];
    uint64_t ticket = 0;
    ASSERT_EQ(ibp_shadow_plan(shadow_, tracker_, 100, 9 * bs, 0, pieces, 8, &ticket), 1);
    EXPECT_EQ(pieces[0].kind, IBP_PIECE_COMPRESSED);
    ibp_shadow_plan_end(shadow_, ticket, nullptr);
    expect_exact(0, size_);
    // Rewritten with other random bytes: the raw encoding fits the slot it was given.
    fill_random(mem_, bs, 3, 1, 14);
    expect_exact(0, size_);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_STALE);
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 1);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_VALID);
    expect_exact(0, size_);
}

// A build keeps its staging buffer for the next one, until it has been idle long enough.
TEST_P(ShadowTest, BuildsKeepTheirStagingBufferUntilIdle)
{
    ibp_shadow_release_staging(0);
    EXPECT_EQ(ibp_shadow_staging_bytes(), 0u);
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    EXPECT_GE(ibp_shadow_staging_bytes(), size_);
    ibp_shadow_release_staging(3600ull * 1000000000ull);
    EXPECT_GE(ibp_shadow_staging_bytes(), size_);
    ibp_shadow_release_staging(0);
    EXPECT_EQ(ibp_shadow_staging_bytes(), 0u);
    expect_exact(0, size_);
}

TEST_P(ShadowTest, SyscallWritesAreSeen)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const char msg[] = "written by the kernel, not by user code";
    ASSERT_EQ(write(fds[1], msg, sizeof(msg)), (ssize_t)sizeof(msg));
    // The interposed read() unprotects mprotect'ed pages first; uffd sees kernel writes itself.
    ibp_track_before_kernel_write(mem_ + 200000, sizeof(msg), nullptr);
    ASSERT_EQ(read(fds[0], mem_ + 200000, sizeof(msg)), (ssize_t)sizeof(msg));
    close(fds[0]);
    close(fds[1]);
    expect_exact(190000, 30000);
}

TEST_P(ShadowTest, InvalidateCoversDeviceWrites)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    ibp_shadow_invalidate(shadow_, 5 * bs + 7, 2 * bs);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 4), IBP_BLOCK_VALID);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 5), IBP_BLOCK_STALE);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 7), IBP_BLOCK_STALE);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 8), IBP_BLOCK_VALID);
}

TEST_P(ShadowTest, ShortRunsGoRawAndRunsAreContiguous)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    mem_[2 * bs] ^= 1;
    mem_[4 * bs] ^= 1; // block 3 alone between two stale blocks
    IbpPiece pieces[16];
    uint64_t ticket = 0;
    const int n = ibp_shadow_plan(shadow_, tracker_, 0, 8 * bs, 2 * bs, pieces, 16, &ticket);
    ASSERT_GT(n, 0);
    for (int i = 0; i < n; i++) {
        if (pieces[i].kind == IBP_PIECE_COMPRESSED) {
            EXPECT_GE(pieces[i].len, 2 * bs);
            EXPECT_EQ(pieces[i].run_len, pieces[i].offsets[pieces[i].nblocks] - pieces[i].offsets[0]);
        }
        if (pieces[i].off <= 3 * bs && 3 * bs < pieces[i].off + pieces[i].len) {
            EXPECT_EQ(pieces[i].kind, IBP_PIECE_RAW);
        }
    }
    ibp_shadow_plan_end(shadow_, ticket, nullptr);
}

TEST_P(ShadowTest, RangesCutIntoTooManyPiecesEndRaw)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    const size_t nb = size_ / bs;
    ASSERT_GE(nb, 8u);
    for (size_t b = 1; b < nb; b += 2)
        mem_[b * bs + 7] ^= 0x5a; // every other block stale: 2 pieces a pair of blocks
    IbpPiece pieces[4];
    uint64_t ticket = 0;
    const int n = ibp_shadow_plan(shadow_, tracker_, 0, size_, 0, pieces, 4, &ticket);
    ASSERT_EQ(n, 4);
    EXPECT_EQ(pieces[0].kind, IBP_PIECE_COMPRESSED); // the runs before the cut still go compressed
    EXPECT_EQ(pieces[2].kind, IBP_PIECE_COMPRESSED);
    EXPECT_EQ(pieces[3].kind, IBP_PIECE_RAW);
    EXPECT_EQ(pieces[3].off + pieces[3].len, size_);
    size_t covered = 0;
    for (int i = 0; i < n; i++) {
        EXPECT_EQ(pieces[i].off, covered);
        covered += pieces[i].len;
    }
    EXPECT_EQ(covered, size_);
    std::vector<uint8_t> out(size_, 0xcd);
    ASSERT_EQ(ibp_shadow_decode_pieces(shadow_, pieces, (size_t)n, out.data()), 0);
    ibp_shadow_plan_end(shadow_, ticket, nullptr);
    EXPECT_EQ(memcmp(out.data(), mem_, size_), 0);
    expect_exact(0, size_);
}

// Content that no longer fits its slot is encoded once per write, not at every recompression,
// and the blocks it strands count against the runs a copy can use.
TEST_P(ShadowTest, MisfitsWaitForTheirNextWrite)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    const size_t all = ibp_shadow_run_bytes(shadow_, 0, 0);
    IbpShadowStats st;
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(all, st.valid_orig_bytes);
    std::vector<uint8_t> saved(mem_ + 5 * bs, mem_ + 6 * bs);
    // Small integers where the plan expects float weights: too big for block 5's slot.
    for (size_t i = 0; i < bs; i += 4) {
        const uint32_t v = (uint32_t)(i % 97);
        memcpy(mem_ + 5 * bs + i, &v, 4);
    }
    mem_[9 * bs] ^= 1; // block 9: a small change that still fits
    expect_exact(0, size_);
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 1);
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(st.stale, 1u);
    EXPECT_EQ(st.misfit, 1u);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 5), IBP_BLOCK_STALE);
    // Nothing left to try: no encode, nothing made.
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 0);
    // Runs: the whole region but block 5, split in two; with min_run above block 5's offset the
    // head run no longer counts.
    EXPECT_EQ(ibp_shadow_run_bytes(shadow_, 0, 0), all - bs);
    EXPECT_EQ(ibp_shadow_run_bytes(shadow_, 0, 1), all);
    EXPECT_EQ(ibp_shadow_run_bytes(shadow_, 6 * bs, 0), all - 6 * bs);
    // Written again: tried again (and still too big); then the old content back: it fits.
    mem_[5 * bs + 8] ^= 0x10;
    expect_exact(0, size_);
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(st.misfit, 0u);
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 0);
    ibp_shadow_stats(shadow_, &st);
    EXPECT_EQ(st.misfit, 1u);
    memcpy(mem_ + 5 * bs, saved.data(), bs);
    expect_exact(0, size_);
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 100, 0, 1), 1);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 5), IBP_BLOCK_VALID);
    EXPECT_EQ(ibp_shadow_run_bytes(shadow_, 0, 0), all);
    expect_exact(0, size_);
}

// A transfer planned while a block was valid may still read its slot: the block is re-encoded
// but not written back until that transfer is done; the rest of the region is not held up.
TEST_P(ShadowTest, FencesHoldSlotsUntilDone)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    TestFence fence;
    IbpPiece pieces[8];
    uint64_t ticket = 0;
    ASSERT_GT(ibp_shadow_plan(shadow_, tracker_, 0, size_, 0, pieces, 8, &ticket), 0);
    ibp_shadow_plan_end(shadow_, ticket, &fence);
    mem_[1000] ^= 1;
    expect_exact(0, 4096); // consumes the write: block 0 is STALE
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 0, 1), 0); // the transfer may still read slot 0
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 0), IBP_BLOCK_STALE);
    fence.done = 1;
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 0, 1), 1);
    EXPECT_EQ(fence.released.load(), 1);
    expect_exact(0, size_);
}

// Transfers planned after a block went stale sent it raw: they do not hold its slot, so a region
// copied without pause (a streamed table) still gets its stale blocks back.
TEST_P(ShadowTest, LaterTransfersDoNotHoldStaleSlots)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    mem_[2 * bs + 5] ^= 1;
    expect_exact(0, size_); // block 2 STALE
    TestFence fence;
    IbpPiece pieces[8];
    uint64_t ticket = 0;
    const int n = ibp_shadow_plan(shadow_, tracker_, 0, size_, 0, pieces, 8, &ticket);
    ASSERT_GT(n, 0);
    for (int i = 0; i < n; i++) {
        if (pieces[i].off <= 2 * bs && 2 * bs < pieces[i].off + pieces[i].len) {
            EXPECT_EQ(pieces[i].kind, IBP_PIECE_RAW);
        }
    }
    ibp_shadow_plan_end(shadow_, ticket, &fence); // still pending
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 0, 1), 1);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 2), IBP_BLOCK_VALID);
    EXPECT_EQ(fence.released.load(), 0);
    expect_exact(0, size_);
    fence.done = 1;
}

// A plan still being enqueued (between plan and plan_end) holds the slots it may read, and only
// those: blocks that went stale before it are rewritten meanwhile, and no pass waits for it.
TEST_P(ShadowTest, APlanBeingEnqueuedHoldsOnlyItsSlots)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    mem_[5] ^= 1;
    expect_exact(0, size_); // block 0 STALE before the plan below
    IbpPiece pieces[8];
    uint64_t ticket = 0;
    ASSERT_GT(ibp_shadow_plan(shadow_, tracker_, 0, size_, 0, pieces, 8, &ticket), 0);
    mem_[3 * bs + 1] ^= 1;
    IbpPiece other[8];
    uint64_t other_ticket = 0;
    ASSERT_GT(ibp_shadow_plan(shadow_, tracker_, 0, size_, 0, other, 8, &other_ticket), 0); // block 3 STALE
    ibp_shadow_plan_end(shadow_, other_ticket, nullptr);
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 0, 2), 1)
        << "only block 0: the plan may read slot 3";
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 0), IBP_BLOCK_VALID);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_STALE);
    ibp_shadow_plan_end(shadow_, ticket, nullptr);
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 0, 2), 1);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 3), IBP_BLOCK_VALID);
    expect_exact(0, size_);
}

// A block found written less than min_age ago is left alone; once older it is re-encoded.
TEST_P(ShadowTest, RecentlyWrittenBlocksWait)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 1, 0.98, nullptr), 0);
    const size_t bs = ibp_shadow_block_size(shadow_);
    mem_[4 * bs + 9] ^= 1;
    expect_exact(0, size_);
    const uint64_t hour = 3600ull * 1000000000ull;
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, hour, 1), 0);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 4), IBP_BLOCK_STALE);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 20000000ull, 1), 1);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 4), IBP_BLOCK_VALID);
    // Stale and old enough, but written again since no copy looked: the pass's own query sees
    // the write and leaves the block for later.
    mem_[4 * bs + 9] ^= 1;
    expect_exact(0, size_);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    mem_[4 * bs + 10] ^= 1;
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 20000000ull, 1), 0);
    EXPECT_EQ(ibp_shadow_block_state(shadow_, 4), IBP_BLOCK_STALE);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(ibp_shadow_recompress(shadow_, tracker_, 10, 20000000ull, 1), 1);
    expect_exact(0, size_);
}

TEST_P(ShadowTest, RandomInterleavings)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    std::mt19937_64 rng(GetParam() * 1000 + 17);
    for (int step = 0; step < 1500; step++) {
        const int op = (int)(rng() % 10);
        if (op < 4) {
            const size_t off = rng() % size_;
            const size_t len = 1 + rng() % std::min<size_t>(size_ - off, 20000);
            for (size_t i = 0; i < len; i++)
                mem_[off + i] = (uint8_t)rng();
        } else if (op < 5) {
            // Rewrite with compressible data so recompression can succeed.
            const size_t off = (rng() % (size_ / 4)) * 4;
            fill_weights(mem_ + off, std::min<size_t>(size_ - off, 4096 * (1 + rng() % 8)), (uint32_t)rng());
        } else if (op < 6) {
            ibp_shadow_recompress(shadow_, tracker_, 1 + (unsigned)(rng() % 8), 0, 1 + (unsigned)(rng() % 3));
        } else if (op < 7) {
            const size_t off = rng() % size_;
            ibp_shadow_invalidate(shadow_, off, 1 + rng() % 100000);
        } else {
            const size_t off = rng() % size_;
            const size_t len = 1 + rng() % (size_ - off);
            expect_exact(off, len, (size_t)(rng() % 3) * 65536);
            if (HasFatalFailure())
                return;
        }
    }
    expect_exact(0, size_);
}

TEST_P(ShadowTest, ConcurrentPlannersAndRecompressor)
{
    ASSERT_EQ(ibp_shadow_build(shadow_, tracker_, 2, 0.98, nullptr), 0);
    for (int round = 0; round < 20; round++) {
        // Writers first (between copies, as an application does), then copies race with the
        // compressor.
        std::mt19937_64 rng(round);
        for (int w = 0; w < 20; w++)
            fill_weights(mem_ + (rng() % (size_ / 4096)) * 4096, 2048, (uint32_t)rng());
        std::atomic<int> bad{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 3; t++)
            threads.emplace_back([&, t] {
                std::mt19937_64 r(round * 10 + t);
                for (int k = 0; k < 10; k++) {
                    const size_t off = r() % size_;
                    const size_t len = 1 + r() % (size_ - off);
                    IbpPiece pieces[512];
                    uint64_t ticket = 0;
                    const int n = ibp_shadow_plan(shadow_, tracker_, off, len, 0, pieces, 512, &ticket);
                    if (n <= 0) {
                        bad++;
                        continue;
                    }
                    std::vector<uint8_t> out(len);
                    if (ibp_shadow_decode_pieces(shadow_, pieces, (size_t)n, out.data()) ||
                        memcmp(out.data(), mem_ + off, len))
                        bad++;
                    ibp_shadow_plan_end(shadow_, ticket, nullptr);
                }
            });
        threads.emplace_back([&] {
            for (int k = 0; k < 10; k++)
                ibp_shadow_recompress(shadow_, tracker_, 4, 0, 2);
        });
        for (auto &t : threads)
            t.join();
        ASSERT_EQ(bad.load(), 0) << "round " << round;
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, ShadowTest, ::testing::Values(IBP_TRACK_UFFD, IBP_TRACK_MPROTECT),
                         [](const ::testing::TestParamInfo<IbpTrackBackend> &info) {
                             return std::string(ibp_track_backend_name(info.param));
                         });

} // namespace
