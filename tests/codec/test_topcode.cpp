// SPDX-License-Identifier: MIT
// ibpshim: the top-byte coded form (codec/topcode.h): round trips on random data of every word
// size and awkward lengths and alignments, the sizes of runs whose entropy is known, every kind of
// damage rejected or decoded without a read outside the run, and the real weights against the
// IBP ratios they must beat.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "codec/topcode.h"
}

namespace {

// Codes n bytes at src (any alignment) and decodes them back; the run's length into *coded.
std::vector<uint8_t> round_trip(const uint8_t *src, size_t n, unsigned w, unsigned lanes, size_t *coded = nullptr)
{
    std::vector<uint8_t> run(ibp_top_bound(n, w, lanes) + 1);
    size_t len = 0;
    EXPECT_EQ(ibp_top_encode(src, n, w, lanes, run.data() + 1, run.size() - 1, &len), 0);
    EXPECT_EQ(len % 16, 0u);
    // decoded from an odd address too: nothing in the form needs alignment
    std::vector<uint8_t> at_odd(len + 1);
    std::memcpy(at_odd.data() + 1, run.data() + 1, len);
    std::vector<uint8_t> out(n + 1, 0xa5);
    EXPECT_EQ(ibp_top_decode(at_odd.data() + 1, len, out.data() + 1, n), 0);
    if (coded)
        *coded = len;
    return std::vector<uint8_t>(out.begin() + 1, out.end());
}

// Words whose top byte takes a few values, as a float's sign and exponent do, under random bytes.
std::vector<uint8_t> weights_like(size_t n, unsigned w, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    std::geometric_distribution<int> exp(0.4);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)rng();
    for (size_t i = w - 1; i < n; i += w)
        v[i] = (uint8_t)((rng() & 0x80) | (0x3c - std::min(exp(rng), 40)));
    return v;
}

double entropy_bits(const std::vector<uint64_t> &count, uint64_t total)
{
    double h = 0;
    for (uint64_t c : count)
        if (c)
            h -= (double)c * std::log2((double)c / (double)total);
    return h;
}

} // namespace

TEST(TopCode, RoundTripsEveryWordSizeAndLength)
{
    const size_t lengths[] = {0, 1, 2, 3, 7, 8, 9, 31, 33, 255, 4095, 4097, 65536 + 5, 262144};
    for (unsigned w : {2u, 4u, 8u})
        for (unsigned lanes : {32u, 64u, 256u, 1024u})
            for (size_t n : lengths) {
                for (int kind = 0; kind < 3; kind++) {
                    std::vector<uint8_t> src(n + 3);
                    std::mt19937 rng((uint32_t)(n * 31 + w * 7 + lanes + kind));
                    if (kind == 0) // random bytes: every top byte value
                        for (auto &b : src)
                            b = (uint8_t)rng();
                    else if (kind == 1) // weights-like
                        src = weights_like(n + 3, w, (uint32_t)n);
                    else // one top byte throughout: no stream at all
                        std::fill(src.begin(), src.end(), 0x42);
                    // from an unaligned source
                    ASSERT_EQ(round_trip(src.data() + 3, n, w, lanes), std::vector<uint8_t>(src.begin() + 3, src.end()))
                        << "w=" << w << " lanes=" << lanes << " n=" << n << " kind=" << kind;
                }
            }
}

TEST(TopCode, RefusesBadArguments)
{
    uint8_t src[64] = {0}, out[4096];
    size_t len = 0;
    EXPECT_EQ(ibp_top_encode(src, 64, 3, 256, out, sizeof(out), &len), -EINVAL);
    EXPECT_EQ(ibp_top_encode(src, 64, 1, 256, out, sizeof(out), &len), -EINVAL);
    EXPECT_EQ(ibp_top_encode(src, 64, 4, 48, out, sizeof(out), &len), -EINVAL);
    EXPECT_EQ(ibp_top_encode(src, 64, 4, 2048, out, sizeof(out), &len), -EINVAL);
    EXPECT_EQ(ibp_top_encode(src, 64, 4, 16, out, sizeof(out), &len), -EINVAL);
    EXPECT_EQ(ibp_top_encode(nullptr, 64, 4, 256, out, sizeof(out), &len), -EINVAL);
    EXPECT_EQ(ibp_top_encode(src, 64, 4, 256, out, sizeof(out), nullptr), -EINVAL);
    EXPECT_EQ(ibp_top_bound(64, 3, 256), 0u);
    // the decoder asked for another length
    ASSERT_EQ(ibp_top_encode(src, 64, 4, 32, out, sizeof(out), &len), 0);
    // an output buffer 16 bytes short: -ENOBUFS, nothing written past it
    std::vector<uint8_t> small(len, 0xee);
    size_t short_len = 0;
    EXPECT_EQ(ibp_top_encode(src, 64, 4, 32, small.data(), len - 16, &short_len), -ENOBUFS);
    EXPECT_TRUE(std::all_of(small.end() - 16, small.end(), [](uint8_t b) { return b == 0xee; }));
    uint8_t back[64];
    EXPECT_EQ(ibp_top_decode(out, len, back, 63), -EBADMSG);
    EXPECT_EQ(ibp_top_decode(out, len - 16, back, 64), -EBADMSG);
    EXPECT_EQ(ibp_top_decode(out, len, back, 64), 0);
}

