// SPDX-License-Identifier: MIT
// ibpshim: property tests of the IBP codec: round trips, random access, SIMD = reference, corrupt input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/internal.h"
#include "ibpshim/codec.h"
#include "tests/codec/strip_index.h"

namespace
{

enum class Dist {
    GaussF32Small,
    GaussF32Large,
    GaussF64,
    Bf16,
    Fp16,
    SmallInts,
    Sparse,
    Constant,
    RandomBytes,
    Rows
};

const Dist kAllDists[] = {Dist::GaussF32Small, Dist::GaussF32Large, Dist::GaussF64, Dist::Bf16,
                          Dist::Fp16,          Dist::SmallInts,     Dist::Sparse,   Dist::Constant,
                          Dist::RandomBytes,   Dist::Rows};

uint16_t f32_to_half(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int exp = (int)((x >> 23) & 0xffu) - 127 + 15;
    const uint32_t mant = (x >> 13) & 0x3ffu;
    if (exp <= 0)
        return (uint16_t)sign;
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | ((uint32_t)exp << 10) | mant);
}

// Fills n bytes with data of the given distribution; n need not be a multiple of the element.
std::vector<uint8_t> make_data(Dist d, size_t n, uint32_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> out(n + 16);
    std::normal_distribution<float> g32(0.0f, 1.0f);
    std::normal_distribution<double> g64(0.0, 1.0);
    size_t i = 0;
    while (i < n) {
        uint8_t elem[16];
        size_t sz = 0;
        switch (d) {
        case Dist::GaussF32Small: {
            const float v = g32(rng) * 0.02f;
            std::memcpy(elem, &v, 4);
            sz = 4;
            break;
        }
        case Dist::GaussF32Large: {
            const float v = g32(rng) * 300.0f;
            std::memcpy(elem, &v, 4);
            sz = 4;
            break;
        }
        case Dist::GaussF64: {
            const double v = g64(rng) * 3.0;
            std::memcpy(elem, &v, 8);
            sz = 8;
            break;
        }
        case Dist::Bf16: {
            const float v = g32(rng) * 0.1f;
            uint32_t x;
            std::memcpy(&x, &v, 4);
            const uint16_t h = (uint16_t)(x >> 16);
            std::memcpy(elem, &h, 2);
            sz = 2;
            break;
        }
        case Dist::Fp16: {
            const uint16_t h = f32_to_half(g32(rng) * 0.5f);
            std::memcpy(elem, &h, 2);
            sz = 2;
            break;
        }
        case Dist::SmallInts: {
            const int32_t v = (int32_t)(rng() % 201) - 100;
            std::memcpy(elem, &v, 4);
            sz = 4;
            break;
        }
        case Dist::Sparse: {
            const float v = rng() % 10 == 0 ? g32(rng) : 0.0f;
            std::memcpy(elem, &v, 4);
            sz = 4;
            break;
        }
        case Dist::Constant:
            std::memset(elem, 0x3c, 8);
            sz = 8;
            break;
        case Dist::RandomBytes: {
            const uint64_t v = rng();
            std::memcpy(elem, &v, 8);
            sz = 8;
            break;
        }
        case Dist::Rows: {
            // 12-byte records: sorted key, small id, increasing time.
            const int32_t rec[3] = {(int32_t)(i / 120), (int32_t)(rng() % 5000), (int32_t)(1000000 + i * 3)};
            std::memcpy(elem, rec, 12);
            sz = 12;
            break;
        }
        }
        const size_t take = std::min(sz, n - i);
        std::memcpy(out.data() + i, elem, take);
        i += take;
    }
    out.resize(n);
    return out;
}

std::vector<uint8_t> file_round_trip(const uint8_t *src, size_t n, const IbpCodecPlanOptions *opts,
                                     double *ratio)
{
    void *packed = nullptr;
    size_t packed_len = 0;
    EXPECT_EQ(ibp_codec_file_compress(src, n, opts, 2, &packed, &packed_len), 0);
    uint64_t orig = 0;
    EXPECT_EQ(ibp_codec_file_orig_len(packed, packed_len, &orig), 0);
    EXPECT_EQ(orig, n);
    std::vector<uint8_t> back(n + 1, 0xee);
    EXPECT_EQ(ibp_codec_file_decompress(packed, packed_len, back.data(), n), 0);
    if (ratio)
        *ratio = n ? (double)packed_len / (double)n : 1.0;
    std::free(packed);
    EXPECT_EQ(back[n], 0xee) << "decoder wrote past the end";
    back.resize(n);
    return back;
}

// data one byte into a buffer (at buf.data() + 1): an unaligned source.
std::vector<uint8_t> unaligned(const std::vector<uint8_t> &data)
{
    std::vector<uint8_t> buf(data.size() + 1);
    if (!data.empty())
        std::memcpy(buf.data() + 1, data.data(), data.size());
    return buf;
}

struct ForceReference {
    explicit ForceReference(int on)
    {
        ibp_codec_force_reference(on);
    }
    ~ForceReference()
    {
        ibp_codec_force_reference(0);
    }
};

TEST(Codec, RoundTripEveryDistributionAndSize)
{
    const size_t sizes[] = {0, 1, 7, 4095, (1u << 20) + 3};
    uint32_t seed = 1;
    for (const Dist d : kAllDists) {
        for (const size_t n : sizes) {
            const std::vector<uint8_t> data = make_data(d, n, seed++);
            const std::vector<uint8_t> buf = unaligned(data);
            double ratio = 0;
            const std::vector<uint8_t> back = file_round_trip(buf.data() + 1, n, nullptr, &ratio);
            ASSERT_EQ(back, data) << "dist " << (int)d << " size " << n;
            if (n == (1u << 20) + 3 && d == Dist::Constant) {
                EXPECT_LT(ratio, 0.02);
            }
            if (n == (1u << 20) + 3 && d == Dist::RandomBytes) {
                EXPECT_LT(ratio, 1.002);
            }
        }
    }
}

TEST(Codec, SmallBlocksAndFaithfulPlans)
{
    uint32_t seed = 100;
    for (const Dist d : kAllDists) {
        const std::vector<uint8_t> data = make_data(d, 50000 + seed, seed);
        IbpCodecPlanOptions opts = {};
        opts.block_size = 4096;
        opts.flags = seed % 2 ? IBP_CODEC_PLAN_FAITHFUL : 0;
        seed++;
        ASSERT_EQ(file_round_trip(data.data(), data.size(), &opts, nullptr), data);
    }
}

// Random plans (transforms, several mask sets, odd row and column counts) built directly, so
// every encoder and decoder branch runs whatever the planner would pick.
TEST(Codec, RandomPlansSimdEqualsReference)
{
    std::mt19937_64 rng(42);
    const uint32_t sizes[] = {2, 4, 8};
    for (int iter = 0; iter < 60; iter++) {
        const uint32_t w = sizes[rng() % 3];
        const uint32_t c_count = 1 + (uint32_t)(rng() % 37);
        const uint32_t r_len = 1 + (uint32_t)(rng() % 300);
        const uint32_t nsets = 1 + (uint32_t)(rng() % IBP_MAX_SETS);
        std::vector<uint8_t> xform(c_count);
        static const uint8_t xfs[] = {0,
                                      IBP_XF_ZIGZAG,
                                      IBP_XF_PRED_DELTA,
                                      IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG,
                                      IBP_XF_PRED_XOR,
                                      IBP_XF_PRED_XOR | IBP_XF_ZIGZAG};
        for (auto &x : xform)
            x = xfs[rng() % 6];
        const Dist d = kAllDists[rng() % 10];
        const size_t n = 4096 + (size_t)(rng() % 20000);
        const std::vector<uint8_t> data = make_data(d, n, (uint32_t)iter);
        // Masks: random high-bit masks with values taken from real words, so some words match.
        std::vector<uint64_t> mask(nsets * c_count), value(nsets * c_count);
        const uint64_t wmask = ibp_fmt_word_mask(w);
        for (size_t i = 0; i < mask.size(); i++) {
            const uint32_t inv = (uint32_t)(rng() % (w * 8 + 1));
            mask[i] = inv ? (wmask & ~(inv >= 64 ? 0 : (wmask >> inv))) : 0;
            const size_t at = (size_t)(rng() % (n / w)) * w;
            value[i] = ibp_load_word(data.data() + at, w) & mask[i];
        }
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_build(w, c_count, r_len, nsets, 8192, xform.data(), mask.data(),
                                       value.data(), &plan),
                  0);
        const size_t bs = 8192;
        const size_t nblocks = (n + bs - 1) / bs;
        const size_t each = ibp_codec_block_bound(plan, bs);
        std::vector<uint8_t> ref(nblocks * each), simd(nblocks * each);
        std::vector<void *> ref_ptr(nblocks), simd_ptr(nblocks);
        std::vector<size_t> ref_len(nblocks), simd_len(nblocks);
        for (size_t i = 0; i < nblocks; i++) {
            ref_ptr[i] = ref.data() + i * each;
            simd_ptr[i] = simd.data() + i * each;
        }
        {
            ForceReference force(1);
            ASSERT_EQ(ibp_codec_region_encode(plan, data.data(), n, 1, ref_ptr.data(), each, ref_len.data()),
                      0);
        }
        ASSERT_EQ(ibp_codec_region_encode(plan, data.data(), n, 3, simd_ptr.data(), each, simd_len.data()),
                  0);
        for (size_t i = 0; i < nblocks; i++) {
            ASSERT_EQ(ref_len[i], simd_len[i]);
            ASSERT_EQ(std::memcmp(ref_ptr[i], simd_ptr[i], ref_len[i]), 0) << "block " << i;
        }
        // Each path decodes the other's output.
        for (int force_ref = 0; force_ref < 2; force_ref++) {
            ForceReference force(force_ref);
            std::vector<uint8_t> back(n);
            ASSERT_EQ(ibp_codec_region_decode_range(plan, (const void *const *)ref_ptr.data(), ref_len.data(),
                                                    n, 0, n, back.data()),
                      0);
            ASSERT_EQ(back, data) << "iter " << iter;
        }
        ibp_codec_plan_destroy(&plan);
        EXPECT_EQ(plan, nullptr);
    }
}

// Rows shorter than a vector or not a whole number of vectors (2 to 112 words: the planner's
// trials pick such rows, and the vector levels count their words by vectors across rows): every
// level's cost equals the reference's, which equals the reference encoder's length, for full
// plans and for the planner's cost-only plans, each word size, one and several columns, 1 to 3
// mask sets, with and without transforms, blocks that end inside a row.
TEST(Codec, EveryLevelCostsShortRowsAsTheReference)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    ASSERT_LE(nlevels, 8u);
    const IbpCodecKernels *ref = ibp_codec_kernels_reference();
    std::mt19937_64 rng(4242);
    const uint32_t sizes[] = {2, 4, 8};
    const uint32_t rows[] = {1, 2, 4, 6, 8, 12, 14, 24, 28, 40, 56, 112};
    const uint32_t cols[] = {1, 3, 7, 14};
    const uint32_t bs = 16384;
    int iter = 0;
    for (const uint32_t w : sizes) {
        for (const uint32_t r_len : rows) {
            for (const uint32_t c_count : cols) {
                iter++;
                const uint32_t nsets = 1 + (uint32_t)(rng() % IBP_MAX_SETS);
                std::vector<uint8_t> xform(c_count, 0);
                if (iter % 2)
                    for (auto &x : xform) {
                        static const uint8_t preds[] = {IBP_XF_PRED_NONE, IBP_XF_PRED_DELTA, IBP_XF_PRED_XOR};
                        x = (uint8_t)((rng() % 2 ? IBP_XF_ZIGZAG : 0u) | preds[rng() % 3]);
                    }
                // Mostly matching data, so that rows go both ways (packed and raw).
                const Dist d = iter % 3 ? Dist::SmallInts : kAllDists[rng() % 10];
                const std::vector<uint8_t> data = make_data(d, bs + 1, (uint32_t)iter + 9000);
                std::vector<uint64_t> mask(nsets * c_count), value(nsets * c_count);
                const uint64_t wmask = ibp_fmt_word_mask(w);
                for (size_t i = 0; i < mask.size(); i++) {
                    const uint32_t inv = (uint32_t)(rng() % (w * 8 + 1));
                    mask[i] = inv ? (wmask & ~(inv >= 64 ? 0 : (wmask >> inv))) : 0;
                    value[i] = ibp_load_word(data.data() + (size_t)(rng() % (bs / w)) * w, w) & mask[i];
                }
                for (int lite = 0; lite < 2; lite++) {
                    IbpCodecPlan *plan = nullptr;
                    ASSERT_EQ((lite ? ibp_codec_plan_build_lite
                                    : ibp_codec_plan_build)(w, c_count, r_len, nsets, bs, xform.data(),
                                                            mask.data(), value.data(), &plan),
                              0);
                    const size_t lens[] = {bs, bs - 1 - (size_t)(rng() % 3000), 1 + (size_t)(rng() % 300)};
                    for (const size_t len : lens) {
                        const uint32_t phase = (uint32_t)(rng() % c_count);
                        std::vector<uint8_t> src(len + 1);
                        std::memcpy(src.data() + 1, data.data(), len);
                        const uint64_t want = ref->cost(plan, src.data() + 1, (uint32_t)len, phase);
                        if (!lite) {
                            const size_t cap = ibp_codec_bound_for(plan, len);
                            std::vector<uint8_t> enc(cap);
                            size_t enc_len = 0;
                            ASSERT_EQ(ref->encode(plan, src.data() + 1, (uint32_t)len, phase, enc.data(), cap,
                                                  &enc_len),
                                      0);
                            EXPECT_EQ(want, enc_len);
                        }
                        for (size_t l = 0; l < nlevels; l++)
                            EXPECT_EQ(levels[l]->cost(plan, src.data() + 1, (uint32_t)len, phase), want)
                                << levels[l]->name << " W " << w << " C " << c_count << " R " << r_len
                                << " K " << nsets << " lite " << lite << " len " << len;
                    }
                    ibp_codec_plan_destroy(&plan);
                }
            }
        }
    }
}

