// SPDX-License-Identifier: MIT
// ibpshim: decodes runs of IBP blocks on the GPU, bit-exact with codec/ (one CTA per block).
//
// Per block: a prefix count of packed rows gives every word's selector position; each thread
// sums the field sizes of a contiguous chunk of words and a CTA scan turns the sums into bit
// offsets; each thread then unpacks its chunk; predictor columns are undone by per-column scans.
#include <stdint.h>

#include "codec/format.h"
#include "kernels/decode_abi.h"

namespace {

constexpr int kThreads = IBP_DECODE_THREADS;
constexpr int kWarps = kThreads / 32;

struct Plan {
    uint32_t w, k, c, r, sb;
    const uint8_t *xform;
    const uint8_t *masks;  // k*c entries {mask, value}, w bytes each
};

__device__ __forceinline__ uint64_t load_le(const uint8_t *p, uint32_t n)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

// A little-endian word of w bytes at an address aligned to w.
__device__ __forceinline__ uint64_t load_word(const uint8_t *p, uint32_t w)
{
    switch (w) {
    case 2: return *(const uint16_t *)p;
    case 4: return *(const uint32_t *)p;
    default: return *(const uint64_t *)p;
    }
}

// Sequential reader of a little-endian bit stream of `len` bytes at an 8-byte aligned address:
// a 128-bit window refilled with one 8-byte load per 64 bits consumed.
struct BitReader {
    const uint8_t *base;
    uint64_t len;
    uint64_t q;    // index of the 8-byte word in lo
    uint64_t lo, hi;
    uint32_t off;  // bits of lo already consumed
};

__device__ __forceinline__ uint64_t br_load(const BitReader &r, uint64_t q)
{
    const uint64_t at = q * 8;
    if (at + 8 <= r.len)
        return *(const uint64_t *)(r.base + at);
    uint64_t v = 0;
    for (uint64_t i = at; i < r.len; i++)
        v |= (uint64_t)r.base[i] << (8 * (i - at));
    return v;
}

__device__ __forceinline__ void br_init(BitReader &r, const uint8_t *base, uint64_t len, uint64_t bitpos)
{
    r.base = base;
    r.len = len;
    r.q = bitpos >> 6;
    r.off = (uint32_t)(bitpos & 63);
    r.lo = br_load(r, r.q);
    r.hi = br_load(r, r.q + 1);
}

__device__ __forceinline__ uint64_t br_read(BitReader &r, uint32_t n)
{
    if (!n)
        return 0;
    uint64_t v = r.off ? (r.lo >> r.off) | (r.hi << (64 - r.off)) : r.lo;
    if (n < 64)
        v &= (1ull << n) - 1;
    r.off += n;
    if (r.off >= 64) {
        r.off -= 64;
        r.lo = r.hi;
        r.q++;
        r.hi = br_load(r, r.q + 1);
    }
    return v;
}

__device__ __forceinline__ uint64_t word_mask(uint32_t w)
{
    return w >= 8 ? ~0ull : ((1ull << (8 * w)) - 1);
}

// Scatters the low bits of f into the zero bits of mask (pdep over ~mask), one run at a time.
__device__ __forceinline__ uint64_t deposit(uint64_t vmask, uint64_t f)
{
    uint64_t out = 0;
    while (vmask) {
        const uint32_t p = __ffsll((long long)vmask) - 1;
        const uint64_t rest = vmask >> p;
        const uint32_t len = rest == ~0ull ? 64 - p : __ffsll((long long)~rest) - 1;
        const uint64_t lm = len >= 64 ? ~0ull : ((1ull << len) - 1);
        out |= (f & lm) << p;
        f = len >= 64 ? 0 : f >> len;
        vmask &= ~(lm << p);
    }
    return out;
}

__device__ __forceinline__ uint64_t unzigzag(uint64_t t, uint32_t w)
{
    return ((t >> 1) ^ (0ull - (t & 1))) & word_mask(w);
}

template <typename T>
__device__ T block_exclusive_scan(T v, T *warp_sums, T *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    T x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const T y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    if (lane == 31)
        warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        T s = lane < kWarps ? warp_sums[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const T y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o)
                s += y;
        }
        if (lane < kWarps)
            warp_sums[lane] = s;
    }
    __syncthreads();
    const T before = (warp ? warp_sums[warp - 1] : 0) + x - v;
    if (total)
        *total = warp_sums[kWarps - 1];
    __syncthreads();
    return before;
}

