// SPDX-License-Identifier: MIT
// How a pipelined copy splits its compressed run into chunks (interpose/pipe_chunks.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "interpose/pipe_chunks.h"

namespace
{

// Block offsets of blocks of the given compressed sizes.
std::vector<uint64_t> offsets_of(const std::vector<uint64_t> &sizes)
{
    std::vector<uint64_t> offs(1, 0);
    for (uint64_t s : sizes)
        offs.push_back(offs.back() + s);
    return offs;
}

// The chunks' compressed sizes, checking that they cover [0, n) in order, each at least a block;
// blocks: how many blocks each has.
std::vector<uint64_t> chunks(const std::vector<uint64_t> &offs, size_t chunk, size_t tail,
                             std::vector<uint32_t> *blocks = nullptr)
{
    const uint32_t end = (uint32_t)offs.size() - 1;
    std::vector<uint64_t> out;
    for (uint32_t b = 0; b < end;) {
        const uint32_t e = ibp_pipe_chunk_end(offs.data(), b, end, chunk, tail);
        EXPECT_GT(e, b);
        EXPECT_LE(e, end);
        if (e <= b || e > end)
            break;
        out.push_back(offs[e] - offs[b]);
        if (blocks)
            blocks->push_back(e - b);
        b = e;
    }
    return out;
}

TEST(PipeChunks, EqualChunksWithoutTail)
{
    const auto offs = offsets_of(std::vector<uint64_t>(64, 100)); // 6400 bytes
    const auto c = chunks(offs, 800, 0);
    ASSERT_EQ(c.size(), 8u);
    for (uint64_t s : c)
        EXPECT_EQ(s, 800u);
}

TEST(PipeChunks, TailHalvesWhatIsLeft)
{
    const auto offs = offsets_of(std::vector<uint64_t>(64, 100)); // 6400 bytes
    // Equal chunks of 800 while two or more are left, then 800 (half of 1600), 400, then the
    // last 400 whole (at most two tails of 200).
    const auto c = chunks(offs, 800, 200);
    const std::vector<uint64_t> want = {800, 800, 800, 800, 800, 800, 800, 400, 400};
    EXPECT_EQ(c, want);
}

TEST(PipeChunks, TailTakesTheRestWhole)
{
    const auto offs = offsets_of(std::vector<uint64_t>(60, 100)); // 6000 bytes
    // 6000 < 2 * 4000: half (3000), then half of 3000, then 1500 <= 2 * 1000 whole.
    EXPECT_EQ(chunks(offs, 4000, 1000), (std::vector<uint64_t>{3000, 1500, 1500}));
    // A tail of half the chunk or more: what is left under two tails goes whole.
    EXPECT_EQ(chunks(offs, 2000, 1500), (std::vector<uint64_t>{2000, 2000, 2000}));
    EXPECT_EQ(chunks(offs, 2500, 1500), (std::vector<uint64_t>{2500, 1700, 1800}));
}

TEST(PipeChunks, BlocksLargerThanTheChunk)
{
    const auto offs = offsets_of({5000, 10, 7000, 1});
    EXPECT_EQ(chunks(offs, 100, 0), (std::vector<uint64_t>{5000, 10, 7000, 1}));
    EXPECT_EQ(chunks(offs, 100, 50), (std::vector<uint64_t>{5000, 10, 7000, 1}));
}

TEST(PipeChunks, RandomBlocksCoverTheRunAndShrink)
{
    std::mt19937_64 rng(7);
    for (int round = 0; round < 200; round++) {
        std::vector<uint64_t> sizes(1 + rng() % 300);
        for (auto &s : sizes)
            s = 1 + rng() % 1000;
        const auto offs = offsets_of(sizes);
        const size_t chunk = 1 + rng() % 20000, tail = rng() % 3 ? rng() % 5000 : 0;
        std::vector<uint32_t> nb;
        const auto c = chunks(offs, chunk, tail, &nb);
        uint64_t sum = 0;
        for (uint64_t s : c)
            sum += s;
        EXPECT_EQ(sum, offs.back());
        // Only a chunk of one block exceeds the chunk size (or, with a tail, the last two tails);
        // with a tail the last chunk is at most two tails, or one block more than the last target.
        for (size_t k = 0; k < c.size(); k++) {
            if (c[k] > std::max<uint64_t>(chunk, 2 * tail)) {
                EXPECT_EQ(nb[k], 1u);
            }
        }
        // The summary the shim and ibp-bench size staging and offsets by.
        const IbpPipeChunks summary = ibp_pipe_chunks(offs.data(), 0, (uint32_t)sizes.size(), chunk, tail);
        EXPECT_EQ(summary.count, c.size());
        EXPECT_EQ(summary.max_bytes, *std::max_element(c.begin(), c.end()));
        EXPECT_EQ(summary.max_blocks, *std::max_element(nb.begin(), nb.end()));
        if (tail && c.size() > 1) {
            EXPECT_LE(c.back(), std::max<uint64_t>(2 * tail, std::min<uint64_t>(chunk, c.back()) + 1000));
        }
    }
}

// Which runs are pipelined and the chunk size they aim at: two chunks of pipeline_chunk at least,
// an eighth of the run once that is more; 0 turns pipelining off.
TEST(PipeChunks, WorthAndSize)
{
    const size_t mib = (size_t)1 << 20;
    EXPECT_FALSE(ibp_pipe_worth(1024 * mib, 0));
    EXPECT_FALSE(ibp_pipe_worth(32 * mib - 1, 16 * mib));
    EXPECT_TRUE(ibp_pipe_worth(32 * mib, 16 * mib));
    EXPECT_TRUE(ibp_pipe_worth(52 * mib, IBP_PIPE_CHUNK_DEFAULT)); // a 64 MiB copy of the bf16 weights
    EXPECT_FALSE(ibp_pipe_worth(0, 1));
    // Shorter runs alone: a chunk of original bytes and two tails (int32 triples at 64 and 16 MiB,
    // their tail halved), not less than a chunk of original bytes (4.5 MiB of fp32 weights) or two
    // tails (float64 features at 16.7 MiB), nor without a tail or with pipelining off.
    EXPECT_TRUE(ibp_pipe_alone_worth(22 * mib, 64 * mib, IBP_PIPE_CHUNK_DEFAULT, mib));
    EXPECT_TRUE(ibp_pipe_alone_worth(5700 * 1024, 16 * mib, IBP_PIPE_CHUNK_DEFAULT, mib));
    EXPECT_FALSE(ibp_pipe_alone_worth(4 * mib, 4608 * 1024, IBP_PIPE_CHUNK_DEFAULT, 2 * mib));
    EXPECT_FALSE(ibp_pipe_alone_worth(1750 * 1024, 17100 * 1024, IBP_PIPE_CHUNK_DEFAULT, mib));
    EXPECT_FALSE(ibp_pipe_alone_worth(22 * mib, 64 * mib, IBP_PIPE_CHUNK_DEFAULT, 0));
    EXPECT_FALSE(ibp_pipe_alone_worth(22 * mib, 64 * mib, 0, mib));
    EXPECT_EQ(ibp_pipe_chunk_size(52 * mib, 16 * mib), 16 * mib);
    EXPECT_EQ(ibp_pipe_chunk_size(128 * mib, 16 * mib), 16 * mib);
    EXPECT_EQ(ibp_pipe_chunk_size(200 * mib, 16 * mib), 25 * mib);
    EXPECT_EQ(ibp_pipe_chunk_size(3 * mib, 0), 3 * mib / 8);
}

// The tail a run ends in: the one asked for, half of it for runs compressed below 0.7 of their
// original bytes (their last chunk holds more to decode); 0 (equal chunks) stays 0.
TEST(PipeChunks, WellCompressedRunsEndInHalfTheTail)
{
    const size_t mib = (size_t)1 << 20;
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 88 * mib, 100 * mib), 2 * mib); // fp32 weights
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 76 * mib, 100 * mib), 2 * mib); // bf16 weights
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 70 * mib, 100 * mib), 2 * mib); // at the line
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 70 * mib - 1, 100 * mib), mib);
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 35 * mib, 100 * mib), mib); // int32 triples
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 10 * mib, 100 * mib), mib); // float64 features
    EXPECT_EQ(ibp_pipe_tail(0, 10 * mib, 100 * mib), 0u);
    EXPECT_EQ(ibp_pipe_tail(2 * mib, 0, 0), 2 * mib); // nothing to go by: as asked
}