// The planner's agreement histograms at every level: each word's agreement length (the lowest rank
// among the bits where it differs from the majority) counted as a bit-by-bit search finds it, for
// every word size, lengths around the vector widths, and majorities the words mostly match.
TEST(Codec, EveryLevelCountsAgreementLengths)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(31);
    const uint32_t lengths[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 100, 1023};
    for (uint32_t w : {2u, 4u, 8u}) {
        const uint32_t wbits = w * 8u;
        const uint64_t full = ibp_fmt_word_mask(w);
        for (int round = 0; round < 8; round++) {
            std::vector<uint8_t> order(wbits), rk(wbits);
            for (uint32_t b = 0; b < wbits; b++)
                order[b] = (uint8_t)b;
            std::shuffle(order.begin(), order.end(), rng);
            for (uint32_t m = 0; m < wbits; m++)
                rk[order[m]] = (uint8_t)m;
            std::vector<uint8_t> rank(w * IBP_RANK_NIBBLES);
            for (uint32_t q = 0; q < w; q++)
                for (uint32_t v = 0; v < 16u; v++) {
                    uint32_t low = wbits, high = wbits;
                    for (uint32_t b = 0; b < 4u; b++)
                        if ((v >> b) & 1u) {
                            low = std::min<uint32_t>(low, rk[8u * q + b]);
                            high = std::min<uint32_t>(high, rk[8u * q + 4u + b]);
                        }
                    rank[q * IBP_RANK_NIBBLES + v] = (uint8_t)low;
                    rank[q * IBP_RANK_NIBBLES + 16u + v] = (uint8_t)high;
                }
            const uint64_t maj = rng() & full;
            for (uint32_t n : lengths) {
                std::vector<uint8_t> words((size_t)n * w + 1u);
                std::vector<uint32_t> want(wbits + 1u, 3u); // added to what is there
                for (uint32_t j = 0; j < n; j++) {
                    // Mostly a few bits away from the majority, so that every length shows up.
                    uint64_t x = maj;
                    for (uint64_t flips = rng() % 4; flips > 0; flips--)
                        x ^= (uint64_t)1 << (rng() % wbits);
                    if (round % 2)
                        x = rng() & full;
                    memcpy(words.data() + (size_t)j * w, &x, w);
                    uint32_t agree = 0;
                    while (agree < wbits && !(((x ^ maj) >> order[agree]) & 1u))
                        agree++;
                    want[agree]++;
                }
                for (size_t l = 0; l < nlevels; l++) {
                    std::vector<uint32_t> got(wbits + 1u, 3u);
                    levels[l]->agree_hist(words.data(), n, w, maj, rank.data(), got.data());
                    EXPECT_EQ(got, want) << levels[l]->name << " w " << w << " n " << n << " round " << round;
                }
            }
        }
    }
}

// The period search's equal-byte counts at every level, against a byte-by-byte count: lengths
// around the vector widths, data that repeats (counters near full) and data that does not.
TEST(Codec, EveryLevelCountsEqualBytesAtEachLag)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(5);
    for (size_t n : {8u, 9u, 40u, 63u, 64u, 65u, 127u, 300u, 4097u, 8192u, 40000u}) {
        for (int repeat = 0; repeat < 2; repeat++) {
            std::vector<uint8_t> p(n);
            for (size_t i = 0; i < n; i++)
                p[i] = repeat ? (uint8_t)(i % 12u == 0 ? rng() : i % 3u) : (uint8_t)rng();
            const uint32_t lag_max = (uint32_t)std::min<size_t>(n / 4u, 2048u);
            std::vector<uint32_t> want(lag_max + 1u, 0);
            for (uint32_t lag = 1; lag <= lag_max; lag++)
                for (size_t i = 0; i < (n - lag) / 8u * 8u; i++)
                    want[lag] += p[i] == p[i + lag];
            for (size_t l = 0; l < nlevels; l++) {
                std::vector<uint32_t> got(lag_max + 1u, 0);
                levels[l]->lag_equal(p.data(), n, lag_max, got.data());
                EXPECT_EQ(got, want) << levels[l]->name << " n " << n << " repeat " << repeat;
            }
        }
    }
}

// The staged count pass's routing at every level against the reference: each routing and number
// of sets the planner asks for, strides of one and more, lengths around the vector widths, fills
// that start near the cap (a call stops where a set's buffer fills) and words that match the sets
// about evenly; the buffers and fills must be the same after each call, and so must its words taken.
TEST(Codec, EveryLevelStagesWordsAsTheReference)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(44);
    const uint32_t routes[][2] = {{IBP_ROUTE_ONE, 0},  {IBP_ROUTE_SIGN, 0}, {IBP_ROUTE_FREE, 1},
                                  {IBP_ROUTE_FREE, 2}, {IBP_ROUTE_SETS, 2}, {IBP_ROUTE_SETS, 3}};
    const uint32_t cap = 64;
    for (uint32_t w : {2u, 4u, 8u}) {
        const uint64_t full = ibp_fmt_word_mask(w);
        for (const auto &how : routes) {
            for (size_t stride : {1u, 3u, 14u}) {
                for (uint32_t n : {0u, 1u, 3u, 4u, 5u, 7u, 9u, 31u, 100u, 333u}) {
                    IbpStageRoute rt = {};
                    rt.how = how[0];
                    rt.nsets = how[1];
                    rt.first = (uint32_t)(rng() % 2u);
                    for (uint32_t k = 0; k < rt.nsets; k++) {
                        rt.mask[k] = rng() & rng() & full;
                        rt.value[k] = rng() & rt.mask[k];
                    }
                    std::vector<uint64_t> words((size_t)n * stride + 1u);
                    for (auto &x : words) {
                        x = rng() & full;
                        const uint32_t k = (uint32_t)(rng() % 4u); // mostly one of the sets
                        if (k < rt.nsets)
                            x = (x & ~rt.mask[k]) | rt.value[k];
                    }
                    uint32_t start[IBP_MAX_SETS + 1u];
                    for (auto &f : start)
                        f = (uint32_t)(rng() % 2u ? rng() % cap : cap - 1u - rng() % 6u);
                    std::vector<uint8_t> want_buf((IBP_MAX_SETS + 1u) * cap * 8u + 32u, 0xa5);
                    uint8_t *want_to[IBP_MAX_SETS + 1u];
                    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
                        want_to[r] = want_buf.data() + (size_t)r * cap * 8u;
                    uint32_t want_fill[IBP_MAX_SETS + 1u];
                    memcpy(want_fill, start, sizeof(start));
                    const uint32_t want_took =
                        ibp_codec_stage_ref(words.data(), stride, n, w, &rt, want_to, want_fill, cap);
                    for (size_t l = 0; l < nlevels; l++) {
                        std::vector<uint8_t> buf(want_buf.size(), 0xa5);
                        uint8_t *to[IBP_MAX_SETS + 1u];
                        for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
                            to[r] = buf.data() + (size_t)r * cap * 8u;
                        uint32_t fill[IBP_MAX_SETS + 1u];
                        memcpy(fill, start, sizeof(start));
                        const uint32_t took =
                            levels[l]->stage(words.data(), stride, n, w, &rt, to, fill, cap);
                        const std::string what = std::string(levels[l]->name) + " w " + std::to_string(w) +
                                                 " how " + std::to_string(how[0]) + " sets " +
                                                 std::to_string(how[1]) + " stride " +
                                                 std::to_string(stride) + " n " + std::to_string(n);
                        EXPECT_EQ(took, want_took) << what;
                        for (uint32_t r = 0; r <= IBP_MAX_SETS; r++) {
                            EXPECT_EQ(fill[r], want_fill[r]) << what << " set " << r;
                            EXPECT_EQ(0, memcmp(to[r], want_to[r], (size_t)want_fill[r] * w))
                                << what << " set " << r;
                        }
                    }
                }
            }
        }
    }
}

// The set assignment's sizes and running sums at every level against a word-by-word oracle: one to
// three sets, column counts below, at and above the vector width (the table's period is a multiple
// of C of at least 8), every starting entry, lengths around the vector widths, with and without the
// running sums, words that mostly match some set.
TEST(Codec, EveryLevelAssignsWordsAsTheReference)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(45);
    for (uint32_t w : {2u, 4u, 8u}) {
        const uint32_t wbits = w * 8u;
        const uint64_t full = ibp_fmt_word_mask(w);
        for (uint32_t c_count : {1u, 2u, 3u, 5u, 7u, 8u, 14u, 33u}) {
            const uint32_t period = c_count * ((8u + c_count - 1u) / c_count);
            const size_t stride = period + 8u;
            for (uint32_t nsets = 1; nsets <= IBP_MAX_SETS; nsets++) {
                std::vector<uint64_t> cm((size_t)nsets * c_count), cv(cm.size());
                for (size_t e = 0; e < cm.size(); e++) {
                    cm[e] = rng() & rng() & full;
                    cv[e] = rng() & cm[e];
                }
                std::vector<uint64_t> mk(IBP_MAX_SETS * stride), vl(mk.size()), vb(mk.size());
                std::vector<uint32_t> mk32(mk.size()), vl32(mk.size()), vb32(mk.size());
                for (uint32_t k = 0; k < nsets; k++)
                    for (size_t j = 0; j < stride; j++) {
                        const size_t at = (size_t)k * c_count + j % c_count;
                        mk[k * stride + j] = cm[at];
                        vl[k * stride + j] = cv[at];
                        vb[k * stride + j] = wbits - (uint32_t)__builtin_popcountll(cm[at]);
                        mk32[k * stride + j] = (uint32_t)mk[k * stride + j];
                        vl32[k * stride + j] = (uint32_t)vl[k * stride + j];
                        vb32[k * stride + j] = (uint32_t)vb[k * stride + j];
                    }
                IbpAssignTable t = {};
                t.mask = mk.data();
                t.value = vl.data();
                t.bits = vb.data();
                if (w < 8u) {
                    t.mask32 = mk32.data();
                    t.value32 = vl32.data();
                    t.bits32 = vb32.data();
                }
                t.stride = stride;
                t.nsets = nsets;
                t.period = period;
                for (size_t n : {0u, 1u, 3u, 4u, 5u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 100u, 1001u}) {
                    const uint32_t j0 = (uint32_t)(rng() % period);
                    const uint32_t base = (uint32_t)rng();
                    std::vector<uint64_t> words(n);
                    std::vector<uint32_t> want_run(n);
                    uint64_t want = 0;
                    uint32_t sum = base;
                    for (size_t i = 0; i < n; i++) {
                        const uint32_t c = (uint32_t)((j0 + i) % period % c_count);
                        uint64_t x = rng() & full;
                        const uint32_t pick = (uint32_t)(rng() % (nsets + 1u));
                        if (pick < nsets)
                            x = (x & ~cm[(size_t)pick * c_count + c]) | cv[(size_t)pick * c_count + c];
                        words[i] = x;
                        uint32_t sz = wbits;
                        for (uint32_t k = 0; k < nsets; k++)
                            if ((x & cm[(size_t)k * c_count + c]) == cv[(size_t)k * c_count + c]) {
                                sz = wbits - (uint32_t)__builtin_popcountll(cm[(size_t)k * c_count + c]);
                                break;
                            }
                        want += sz;
                        sum += sz;
                        want_run[i] = sum;
                    }
                    for (size_t l = 0; l < nlevels; l++) {
                        const std::string what = std::string(levels[l]->name) + " w " + std::to_string(w) +
                                                 " C " + std::to_string(c_count) + " sets " +
                                                 std::to_string(nsets) + " n " + std::to_string(n);
                        std::vector<uint32_t> run(n + 1u, 7u);
                        EXPECT_EQ(levels[l]->assign(words.data(), n, wbits, &t, j0, base, run.data()), want)
                            << what;
                        EXPECT_EQ(std::vector<uint32_t>(run.begin(), run.begin() + (long)n), want_run)
                            << what;
                        EXPECT_EQ(run[n], 7u) << what;
                        EXPECT_EQ(levels[l]->assign(words.data(), n, wbits, &t, j0, base, nullptr), want)
                            << what;
                    }
                }
            }
        }
    }
}

