// SPDX-License-Identifier: MIT
// ibpshim: decodes runs of IBP blocks on the GPU, bit-exact with codec/ (one CTA per block).
//
// A block's words are split into contiguous warp segments of 32-word groups, one lane per word.
// Phase 0 counts each segment's packed words (its selectors), phase 1 sums its field sizes; a
// prefix over the CTA's warps then gives every segment its first selector and payload bit.
// Phase 2 walks the groups: per group a ballot places the selectors, a warp scan of the field
// sizes places the fields, and each lane loads its field, deposits it into its mask set and
// stores the word, so loads and stores of a warp are contiguous.  Predictor columns with a period
// of up to 32 words are undone in registers by strided warp scans with the carry of the previous
// group, then segments are joined by a per-column carry over the CTA's warps; longer periods go
// through a per-column pass over the output.
#include <stdint.h>

#include "codec/format.h"
#include "kernels/decode_abi.h"

namespace {

constexpr int kThreads = IBP_DECODE_THREADS;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
// Groups whose fields are placed before any of them is loaded: independent loads in flight.
constexpr int kBatch = 2;

template <int W> struct WordT;
template <> struct WordT<2> { using U = uint32_t; };
template <> struct WordT<4> { using U = uint32_t; };
template <> struct WordT<8> { using U = uint64_t; };

template <int W> __device__ __forceinline__ typename WordT<W>::U word_mask()
{
    if constexpr (W == 8)
        return ~0ull;
    else if constexpr (W == 4)
        return ~0u;
    else
        return 0xffffu;
}

template <int W> __device__ __forceinline__ typename WordT<W>::U ld_word(const uint8_t *p)
{
    if constexpr (W == 2)
        return __ldg((const uint16_t *)p);
    else if constexpr (W == 4)
        return __ldg((const uint32_t *)p);
    else
        return __ldg((const unsigned long long *)p);
}

template <typename U> __device__ __forceinline__ int popc(U x)
{
    if constexpr (sizeof(U) == 8)
        return __popcll(x);
    else
        return __popc(x);
}

template <typename U> __device__ __forceinline__ U low_bits(uint32_t n)
{
    constexpr uint32_t kBits = 8 * sizeof(U);
    return n >= kBits ? ~(U)0 : (((U)1 << n) - 1);
}

// Scatters the low bits of f into the set bits of vmask (pdep), one run of set bits at a time.
template <typename U> __device__ __forceinline__ U deposit(U vmask, U f)
{
    constexpr uint32_t kBits = 8 * sizeof(U);
    U out = 0;
    while (vmask) {
        uint32_t p, len;
        if constexpr (sizeof(U) == 8) {
            p = __ffsll((long long)vmask) - 1;
            const U rest = ~(vmask >> p);
            len = rest ? __ffsll((long long)rest) - 1 : kBits - p;
        } else {
            p = __ffs((int)vmask) - 1;
            const U rest = ~(vmask >> p);
            len = rest ? __ffs((int)rest) - 1 : kBits - p;
        }
        const U lm = low_bits<U>(len);
        out |= (f & lm) << p;
        f = len >= kBits ? 0 : f >> len;
        vmask &= ~(lm << p);
    }
    return out;
}

template <int W> __device__ __forceinline__ typename WordT<W>::U unzigzag(typename WordT<W>::U t)
{
    using U = typename WordT<W>::U;
    return ((t >> 1) ^ ((U)0 - (t & 1))) & word_mask<W>();
}

template <typename U> __device__ __forceinline__ U pred_op(uint32_t pred, U a, U b)
{
    return pred == IBP_XF_PRED_DELTA ? a + b : (pred == IBP_XF_PRED_XOR ? a ^ b : a);
}

template <typename U> __device__ __forceinline__ U shfl_up(U v, unsigned o)
{
    return __shfl_up_sync(kFull, v, o);
}

template <typename U> __device__ __forceinline__ U shfl_idx(U v, int lane)
{
    return __shfl_sync(kFull, v, lane);
}

// Byte-wise store of the bytes of a word that fall inside [0, len) of dst.
template <int W>
__device__ __forceinline__ void store_clipped(uint8_t *dst, int64_t at, typename WordT<W>::U x, uint64_t len)
{
    for (int i = 0; i < W; i++) {
        const int64_t p = at + i;
        if (p >= 0 && (uint64_t)p < len)
            dst[p] = (uint8_t)(x >> (8 * i));
    }
}

template <int W>
__device__ __forceinline__ typename WordT<W>::U load_clipped(const uint8_t *dst, int64_t at, uint64_t len)
{
    using U = typename WordT<W>::U;
    U x = 0;
    for (int i = 0; i < W; i++) {
        const int64_t p = at + i;
        if (p >= 0 && (uint64_t)p < len)
            x |= (U)dst[p] << (8 * i);
    }
    return x;
}

struct Plan {
    uint32_t w, k, c, r, sb;
    const uint8_t *xform;
    const uint8_t *masks;  // k*c entries {mask, value}, w bytes each
};

struct Shared {
    uint32_t seg_sel[kWarps];
    uint32_t seg_bits[kWarps];
    uint64_t last[kWarps][32];  // per warp and column residue: the segment's last predicted value
    uint64_t warp_sums[kWarps];
};

// Per-lane position of word j = 32 * g + lane inside its row and column period, advanced one
// group (32 words) at a time without divisions.
struct LanePos {
    uint32_t row, rpos, col, res;
};

struct Steps {
    uint32_t row_q, row_r, col_r;
};

__device__ __forceinline__ void pos_init(LanePos &lp, uint32_t j, uint32_t r, uint32_t c, uint32_t phase)
{
    lp.row = j / r;
    lp.rpos = j - lp.row * r;
    lp.res = j % c;
    lp.col = (uint32_t)(((uint64_t)phase + j) % c);
}

__device__ __forceinline__ void pos_next(LanePos &lp, const Steps &st, uint32_t r, uint32_t c)
{
    lp.row += st.row_q;
    lp.rpos += st.row_r;
    if (lp.rpos >= r) {
        lp.rpos -= r;
        lp.row++;
    }
    lp.col += st.col_r;
    if (lp.col >= c)
        lp.col -= c;
    lp.res += st.col_r;
    if (lp.res >= c)
        lp.res -= c;
}

struct Block {
    const uint8_t *rowflags;
    const uint32_t *sel;
    const uint8_t *payload;
    uint32_t payload_words;  // whole 4-byte words of the payload section (it is padded to 16)
    uint32_t nwords;
};

// The selector of the lane's word (0 for raw rows and words past the segment), the field size,
// and the warp's selectors consumed; selbase advances past them.
template <int W>
__device__ __forceinline__ uint32_t word_selector(const Plan &p, const Block &b, const LanePos &lp, bool valid,
                                                  uint32_t &selbase)
{
    const uint32_t lane = threadIdx.x & 31;
    const bool packed = valid && ((b.rowflags[lp.row >> 3] >> (lp.row & 7)) & 1);
    const unsigned bal = __ballot_sync(kFull, packed);
    uint32_t s = 0;
    if (packed) {
        const uint32_t pos = (selbase + __popc(bal & ((1u << lane) - 1u))) * p.sb;
        s = (__ldg(b.sel + (pos >> 5)) >> (pos & 31)) & (p.sb == 1 ? 1u : 3u);
    }
    selbase += __popc(bal);
    return s;
}

template <int W> __device__ __forceinline__ const uint8_t *mask_entry(const Plan &p, uint32_t s, uint32_t col)
{
    return p.masks + (size_t)((s - 1) * p.c + col) * 2 * W;
}

// Loads the field of `size` bits at bit `o` of the payload.
template <int W>
__device__ __forceinline__ typename WordT<W>::U load_field(const Block &b, uint32_t o, uint32_t size)
{
    using U = typename WordT<W>::U;
    if constexpr (W == 8) {
        const uint64_t *p64 = (const uint64_t *)b.payload;
        const uint32_t q = o >> 6, sh = o & 63;
        const uint32_t nq = b.payload_words / 2;
        const uint64_t lo = q < nq ? __ldg((const unsigned long long *)p64 + q) : 0;
        const uint64_t hi = (sh + size > 64 && q + 1 < nq) ? __ldg((const unsigned long long *)p64 + q + 1) : 0;
        const uint64_t v = sh ? (lo >> sh) | (hi << (64 - sh)) : lo;
        return v & low_bits<U>(size);
    } else {
        const uint32_t *p32 = (const uint32_t *)b.payload;
        const uint32_t q = o >> 5, sh = o & 31;
        const uint32_t lo = q < b.payload_words ? __ldg(p32 + q) : 0;
        const uint32_t hi = (sh + size > 32 && q + 1 < b.payload_words) ? __ldg(p32 + q + 1) : 0;
        return __funnelshift_r(lo, hi, sh) & low_bits<U>(size);
    }
}

template <typename T> __device__ __forceinline__ T warp_sum(T v)
{
    for (int o = 16; o; o >>= 1)
        v += __shfl_xor_sync(kFull, v, o);
    return v;
}

// Undoes predictor columns of any period in place, one column at a time (a CTA scan per column).
// Only words inside dst are scanned: the router sends clipped blocks of such plans through a
// whole-block scratch buffer.
template <int W>
__device__ void undo_predictors_by_column(const Plan &p, uint32_t col_phase, uint32_t nwords, uint8_t *dst,
                                          int64_t origin, uint64_t len, Shared &sh)
{
    using U = typename WordT<W>::U;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t rows_c = (nwords + p.c - 1) / p.c;
    for (uint32_t c0 = 0; c0 < p.c; c0++) {
        const uint32_t col = (uint32_t)((col_phase + (uint64_t)c0) % p.c);
        const uint32_t pred = p.xform[col] & IBP_XF_PRED_MASK;
        if (!pred)
            continue;
        U carry = 0;
        for (uint32_t base = 0; base < rows_c; base += kThreads) {
            const uint32_t i = base + threadIdx.x;
            const uint32_t j = c0 + i * p.c;
            const bool in = i < rows_c && j < nwords;
            const int64_t at = origin + (int64_t)j * W;
            U x = in ? load_clipped<W>(dst, at, len) : 0;
            for (int o = 1; o < 32; o <<= 1) {
                const U y = shfl_up(x, o);
                if (lane >= o)
                    x = pred_op(pred, x, y);
            }
            if (lane == 31)
                sh.warp_sums[warp] = x;
            __syncthreads();
            U before = carry, last = carry;
            for (int q = 0; q < kWarps; q++) {
                if (q < warp)
                    before = pred_op(pred, before, (U)sh.warp_sums[q]);
                last = pred_op(pred, last, (U)sh.warp_sums[q]);
            }
            x = pred_op(pred, x, before) & word_mask<W>();
            __syncthreads();
            if (in)
                store_clipped<W>(dst, at, x, len);
            carry = last & word_mask<W>();
        }
        __syncthreads();
    }
}

template <int W>
__device__ void decode_packed(const Plan &p, const IbpBlockHeader &h, const uint8_t *blk, uint8_t *dst,
                              int64_t origin, uint64_t len, Shared &sh)
{
    using U = typename WordT<W>::U;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    Block b;
    b.rowflags = blk + h.rowflag_off;
    b.sel = (const uint32_t *)(blk + h.sel_off);
    b.payload = blk + h.payload_off;
    b.payload_words = (h.sel_off - h.payload_off) / 4;
    b.nwords = h.orig_len / W;

    const uint32_t ngroups = (b.nwords + 31) / 32;
    const uint32_t g0 = (uint32_t)((uint64_t)warp * ngroups / kWarps);
    const uint32_t g1 = (uint32_t)((uint64_t)(warp + 1) * ngroups / kWarps);
    const uint32_t j0 = g0 * 32, j1 = min(b.nwords, g1 * 32);

    Steps st;
    st.row_q = 32 / p.r;
    st.row_r = 32 % p.r;
    st.col_r = 32 % p.c;

    // Phase 0: packed words of the segment (the selectors it consumes).
    uint32_t npacked = 0;
    if (j0 < j1) {
        const uint32_t r0 = j0 / p.r, r1 = (j1 - 1) / p.r;
        for (uint32_t r = r0 + lane; r <= r1; r += 32) {
            if ((b.rowflags[r >> 3] >> (r & 7)) & 1) {
                const uint32_t lo = max(j0, r * p.r), hi = min(j1, (r + 1) * p.r);
                npacked += hi - lo;
            }
        }
        npacked = warp_sum(npacked);
    }
    if (lane == 0)
        sh.seg_sel[warp] = npacked;
    __syncthreads();
    uint32_t selbase0 = 0;
    for (uint32_t q = 0; q < warp; q++)
        selbase0 += sh.seg_sel[q];

    // Phase 1: payload bits of the segment.
    uint32_t bits = 0;
    {
        LanePos lp;
        pos_init(lp, j0 + lane, p.r, p.c, h.col_phase);
        uint32_t selbase = selbase0;
        for (uint32_t g = g0; g < g1; g++) {
            const bool valid = g * 32 + lane < j1;
            const uint32_t s = word_selector<W>(p, b, lp, valid, selbase);
            uint32_t size = valid ? 8 * W : 0;
            if (s)
                size = 8 * W - popc(ld_word<W>(mask_entry<W>(p, s, lp.col)));
            bits += size;
            pos_next(lp, st, p.r, p.c);
        }
        bits = warp_sum(bits);
    }
    if (lane == 0)
        sh.seg_bits[warp] = bits;
    __syncthreads();
    uint32_t bitbase = 0;
    for (uint32_t q = 0; q < warp; q++)
        bitbase += sh.seg_bits[q];

    // Phase 2: decode.
    const bool fast = origin >= 0 && (uint64_t)origin + (uint64_t)b.nwords * W <= len &&
                      ((uintptr_t)(dst + origin) % W) == 0;
    bool any_pred = false;
    for (uint32_t c = lane; c < p.c; c += 32)
        any_pred |= (p.xform[c] & IBP_XF_PRED_MASK) != 0;
    any_pred = __any_sync(kFull, any_pred);
    const bool regpred = any_pred && p.c <= 32;
    const uint32_t lane_mod_c = lane % p.c;
    U prev = 0;  // the previous group's words after predictors (carry of the strided scans)
    {
        LanePos lp;
        pos_init(lp, j0 + lane, p.r, p.c, h.col_phase);
        uint32_t selbase = selbase0;
        for (uint32_t g = g0; g < g1; g += kBatch) {
            uint32_t s[kBatch], size[kBatch], o[kBatch], col[kBatch];
            U m[kBatch], v[kBatch], f[kBatch];
            bool valid[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; u++) {
                valid[u] = g + u < g1 && (g + u) * 32 + lane < j1;
                s[u] = word_selector<W>(p, b, lp, valid[u], selbase);
                col[u] = lp.col;
                size[u] = valid[u] ? 8 * W : 0;
                m[u] = 0;
                v[u] = 0;
                if (s[u]) {
                    const uint8_t *e = mask_entry<W>(p, s[u], lp.col);
                    m[u] = ld_word<W>(e);
                    v[u] = ld_word<W>(e + W);
                    size[u] = 8 * W - popc(m[u]);
                }
                uint32_t incl = size[u];
#pragma unroll
                for (int q = 1; q < 32; q <<= 1) {
                    const uint32_t y = __shfl_up_sync(kFull, incl, q);
                    if (lane >= (uint32_t)q)
                        incl += y;
                }
                o[u] = bitbase + incl - size[u];
                bitbase += __shfl_sync(kFull, incl, 31);
                if (u + 1 < kBatch)
                    pos_next(lp, st, p.r, p.c);
            }
#pragma unroll
            for (int u = 0; u < kBatch; u++)
                f[u] = valid[u] ? load_field<W>(b, o[u], size[u]) : 0;
#pragma unroll
            for (int u = 0; u < kBatch; u++) {
                if (g + u >= g1)
                    break;
                U x = s[u] ? (v[u] | deposit<U>(~m[u] & word_mask<W>(), f[u])) : f[u];
                const uint8_t xf = valid[u] ? p.xform[col[u]] : 0;
                if (xf & IBP_XF_ZIGZAG)
                    x = unzigzag<W>(x);
                if (regpred) {
                    const uint32_t pred = xf & IBP_XF_PRED_MASK;
                    for (uint32_t q = p.c; q < 32; q <<= 1) {
                        const U y = shfl_up(x, q);
                        if (lane >= q)
                            x = pred_op(pred, x, y);
                    }
                    const U c = shfl_idx(prev, 32 - p.c + lane_mod_c);
                    x = pred_op(pred, x, c) & word_mask<W>();
                    prev = x;
                }
                if (valid[u]) {
                    const int64_t at = origin + (int64_t)((g + u) * 32 + lane) * W;
                    if (fast) {
                        if constexpr (W == 2)
                            *(uint16_t *)(dst + at) = (uint16_t)x;
                        else if constexpr (W == 4)
                            *(uint32_t *)(dst + at) = (uint32_t)x;
                        else
                            *(uint64_t *)(dst + at) = x;
                    } else {
                        store_clipped<W>(dst, at, x, len);
                    }
                }
            }
            pos_next(lp, st, p.r, p.c);
        }
    }
    if (!any_pred)
        return;
    __syncthreads();
    if (!regpred) {
        undo_predictors_by_column<W>(p, h.col_phase, b.nwords, dst, origin, len, sh);
        return;
    }
    // Join the segments: the carry into segment w of the column residue r (j mod C) is the
    // predictor sum of every earlier segment's last value of that residue.
    const uint32_t e = g1 * 32;  // the last group of a non-final segment is whole
    if (lane >= 32 - p.c)
        sh.last[warp][(e + lane - (32 - p.c)) % p.c] = j0 < j1 ? (uint64_t)prev : 0;
    __syncthreads();
    if (warp == 0 || j0 >= j1)
        return;
    U k = 0;
    uint32_t kpred = 0;
    if (lane < p.c) {
        const uint32_t col = (uint32_t)(((uint64_t)h.col_phase + lane) % p.c);
        kpred = p.xform[col] & IBP_XF_PRED_MASK;
        for (uint32_t q = 0; q < warp; q++)
            k = pred_op(kpred, k, (U)sh.last[q][lane]);
        k &= word_mask<W>();
    }
    if (!__any_sync(kFull, k != 0))
        return;
    LanePos lp;
    pos_init(lp, j0 + lane, p.r, p.c, h.col_phase);
    for (uint32_t g = g0; g < g1; g++) {
        const uint32_t j = g * 32 + lane;
        const U kr = shfl_idx(k, lp.res);
        const uint32_t pred = p.xform[lp.col] & IBP_XF_PRED_MASK;
        if (j < j1 && pred && kr) {
            const int64_t at = origin + (int64_t)j * W;
            if (fast) {
                if constexpr (W == 2) {
                    uint16_t *q = (uint16_t *)(dst + at);
                    *q = (uint16_t)(pred_op(pred, (U)*q, kr) & word_mask<W>());
                } else if constexpr (W == 4) {
                    uint32_t *q = (uint32_t *)(dst + at);
                    *q = (uint32_t)pred_op(pred, (U)*q, kr);
                } else {
                    uint64_t *q = (uint64_t *)(dst + at);
                    *q = pred_op(pred, (U)*q, kr);
                }
            } else {
                const U x = pred_op(pred, load_clipped<W>(dst, at, len), kr) & word_mask<W>();
                store_clipped<W>(dst, at, x, len);
            }
        }
        pos_next(lp, st, p.r, p.c);
    }
}

__device__ void copy_raw(const uint8_t *src, uint32_t n, uint8_t *dst, int64_t origin, uint64_t len)
{
    if (origin >= 0 && (uint64_t)origin + n <= len && ((uintptr_t)(dst + origin) % 16) == 0) {
        const uint4 *s = (const uint4 *)src;
        uint4 *d = (uint4 *)(dst + origin);
        for (uint32_t i = threadIdx.x; i < n / 16; i += kThreads)
            d[i] = __ldg(s + i);
        for (uint32_t i = n / 16 * 16 + threadIdx.x; i < n; i += kThreads)
            dst[origin + i] = src[i];
        return;
    }
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        const int64_t at = origin + i;
        if (at >= 0 && (uint64_t)at < len)
            dst[at] = src[i];
    }
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) ibp_k_decode(IbpDecodeArgs a)
{
    __shared__ Shared sh;

    const uint8_t *plan_blob = (const uint8_t *)a.plan;
    IbpPlanHeader ph;
    memcpy(&ph, plan_blob, sizeof(ph));
    Plan p;
    p.w = ph.word_size;
    p.k = ph.nsets;
    p.c = ph.columns;
    p.r = ph.row_words;
    p.sb = p.k > 1 ? 2 : 1;
    p.xform = plan_blob + ph.xform_off;
    p.masks = plan_blob + ph.mask_off;
    const uint64_t *offs = (const uint64_t *)a.offsets;
    const uint64_t base_off = offs[0];
    uint8_t *const dst = (uint8_t *)a.dst;

    for (uint32_t bi = blockIdx.x; bi < a.nblocks; bi += gridDim.x) {
        const uint8_t *blk = (const uint8_t *)a.comp + (offs[bi] - base_off);
        IbpBlockHeader h;
        memcpy(&h, blk, sizeof(h));
        // Where this block's byte 0 lands in dst.
        const int64_t origin = (int64_t)bi * a.block_size - (int64_t)a.skip;
        if (h.flags & IBP_BLOCK_RAW) {
            copy_raw(blk + IBP_BLOCK_HEADER_SIZE, h.orig_len, dst, origin, a.len);
        } else {
            switch (p.w) {
            case 2: decode_packed<2>(p, h, blk, dst, origin, a.len, sh); break;
            case 4: decode_packed<4>(p, h, blk, dst, origin, a.len, sh); break;
            default: decode_packed<8>(p, h, blk, dst, origin, a.len, sh); break;
            }
            // Tail bytes (the region's last block only).
            const uint32_t nw = h.orig_len / p.w;
            for (uint32_t i = threadIdx.x; i < h.orig_len % p.w; i += kThreads) {
                const int64_t at = origin + (int64_t)nw * p.w + i;
                if (at >= 0 && (uint64_t)at < a.len)
                    dst[at] = blk[h.tail_off + i];
            }
        }
        __syncthreads();
    }
}