__device__ void store_word(uint8_t *dst, int64_t at, uint64_t x, uint32_t w, uint64_t len)
{
    // at: position of the word in dst coordinates (may be negative or past len at the edges)
    if (at >= 0 && (uint64_t)at + w <= len && ((uintptr_t)(dst + at) % w) == 0) {
        switch (w) {
        case 2: *(uint16_t *)(dst + at) = (uint16_t)x; return;
        case 4: *(uint32_t *)(dst + at) = (uint32_t)x; return;
        default: *(uint64_t *)(dst + at) = x; return;
        }
    }
    for (uint32_t i = 0; i < w; i++) {
        const int64_t p = at + i;
        if (p >= 0 && (uint64_t)p < len)
            dst[p] = (uint8_t)(x >> (8 * i));
    }
}

__device__ uint64_t load_out(const uint8_t *buf, int64_t at, uint32_t w)
{
    return load_le(buf + at, w);
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1) ibp_k_decode(IbpDecodeArgs a)
{
    __shared__ uint32_t flag_prefix[kThreads];
    __shared__ uint64_t warp_sums64[kWarps];
    __shared__ uint32_t warp_sums32[kWarps];

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

    for (uint32_t b = blockIdx.x; b < a.nblocks; b += gridDim.x) {
        const uint8_t *blk = (const uint8_t *)a.comp + (offs[b] - base_off);
        IbpBlockHeader h;
        memcpy(&h, blk, sizeof(h));
        // Where this block's byte 0 lands in dst.
        const int64_t origin = (int64_t)b * a.block_size - (int64_t)a.skip;
        if (h.flags & IBP_BLOCK_RAW) {
            for (uint32_t i = threadIdx.x; i < h.orig_len; i += kThreads) {
                const int64_t at = origin + i;
                if (at >= 0 && (uint64_t)at < a.len)
                    dst[at] = blk[IBP_BLOCK_HEADER_SIZE + i];
            }
            continue;
        }
        const uint32_t w = p.w;
        const uint32_t nwords = h.orig_len / w;
        const uint32_t nrows = (nwords + p.r - 1) / p.r;
        const uint32_t nflagw = (nrows + 31) / 32;
        const uint8_t *rowflags = blk + h.rowflag_off;
        const uint8_t *payload = blk + h.payload_off;
        const uint8_t *sel = blk + h.sel_off;

        // Packed rows before each 32-row group (a CTA scan over the flag words).
        const uint32_t groups_per_thread = (nflagw + kThreads - 1) / kThreads;
        uint32_t my = 0;
        for (uint32_t g = 0; g < groups_per_thread; g++) {
            const uint32_t i = threadIdx.x * groups_per_thread + g;
            if (i < nflagw)
                my += __popc((uint32_t)load_le(rowflags + 4 * i, 4 * i + 4 <= (nrows + 7) / 8 ? 4 : (nrows + 7) / 8 - 4 * i));
        }
        uint32_t acc = block_exclusive_scan<uint32_t>(my, warp_sums32, nullptr);
        // flag_prefix holds the prefix at the start of each thread's group range; the rest is
        // recomputed from the flag bytes on demand (groups_per_thread words at most).
        flag_prefix[threadIdx.x] = acc;
        __syncthreads();

        // Word chunk of this thread.
        const uint32_t chunk = (nwords + kThreads - 1) / kThreads;
        const uint32_t j0 = min(nwords, threadIdx.x * chunk);
        const uint32_t j1 = min(nwords, j0 + chunk);

        // Selector index of word j: R * (packed rows before its row) + position in its row.
        auto packed_before = [&](uint32_t row) -> uint32_t {
            const uint32_t fw = row / 32;
            const uint32_t owner = fw / groups_per_thread;
            uint32_t cnt = flag_prefix[owner];
            for (uint32_t i = owner * groups_per_thread; i < fw; i++)
                cnt += __popc((uint32_t)load_le(rowflags + 4 * i, 4));
            const uint32_t bits = (uint32_t)load_le(rowflags + 4 * fw, 4 * fw + 4 <= (nrows + 7) / 8 ? 4 : (nrows + 7) / 8 - 4 * fw);
            cnt += __popc(bits & ((1u << (row % 32)) - 1u));
            return cnt;
        };
        auto row_packed = [&](uint32_t row) -> bool { return (rowflags[row / 8] >> (row % 8)) & 1; };

        // Selectors of packed rows are stored back to back, so a chunk reads them sequentially
        // from the selector of its first word in a packed row on.
        const uint32_t row0 = j0 / p.r;
        const uint64_t sel0 = j0 < j1 ? ((uint64_t)packed_before(row0) * p.r +
                                         (row_packed(row0) ? j0 - row0 * p.r : 0)) * p.sb
                                      : 0;
        const uint64_t sel_len = h.tail_off - h.sel_off;
        const uint64_t payload_len = h.sel_off - h.payload_off;

        // Pass 1: field sizes of the chunk.
        uint64_t bits = 0;
        if (j0 < j1) {
            BitReader sr;
            br_init(sr, sel, sel_len, sel0);
            uint32_t row = row0;
            uint32_t row_end = (row + 1) * p.r;
            bool packed = row_packed(row);
            uint32_t col = (uint32_t)((h.col_phase + (uint64_t)j0) % p.c);
            for (uint32_t j = j0; j < j1; j++) {
                if (j == row_end) {
                    row++;
                    row_end += p.r;
                    packed = row_packed(row);
                }
                uint32_t size = 8 * w;
                if (packed) {
                    const uint32_t s = (uint32_t)br_read(sr, p.sb);
                    if (s) {
                        const uint64_t m = load_word(p.masks + (size_t)((s - 1) * p.c + col) * 2 * w, w);
                        size = 8 * w - __popcll(m);
                    }
                }
                bits += size;
                if (++col == p.c)
                    col = 0;
            }
        }
        uint64_t bitpos = block_exclusive_scan<uint64_t>(bits, warp_sums64, nullptr);

        // Pass 2: unpack (predictor columns still hold differences).
        bool any_pred = false;
        if (j0 < j1) {
            BitReader sr, pr;
            br_init(sr, sel, sel_len, sel0);
            br_init(pr, payload, payload_len, bitpos);
            uint32_t row = row0;
            uint32_t row_end = (row + 1) * p.r;
            bool packed = row_packed(row);
            uint32_t col = (uint32_t)((h.col_phase + (uint64_t)j0) % p.c);
            for (uint32_t j = j0; j < j1; j++) {
                if (j == row_end) {
                    row++;
                    row_end += p.r;
                    packed = row_packed(row);
                }
                uint64_t x;
                const uint32_t s = packed ? (uint32_t)br_read(sr, p.sb) : 0;
                if (s) {
                    const uint8_t *e = p.masks + (size_t)((s - 1) * p.c + col) * 2 * w;
                    const uint64_t m = load_word(e, w), v = load_word(e + w, w);
                    const uint32_t vb = 8 * w - __popcll(m);
                    x = v | deposit(~m & word_mask(w), br_read(pr, vb));
                } else {
                    x = br_read(pr, 8 * w);
                }
                const uint8_t xf = p.xform[col];
                if (xf & IBP_XF_ZIGZAG)
                    x = unzigzag(x, w);
                any_pred |= (xf & IBP_XF_PRED_MASK) != 0;
                store_word(dst, origin + (int64_t)j * w, x, w, a.len);
                if (++col == p.c)
                    col = 0;
            }
        }
        // Tail bytes (the region's last block only).
        for (uint32_t i = threadIdx.x; i < h.orig_len % w; i += kThreads) {
            const int64_t at = origin + (int64_t)nwords * w + i;
            if (at >= 0 && (uint64_t)at < a.len)
                dst[at] = blk[h.tail_off + i];
        }
        any_pred = __syncthreads_or(any_pred);
        if (!any_pred)
            continue;
        // Pass 3: undo predictors column by column, in place.  Only words inside dst can be
        // scanned in place: a clipped block needs the words before dst too, so the launcher
        // sends clipped blocks of predictor plans through a full-block scratch (see router).
        __threadfence_block();
        const uint32_t rows_c = (nwords + p.c - 1) / p.c;
        for (uint32_t c0 = 0; c0 < p.c; c0++) {
            const uint32_t col = (uint32_t)((h.col_phase + (uint64_t)c0) % p.c);
            const uint8_t xf = p.xform[col];
            if (!(xf & IBP_XF_PRED_MASK))
                continue;
            const bool delta = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA;
            // Word c0 + i*C for i in [0, rows_c): a CTA scan in chunks of kThreads words.
            uint64_t carry = 0;
            for (uint32_t base = 0; base < rows_c; base += kThreads) {
                const uint32_t i = base + threadIdx.x;
                const uint32_t j = c0 + i * p.c;
                const bool in = i < rows_c && j < nwords;
                const int64_t at = origin + (int64_t)j * w;
                uint64_t d = in ? load_out(dst, at, w) : 0;
                // Inclusive scan with + (delta) or ^ (xor) across the CTA.
                uint64_t x = d;
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
                for (int o = 1; o < 32; o <<= 1) {
                    const uint64_t y = __shfl_up_sync(0xffffffffu, x, o);
                    if (lane >= o)
                        x = delta ? x + y : x ^ y;
                }
                if (lane == 31)
                    warp_sums64[warp] = x;
                __syncthreads();
                uint64_t before = carry;
                for (int q = 0; q < warp; q++)
                    before = delta ? before + warp_sums64[q] : before ^ warp_sums64[q];
                uint64_t last = carry;
                for (int q = 0; q < kWarps; q++)
                    last = delta ? last + warp_sums64[q] : last ^ warp_sums64[q];
                x = delta ? x + before : x ^ before;
                __syncthreads();
                if (in)
                    store_word(dst, at, x & word_mask(w), w, a.len);
                carry = last & word_mask(w);
                __syncthreads();
            }
        }
        __syncthreads();
    }
}