// The row-length pick's sums at every level against a row-by-row oracle: row counts around the
// vector widths, rows whose packed form is larger than raw and smaller, and the sizes of the rows
// twice as long written in place.
TEST(Codec, EveryLevelSumsRowLevelsAsTheReference)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(46);
    for (uint32_t r : {1u, 3u, 8u, 14u, 64u, 1024u}) {
        for (size_t nrows : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 100u}) {
            for (uint32_t wbits : {16u, 64u}) {
                std::vector<uint32_t> sums(nrows);
                for (auto &v : sums)
                    v = (uint32_t)(rng() % ((uint64_t)r * wbits + 1u));
                const uint32_t row_sel = r * (uint32_t)(rng() % 3u);
                const uint32_t row_raw = r * wbits;
                uint64_t want = 0;
                for (size_t q = 0; q < nrows; q++)
                    want += std::min<uint64_t>(row_sel + (uint64_t)sums[q], row_raw) + 1u;
                std::vector<uint32_t> halves(sums);
                for (size_t q = 0; q < nrows / 2u; q++)
                    halves[q] = sums[2u * q] + sums[2u * q + 1u];
                for (size_t l = 0; l < nlevels; l++) {
                    std::vector<uint32_t> got(sums);
                    EXPECT_EQ(levels[l]->row_level(got.data(), nrows, row_sel, row_raw), want)
                        << levels[l]->name << " r " << r << " rows " << nrows << " wbits " << wbits;
                    EXPECT_TRUE(std::equal(got.begin(), got.begin() + (long)(nrows / 2u), halves.begin()))
                        << levels[l]->name << " r " << r << " rows " << nrows << " wbits " << wbits;
                }
            }
        }
    }
}

// The planner's loads at every level against a word-by-word oracle: every word size and transform,
// predictor distances shorter and longer than a vector, lengths around the vector widths, and the
// words C before shorter than C words (predicted from 0).
TEST(Codec, EveryLevelWidensWordsAsTheReference)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(47);
    const uint32_t xforms[] = {0u,
                               IBP_XF_ZIGZAG,
                               IBP_XF_PRED_DELTA,
                               IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG,
                               IBP_XF_PRED_XOR,
                               IBP_XF_PRED_XOR | IBP_XF_ZIGZAG};
    for (uint32_t w : {2u, 4u, 8u}) {
        for (uint32_t xf : xforms) {
            for (uint32_t c_count : {1u, 3u, 14u, 40u}) {
                for (uint32_t nw : {0u, 1u, 2u, 3u, 4u, 7u, 15u, 16u, 17u, 33u, 100u, 1000u}) {
                    std::vector<uint8_t> p((size_t)nw * w + 1u);
                    for (auto &b : p)
                        b = (uint8_t)(rng() % 4u ? rng() % 3u : rng()); // small deltas and large
                    std::vector<uint64_t> want(nw);
                    for (uint32_t j = 0; j < nw; j++) {
                        const uint64_t prev =
                            j >= c_count ? ibp_load_word(p.data() + (size_t)(j - c_count) * w, w) : 0;
                        want[j] = ibp_xform(xf, ibp_load_word(p.data() + (size_t)j * w, w), prev, w);
                    }
                    for (size_t l = 0; l < nlevels; l++) {
                        std::vector<uint64_t> got(nw + 1u, 77u);
                        if (xf)
                            levels[l]->xf_widen(p.data(), nw, w, xf, c_count, got.data());
                        else
                            levels[l]->widen(p.data(), nw, w, got.data());
                        EXPECT_EQ(std::vector<uint64_t>(got.begin(), got.begin() + nw), want)
                            << levels[l]->name << " w " << w << " xf " << xf << " C " << c_count << " n "
                            << nw;
                        EXPECT_EQ(got[nw], 77u) << levels[l]->name << " w " << w << " n " << nw;
                    }
                }
            }
        }
    }
}

// Every kernel level the CPU runs, called directly (dispatch picks only one): each must encode to
// the reference's bytes and cost, decode any prefix to the reference's bytes, and fail on a
// corrupt block exactly when the reference fails.  Plans cover each word size with one column
// and no transform, several columns, transforms, and 1 to 3 mask sets.
TEST(Codec, EveryLevelEqualsReferenceBlockByBlock)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    ASSERT_LE(nlevels, 8u);
    const IbpCodecKernels *ref = ibp_codec_kernels_reference();
    ASSERT_EQ(levels[0], ref);
    std::mt19937_64 rng(77);
    const uint32_t sizes[] = {2, 4, 8};
    for (int iter = 0; iter < 90; iter++) {
        const uint32_t w = sizes[iter % 3];
        const uint32_t c_count = iter % 2 ? 1 : 1 + (uint32_t)(rng() % 19);
        const uint32_t r_len = iter % 5 == 0 ? 1 + (uint32_t)(rng() % 40) : 1 + (uint32_t)(rng() % 2000);
        const uint32_t nsets = 1 + (uint32_t)((iter / 3) % IBP_MAX_SETS);
        std::vector<uint8_t> xform(c_count, 0);
        if (iter % 4 == 3)
            for (auto &x : xform) {
                static const uint8_t preds[] = {IBP_XF_PRED_NONE, IBP_XF_PRED_DELTA, IBP_XF_PRED_XOR};
                x = (uint8_t)((rng() % 2 ? IBP_XF_ZIGZAG : 0u) | preds[rng() % 3]);
            }
        const Dist d = kAllDists[rng() % 10];
        const uint32_t bs = 16384;
        // Block lengths: full, odd (a tail of bytes), tiny.
        const size_t lens[] = {bs, bs - 1 - (size_t)(rng() % 3000), 1 + (size_t)(rng() % 40)};
        const std::vector<uint8_t> data = make_data(d, bs + 1, (uint32_t)iter + 1000);
        std::vector<uint64_t> mask(nsets * c_count), value(nsets * c_count);
        const uint64_t wmask = ibp_fmt_word_mask(w);
        for (size_t i = 0; i < mask.size(); i++) {
            const uint32_t inv = (uint32_t)(rng() % (w * 8 + 1));
            mask[i] = inv ? (wmask & ~(inv >= 64 ? 0 : (wmask >> inv))) : 0;
            value[i] = ibp_load_word(data.data() + (size_t)(rng() % (bs / w)) * w, w) & mask[i];
        }
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_build(w, c_count, r_len, nsets, bs, xform.data(), mask.data(), value.data(),
                                       &plan),
                  0);
        for (const size_t len : lens) {
            const uint32_t phase = (uint32_t)(rng() % c_count);
            // Unaligned source and block buffers: one byte in.
            std::vector<uint8_t> src(len + 1);
            std::memcpy(src.data() + 1, data.data(), len);
            const size_t cap = ibp_codec_bound_for(plan, len);
            std::vector<uint8_t> want(cap + 1);
            size_t want_len = 0;
            ASSERT_EQ(
                ref->encode(plan, src.data() + 1, (uint32_t)len, phase, want.data() + 1, cap, &want_len), 0);
            const uint64_t want_cost = ref->cost(plan, src.data() + 1, (uint32_t)len, phase);
            EXPECT_EQ(want_cost, want_len);
            for (size_t l = 0; l < nlevels; l++) {
                const IbpCodecKernels *k = levels[l];
                SCOPED_TRACE(std::string(k->name) + " iter " + std::to_string(iter) + " len " +
                             std::to_string(len));
                std::vector<uint8_t> got(cap + 1, 0xa5);
                size_t got_len = 0;
                ASSERT_EQ(
                    k->encode(plan, src.data() + 1, (uint32_t)len, phase, got.data() + 1, cap, &got_len), 0);
                ASSERT_EQ(got_len, want_len);
                ASSERT_EQ(std::memcmp(got.data() + 1, want.data() + 1, want_len), 0);
                EXPECT_EQ(k->cost(plan, src.data() + 1, (uint32_t)len, phase), want_cost);
                const size_t limits[] = {len, 0, 1, (size_t)(rng() % (len + 1)), len - (len > 5 ? 5 : 0)};
                for (const size_t limit : limits) {
                    std::vector<uint8_t> out(len + 2, 0x5a);
                    ASSERT_EQ(k->decode(plan, want.data() + 1, want_len, (uint32_t)len, out.data() + 1,
                                        (uint32_t)limit),
                              0)
                        << "limit " << limit;
                    ASSERT_EQ(std::memcmp(out.data() + 1, data.data(), limit), 0) << "limit " << limit;
                    ASSERT_EQ(out[0], 0x5a);
                    ASSERT_EQ(out[limit + 1], 0x5a) << "wrote past limit " << limit;
                }
                // Corrupt copies in exactly-sized buffers: same verdict as the reference, same
                // bytes when both accept.
                for (int c = 0; c < 12; c++) {
                    std::vector<uint8_t> bad(want.begin() + 1, want.begin() + 1 + (long)want_len);
                    bad[(size_t)(rng() % bad.size())] ^= (uint8_t)(1u + rng() % 255);
                    const size_t keep = c % 3 == 0 ? (size_t)(rng() % (bad.size() + 1)) : bad.size();
                    const std::vector<uint8_t> exact(bad.begin(), bad.begin() + (long)keep);
                    std::vector<uint8_t> a(len), b(len);
                    const int ra =
                        ref->decode(plan, exact.data(), exact.size(), (uint32_t)len, a.data(), (uint32_t)len);
                    const int rb =
                        k->decode(plan, exact.data(), exact.size(), (uint32_t)len, b.data(), (uint32_t)len);
                    ASSERT_EQ(ra, rb) << "corruption " << c;
                    if (ra == 0) {
                        ASSERT_EQ(a, b) << "corruption " << c;
                    }
                }
            }
        }
        ibp_codec_plan_destroy(&plan);
    }
}

// ---- an oracle from codec/FORMAT.md, bit by bit ----
//
// The reference decoder is the oracle of every SIMD level, but it is no longer the simplest code
// that could decode a block (it deposits a group of words through a shift network and undoes
// transforms column by column).  This decoder follows FORMAT.md literally, one bit and one word
// at a time, reading the plan from its serialised blob, and checks the reference in turn.

struct OraclePlan {
    uint32_t w = 0, c = 0, r = 0, k = 0;
    std::vector<uint8_t> xform;
    std::vector<uint64_t> mask, value; // set-major: k * C + c
};

OraclePlan oracle_plan(const IbpCodecPlan *plan)
{
    size_t len = 0;
    const uint8_t *blob = (const uint8_t *)ibp_codec_plan_blob(plan, &len);
    IbpPlanHeader h;
    std::memcpy(&h, blob, sizeof(h));
    OraclePlan o;
    o.w = h.word_size;
    o.c = h.columns;
    o.r = h.row_words;
    o.k = h.nsets;
    o.xform.assign(blob + h.xform_off, blob + h.xform_off + h.columns);
    for (uint32_t i = 0; i < o.k * o.c; i++) {
        uint64_t m = 0, v = 0;
        std::memcpy(&m, blob + h.mask_off + (size_t)i * 2 * o.w, o.w);
        std::memcpy(&v, blob + h.mask_off + (size_t)i * 2 * o.w + o.w, o.w);
        o.mask.push_back(m);
        o.value.push_back(v);
    }
    return o;
}

struct OracleBits {
    const uint8_t *base;
    uint64_t pos;
    uint64_t read(uint32_t n)
    {
        uint64_t v = 0;
        for (uint32_t i = 0; i < n; i++, pos++)
            v |= (uint64_t)((base[pos / 8] >> (pos % 8)) & 1u) << i;
        return v;
    }
};