// The coded size is the top bytes' entropy within a few hundredths of a bit a word, beside the
// planes, the table and the lanes' states.
TEST(TopCode, SizeFollowsTheTopBytesEntropy)
{
    for (unsigned w : {2u, 4u, 8u}) {
        const size_t n = (size_t)1 << 20;
        const std::vector<uint8_t> src = weights_like(n, w, 9);
        std::vector<uint64_t> count(256);
        for (size_t i = w - 1; i < n; i += w)
            count[src[i]]++;
        const double h = entropy_bits(count, n / w); // bits of all top bytes
        std::vector<uint8_t> run(ibp_top_bound(n, w, 256));
        size_t len = 0;
        ASSERT_EQ(ibp_top_encode(src.data(), n, w, 256, run.data(), run.size(), &len), 0);
        std::vector<uint8_t> back(n);
        ASSERT_EQ(ibp_top_decode(run.data(), len, back.data(), n), 0);
        ASSERT_EQ(back, src);
        IbpTopHeader hdr;
        std::memcpy(&hdr, run.data(), sizeof(hdr)); // little endian, as the form is
        // the streams plus the lanes' states: the top bytes' entropy with 12-bit frequencies,
        // within 1%, as rANS gets there
        const double bits = 8.0 * hdr.stream_bytes + 32.0 * hdr.lanes;
        EXPECT_GT(bits, h) << "w=" << w;
        EXPECT_LT(bits, h * 1.01 + 32.0 * hdr.lanes) << "w=" << w;
        // the planes as they are: the rest of the run is at most a few KiB
        EXPECT_LT(len, (w - 1) * (n / w) + 4096 + hdr.stream_bytes + 4 * hdr.lanes) << "w=" << w;
        std::printf("w=%u: top bytes %.3f bits a word, coded in %.3f\n", w, h / (double)(n / w),
                    bits / (double)(n / w));
    }
}

// Every truncation, and every byte of a run changed, is rejected or decodes to the run's length
// without reading outside it (the address sanitizer build checks the reads).
TEST(TopCode, DamageIsRejectedOrHarmless)
{
    const std::vector<uint8_t> src = weights_like(4096 + 6, 4, 3);
    std::vector<uint8_t> run(ibp_top_bound(src.size(), 4, 64));
    size_t len = 0;
    ASSERT_EQ(ibp_top_encode(src.data(), src.size(), 4, 64, run.data(), run.size(), &len), 0);
    run.resize(len);
    std::vector<uint8_t> out(src.size());
    for (size_t cut = 0; cut < len; cut++) {
        std::vector<uint8_t> part(run.begin(), run.begin() + (long)cut);
        EXPECT_EQ(ibp_top_decode(part.data(), cut, out.data(), out.size()), -EBADMSG) << "cut at " << cut;
    }
    // 1025 words: the planes (3 of 1040 bytes) and the tail's 2 bytes end the run, padded to 16
    const size_t planes = len - 16 - 3 * 1040;
    size_t rejected = 0, coded = 0, in_planes = 0;
    for (size_t at = 0; at < len; at++)
        for (uint8_t flip : {0x01, 0x80, 0xff}) {
            std::vector<uint8_t> bad = run;
            bad[at] ^= flip;
            const int r = ibp_top_decode(bad.data(), len, out.data(), out.size());
            EXPECT_TRUE(r == 0 || r == -EBADMSG) << "byte " << at;
            const bool data = (at >= planes && at < len - 16 && (at - planes) % 1040 < 1025) ||
                              (at >= len - 16 && at < len - 14);
            if (data) // the planes and the tail are stored as they are: a change there is no error
                in_planes += r != 0;
            else
                rejected += r != 0, coded++;
        }
    // header, table, offsets, states and streams: a change is caught where it moves a lane off
    // its final state or a stream off its length, nearly always
    std::printf("%zu of %zu damaged runs rejected outside the planes\n", rejected, coded);
    EXPECT_EQ(in_planes, 0u);
    EXPECT_GE(rejected * 100, coded * 95);
}

// The weights among the real tensors, in 256 KiB runs: smaller than invariant bit packing gets
// them (flagged selectors, docs/BENCHMARKS.md: ocr_det 0.8662, linear85 0.8654, bf16 0.7351).
TEST(TopCode, RealWeightsSmallerThanIbp)
{
    const char *dir = std::getenv("IBPSHIM_TEST_DATA");
    if (!dir || !std::ifstream(std::string(dir) + "/MANIFEST.md"))
        GTEST_SKIP() << "real tensors not found (set IBPSHIM_TEST_DATA to the folder with MANIFEST.md)";
    const struct {
        const char *file;
        unsigned w;
        double ibp;
    } weights[] = {{"ocr_det_all_f32.bin", 4, 0.8662},
                   {"ocr_rec_linear85_f32_120x6625.bin", 4, 0.8654},
                   {"ocr_rec_all_bf16.bin", 2, 0.7351}};
    for (const auto &t : weights) {
        std::ifstream f(std::string(dir) + "/" + t.file, std::ios::binary);
        ASSERT_TRUE(f) << t.file << " missing";
        const std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        size_t total = 0;
        for (size_t at = 0; at < data.size(); at += 256u << 10) {
            const size_t n = std::min(data.size() - at, (size_t)256 << 10);
            size_t coded = 0;
            ASSERT_EQ(round_trip(data.data() + at, n, t.w, IBP_TOP_LANES_DEFAULT, &coded),
                      std::vector<uint8_t>(data.begin() + (long)at, data.begin() + (long)(at + n)))
                << t.file << " at " << at;
            total += coded;
        }
        const double ratio = (double)total / (double)data.size();
        std::printf("%s: top-byte coded %.4f (IBP flagged %.4f)\n", t.file, ratio, t.ibp);
        EXPECT_LT(ratio, t.ibp - 0.01) << t.file;
    }
}