// A raw tail: the last blocks that hold the bytes asked for (a part of a block takes it whole),
// kept only where the rest has at least as many blocks.
TEST(PipeChunks, RawTailTakesWholeBlocksFromTheEnd)
{
    const size_t kib = 1024;
    EXPECT_EQ(ibp_pipe_raw_from(0, 100, 256 * kib, 1024 * kib), 96u);
    EXPECT_EQ(ibp_pipe_raw_from(10, 110, 256 * kib, 1024 * kib + 1), 105u);
    EXPECT_EQ(ibp_pipe_raw_from(10, 110, 256 * kib, 1), 109u);
    EXPECT_EQ(ibp_pipe_raw_from(0, 8, 256 * kib, 1024 * kib), 4u); // as many as the rest
    EXPECT_EQ(ibp_pipe_raw_from(0, 7, 256 * kib, 1024 * kib), 7u); // more than the rest: none
    EXPECT_EQ(ibp_pipe_raw_from(0, 100, 256 * kib, 0), 100u);      // none asked
    EXPECT_EQ(ibp_pipe_raw_from(0, 1, 256 * kib, 1), 1u);          // a run of one block: none
    EXPECT_EQ(ibp_pipe_raw_from(5, 5, 256 * kib, 1), 5u);          // no blocks
    EXPECT_EQ(ibp_pipe_raw_from(0, 100, 0, 1), 100u);              // no block size
    EXPECT_EQ(ibp_pipe_raw_from(0, 4000000000u, 256 * kib, (size_t)1 << 40), 0u + 4000000000u - 4194304u);
}

// A run pipelined only for its raw tail keeps one where it is at least a quarter of its original
// bytes: int32 triples (0.36) do, float64 features (0.10) do not.  Pipelined runs keep one whatever
// their ratio; without pipelining there is none.
TEST(PipeChunks, RawTailOnShortRunsWantsAQuarter)
{
    const uint64_t mib = 1 << 20;
    const size_t chunk = IBP_PIPE_CHUNK_DEFAULT;
    EXPECT_TRUE(ibp_pipe_raw_worth(1700000, 4800192, chunk, mib));    // int32 triples, 4.6 MiB
    EXPECT_FALSE(ibp_pipe_raw_worth(460000, 4601856, chunk, mib));    // float64 features, 4.4 MiB
    EXPECT_TRUE(ibp_pipe_raw_worth(mib, 4 * mib, chunk, mib));        // a quarter exactly
    EXPECT_FALSE(ibp_pipe_raw_worth(mib - 1, 4 * mib, chunk, mib));   // just below
    EXPECT_TRUE(ibp_pipe_raw_worth(6700000, 67200000, chunk, mib));   // float64 features, 64 MiB: alone
    EXPECT_TRUE(ibp_pipe_raw_worth(40 * mib, 400 * mib, chunk, mib)); // two chunks: pipelined
    EXPECT_FALSE(ibp_pipe_raw_worth(1700000, 4800192, 0, mib));       // pipeline_chunk = 0
}

} // namespace