std::vector<uint8_t> oracle_decode(const OraclePlan &o, const uint8_t *blk, uint32_t orig_len)
{
    IbpBlockHeader h;
    std::memcpy(&h, blk, sizeof(h));
    EXPECT_EQ(h.orig_len, orig_len);
    if (h.flags == IBP_BLOCK_RAW)
        return std::vector<uint8_t>(blk + IBP_BLOCK_HEADER_SIZE, blk + IBP_BLOCK_HEADER_SIZE + orig_len);
    const uint32_t nwords = orig_len / o.w;
    const uint32_t bits = o.w * 8;
    const uint64_t wmask = bits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    OracleBits payload{blk + h.payload_off, 0};
    OracleBits sel{blk + h.sel_off, 0};
    // The group index: where it lies, and the payload offset of every IBP_INDEX_WORDS-th word.
    const uint32_t groups = (nwords + IBP_INDEX_WORDS - 1) / IBP_INDEX_WORDS;
    const uint32_t index_len = groups > 1 ? (4 * (groups - 1) + 15) / 16 * 16 : 0;
    // Its carries: the words before each entry whose column has a predictor (plans of at most 32
    // columns).
    uint32_t npred = 0;
    for (uint8_t xf : o.xform)
        npred += (xf & IBP_XF_PRED_MASK) != 0;
    const bool carries = npred && o.c <= 32;
    EXPECT_EQ(h.flags & IBP_BLOCK_CARRIES, carries ? IBP_BLOCK_CARRIES : 0u);
    const uint32_t carry_len = carries && groups > 1 ? ((groups - 1) * npred * o.w + 15) / 16 * 16 : 0;
    EXPECT_EQ(h.rowflag_off,
              IBP_BLOCK_HEADER_SIZE + (h.flags & IBP_BLOCK_INDEXED ? index_len + carry_len : 0));
    std::vector<uint64_t> x(nwords);
    for (uint32_t j = 0; j < nwords; j++) {
        if ((h.flags & IBP_BLOCK_INDEXED) && j && j % IBP_INDEX_WORDS == 0) {
            uint32_t entry = 0;
            std::memcpy(&entry, blk + IBP_BLOCK_HEADER_SIZE + 4 * (j / IBP_INDEX_WORDS - 1), 4);
            EXPECT_EQ(entry, payload.pos) << "index entry of word " << j;
        }
        const uint32_t col = (h.col_phase + j) % o.c;
        const uint32_t row = j / o.r;
        uint64_t t;
        if ((blk[h.rowflag_off + row / 8] >> (row % 8)) & 1) {
            const uint32_t s = (uint32_t)sel.read(o.k > 1 ? 2 : 1);
            if (s == 0) {
                t = payload.read(bits);
            } else {
                const uint64_t m = o.mask[(s - 1) * o.c + col];
                t = o.value[(s - 1) * o.c + col];
                for (uint32_t b = 0; b < bits; b++)
                    if (!((m >> b) & 1))
                        t |= payload.read(1) << b;
            }
        } else {
            t = payload.read(bits);
        }
        const uint8_t xf = o.xform[col];
        if (xf & IBP_XF_ZIGZAG)
            t = ((t >> 1) ^ (0 - (t & 1))) & wmask;
        const uint64_t prev = j >= o.c ? x[j - o.c] : 0;
        if ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA)
            t = (t + prev) & wmask;
        else if ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_XOR)
            t ^= prev;
        x[j] = t;
    }
    const uint8_t *carry = blk + IBP_BLOCK_HEADER_SIZE + index_len;
    for (uint32_t g = 1; carries && g < groups; g++)
        for (uint32_t j = g * IBP_INDEX_WORDS - o.c; j < g * IBP_INDEX_WORDS; j++)
            if (o.xform[(h.col_phase + j) % o.c] & IBP_XF_PRED_MASK) {
                uint64_t v = 0;
                std::memcpy(&v, carry, o.w);
                carry += o.w;
                EXPECT_EQ(v, x[j]) << "carry of word " << j;
            }
    std::vector<uint8_t> out(orig_len);
    for (uint32_t j = 0; j < nwords; j++)
        std::memcpy(out.data() + (size_t)j * o.w, &x[j], o.w);
    std::memcpy(out.data() + (size_t)nwords * o.w, blk + h.tail_off, orig_len % o.w);
    return out;
}

// A plan of the given shape with masks fitted loosely to data (as transformed by the plan):
// contiguous high-bit masks, masks of scattered bits (many runs, which the reference's shift
// network and the SIMD groups must place), and some that seldom match; xf_mode 0: no transforms, 1: any per
// column, 2: zigzag only, 3: delta (some with zigzag), 4: xor (some with zigzag), 5: delta in every column.
IbpCodecPlan *make_plan(std::mt19937_64 &rng, uint32_t w, uint32_t c_count, uint32_t r_len, uint32_t nsets,
                        int xf_mode, const std::vector<uint8_t> &data, uint32_t phase, uint32_t bs)
{
    std::vector<uint8_t> xform(c_count, 0);
    for (auto &x : xform) {
        const uint8_t zz = rng() % 2 ? IBP_XF_ZIGZAG : 0;
        switch (xf_mode) {
        case 1: {
            static const uint8_t preds[] = {IBP_XF_PRED_NONE, IBP_XF_PRED_DELTA, IBP_XF_PRED_XOR};
            x = (uint8_t)(zz | preds[rng() % 3]);
            break;
        }
        case 2:
            x = zz;
            break;
        case 3:
            x = (uint8_t)(rng() % 3 ? IBP_XF_PRED_DELTA | zz : 0);
            break;
        case 4:
            x = (uint8_t)(rng() % 3 ? IBP_XF_PRED_XOR | zz : 0);
            break;
        case 5:
            x = (uint8_t)(IBP_XF_PRED_DELTA | zz);
            break;
        default:
            break;
        }
    }
    const uint64_t wmask = ibp_fmt_word_mask(w);
    const uint32_t bits = w * 8;
    // Word j of data transformed as its column says, in a block at data whose word 0 is in column
    // phase.
    const size_t nw = data.size() / w;
    auto word = [&](size_t j) {
        uint64_t v = 0;
        std::memcpy(&v, data.data() + j * w, w);
        return v;
    };
    auto transformed = [&](size_t j) {
        const uint8_t xf = xform[(phase + j) % c_count];
        const uint64_t prev = j >= c_count ? word(j - c_count) : 0;
        uint64_t d = word(j);
        if ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA)
            d = (d - prev) & wmask;
        else if ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_XOR)
            d ^= prev;
        if (xf & IBP_XF_ZIGZAG)
            d = ((d << 1) ^ (0 - (d >> (bits - 1)))) & wmask;
        return d;
    };
    std::vector<uint64_t> mask(nsets * c_count), value(nsets * c_count);
    for (size_t i = 0; i < mask.size(); i++) {
        // c: the first word in column i mod C.
        const uint32_t c = (uint32_t)((i % c_count + c_count - phase) % c_count);
        const size_t per_col = nw > c ? (nw - c + c_count - 1) / c_count : 0;
        if (per_col == 0) {
            mask[i] = 0;
            value[i] = 0;
            continue;
        }
        // Bits on which a few words of the column agree, thinned to a contiguous high part or to
        // scattered bits, so that sets match often and still have runs for the kernels to place.
        const uint64_t first = transformed(c + (rng() % per_col) * c_count);
        uint64_t agree = wmask;
        for (int k = 0; k < 3; k++)
            agree &= ~(first ^ transformed(c + (rng() % per_col) * c_count));
        const uint32_t inv = (uint32_t)(rng() % (bits + 1));
        switch (rng() % 4) {
        case 0:
            mask[i] = agree & (inv ? (wmask & ~(inv >= 64 ? 0 : (wmask >> inv))) : 0);
            break;
        case 1:
            mask[i] = agree & (rng() | rng());
            break;
        case 2:
            mask[i] = agree;
            break;
        default:
            mask[i] = rng() & rng() & wmask;
            break;
        }
        value[i] = first & mask[i];
    }
    IbpCodecPlan *plan = nullptr;
    EXPECT_EQ(
        ibp_codec_plan_build(w, c_count, r_len, nsets, bs, xform.data(), mask.data(), value.data(), &plan),
        0);
    return plan;
}

// Every level on plans of every layout its kernels distinguish: column counts around the vector
// widths (period-major with k > 1 periods per vector, one or two vectors per period, and the
// plain path beyond), group tables present or too large, rows not a multiple of a group, rows
// longer than the kernels' stream-end copies, each mix of transforms.  The reference must decode
// as the oracle does, and every level must match the reference byte for byte, prefix by prefix,
// and fail on a corrupt block exactly when it does.
TEST(Codec, EveryLevelEveryLayoutMatchesOracle)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    const IbpCodecKernels *ref = ibp_codec_kernels_reference();
    std::mt19937_64 rng(2026);
    const uint32_t columns[] = {1, 2, 3, 4, 5, 7, 8, 9, 14, 16, 17, 31, 32, 33, 64, 65, 100};
    const uint32_t sizes[] = {2, 4, 8};
    int iter = 0;
    for (const uint32_t w : sizes) {
        for (const uint32_t c_count : columns) {
            for (int mix = 0; mix < 3; mix++) {
                iter++;
                const uint32_t nsets = 1 + (uint32_t)(rng() % IBP_MAX_SETS);
                const uint32_t rows[] = {c_count * 8, 1 + (uint32_t)(rng() % 37), 1024, 4096, 1021};
                const uint32_t r_len =
                    std::min<uint32_t>(mix == 1 ? 1024 : rows[rng() % 5], IBP_MAX_ROW_WORDS);
                // Each shape meets no transform or any mix, and two of the one-kind mixes.
                const int xf_mode = mix == 0 ? iter % 2 : 2 + (iter + mix) % 4;
                const uint32_t bs = 65536;
                // Mostly data that packs, so that rows go through the packed paths.
                static const Dist packs[] = {Dist::SmallInts, Dist::Sparse, Dist::Rows, Dist::Bf16,
                                             Dist::Fp16};
                const Dist d = mix == 2 ? kAllDists[rng() % 10] : packs[rng() % 5];
                const std::vector<uint8_t> data = make_data(d, bs + 1, (uint32_t)iter + 77);
                const uint32_t phase = (uint32_t)(rng() % c_count);
                IbpCodecPlan *plan = make_plan(rng, w, c_count, r_len, nsets, xf_mode, data, phase, bs);
                ASSERT_NE(plan, nullptr);
                const OraclePlan oracle = oracle_plan(plan);
                const size_t lens[] = {bs, bs - 1 - (size_t)(rng() % 5000), 1 + (size_t)(rng() % 60)};
                for (const size_t len : lens) {
                    SCOPED_TRACE("W " + std::to_string(w) + " C " + std::to_string(c_count) + " R " +
                                 std::to_string(r_len) + " K " + std::to_string(nsets) + " xf " +
                                 std::to_string(xf_mode) + " len " + std::to_string(len));
                    std::vector<uint8_t> src(len + 1);
                    std::memcpy(src.data() + 1, data.data(), len);
                    const size_t cap = ibp_codec_bound_for(plan, len);
                    std::vector<uint8_t> want(cap + 1);
                    size_t want_len = 0;
                    ASSERT_EQ(ref->encode(plan, src.data() + 1, (uint32_t)len, phase, want.data() + 1, cap,
                                          &want_len),
                              0);
                    const std::vector<uint8_t> orig(data.begin(), data.begin() + (long)len);
                    ASSERT_EQ(oracle_decode(oracle, want.data() + 1, (uint32_t)len), orig);
                    const uint64_t want_cost = ref->cost(plan, src.data() + 1, (uint32_t)len, phase);
                    EXPECT_EQ(want_cost, want_len);
                    for (size_t l = 0; l < nlevels; l++) {
                        const IbpCodecKernels *k = levels[l];
                        SCOPED_TRACE(k->name);
                        std::vector<uint8_t> got(cap + 1, 0xa5);
                        size_t got_len = 0;
                        ASSERT_EQ(k->encode(plan, src.data() + 1, (uint32_t)len, phase, got.data() + 1, cap,
                                            &got_len),
                                  0);
                        ASSERT_EQ(got_len, want_len);
                        ASSERT_EQ(std::memcmp(got.data() + 1, want.data() + 1, want_len), 0);
                        EXPECT_EQ(k->cost(plan, src.data() + 1, (uint32_t)len, phase), want_cost);
                        const size_t limits[] = {len, (size_t)(rng() % (len + 1)),
                                                 len - std::min<size_t>(len, 3)};
                        for (const size_t limit : limits) {
                            std::vector<uint8_t> out(len + 2, 0x5a);
                            ASSERT_EQ(k->decode(plan, want.data() + 1, want_len, (uint32_t)len,
                                                out.data() + 1, (uint32_t)limit),
                                      0)
                                << "limit " << limit;
                            ASSERT_EQ(std::memcmp(out.data() + 1, orig.data(), limit), 0)
                                << "limit " << limit;
                            ASSERT_EQ(out[0], 0x5a);
                            ASSERT_EQ(out[limit + 1], 0x5a) << "wrote past limit " << limit;
                        }
                        for (int c = 0; c < 6; c++) {
                            std::vector<uint8_t> bad(want.begin() + 1, want.begin() + 1 + (long)want_len);
                            bad[(size_t)(rng() % bad.size())] ^= (uint8_t)(1u + rng() % 255);
                            const size_t keep = c % 3 == 0 ? (size_t)(rng() % (bad.size() + 1)) : bad.size();
                            const std::vector<uint8_t> exact(bad.begin(), bad.begin() + (long)keep);
                            std::vector<uint8_t> a(len), b(len);
                            const int ra = ref->decode(plan, exact.data(), exact.size(), (uint32_t)len,
                                                       a.data(), (uint32_t)len);
                            const int rb = k->decode(plan, exact.data(), exact.size(), (uint32_t)len,
                                                     b.data(), (uint32_t)len);
                            ASSERT_EQ(ra, rb) << "corruption " << c;
                            if (ra == 0) {
                                ASSERT_EQ(a, b) << "corruption " << c;
                            }
                        }
                    }
                }
                ibp_codec_plan_destroy(&plan);
            }
        }
    }
}

// Decodes [off, off + len) of a region with one level, as ibp_codec_region_decode_range does with
// the dispatched one.
int level_decode_range(const IbpCodecKernels *k, const IbpCodecPlan *plan,
                       const std::vector<uint8_t *> &blocks, const std::vector<size_t> &lens,
                       size_t region_len, size_t off, size_t len, uint8_t *dst)
{
    const size_t bs = ibp_codec_plan_block_size(plan);
    std::vector<uint8_t> scratch(bs);
    size_t pos = off;
    while (pos < off + len) {
        const size_t i = pos / bs;
        const size_t boff = i * bs;
        const uint32_t blen = (uint32_t)std::min(bs, region_len - boff);
        const size_t in_blk = pos - boff;
        const size_t end = std::min(off + len - boff, (size_t)blen);
        uint8_t *const to = in_blk ? scratch.data() : dst + (pos - off);
        const int rc = k->decode(plan, blocks[i], lens[i], blen, to, (uint32_t)end);
        if (rc)
            return rc;
        if (in_blk)
            std::memcpy(dst + (pos - off), scratch.data() + in_blk, end - in_blk);
        pos = boff + end;
    }
    return 0;
}

// Every level on the planner's plans for data of every distribution and size, from unaligned
// buffers: the same bytes as the reference, and random sub-ranges decoded by each level into
// unaligned destinations.
TEST(Codec, EveryLevelEveryDistributionAndSize)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    const IbpCodecKernels *ref = ibp_codec_kernels_reference();
    const size_t sizes[] = {0, 1, 7, 4095, (1u << 20) + 3};
    std::mt19937_64 rng(99);
    uint32_t seed = 500;
    for (const Dist d : kAllDists) {
        for (const size_t n : sizes) {
            SCOPED_TRACE("dist " + std::to_string((int)d) + " size " + std::to_string(n));
            const std::vector<uint8_t> data = make_data(d, n, seed++);
            const std::vector<uint8_t> buf = unaligned(data);
            const uint8_t *const src = buf.data() + 1;
            IbpCodecPlanOptions opts = {};
            opts.block_size = n > 100000 ? 65536 : 4096;
            IbpCodecPlan *plan = nullptr;
            ASSERT_EQ(ibp_codec_plan_create(src, n, &opts, &plan), 0);
            const size_t bs = ibp_codec_plan_block_size(plan);
            const size_t nblocks = (n + bs - 1) / bs;
            const size_t each = ibp_codec_block_bound(plan, bs) + 1;
            const IbpCodecPlanInfo info = [&] {
                IbpCodecPlanInfo i;
                ibp_codec_plan_info(plan, &i);
                return i;
            }();
            std::vector<std::vector<uint8_t>> arena(nlevels, std::vector<uint8_t>(nblocks * each + 1));
            std::vector<std::vector<uint8_t *>> blocks(nlevels, std::vector<uint8_t *>(nblocks));
            std::vector<std::vector<size_t>> lens(nlevels, std::vector<size_t>(nblocks));
            for (size_t l = 0; l < nlevels; l++) {
                for (size_t i = 0; i < nblocks; i++) {
                    blocks[l][i] = arena[l].data() + 1 + i * each; // unaligned blocks
                    const size_t off = i * bs;
                    const size_t blen = std::min(bs, n - off);
                    const uint32_t phase = (uint32_t)((off / info.word_size) % info.columns);
                    ASSERT_EQ(levels[l]->encode(plan, src + off, (uint32_t)blen, phase, blocks[l][i],
                                                each - 1, &lens[l][i]),
                              0);
                }
            }
            ASSERT_EQ(levels[0], ref);
            for (size_t l = 1; l < nlevels; l++) {
                for (size_t i = 0; i < nblocks; i++) {
                    ASSERT_EQ(lens[l][i], lens[0][i]) << levels[l]->name << " block " << i;
                    ASSERT_EQ(std::memcmp(blocks[l][i], blocks[0][i], lens[0][i]), 0)
                        << levels[l]->name << " block " << i;
                }
            }
            for (size_t l = 0; l < nlevels; l++) {
                SCOPED_TRACE(levels[l]->name);
                std::vector<uint8_t> whole(n + 2, 0x5a);
                ASSERT_EQ(level_decode_range(levels[l], plan, blocks[0], lens[0], n, 0, n, whole.data() + 1),
                          0);
                ASSERT_EQ(std::memcmp(whole.data() + 1, data.data(), n), 0);
                ASSERT_EQ(whole[n + 1], 0x5a);
                for (int r = 0; r < 12 && n; r++) {
                    const size_t off = (size_t)(rng() % n);
                    const size_t len = (size_t)(rng() % std::min<size_t>(n - off + 1, 3 * bs));
                    std::vector<uint8_t> out(len + 2, 0x5a);
                    ASSERT_EQ(
                        level_decode_range(levels[l], plan, blocks[0], lens[0], n, off, len, out.data() + 1),
                        0);
                    ASSERT_EQ(std::memcmp(out.data() + 1, data.data() + off, len), 0)
                        << "off " << off << " len " << len;
                    ASSERT_EQ(out[0], 0x5a);
                    ASSERT_EQ(out[len + 1], 0x5a);
                }
            }
            ibp_codec_plan_destroy(&plan);
        }
    }
}

TEST(Codec, RandomAccessSubRanges)
{
    std::mt19937_64 rng(7);
    for (const Dist d : {Dist::Rows, Dist::GaussF32Small, Dist::SmallInts, Dist::Bf16}) {
        const size_t n = 300000 + (size_t)(rng() % 1000);
        const std::vector<uint8_t> data = make_data(d, n, (uint32_t)rng());
        IbpCodecPlanOptions opts = {};
        opts.block_size = 16384;
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(data.data(), n, &opts, &plan), 0);
        const size_t bs = ibp_codec_plan_block_size(plan);
        ASSERT_EQ(bs, 16384u);
        const size_t nblocks = (n + bs - 1) / bs;
        const size_t each = ibp_codec_block_bound(plan, bs);
        std::vector<uint8_t> arena(nblocks * each);
        std::vector<void *> ptr(nblocks);
        std::vector<size_t> lens(nblocks);
        for (size_t i = 0; i < nblocks; i++)
            ptr[i] = arena.data() + i * each;
        ASSERT_EQ(ibp_codec_region_encode(plan, data.data(), n, 2, ptr.data(), each, lens.data()), 0);
        for (int k = 0; k < 200; k++) {
            const size_t off = (size_t)(rng() % n);
            const size_t len = (size_t)(rng() % std::min<size_t>(n - off + 1, 3 * bs));
            std::vector<uint8_t> out(len + 1, 0x5a);
            ASSERT_EQ(ibp_codec_region_decode_range(plan, (const void *const *)ptr.data(), lens.data(), n,
                                                    off, len, out.data()),
                      0);
            ASSERT_EQ(out[len], 0x5a);
            ASSERT_EQ(std::memcmp(out.data(), data.data() + off, len), 0) << "off " << off << " len " << len;
        }
        std::vector<uint8_t> out(8);
        EXPECT_EQ(ibp_codec_region_decode_range(plan, (const void *const *)ptr.data(), lens.data(), n, n - 4,
                                                8, out.data()),
                  -EINVAL);
        ibp_codec_plan_destroy(&plan);
    }
}

TEST(Codec, ThreadsGiveIdenticalBlocks)
{
    const std::vector<uint8_t> data = make_data(Dist::GaussF32Small, 3 << 20, 9);
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), nullptr, &plan), 0);
    const size_t bs = ibp_codec_plan_block_size(plan);
    const size_t nblocks = (data.size() + bs - 1) / bs;
    const size_t each = ibp_codec_block_bound(plan, bs);
    std::vector<uint8_t> a(nblocks * each), b(nblocks * each);
    std::vector<void *> pa(nblocks), pb(nblocks);
    std::vector<size_t> la(nblocks), lb(nblocks);
    for (size_t i = 0; i < nblocks; i++) {
        pa[i] = a.data() + i * each;
        pb[i] = b.data() + i * each;
    }
    ASSERT_EQ(ibp_codec_region_encode(plan, data.data(), data.size(), 1, pa.data(), each, la.data()), 0);
    ASSERT_EQ(ibp_codec_region_encode(plan, data.data(), data.size(), 4, pb.data(), each, lb.data()), 0);
    for (size_t i = 0; i < nblocks; i++) {
        ASSERT_EQ(la[i], lb[i]);
        ASSERT_EQ(std::memcmp(pa[i], pb[i], la[i]), 0);
    }
    EXPECT_EQ(ibp_codec_region_encode(plan, data.data(), data.size(), 2, pa.data(), each - 16, la.data()),
              -ENOSPC);
    ibp_codec_plan_destroy(&plan);
}

// Planning threads judge candidates side by side; the plan must not depend on how many there
// are (or on which thread finished first).
TEST(Codec, PlanningThreadsGiveTheSamePlan)
{
    const size_t sizes[] = {64, 4095, (1u << 20) + 3, 5u << 20};
    uint32_t seed = 40;
    for (Dist d : kAllDists) {
        for (size_t n : sizes) {
            const std::vector<uint8_t> data = make_data(d, n, seed++);
            IbpCodecPlan *one = nullptr;
            ASSERT_EQ(ibp_codec_plan_create(data.data(), n, nullptr, &one), 0);
            size_t one_len = 0;
            const void *one_blob = ibp_codec_plan_blob(one, &one_len);
            for (unsigned threads : {2u, 3u, 16u, 1000u}) {
                IbpCodecPlanOptions opts = {};
                opts.threads = threads;
                IbpCodecPlan *many = nullptr;
                ASSERT_EQ(ibp_codec_plan_create(data.data(), n, &opts, &many), 0);
                size_t many_len = 0;
                const void *many_blob = ibp_codec_plan_blob(many, &many_len);
                ASSERT_EQ(many_len, one_len) << "dist " << (int)d << " n " << n << " threads " << threads;
                EXPECT_EQ(std::memcmp(many_blob, one_blob, one_len), 0)
                    << "dist " << (int)d << " n " << n << " threads " << threads;
                ibp_codec_plan_destroy(&many);
            }
            ibp_codec_plan_destroy(&one);
        }
    }
}

// The planner's word passes run on the dispatched kernels: with the reference kernels forced, every
// plan (its blob and its sample ratio) must be the same, for every distribution and for a region
// long enough that the refit and the judges take whole chunks.
TEST(Codec, PlansAreTheSameWithTheReferenceKernels)
{
    const size_t sizes[] = {(64u << 10) + 3, (2u << 20) + 5};
    uint32_t seed = 70;
    for (Dist d : kAllDists) {
        for (size_t n : sizes) {
            const std::vector<uint8_t> data = make_data(d, n, seed++);
            IbpCodecPlan *best = nullptr;
            IbpCodecPlan *ref = nullptr;
            ASSERT_EQ(ibp_codec_plan_create(data.data(), n, nullptr, &best), 0);
            ibp_codec_force_reference(1);
            const int rc = ibp_codec_plan_create(data.data(), n, nullptr, &ref);
            ibp_codec_force_reference(0);
            ASSERT_EQ(rc, 0);
            size_t best_len = 0, ref_len = 0;
            const void *best_blob = ibp_codec_plan_blob(best, &best_len);
            const void *ref_blob = ibp_codec_plan_blob(ref, &ref_len);
            ASSERT_EQ(best_len, ref_len) << "dist " << (int)d << " n " << n;
            EXPECT_EQ(std::memcmp(best_blob, ref_blob, ref_len), 0) << "dist " << (int)d << " n " << n;
            IbpCodecPlanInfo bi, ri;
            ibp_codec_plan_info(best, &bi);
            ibp_codec_plan_info(ref, &ri);
            EXPECT_EQ(bi.sample_ratio, ri.sample_ratio) << "dist " << (int)d << " n " << n;
            ibp_codec_plan_destroy(&best);
            ibp_codec_plan_destroy(&ref);
        }
    }
}

// Each calling thread keeps its planning work spaces for its next plan, sized by the plans before:
// several threads planning the same inputs at once, each in its own order and with its own count
// of planning threads, must get the plans the main thread gets, and free what they kept on exit.
TEST(Codec, CallingThreadsKeepingWorkSpacesGiveTheSamePlans)
{
    const Dist dists[] = {Dist::Rows, Dist::GaussF32Small, Dist::SmallInts, Dist::Bf16};
    const size_t sizes[] = {(1u << 20) + 3, 4095, 5u << 20, 300000};
    std::vector<std::vector<uint8_t>> inputs;
    std::vector<std::string> want;
    for (size_t i = 0; i < 4; i++) {
        inputs.push_back(make_data(dists[i], sizes[i], 90u + (uint32_t)i));
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(inputs[i].data(), sizes[i], nullptr, &plan), 0);
        size_t len = 0;
        const char *blob = static_cast<const char *>(ibp_codec_plan_blob(plan, &len));
        want.emplace_back(blob, len);
        ibp_codec_plan_destroy(&plan);
    }
    const unsigned kThreads = 4;
    std::vector<std::vector<std::string>> got(kThreads);
    std::vector<std::thread> callers;
    for (unsigned t = 0; t < kThreads; t++)
        callers.emplace_back([&, t] {
            for (size_t k = 0; k < 2u * inputs.size(); k++) {
                const size_t i = (k + t) % inputs.size();
                IbpCodecPlanOptions opts = {};
                opts.threads = 1u + (t + (unsigned)k) % 3u;
                IbpCodecPlan *plan = nullptr;
                std::string blob = "failed";
                if (ibp_codec_plan_create(inputs[i].data(), inputs[i].size(), &opts, &plan) == 0) {
                    size_t len = 0;
                    const char *p = static_cast<const char *>(ibp_codec_plan_blob(plan, &len));
                    blob.assign(p, len);
                }
                ibp_codec_plan_destroy(&plan);
                got[t].push_back(blob);
            }
        });
    for (std::thread &c : callers)
        c.join();
    for (unsigned t = 0; t < kThreads; t++) {
        ASSERT_EQ(got[t].size(), 2u * inputs.size());
        for (size_t k = 0; k < got[t].size(); k++)
            EXPECT_EQ(got[t][k], want[(k + t) % inputs.size()]) << "caller " << t << " plan " << k;
    }
}

// A pinned block is often data followed by zero padding (allocators round sizes up to a power
// of two).  One mask set fits the zeros there, whatever the transforms; the mask sets must still
// find the data: the whole compresses about as its parts do.
// The transform search on records of three int32 fields: small signed values (zigzag pays),
// a growing timestamp (delta pays) and noise (nothing pays).  Each column gets its transform:
// the zigzag options take their counts from the option before them, so a wrong count would show
// here as a wrong pick.
TEST(Codec, TransformSearchPicksEachColumnsTransform)
{
    const size_t rows = 256u * 1024u;
    std::vector<uint8_t> data(rows * 12u);
    std::mt19937_64 rng(5);
    uint32_t t = 1500000000u;
    for (size_t r = 0; r < rows; r++) {
        const int32_t small = (int32_t)(rng() % 33u) - 16;
        t += (uint32_t)(rng() % 16u);
        const uint32_t noise = (uint32_t)rng();
        std::memcpy(&data[r * 12u], &small, 4);
        std::memcpy(&data[r * 12u + 4u], &t, 4);
        std::memcpy(&data[r * 12u + 8u], &noise, 4);
    }
    IbpCodecPlanOptions opts = {};
    opts.word_size = 4;
    opts.columns = 3;
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), &opts, &plan), 0);
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(plan, &info);
    EXPECT_EQ(info.columns, 3u);
    EXPECT_EQ(info.xf_zigzag, 1u);
    EXPECT_EQ(info.xf_delta, 1u);
    EXPECT_EQ(info.xf_xor, 0u);
    ibp_codec_plan_destroy(&plan);
}

// Predictor columns over more columns than a block keeps carries for decode a CTA per block on
// the GPU, slower than the link: the float weights of the tools and tests (a period of 1000
// floats), whose smallest plan has deltas over 46 columns, plan without them, and a plan of a
// short period keeps its deltas.
TEST(Codec, LongPeriodPredictorsGiveWayToPlansTheGpuDecodesBySegments)
{
    std::vector<float> w(512u * 1024u);
    for (size_t i = 0; i < w.size(); i++)
        w[i] = 0.02f * (float)((i * 2654435761u) % 1000u) / 1000.0f - 0.01f;
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(w.data(), w.size() * sizeof(float), nullptr, &plan), 0);
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(plan, &info);
    std::printf("weights: %u-byte words, %u columns, %u delta, %u xor, sample ratio %.4f\n", info.word_size,
                info.columns, info.xf_delta, info.xf_xor, info.sample_ratio);
    EXPECT_FALSE(info.columns > IBP_CARRY_MAX_COLUMNS && info.xf_delta + info.xf_xor > 0);
    EXPECT_LT(info.sample_ratio, 0.97);
    ibp_codec_plan_destroy(&plan);

    // 16 counters of int32, each a step of 3 a row: deltas over 16 columns stay.
    std::vector<int32_t> t(512u * 1024u);
    for (size_t i = 0; i < t.size(); i++)
        t[i] = (int32_t)((i % 16u) * 1000003u + (i / 16u) * 3u);
    ASSERT_EQ(ibp_codec_plan_create(t.data(), t.size() * sizeof(int32_t), nullptr, &plan), 0);
    ibp_codec_plan_info(plan, &info);
    EXPECT_LE(info.columns, IBP_CARRY_MAX_COLUMNS);
    EXPECT_GT(info.xf_delta, 0u);
    ibp_codec_plan_destroy(&plan);
}

// Runs of set bits of v within its lowest `bits` bits.
static uint32_t bit_runs(uint64_t v, uint32_t bits)
{
    uint32_t n = 0;
    for (uint32_t b = 0; b < bits; b++)
        n += ((v >> b) & 1u) && (b == 0 || !((v >> (b - 1)) & 1u));
    return n;
}

// Whether every mask set of the plan leaves variant bits the GPU rebuilds a shift and a mask a
// run (format.h IBP_GPU_RUNS): four runs in words of 2 and 4 bytes, two in each half of 8.
static bool masks_within_gpu_runs(const IbpCodecPlan *p)
{
    const uint32_t wbits = p->word_size * 8u;
    const uint64_t full = wbits == 64u ? ~(uint64_t)0 : ((uint64_t)1 << wbits) - 1u;
    for (uint32_t i = 0; i < p->nsets * p->columns; i++) {
        const uint64_t v = ~p->mask[i] & full;
        const bool ok =
            wbits < 64u ? bit_runs(v, wbits) <= IBP_GPU_RUNS
                        : bit_runs(v, 32) <= IBP_GPU_RUNS_HALF && bit_runs(v >> 32, 32) <= IBP_GPU_RUNS_HALF;
        if (!ok)
            return false;
    }
    return true;
}

// Words whose invariant bits alternate with variant ones: masks within the runs the GPU rebuilds
// would cost far more than the bit-run decode, and the planner keeps the masks that fit them
// best; the data round-trips.
TEST(Codec, MasksOfManyRunsStayWhereFewerCostMore)
{
    std::mt19937_64 rng(5);
    for (uint32_t w : {2u, 4u, 8u}) {
        std::vector<uint8_t> buf((size_t)1 << 20);
        for (size_t i = 0; i + w <= buf.size(); i += w) {
            const uint64_t x = (rng() & 0x5555555555555555ull) | 0x8888888888888888ull;
            std::memcpy(buf.data() + i, &x, w);
        }
        IbpCodecPlanOptions o = {};
        o.word_size = w;
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(buf.data(), buf.size(), &o, &plan), 0);
        IbpCodecPlanInfo info;
        ibp_codec_plan_info(plan, &info);
        std::printf("%u-byte words: %u sets, sample ratio %.4f\n", w, plan->nsets, info.sample_ratio);
        EXPECT_FALSE(masks_within_gpu_runs(plan)) << w;
        EXPECT_LT(info.sample_ratio, 0.6) << w;
        ibp_codec_plan_destroy(&plan);
        ASSERT_EQ(file_round_trip(buf.data(), buf.size(), &o, nullptr), buf) << w;
    }
}

// The bound the transform search skips fits by: no mask and value (any bits, not only the
// majority's) leave fewer bits than it says, and words that are all alike meet it (nothing left).
TEST(Codec, OneSetBitsBoundIsNeverBeaten)
{
    std::mt19937_64 rng(11);
    for (uint32_t w : {2u, 4u, 8u}) {
        const uint32_t wbits = w * 8u;
        const uint64_t full = wbits == 64u ? ~(uint64_t)0 : ((uint64_t)1 << wbits) - 1u;
        for (int round = 0; round < 40; round++) {
            // Words sharing a random number of fixed bits, the others random: fits of every length.
            const uint32_t n = 1u + (uint32_t)(rng() % 3000u);
            const uint64_t fixed_bits = rng() & rng() & full;
            const uint64_t fixed_value = rng() & fixed_bits;
            const uint32_t noise_pct = (uint32_t)(rng() % 101u);
            std::vector<uint64_t> words(n);
            std::vector<uint32_t> cnt(wbits, 0);
            for (uint32_t i = 0; i < n; i++) {
                uint64_t x = rng() & full;
                if (rng() % 100u >= noise_pct)
                    x = (x & ~fixed_bits) | fixed_value;
                words[i] = x;
                for (uint32_t b = 0; b < wbits; b++)
                    cnt[b] += (uint32_t)((x >> b) & 1u);
            }
            const uint64_t bound = ibp_plan_bits_bound(cnt.data(), wbits, n);
            ASSERT_LE(bound, (uint64_t)n * wbits);
            for (int trial = 0; trial < 64; trial++) {
                uint64_t mask =
                    trial == 0 ? fixed_bits : rng() & (trial % 2 ? fixed_bits | rng() : rng()) & full;
                const uint64_t value = (trial % 3 ? fixed_value : words[rng() % n]) & mask;
                uint64_t match = 0;
                for (uint64_t x : words)
                    match += (x & mask) == value;
                const uint64_t bits = (uint64_t)n * wbits - (uint64_t)__builtin_popcountll(mask) * match;
                EXPECT_GE(bits, bound) << "w " << w << " round " << round << " trial " << trial;
            }
        }
        std::vector<uint32_t> same(wbits);
        for (uint32_t b = 0; b < wbits; b++)
            same[b] = b % 3u ? 500u : 0u; // 500 equal words
        EXPECT_EQ(ibp_plan_bits_bound(same.data(), wbits, 500u), 0u) << "w " << w;
    }
}

// The count pass adds bits in nibbles and bytes that it empties every so many vectors: counts must
// be exact across those boundaries, for every word size and at every level.
TEST(Codec, PackedBitCountsAreExact)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    ASSERT_GE(nlevels, 1u);
    std::mt19937_64 rng(12);
    const size_t lengths[] = {0,   1,   2,   3,   14,  15,  16,   29,   30,  31,
                              254, 255, 256, 509, 510, 511, 1019, 1021, 4001};
    for (uint32_t w : {2u, 4u, 8u}) {
        const uint32_t wbits = w * 8u;
        for (size_t nvec : lengths) {
            for (int dense = 0; dense < 2; dense++) {
                std::vector<uint8_t> buf(nvec * 16u);
                for (size_t i = 0; i < buf.size(); i += 8u) {
                    const uint64_t x = dense ? rng() | rng() | rng() : rng(); // dense: counters near full
                    memcpy(buf.data() + i, &x, 8);
                }
                std::vector<uint32_t> want(wbits, 7u); // added to what is there
                for (size_t i = 0; i < buf.size(); i += w) {
                    uint64_t x = 0;
                    memcpy(&x, buf.data() + i, w);
                    for (uint32_t b = 0; b < wbits; b++)
                        want[b] += (uint32_t)((x >> b) & 1u);
                }
                for (size_t l = 0; l < nlevels; l++) {
                    std::vector<uint32_t> got(wbits, 7u);
                    levels[l]->count_bits(buf.data(), nvec, wbits, got.data());
                    EXPECT_EQ(got, want)
                        << levels[l]->name << " w " << w << " vectors " << nvec << " dense " << dense;
                }
            }
        }
    }
}

TEST(Codec, ZeroPaddingDoesNotHideTheDataFromTheMaskSets)
{
    const size_t n = 12u << 20, used = 8u << 20;
    for (Dist d : {Dist::Bf16, Dist::GaussF32Small}) {
        std::vector<uint8_t> data = make_data(d, used, 77);
        double alone = 0;
        file_round_trip(data.data(), used, nullptr, &alone);
        data.resize(n, 0);
        double padded = 0;
        const std::vector<uint8_t> back = file_round_trip(data.data(), n, nullptr, &padded);
        ASSERT_TRUE(back == data);
        // The zeros cost their selectors and little else; the data one more selector bit a word.
        const double parts = (alone * (double)used + 0.05 * (double)(n - used)) / (double)n;
        EXPECT_LE(padded, parts + 0.02) << "dist " << (int)d << ": data alone " << alone;
    }
}

// Judging a plan on the region it was made for gives the planner's own sample ratio; on other
// bytes, how well it fits them.
TEST(Codec, JudgingAPlanOnItsRegionGivesItsSampleRatio)
{
    for (size_t n : {(size_t)4095, (size_t)(3u << 20) + 5, (size_t)40 << 20}) {
        const std::vector<uint8_t> floats = make_data(Dist::GaussF32Small, n, 3);
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(floats.data(), n, nullptr, &plan), 0);
        IbpCodecPlanInfo info;
        ibp_codec_plan_info(plan, &info);
        double own = 0;
        ASSERT_EQ(ibp_codec_plan_judge(plan, floats.data(), n, &own), 0);
        EXPECT_DOUBLE_EQ(own, info.sample_ratio) << n;
        // The same plan cloned from its blob judges the same.
        size_t blob_len = 0;
        const void *blob = ibp_codec_plan_blob(plan, &blob_len);
        IbpCodecPlan *clone = nullptr;
        ASSERT_EQ(ibp_codec_plan_from_blob(blob, blob_len, &clone), 0);
        double cloned = 0;
        ASSERT_EQ(ibp_codec_plan_judge(clone, floats.data(), n, &cloned), 0);
        EXPECT_DOUBLE_EQ(cloned, own);
        // Other floats of the same kind fit about as well; random bytes do not fit at all.
        const std::vector<uint8_t> more = make_data(Dist::GaussF32Small, n, 4);
        double other = 0;
        ASSERT_EQ(ibp_codec_plan_judge(plan, more.data(), n, &other), 0);
        EXPECT_NEAR(other, own, 0.01);
        const std::vector<uint8_t> noise = make_data(Dist::RandomBytes, n, 5);
        double bad = 0;
        ASSERT_EQ(ibp_codec_plan_judge(plan, noise.data(), n, &bad), 0);
        EXPECT_GT(bad, 1.0);
        ibp_codec_plan_destroy(&clone);
        ibp_codec_plan_destroy(&plan);
    }
    double r = 0;
    EXPECT_EQ(ibp_codec_plan_judge(nullptr, &r, 64, &r), -EINVAL);
}

// The planner's sample (what the winner is refitted to and its sample ratio is taken on) is the
// whole of a small region, a sixteenth of a larger one, and never more than 512 KiB: from 8 MiB
// on, planning costs the same whatever the region's size.
TEST(Codec, SampleGrowsWithTheRegionUpTo512KiB)
{
    const struct {
        size_t len, sample;
    } cases[] = {{(size_t)64 << 10, (size_t)64 << 10},  {(size_t)1 << 20, (size_t)256 << 10},
                 {(size_t)6 << 20, (size_t)384 << 10},  {(size_t)8 << 20, (size_t)512 << 10},
                 {(size_t)16 << 20, (size_t)512 << 10}, {(size_t)40 << 20, (size_t)512 << 10}};
    for (const auto &c : cases) {
        const std::vector<uint8_t> floats = make_data(Dist::GaussF32Small, c.len, 9);
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(floats.data(), c.len, nullptr, &plan), 0);
        IbpCodecPlanInfo info;
        ibp_codec_plan_info(plan, &info);
        EXPECT_EQ(info.sample_bytes, c.sample) << c.len;
        ibp_codec_plan_destroy(&plan);
    }
}

TEST(Codec, PlanBlobRoundTripAndRejectsGarbage)
{
    const std::vector<uint8_t> data = make_data(Dist::Rows, 200000, 5);
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), nullptr, &plan), 0);
    size_t blob_len = 0;
    const void *blob = ibp_codec_plan_blob(plan, &blob_len);
    ASSERT_NE(blob, nullptr);
    EXPECT_EQ(blob_len % IBP_ALIGN, 0u);
    IbpCodecPlan *again = nullptr;
    ASSERT_EQ(ibp_codec_plan_from_blob(blob, blob_len, &again), 0);
    size_t again_len = 0;
    const void *again_blob = ibp_codec_plan_blob(again, &again_len);
    ASSERT_EQ(again_len, blob_len);
    EXPECT_EQ(std::memcmp(blob, again_blob, blob_len), 0);
    EXPECT_EQ(ibp_codec_plan_from_blob(blob, blob_len - 1, &again), -EBADMSG);
    std::vector<uint8_t> bad((const uint8_t *)blob, (const uint8_t *)blob + blob_len);
    bad[8] = 0xff; // columns
    IbpCodecPlan *junk = nullptr;
    EXPECT_EQ(ibp_codec_plan_from_blob(bad.data(), bad.size(), &junk), -EBADMSG);
    EXPECT_EQ(junk, nullptr);
    char text[512];
    EXPECT_GT(ibp_codec_plan_describe(plan, 1, text, sizeof(text)), 10);
    EXPECT_EQ(text[0], '{');
    ibp_codec_plan_destroy(&again);
    ibp_codec_plan_destroy(&plan);
    ibp_codec_plan_destroy(&plan);
}

TEST(Codec, CorruptOrTruncatedFilesFailCleanly)
{
    const std::vector<uint8_t> data = make_data(Dist::GaussF32Small, 70000, 11);
    IbpCodecPlanOptions opts = {};
    opts.block_size = 8192;
    void *packed = nullptr;
    size_t packed_len = 0;
    ASSERT_EQ(ibp_codec_file_compress(data.data(), data.size(), &opts, 1, &packed, &packed_len), 0);
    const std::vector<uint8_t> good((uint8_t *)packed, (uint8_t *)packed + packed_len);
    std::free(packed);
    std::vector<uint8_t> out(data.size());
    for (size_t cut = 0; cut < good.size(); cut += 97) {
        // Truncated copies live in exactly-sized heap buffers so ASan catches any over-read.
        std::vector<uint8_t> trunc(good.begin(), good.begin() + (long)cut);
        EXPECT_NE(ibp_codec_file_decompress(trunc.data(), trunc.size(), out.data(), out.size()), 0) << cut;
    }
    std::mt19937_64 rng(3);
    int failures = 0;
    for (int k = 0; k < 400; k++) {
        std::vector<uint8_t> bad = good;
        const int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++)
            bad[(size_t)(rng() % bad.size())] ^= (uint8_t)(1u << (rng() % 8));
        const int rc = ibp_codec_file_decompress(bad.data(), bad.size(), out.data(), out.size());
        if (rc == 0) {
            EXPECT_EQ(out, data) << "accepted a file that decodes to other bytes";
        } else {
            EXPECT_EQ(rc, -EBADMSG);
        }
        failures += rc != 0;
    }
    EXPECT_GT(failures, 300);
}

// One block of plan encoded from n bytes of data at region offset region_off, cut to its length,
// and its header (an empty block, and a test failure, where the encode fails).
std::vector<uint8_t> encode_block(const IbpCodecPlan *plan, const uint8_t *data, size_t n, size_t region_off,
                                  IbpBlockHeader &h)
{
    std::vector<uint8_t> blk(ibp_codec_block_bound(plan, n));
    size_t len = 0;
    const int rc = ibp_codec_block_encode(plan, data, n, region_off, blk.data(), blk.size(), &len);
    EXPECT_EQ(rc, 0);
    blk.resize(rc ? 0 : len);
    std::memset(&h, 0, sizeof(h));
    if (blk.size() >= sizeof(h))
        std::memcpy(&h, blk.data(), sizeof(h));
    return blk;
}

// Level k decodes both the block and its form as an older version wrote it back to data's n bytes.
void expect_both_decode(const IbpCodecKernels *k, const IbpCodecPlan *plan, const std::vector<uint8_t> &blk,
                        const std::vector<uint8_t> &older, const std::vector<uint8_t> &data, uint32_t n)
{
    for (const std::vector<uint8_t> *b : {&blk, &older}) {
        std::vector<uint8_t> out(n);
        ASSERT_EQ(k->decode(plan, b->data(), b->size(), n, out.data(), n), 0)
            << (b == &blk ? "block" : "older");
        ASSERT_EQ(std::memcmp(out.data(), data.data(), n), 0) << (b == &blk ? "block" : "older");
    }
}

TEST(Codec, CorruptBlocksFailCleanly)
{
    // Block-level decode has no checksum: it must still stay in bounds on any bytes.
    const std::vector<uint8_t> data = make_data(Dist::SmallInts, 8192, 13);
    IbpCodecPlanOptions opts = {};
    opts.block_size = 8192;
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), &opts, &plan), 0);
    IbpBlockHeader h;
    const std::vector<uint8_t> blk = encode_block(plan, data.data(), data.size(), 0, h);
    ASSERT_FALSE(blk.empty());
    std::mt19937_64 rng(5);
    std::vector<uint8_t> out(8192);
    for (int k = 0; k < 2000; k++) {
        std::vector<uint8_t> bad(blk);
        bad[(size_t)(rng() % bad.size())] = (uint8_t)rng();
        const size_t keep = k % 3 == 0 ? (size_t)(rng() % (bad.size() + 1)) : bad.size();
        std::vector<uint8_t> exact(bad.begin(), bad.begin() + (long)keep);
        const int rc = ibp_codec_block_decode(plan, exact.data(), exact.size(), 8192, out.data(), 8192);
        EXPECT_TRUE(rc == 0 || rc == -EBADMSG) << rc;
    }
    ibp_codec_plan_destroy(&plan);
}

// Flagged selectors (IBP_CODEC_PLAN_SELECTOR_FLAGS): every distribution and awkward size, with
// small blocks so that many blocks take the form, round-trips on every level; a file whose blocks
// took it is never larger than without it.
TEST(Codec, FlaggedSelectorsRoundTrip)
{
    const size_t sizes[] = {0, 1, 7, 4095, 50001, (1u << 20) + 3};
    uint32_t seed = 300;
    size_t flagged_files = 0;
    for (const int ref : {0, 1}) {
        ForceReference force(ref);
        for (const Dist d : kAllDists) {
            for (const size_t n : sizes) {
                const std::vector<uint8_t> data = make_data(d, n, seed++);
                const std::vector<uint8_t> buf = unaligned(data);
                IbpCodecPlanOptions opts = {};
                opts.block_size = n > 100000 ? 65536 : 4096;
                double plain = 0, flagged = 0;
                ASSERT_EQ(file_round_trip(buf.data() + 1, n, &opts, &plain), data);
                opts.flags = IBP_CODEC_PLAN_SELECTOR_FLAGS;
                ASSERT_EQ(file_round_trip(buf.data() + 1, n, &opts, &flagged), data)
                    << "dist " << (int)d << " size " << n << (ref ? " (reference)" : "");
                EXPECT_LE(flagged, plain) << "dist " << (int)d << " size " << n;
                flagged_files += flagged < plain;
            }
        }
    }
    EXPECT_GT(flagged_files, 0u) << "no file took the flagged form: the test tested nothing";
}

// A plan rebuilt from its blob writes the flagged form only when asked to (the blob does not say),
// and so does a copy made from the plan itself.
TEST(Codec, PlansFromBlobsTakeTheSelectorFormTheyAreGiven)
{
    const std::vector<uint8_t> data = make_data(Dist::GaussF32Small, 1u << 20, 11);
    IbpCodecPlanOptions opts = {};
    opts.flags = IBP_CODEC_PLAN_SELECTOR_FLAGS;
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), &opts, &plan), 0);
    size_t len = 0;
    const void *blob = ibp_codec_plan_blob(plan, &len);
    for (const unsigned flags : {0u, IBP_CODEC_PLAN_SELECTOR_FLAGS, IBP_CODEC_PLAN_SELECTOR_FLAGS | 0x100u}) {
        IbpCodecPlan *p = nullptr, *copy = nullptr;
        ASSERT_EQ(ibp_codec_plan_from_blob_flags(blob, len, flags, &p), 0);
        ASSERT_EQ(ibp_codec_plan_with_selector_flags(p, flags == 0, &copy), 0);
        IbpCodecPlanInfo info, copy_info;
        ibp_codec_plan_info(p, &info);
        ibp_codec_plan_info(copy, &copy_info);
        EXPECT_EQ(info.selector_flags, flags != 0) << flags;
        EXPECT_EQ(copy_info.selector_flags, flags == 0) << flags;
        ibp_codec_plan_destroy(&p);
        ibp_codec_plan_destroy(&copy);
    }
    ibp_codec_plan_destroy(&plan);
}

// A flagged block damaged anywhere decodes or fails with -EBADMSG, never out of bounds.
TEST(Codec, CorruptFlaggedBlocksFailCleanly)
{
    const std::vector<uint8_t> data = make_data(Dist::Rows, 65536, 17);
    IbpCodecPlanOptions opts = {};
    opts.block_size = 65536;
    opts.flags = IBP_CODEC_PLAN_SELECTOR_FLAGS;
    IbpCodecPlan *plan = nullptr;
    ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), &opts, &plan), 0);
    IbpBlockHeader h;
    const std::vector<uint8_t> blk = encode_block(plan, data.data(), data.size(), 0, h);
    ASSERT_FALSE(blk.empty());
    ASSERT_TRUE(h.flags & IBP_BLOCK_SELFLAGS) << "the block did not take the flagged form";
    std::vector<uint8_t> out(data.size());
    ASSERT_EQ(ibp_codec_block_decode(plan, blk.data(), blk.size(), data.size(), out.data(), out.size()), 0);
    ASSERT_EQ(out, data);
    std::mt19937_64 rng(7);
    for (int k = 0; k < 3000; k++) {
        std::vector<uint8_t> bad(blk);
        // Mostly in the selector section, where the flagged form lies.
        const size_t at =
            k % 4 ? h.sel_off + (size_t)(rng() % (h.tail_off - h.sel_off)) : (size_t)(rng() % bad.size());
        bad[at] ^= (uint8_t)(1u << (rng() % 8));
        const size_t keep = k % 5 == 0 ? (size_t)(rng() % (bad.size() + 1)) : bad.size();
        const int rc = ibp_codec_block_decode(plan, bad.data(), keep, data.size(), out.data(), out.size());
        EXPECT_TRUE(rc == 0 || rc == -EBADMSG) << rc;
    }
    ibp_codec_plan_destroy(&plan);
}

// The group index of a packed block (format.h): every level rejects a block whose index
// disagrees with its fields, and decodes a block written without one (format version 1).
TEST(Codec, GroupIndexIsCheckedAndOptional)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    for (const Dist d : {Dist::Bf16, Dist::SmallInts, Dist::Rows}) {
        const uint32_t n = 262144 - 3;
        const std::vector<uint8_t> data = make_data(d, n, 21);
        IbpCodecPlanOptions opts = {};
        opts.block_size = 262144;
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(data.data(), n, &opts, &plan), 0);
        IbpBlockHeader h;
        const std::vector<uint8_t> blk = encode_block(plan, data.data(), n, 0, h);
        ASSERT_EQ(h.flags & ~IBP_BLOCK_CARRIES, IBP_BLOCK_INDEXED) << "the data packs";
        const uint32_t index_len = h.rowflag_off - IBP_BLOCK_HEADER_SIZE;
        const uint32_t entries = (n / plan->word_size - 1) / IBP_INDEX_WORDS;
        ASSERT_EQ(index_len, ibp_block_meta_len(plan, n / plan->word_size) - IBP_BLOCK_HEADER_SIZE);
        ASSERT_GE(entries, 7u);
        // The same block without its index.
        std::vector<uint8_t> v1(blk.begin(), blk.end());
        v1.resize(ibp_test_strip_index(v1.data()));
        ASSERT_EQ(v1.size(), blk.size() - index_len);
        IbpBlockHeader h1;
        std::memcpy(&h1, v1.data(), sizeof(h1));
        for (size_t l = 0; l < nlevels; l++) {
            const IbpCodecKernels *k = levels[l];
            SCOPED_TRACE(std::string(k->name) + " dist " + std::to_string((int)d));
            expect_both_decode(k, plan, blk, v1, data, n);
            std::vector<uint8_t> out(n);
            for (uint32_t e = 0; e < entries; e++) {
                std::vector<uint8_t> bad(blk);
                bad[IBP_BLOCK_HEADER_SIZE + 4 * e] ^= 1u << (e % 8);
                EXPECT_EQ(k->decode(plan, bad.data(), bad.size(), n, out.data(), n), -EBADMSG)
                    << "entry " << e;
                // A decode that stops before the entry's word does not reach it.
                const uint32_t upto = (e + 1) * IBP_INDEX_WORDS * plan->word_size;
                EXPECT_EQ(k->decode(plan, bad.data(), bad.size(), n, out.data(), upto / 2), 0)
                    << "entry " << e;
            }
            // The flag without room for the index, and an index without the flag.
            std::vector<uint8_t> lying(v1);
            IbpBlockHeader hl = h1;
            hl.flags = IBP_BLOCK_INDEXED;
            std::memcpy(lying.data(), &hl, sizeof(hl));
            EXPECT_EQ(k->decode(plan, lying.data(), lying.size(), n, out.data(), n), -EBADMSG);
            lying = blk;
            hl = h;
            hl.flags = 0;
            std::memcpy(lying.data(), &hl, sizeof(hl));
            EXPECT_EQ(k->decode(plan, lying.data(), lying.size(), n, out.data(), n), -EBADMSG);
        }
        ibp_codec_plan_destroy(&plan);
    }
}

// The carries of a predictor plan's group index (format.h): every level rejects a block whose
// carries differ from the decoded words, decodes one written without them (format version 2),
// and plans of more columns than the carries cover write none.
TEST(Codec, CarriesAreCheckedAndOptional)
{
    const IbpCodecKernels *levels[8];
    const size_t nlevels = ibp_codec_kernels_levels(levels, 8);
    std::mt19937_64 rng(31);
    for (const uint32_t c_count : {3u, 7u, 32u, 33u}) {
        // The region's second block: its first word's column is not 0 for most periods.
        const uint32_t w = 4, n = 262144 - 5, phase = 262144 / w % c_count;
        const std::vector<uint8_t> data = make_data(Dist::SmallInts, n, 22);
        IbpCodecPlan *plan = make_plan(rng, w, c_count, 64, 2, 4, data, phase, 262144);
        ASSERT_NE(plan, nullptr);
        const uint32_t nwords = n / w, groups = (nwords + IBP_INDEX_WORDS - 1) / IBP_INDEX_WORDS;
        std::vector<uint32_t> carried; // the block words the carries hold, in order
        for (uint32_t g = 1; g < groups; g++)
            for (uint32_t j = g * IBP_INDEX_WORDS - c_count; j < g * IBP_INDEX_WORDS; j++)
                if (plan->xform[(phase + j) % c_count] & IBP_XF_PRED_MASK)
                    carried.push_back(j);
        IbpBlockHeader h;
        const std::vector<uint8_t> blk = encode_block(plan, data.data(), n, 262144, h);
        SCOPED_TRACE("columns " + std::to_string(c_count));
        ASSERT_FALSE(carried.empty());
        if (c_count > IBP_CARRY_MAX_COLUMNS) {
            EXPECT_EQ(h.flags, IBP_BLOCK_INDEXED);
            ibp_codec_plan_destroy(&plan);
            continue;
        }
        ASSERT_EQ(h.flags, IBP_BLOCK_INDEXED | IBP_BLOCK_CARRIES) << "the data packs";
        const uint32_t at0 = IBP_BLOCK_HEADER_SIZE + ibp_fmt_index_len(nwords);
        for (size_t i = 0; i < carried.size(); i++)
            ASSERT_EQ(std::memcmp(blk.data() + at0 + i * w, data.data() + (size_t)carried[i] * w, w), 0);
        std::vector<uint8_t> v2(blk);
        v2.resize(ibp_test_strip_carries(v2.data(), w));
        ASSERT_EQ(v2.size(), blk.size() - ibp_fmt_carry_len(nwords, plan->carry_words, w));
        for (size_t l = 0; l < nlevels; l++) {
            const IbpCodecKernels *k = levels[l];
            SCOPED_TRACE(k->name);
            expect_both_decode(k, plan, blk, v2, data, n);
            std::vector<uint8_t> out(n);
            for (size_t i = 0; i < carried.size(); i += 5) {
                std::vector<uint8_t> bad(blk);
                bad[at0 + i * w + i % w] ^= (uint8_t)(1u << (i % 8));
                EXPECT_EQ(k->decode(plan, bad.data(), bad.size(), n, out.data(), n), -EBADMSG)
                    << "carry " << i;
                // A decode that stops before the carry's word does not check it.
                EXPECT_EQ(k->decode(plan, bad.data(), bad.size(), n, out.data(), carried[i] * w), 0)
                    << "carry " << i;
            }
            // The flag without the plan's predictors behind it.
            std::vector<uint8_t> lying(v2);
            IbpBlockHeader hl;
            std::memcpy(&hl, lying.data(), sizeof(hl));
            hl.flags |= IBP_BLOCK_CARRIES;
            std::memcpy(lying.data(), &hl, sizeof(hl));
            EXPECT_EQ(k->decode(plan, lying.data(), lying.size(), n, out.data(), n), -EBADMSG);
        }
        ibp_codec_plan_destroy(&plan);
    }
}

TEST(Codec, ForceReferenceSwitch)
{
    ibp_codec_force_reference(1);
    EXPECT_STREQ(ibp_codec_backend(), "reference");
    ibp_codec_force_reference(0);
    EXPECT_NE(ibp_codec_backend(), nullptr);
}

// ---- real tensors ----

struct ManifestRow {
    std::string file;
    double ref_ibp;
};

std::vector<ManifestRow> read_manifest(const std::string &dir)
{
    std::vector<ManifestRow> rows;
    std::ifstream in(dir + "/MANIFEST.md");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("| ", 0) != 0 || line.find(".bin") == std::string::npos)
            continue;
        std::vector<std::string> cells;
        std::stringstream ss(line);
        std::string cell;
        while (std::getline(ss, cell, '|')) {
            const size_t a = cell.find_first_not_of(' ');
            const size_t b = cell.find_last_not_of(' ');
            cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
        }
        // cells[0] is empty (leading '|'); file, dtype, shape, what, source, ref IBP, ...
        if (cells.size() > 6)
            rows.push_back({cells[1], std::atof(cells[6].c_str())});
    }
    return rows;
}

// The bytes of a tensor MANIFEST.md lists; a failure of the test where it is missing.
static bool read_tensor(const char *dir, const ManifestRow &row, std::vector<uint8_t> &data)
{
    std::ifstream f(std::string(dir) + "/" + row.file, std::ios::binary);
    if (!f) {
        ADD_FAILURE() << row.file << " listed in MANIFEST.md but missing";
        return false;
    }
    data.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    return true;
}

TEST(CodecRealData, RoundTripAndRatioNoWorseThanReferenceIbp)
{
    const char *dir = std::getenv("IBPSHIM_TEST_DATA");
    if (!dir || !std::ifstream(std::string(dir) + "/MANIFEST.md"))
        GTEST_SKIP() << "real tensors not found (set IBPSHIM_TEST_DATA to the folder with MANIFEST.md)";
    const std::vector<ManifestRow> rows = read_manifest(dir);
    ASSERT_FALSE(rows.empty()) << "MANIFEST.md has no table rows";
    double log_sum = 0;
    for (const ManifestRow &row : rows) {
        std::vector<uint8_t> data;
        if (!read_tensor(dir, row, data))
            continue;
        double ratio = 0;
        ASSERT_EQ(file_round_trip(data.data(), data.size(), nullptr, &ratio), data) << row.file;
        EXPECT_LE(ratio, row.ref_ibp + 0.002) << row.file;
        log_sum += std::log(ratio / row.ref_ibp);
        std::printf("%s ratio=%.4f reference-ibp=%.3f\n", row.file.c_str(), ratio, row.ref_ibp);
    }
    EXPECT_LE(std::exp(log_sum / (double)rows.size()), 0.93);
}

// The real tensors, whole and tiled, plan masks the GPU rebuilds run by run: uint8 images at
// 3.7, 16 and 256 MiB and bf16 weights at 64 MiB took a mask of five to seven runs, which sent
// every word of their decode the bit-run way.
TEST(CodecRealData, MasksKeepToTheRunsTheGpuRebuilds)
{
    const char *dir = std::getenv("IBPSHIM_TEST_DATA");
    if (!dir || !std::ifstream(std::string(dir) + "/MANIFEST.md"))
        GTEST_SKIP() << "real tensors not found (set IBPSHIM_TEST_DATA to the folder with MANIFEST.md)";
    for (const ManifestRow &row : read_manifest(dir)) {
        std::vector<uint8_t> data;
        if (!read_tensor(dir, row, data))
            continue;
        for (size_t size : {data.size(), (size_t)16 << 20, (size_t)64 << 20}) {
            std::vector<uint8_t> tile(size);
            for (size_t at = 0; at < size; at += data.size())
                std::memcpy(tile.data() + at, data.data(), std::min(data.size(), size - at));
            IbpCodecPlan *plan = nullptr;
            ASSERT_EQ(ibp_codec_plan_create(tile.data(), tile.size(), nullptr, &plan), 0) << row.file;
            EXPECT_TRUE(masks_within_gpu_runs(plan)) << row.file << " at " << size << " bytes";
            ibp_codec_plan_destroy(&plan);
        }
    }
}

TEST(CodecRealData, TwoByteWordsOnlyByAClearMargin)
{
    // fashion_mnist (uint8 images, 28-byte rows): 2-byte words compress about 1.3% better than
    // 4-byte ones, which decode at twice the bytes a second; the planner takes the 4-byte plan.
    const char *dir = std::getenv("IBPSHIM_TEST_DATA");
    const std::string path = std::string(dir ? dir : "") + "/fashion_mnist_5000x784_u8.bin";
    std::ifstream f(path, std::ios::binary);
    if (!dir || !f)
        GTEST_SKIP() << "fashion_mnist_5000x784_u8.bin not found (set IBPSHIM_TEST_DATA to the data folder)";
    const std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    IbpCodecPlanInfo info[2];
    for (int narrow = 0; narrow < 2; narrow++) {
        IbpCodecPlanOptions o = {};
        o.word_size = narrow ? 2 : 0;
        IbpCodecPlan *plan = nullptr;
        ASSERT_EQ(ibp_codec_plan_create(data.data(), data.size(), &o, &plan), 0);
        ibp_codec_plan_info(plan, &info[narrow]);
        ibp_codec_plan_destroy(&plan);
    }
    std::printf("chosen: %u-byte words, sample ratio %.4f; 2-byte words: %.4f\n", info[0].word_size,
                info[0].sample_ratio, info[1].sample_ratio);
    EXPECT_EQ(info[0].word_size, 4u);
    EXPECT_LT(info[1].sample_ratio, info[0].sample_ratio);
    EXPECT_LE(info[0].sample_ratio, info[1].sample_ratio * 1.02 + 1e-9);
}

} // namespace
