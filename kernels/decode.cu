// SPDX-License-Identifier: MIT
// ibpshim: decodes runs of IBP blocks on the GPU, bit-exact with codec/.
//
// Kernels picked per launch by ibp_decode_launch() (kernels/module.c):
// - ibp_k_decode_seg1 (one column) and ibp_k_decode_seg (or ibp_k_decode_segs, its table sliced
//   for plans of many entries): plans without predictor columns.  A
//   block's 512-word segments form groups of 8, each CTA takes a contiguous share of the groups
//   and its warps a segment each.  Each segment's payload bits (popcounts over its selectors for
//   one-column plans, else its lanes' field sizes, kept for the decode) and a CTA scan place the
//   segments, the bits of a block's earlier groups carried from group to group.  A warp stages its
//   segment in shared memory; each lane takes a run of 16 consecutive words, one warp scan places
//   the runs' fields, and each lane walks its fields with a bit cursor, a word costing one lookup
//   of what its selector and column mean and a deposit of up to four runs of variant bits;
// - ibp_k_decode_segp (or ibp_k_decode_segps, its table sliced for plans of many entries) then
//   ibp_k_decode_fix: plans with predictor columns of a period of at most 32 words, split the
//   same way; a warp decodes its segment into shared memory and undoes the predictors there
//   (section "Plans with predictor columns" below);
// - ibp_k_decode: a CTA per block, its warps on contiguous stretches of the block (any plan; the
//   launcher's choice for longer predictor periods).  Periods of up to 32 words are undone in
//   registers by strided warp scans carrying the previous group, then stretches are joined by a
//   per-residue carry over the CTA's warps; longer periods go through a per-column pass over the
//   output.  Within a stretch a warp takes 32 words at a time, a lane per word: a ballot places
//   the selectors, a warp scan of the field sizes places the fields, and each lane loads its
//   field, deposits it into its mask set and stores the word.
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

// The lowest run of set bits of v (v != 0): its first bit and its length.
template <typename U> __device__ __forceinline__ void lowest_run(U v, uint32_t &pos, uint32_t &len)
{
    constexpr uint32_t kBits = 8 * sizeof(U);
    if constexpr (sizeof(U) == 8) {
        pos = __ffsll((long long)v) - 1;
        const U rest = ~(v >> pos);
        len = rest ? __ffsll((long long)rest) - 1 : kBits - pos;
    } else {
        pos = __ffs((int)v) - 1;
        const U rest = ~(v >> pos);
        len = rest ? __ffs((int)rest) - 1 : kBits - pos;
    }
}

// Scatters the low bits of f into the set bits of vmask (pdep), one run of set bits at a time.
template <typename U> __device__ __forceinline__ U deposit(U vmask, U f)
{
    constexpr uint32_t kBits = 8 * sizeof(U);
    U out = 0;
    while (vmask) {
        uint32_t p, len;
        lowest_run<U>(vmask, p, len);
        const U lm = low_bits<U>(len);
        out |= (f & lm) << p;
        f = len >= kBits ? 0 : f >> len;
        vmask &= ~(lm << p);
    }
    return out;
}

// A whole word at an address aligned to W.
template <int W> __device__ __forceinline__ void store_aligned(uint8_t *p, typename WordT<W>::U x)
{
    if constexpr (W == 2)
        *(uint16_t *)p = (uint16_t)x;
    else if constexpr (W == 4)
        *(uint32_t *)p = (uint32_t)x;
    else
        *(uint64_t *)p = x;
}

template <int W> __device__ __forceinline__ typename WordT<W>::U load_aligned(const uint8_t *p)
{
    if constexpr (W == 2)
        return *(const uint16_t *)p;
    else if constexpr (W == 4)
        return *(const uint32_t *)p;
    else
        return *(const uint64_t *)p;
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

// Whether the word at byte `at` of dst lies wholly inside [0, len) at an address aligned to W.
template <int W> __device__ __forceinline__ bool word_inside(const uint8_t *dst, int64_t at, uint64_t len)
{
    return at >= 0 && (uint64_t)at + W <= len && ((uintptr_t)(dst + at) % W) == 0;
}

// Store of the bytes of a word that fall inside [0, len) of dst: one store where the word lies
// wholly inside, aligned (most words of a block that only its first or last bytes clip), else byte
// by byte. Stored byte by byte, the decodes of a stream of 4 MiB slices of fp32 weights took
// 0.67 ms a step; word by word, 0.20 ms (H100, docs/BENCHMARKS.md).
template <int W>
__device__ __forceinline__ void store_clipped(uint8_t *dst, int64_t at, typename WordT<W>::U x, uint64_t len)
{
    if (word_inside<W>(dst, at, len)) {
        store_aligned<W>(dst + at, x);
        return;
    }
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
    if (word_inside<W>(dst, at, len))
        return load_aligned<W>(dst + at);
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

// What a selector means for a word of a column, prepared once per CTA: selector 0 (the word
// stored whole) and each mask set, entry s * C + col.  The word is value | the sum over runs r of
// ((field << shift[r]) & run[r]), each run a stretch of variant bits (bits of the field above its
// variant bits fall outside every run, so fields are not masked); entries with more runs than fit
// use the bit-by-run loop over vmask.
constexpr int kRuns = 4;
constexpr uint32_t kTableEntries = 128;
constexpr uint32_t kMetaBits = 0xffu;     // field bits
constexpr uint32_t kMetaLoop = 1u << 8;   // more runs than kRuns
constexpr uint32_t kMetaZigzag = 1u << 9; // the column is zigzag-coded

// 8-byte words are rebuilt as two 32-bit halves, each from its own field (the low half's variant
// bits come first in a word's field), with at most two runs a half: 32-bit shifts and masks are
// a third of the instructions of 64-bit ones.
constexpr uint32_t kRunsHalf = 2;
constexpr uint32_t kMetaLoShift = 16; // meta bits 16-21: variant bits of the low half
static_assert((uint32_t)kRuns == IBP_GPU_RUNS && kRunsHalf == IBP_GPU_RUNS_HALF,
              "the planner keeps masks within the runs a table entry deposits");

// An entry is 16-byte parts, and the table keeps part q of every entry side by side, so that the
// lanes of a quarter warp, each loading a part of its own entry, meet in a bank only where their
// entries are 8 apart; whole 32-byte entries met at 4 apart (ncu, the predictor decode of uint8
// images: the entries' loads were 43% of its shared-memory wavefronts, 70% of them excess, and
// it decodes 10-15% faster split).  Words:
//   W <= 4: part 0 runs 0-3; part 1 value, shifts, meta, vmask;
//   W == 8: part 0 value (low, high), runs 0-1 (the low half's); part 1 runs 2-3, shifts, meta;
//           part 2 vmask.
// Runs are masks within the word (a half for W == 8), unused ones 0; byte r of shifts is run r's
// shift (within its half for W == 8); meta is kMeta* (and kMetaLoShift for W == 8).
//
// Kernels of their own keep the table of a plan of several columns of 2- and 4-byte words and more
// than IBP_DECODE_PARTS_ENTRIES_MAX entries sliced by words instead: word k of every entry side
// by side, so that a quarter warp's 4-byte loads meet in no bank for up to 32 entries, where
// 16-byte parts meet for entries 8 apart.  It costs seven loads a word where parts cost two.
enum class Layout { parts, sliced };
template <int W, Layout L> struct Table {
    static constexpr uint32_t kParts = W == 8 ? 3 : 2;
    uint4 part[kParts][kTableEntries];
};
template <int W> struct Table<W, Layout::sliced> {
    static_assert(W <= 4, "8-byte words keep their table in parts");
    uint32_t word[8][kTableEntries]; // word 4 q + k of entry i: word k of its part q
};

// Entry i of a table, its fields read where they are used (a copy of a whole entry in registers
// cost the kernel of several columns of 4-byte words a spill).
template <int W, Layout L> struct EntryAt {
    using U = typename WordT<W>::U;
    const Table<W, L> &t;
    uint32_t i;
    __device__ __forceinline__ uint32_t word(uint32_t q, uint32_t k) const
    {
        if constexpr (L == Layout::sliced)
            return t.word[4 * q + k][i];
        else
            return ((const uint32_t *)&t.part[q][i])[k];
    }
    __device__ __forceinline__ uint32_t run(uint32_t r) const
    {
        return W == 8 ? (r < kRunsHalf ? word(0, 2 + r) : word(1, r - kRunsHalf)) : word(0, r);
    }
    __device__ __forceinline__ uint32_t shifts() const
    {
        return word(1, W == 8 ? 2 : 1);
    }
    __device__ __forceinline__ uint32_t meta() const
    {
        return word(1, W == 8 ? 3 : 2);
    }
    __device__ __forceinline__ U value() const
    {
        if constexpr (W == 8)
            return (uint64_t)word(0, 1) << 32 | word(0, 0);
        else
            return word(1, 0);
    }
    __device__ __forceinline__ U vmask() const
    {
        if constexpr (W == 8)
            return (uint64_t)word(2, 1) << 32 | word(2, 0);
        else
            return word(1, 3);
    }
};

// Splits the set bits of v into runs: the first `max` go to run[0], run[stride], ... (the others
// zeroed), the shift that takes each from its place in the field to its place in v into byte
// `at` + r of shifts.  Returns whether v has more than `max` runs.
template <typename U>
__device__ __forceinline__ bool split_runs(U v, U *run, uint32_t stride, uint32_t max, uint32_t &shifts,
                                           uint32_t at)
{
    for (uint32_t r = 0; r < max; r++)
        run[r * stride] = 0;
    uint32_t src_bit = 0, nr = 0;
    while (v && nr <= max) {
        uint32_t pos, len;
        lowest_run<U>(v, pos, len);
        const U bits = low_bits<U>(len) << pos;
        if (nr < max) {
            run[nr * stride] = bits;
            shifts |= (pos - src_bit) << (8 * (at + nr));
        }
        nr++;
        src_bit += len;
        v &= ~bits;
    }
    return nr > max;
}

// Fills entry i for variant bits vmask and invariant values value; returns whether its variant
// bits are more runs than the runs deposit takes (the entry then deposits bit run by bit run).
// The runs go straight to the table: split_runs indexes them by how many it has found.
template <int W, Layout L>
__device__ __forceinline__ bool entry_fill(Table<W, L> &t, uint32_t i, typename WordT<W>::U vmask,
                                           typename WordT<W>::U value, uint32_t meta)
{
    uint32_t shifts = 0;
    bool loop = false;
    if constexpr (W == 8) {
        for (uint32_t half = 0; half < 2; half++) // runs 0-1 in part 0 after the value, 2-3 in part 1
            loop |= split_runs<uint32_t>((uint32_t)(vmask >> (32 * half)),
                                         half ? (uint32_t *)&t.part[1][i] : (uint32_t *)&t.part[0][i] + 2, 1,
                                         kRunsHalf, shifts, kRunsHalf * half);
        meta |= (uint32_t)__popc((uint32_t)vmask) << kMetaLoShift;
        meta |= (uint32_t)popc(vmask) | (loop ? kMetaLoop : 0);
        t.part[0][i].x = (uint32_t)value;
        t.part[0][i].y = (uint32_t)(value >> 32);
        t.part[1][i].z = shifts;
        t.part[1][i].w = meta;
        t.part[2][i] = make_uint4((uint32_t)vmask, (uint32_t)(vmask >> 32), 0, 0);
    } else if constexpr (L == Layout::sliced) {
        loop = split_runs<uint32_t>(vmask, &t.word[0][i], kTableEntries, kRuns, shifts, 0);
        t.word[4][i] = value;
        t.word[5][i] = shifts;
        t.word[6][i] = meta | (uint32_t)popc(vmask) | (loop ? kMetaLoop : 0);
        t.word[7][i] = vmask;
    } else {
        loop = split_runs<uint32_t>(vmask, (uint32_t *)&t.part[0][i], 1, kRuns, shifts, 0);
        t.part[1][i] =
            make_uint4(value, shifts, meta | (uint32_t)popc(vmask) | (loop ? kMetaLoop : 0), vmask);
    }
    return loop;
}

union TableAny {
    Table<2, Layout::parts> t2;
    Table<4, Layout::parts> t4;
    Table<8, Layout::parts> t8;
    Table<2, Layout::sliced> s2;
    Table<4, Layout::sliced> s4;
};

struct Shared {
    uint32_t seg_sel[kWarps];
    uint32_t seg_bits[kWarps];
    uint64_t last[kWarps][32];  // per warp and column residue: the segment's last predicted value
    uint64_t warp_sums[kWarps];
    uint64_t edge[2];           // words straddling the start and the end of dst, before the carry
};

enum class TableKind { none, loop, runs };

// Fills the entry table when the plan's (K + 1) * C entries fit, then waits for the CTA's
// threads: none when they do not fit, runs when every entry's variant bits are at most kRuns
// runs, else loop.
template <int W, Layout L> __device__ TableKind table_build(const Plan &p, Table<W, L> &t)
{
    using U = typename WordT<W>::U;
    const uint32_t n = (p.k + 1) * p.c;
    if (n > kTableEntries) {
        __syncthreads();
        return TableKind::none;
    }
    bool loop = false;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const uint32_t s = i / p.c, col = i - s * p.c;
        const uint8_t *src = p.masks + (size_t)(i - p.c) * 2 * W; // set s - 1, entry (s - 1) * C + col
        const U vmask = s ? ~ld_word<W>(src) & word_mask<W>() : word_mask<W>();
        loop |= entry_fill<W>(t, i, vmask, s ? ld_word<W>(src + W) : 0,
                              (p.xform[col] & IBP_XF_ZIGZAG) ? kMetaZigzag : 0);
    }
    return __syncthreads_or(loop) ? TableKind::loop : TableKind::runs;
}

template <int W, Layout L>
__device__ __forceinline__ const Table<W, L> *table_if(TableKind k, const Table<W, L> &t)
{
    return k == TableKind::none ? nullptr : &t;
}

template <typename U> __device__ __forceinline__ U shift_left(U f, uint32_t n)
{
    if constexpr (sizeof(U) == 8)
        return f << (n & 63);
    else
        return __funnelshift_l(0u, f, n); // n mod 32
}

// The word of an entry of at most kRuns runs rebuilt from its field f (zigzag not undone).
template <int W, Layout L>
__device__ __forceinline__ typename WordT<W>::U runs_deposit(const EntryAt<W, L> &e, typename WordT<W>::U f)
{
    using U = typename WordT<W>::U;
    const uint32_t shifts = e.shifts();
    if constexpr (W == 8) {
        const uint32_t f_lo = (uint32_t)f;
        const uint32_t f_hi = __funnelshift_rc(f_lo, (uint32_t)(f >> 32), e.meta() >> kMetaLoShift);
        uint32_t lo = e.word(0, 0), hi = e.word(0, 1);
#pragma unroll
        for (uint32_t r = 0; r < kRunsHalf; r++) {
            lo |= shift_left<uint32_t>(f_lo, shifts >> (8 * r)) & e.run(r);
            hi |= shift_left<uint32_t>(f_hi, shifts >> (8 * (kRunsHalf + r))) & e.run(kRunsHalf + r);
        }
        return (uint64_t)hi << 32 | lo;
    } else {
        U x = e.value();
#pragma unroll
        for (int r = 0; r < kRuns; r++)
            x |= shift_left<U>(f, shifts >> (8 * r)) & e.run(r);
        return x;
    }
}

// The word of entry e rebuilt from its field f (zigzag not undone).
template <int W, Layout L>
__device__ __forceinline__ typename WordT<W>::U table_deposit(const EntryAt<W, L> &e, typename WordT<W>::U f)
{
    using U = typename WordT<W>::U;
    if (e.meta() & kMetaLoop)
        return e.value() | deposit<U>(e.vmask(), f);
    return runs_deposit<W>(e, f);
}

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
    const uint32_t *index; // the group index (format.h), or null in a block without one
    const uint8_t *rowflags;
    const uint32_t *sel;
    const uint8_t *payload;
    uint32_t payload_words;  // whole 4-byte words of the payload section (it is padded to 16)
    uint32_t flag_words;     // of the row flags section
    uint32_t sel_words;      // of the selector section
    uint32_t nwords;
};

// Block bi of the run (header h, bytes at blk).  A block of flagged selectors has its selectors
// in the fixed-width form in a.selx, where ibp_k_decode_unflag put them.
__device__ __forceinline__ Block block_view(const IbpDecodeArgs &a, uint32_t bi, const IbpBlockHeader &h,
                                            const uint8_t *blk, uint32_t w)
{
    Block b;
    b.index = (h.flags & IBP_BLOCK_INDEXED) ? (const uint32_t *)(blk + IBP_BLOCK_HEADER_SIZE) : nullptr;
    b.rowflags = blk + h.rowflag_off;
    b.sel = (const uint32_t *)(blk + h.sel_off);
    b.payload = blk + h.payload_off;
    b.payload_words = (h.sel_off - h.payload_off) / 4;
    b.flag_words = (h.payload_off - h.rowflag_off) / 4;
    b.sel_words = (h.tail_off - h.sel_off) / 4;
    b.nwords = h.orig_len / w;
    if (h.flags & IBP_BLOCK_SELFLAGS) {
        const uint32_t stride = ibp_decode_selx_stride(w, a.block_size);
        b.sel = (const uint32_t *)(a.selx + (uint64_t)bi * stride);
        b.sel_words = stride / 4;
    }
    return b;
}

__device__ __forceinline__ Steps plan_steps(const Plan &p)
{
    Steps st;
    st.row_q = 32 / p.r;
    st.row_r = 32 % p.r;
    st.col_r = 32 % p.c;
    return st;
}

// The selector of the lane's word (0 for raw rows and words past the range); selbase advances
// past the warp's selectors.
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
    return p.masks + (size_t)((min(s, p.k) - 1) * p.c + col) * 2 * W; // s > K reads as K
}

// Bits stored for a word that matched mask set s (> 0) of column col.
template <int W, Layout L>
__device__ __forceinline__ uint32_t matched_bits(const Plan &p, const Table<W, L> *t, uint32_t s,
                                                 uint32_t col)
{
    return t ? EntryAt<W, L>{*t, min(s, p.k) * p.c + col}.meta() & kMetaBits
             : 8 * W - popc(ld_word<W>(mask_entry<W>(p, s, col)));
}

// The word that matched mask set s (> 0) of column col, from its variant bits f.
template <int W, Layout L>
__device__ __forceinline__ typename WordT<W>::U matched_word(const Plan &p, const Table<W, L> *t, uint32_t s,
                                                             uint32_t col, typename WordT<W>::U f)
{
    if (t)
        return table_deposit<W>(EntryAt<W, L>{*t, min(s, p.k) * p.c + col}, f);
    const uint8_t *e = mask_entry<W>(p, s, col);
    return ld_word<W>(e + W) | deposit<typename WordT<W>::U>(~ld_word<W>(e) & word_mask<W>(), f);
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

// The sum of v over the warp's lanes before this one; total gets the whole warp's.
template <typename T> __device__ __forceinline__ T warp_excl_scan(T v, T &total)
{
    const uint32_t lane = threadIdx.x & 31;
    T incl = v;
#pragma unroll
    for (int q = 1; q < 32; q <<= 1) {
        const T y = __shfl_up_sync(kFull, incl, q);
        if (lane >= (uint32_t)q)
            incl += y;
    }
    total = __shfl_sync(kFull, incl, 31);
    return incl - v;
}

// Packed words (selectors) among words [j0, j1) of a block, summed over the warp.
__device__ uint32_t range_packed(const Plan &p, const Block &b, uint32_t j0, uint32_t j1)
{
    const uint32_t lane = threadIdx.x & 31;
    uint32_t n = 0;
    if (j0 < j1) {
        const uint32_t r0 = j0 / p.r, r1 = (j1 - 1) / p.r;
        for (uint32_t r = r0 + lane; r <= r1; r += 32) {
            if ((b.rowflags[r >> 3] >> (r & 7)) & 1)
                n += min(j1, (r + 1) * p.r) - max(j0, r * p.r);
        }
    }
    return warp_sum(n);
}

// Payload bits of words [j0, j1) (j0 a multiple of 32) whose first selector is selbase.
template <int W, Layout L>
__device__ uint32_t range_bits(const Plan &p, const Table<W, L> *t, const Block &b, const IbpBlockHeader &h,
                               uint32_t j0, uint32_t j1, uint32_t selbase)
{
    const uint32_t lane = threadIdx.x & 31;
    const Steps st = plan_steps(p);
    LanePos lp;
    pos_init(lp, j0 + lane, p.r, p.c, h.col_phase);
    uint32_t bits = 0;
    for (uint32_t j = j0; j < j1; j += 32) {
        const bool valid = j + lane < j1;
        const uint32_t s = word_selector(p, b, lp, valid, selbase);
        uint32_t size = valid ? 8 * W : 0;
        if (s)
            size = matched_bits<W>(p, t, s, lp.col);
        bits += size;
        pos_next(lp, st, p.r, p.c);
    }
    return warp_sum(bits);
}

// Where decoded words go: dst, the block's byte 0 at dst + origin, and only bytes in [0, len).
struct Out {
    uint8_t *dst;
    int64_t origin;
    uint64_t len;
    bool fast;  // the whole block lands inside dst at an address aligned to W
};

// State of the in-register undo of predictors with a period of at most 32 words.
template <int W> struct Pred {
    typename WordT<W>::U prev;  // the previous group's words (the carries of the strided scans)
    uint32_t lane_mod_c;
    uint64_t *edge;             // where words straddling dst's ends keep their whole value
};

// Decodes words [j0, j1) (j0 a multiple of 32) whose first selector and payload bit are selbase
// and bitbase.  With PRED, predictor columns (period <= 32) are undone relative to j0.
template <int W, bool PRED, Layout L>
__device__ void decode_range(const Plan &p, const Table<W, L> *t, const Block &b, const IbpBlockHeader &h,
                             uint32_t j0, uint32_t j1, uint32_t selbase, uint32_t bitbase, const Out &out,
                             Pred<W> *pr)
{
    using U = typename WordT<W>::U;
    const uint32_t lane = threadIdx.x & 31;
    const Steps st = plan_steps(p);
    LanePos lp;
    pos_init(lp, j0 + lane, p.r, p.c, h.col_phase);
    for (uint32_t j = j0; j < j1; j += 32 * kBatch) {
        uint32_t s[kBatch], size[kBatch], o[kBatch], col[kBatch];
        U f[kBatch];
        bool valid[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            valid[u] = j + 32 * u + lane < j1;
            s[u] = word_selector(p, b, lp, valid[u], selbase);
            col[u] = lp.col;
            size[u] = valid[u] ? 8 * W : 0;
            if (s[u])
                size[u] = matched_bits<W>(p, t, s[u], lp.col);
            uint32_t group_bits;
            o[u] = bitbase + warp_excl_scan<uint32_t>(size[u], group_bits);
            bitbase += group_bits;
            pos_next(lp, st, p.r, p.c);
        }
#pragma unroll
        for (int u = 0; u < kBatch; u++)
            f[u] = valid[u] ? load_field<W>(b, o[u], size[u]) : 0;
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            if (j + 32 * u >= j1)
                break;
            U x = s[u] ? matched_word<W>(p, t, s[u], col[u], f[u]) : f[u];
            const uint8_t xf = valid[u] ? p.xform[col[u]] : 0;
            if (xf & IBP_XF_ZIGZAG)
                x = unzigzag<W>(x);
            const uint32_t jw = j + 32 * u + lane;
            const int64_t at = out.origin + (int64_t)jw * W;
            if constexpr (PRED) {
                const uint32_t pred = xf & IBP_XF_PRED_MASK;
                for (uint32_t q = p.c; q < 32; q <<= 1) {
                    const U y = shfl_up(x, q);
                    if (lane >= q)
                        x = pred_op(pred, x, y);
                }
                const U c = shfl_idx(pr->prev, 32 - p.c + pr->lane_mod_c);
                x = pred_op(pred, x, c) & word_mask<W>();
                pr->prev = x;
                if (valid[u] && !out.fast && at < (int64_t)out.len && at + W > 0 &&
                    (at < 0 || at + W > (int64_t)out.len))
                    pr->edge[at < 0 ? 0 : 1] = x;
            }
            if (valid[u]) {
                if (out.fast)
                    store_aligned<W>(out.dst + at, x);
                else
                    store_clipped<W>(out.dst, at, x, out.len);
            }
        }
    }
}

// Undoes predictor columns of any period in place, one column at a time (a CTA scan per column).
// Only words inside dst are scanned: the router sends clipped blocks of such plans through a
// whole-block scratch buffer.
template <int W>
__device__ void undo_predictors_by_column(const Plan &p, uint32_t col_phase, uint32_t nwords, const Out &out,
                                          Shared &sh)
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
            const int64_t at = out.origin + (int64_t)j * W;
            U x = in ? load_clipped<W>(out.dst, at, out.len) : 0;
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
                store_clipped<W>(out.dst, at, x, out.len);
            carry = last & word_mask<W>();
        }
        __syncthreads();
    }
}

// Whether any column's transform has one of the bits of `mask` (the warp answers together).
__device__ __forceinline__ bool plan_has_xform(const Plan &p, uint32_t mask)
{
    bool any = false;
    for (uint32_t c = threadIdx.x & 31; c < p.c; c += 32)
        any |= (p.xform[c] & mask) != 0;
    return __any_sync(kFull, any);
}

// One CTA decodes a whole block: warps take contiguous segments of 32-word groups.
template <int W, Layout L>
__device__ void decode_block_cta(const Plan &p, const Table<W, L> *t, bool any_pred, const IbpBlockHeader &h,
                                 const Block &b, const Out &out, Shared &sh)
{
    using U = typename WordT<W>::U;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t ngroups = (b.nwords + 31) / 32;
    const uint32_t g0 = (uint32_t)((uint64_t)warp * ngroups / kWarps);
    const uint32_t g1 = (uint32_t)((uint64_t)(warp + 1) * ngroups / kWarps);
    const uint32_t j0 = g0 * 32, j1 = min(b.nwords, g1 * 32);

    const uint32_t npacked = range_packed(p, b, j0, j1);
    if (lane == 0)
        sh.seg_sel[warp] = npacked;
    __syncthreads();
    uint32_t selbase = 0;
    for (uint32_t q = 0; q < warp; q++)
        selbase += sh.seg_sel[q];
    const uint32_t bits = range_bits<W>(p, t, b, h, j0, j1, selbase);
    if (lane == 0)
        sh.seg_bits[warp] = bits;
    __syncthreads();
    uint32_t bitbase = 0;
    for (uint32_t q = 0; q < warp; q++)
        bitbase += sh.seg_bits[q];

    if (!any_pred || p.c > 32) {
        decode_range<W, false>(p, t, b, h, j0, j1, selbase, bitbase, out, nullptr);
        if (any_pred) {
            __syncthreads();
            undo_predictors_by_column<W>(p, h.col_phase, b.nwords, out, sh);
        }
        return;
    }
    Pred<W> pr;
    pr.prev = 0;
    pr.lane_mod_c = lane % p.c;
    pr.edge = sh.edge;
    decode_range<W, true>(p, t, b, h, j0, j1, selbase, bitbase, out, &pr);
    // Join the segments: the carry into segment w of the column residue r (j mod C) is the
    // predictor sum of every earlier segment's last value of that residue.
    const uint32_t e = g1 * 32;  // the last group of a non-final segment is whole
    if (lane >= 32 - p.c)
        sh.last[warp][(e + lane - (32 - p.c)) % p.c] = j0 < j1 ? (uint64_t)pr.prev : 0;
    __syncthreads();
    if (warp == 0 || j0 >= j1)
        return;
    U k = 0;
    if (lane < p.c) {
        const uint32_t col = (uint32_t)(((uint64_t)h.col_phase + lane) % p.c);
        const uint32_t kpred = p.xform[col] & IBP_XF_PRED_MASK;
        for (uint32_t q = 0; q < warp; q++)
            k = pred_op(kpred, k, (U)sh.last[q][lane]);
        k &= word_mask<W>();
    }
    if (!__any_sync(kFull, k != 0))
        return;
    const Steps st = plan_steps(p);
    LanePos lp;
    pos_init(lp, j0 + lane, p.r, p.c, h.col_phase);
    for (uint32_t g = g0; g < g1; g++) {
        const uint32_t j = g * 32 + lane;
        const U kr = shfl_idx(k, lp.res);
        const uint32_t pred = p.xform[lp.col] & IBP_XF_PRED_MASK;
        if (j < j1 && pred && kr) {
            const int64_t at = out.origin + (int64_t)j * W;
            if (out.fast) {
                store_aligned<W>(out.dst + at, pred_op(pred, load_aligned<W>(out.dst + at), kr) & word_mask<W>());
            } else if (at < (int64_t)out.len && at + W > 0) {
                // A word straddling an end of dst kept its whole value: the carry of a delta
                // runs through the bytes that are not written.
                const bool edge = at < 0 || at + W > (int64_t)out.len;
                const U x0 = edge ? (U)sh.edge[at < 0 ? 0 : 1] : load_clipped<W>(out.dst, at, out.len);
                store_clipped<W>(out.dst, at, pred_op(pred, x0, kr) & word_mask<W>(), out.len);
            }
        }
        pos_next(lp, st, p.r, p.c);
    }
}

__device__ void copy_raw(const uint8_t *src, uint32_t n, uint8_t *dst, int64_t origin, uint64_t len,
                         uint32_t tid, uint32_t nthreads)
{
    if (origin >= 0 && (uint64_t)origin + n <= len && ((uintptr_t)(dst + origin) % 16) == 0 &&
        ((uintptr_t)src % 16) == 0) {
        const uint4 *s = (const uint4 *)src;
        uint4 *d = (uint4 *)(dst + origin);
        for (uint32_t i = tid; i < n / 16; i += nthreads)
            d[i] = __ldg(s + i);
        for (uint32_t i = n / 16 * 16 + tid; i < n; i += nthreads)
            dst[origin + i] = src[i];
        return;
    }
    for (uint32_t i = tid; i < n; i += nthreads) {
        const int64_t at = origin + i;
        if (at >= 0 && (uint64_t)at < len)
            dst[at] = src[i];
    }
}

__device__ __forceinline__ Plan load_plan(uint64_t plan_addr)
{
    const uint8_t *plan_blob = (const uint8_t *)plan_addr;
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
    return p;
}

__device__ __forceinline__ void copy_tail(const IbpBlockHeader &h, const uint8_t *blk, uint32_t w, const Out &out,
                                          uint32_t tid, uint32_t nthreads)
{
    const uint32_t nw = h.orig_len / w;
    for (uint32_t i = tid; i < h.orig_len % w; i += nthreads) {
        const int64_t at = out.origin + (int64_t)nw * w + i;
        if (at >= 0 && (uint64_t)at < out.len)
            out.dst[at] = blk[h.tail_off + i];
    }
}

// Block bi of the run and its header.  The offset comes from the arguments when the launch
// carries them, else from the table through the non-coherent path, so that a CTA's later blocks
// mostly hit the line its first read cached; blocks start 16-aligned (IBP_ALIGN; the launcher
// checks the run's base), so the header comes in 8-byte loads instead of a byte at a time.
// INL: the launch carries the offsets (a.inline_offsets), known where the caller is compiled for
// either case.
template <bool INL>
__device__ __forceinline__ const uint8_t *block_at(const IbpDecodeArgs &a, uint32_t bi, IbpBlockHeader &h)
{
    static_assert(sizeof(IbpBlockHeader) == 32, "a block header is four 8-byte loads");
    const uint64_t *offs = (const uint64_t *)a.offsets;
    const uint8_t *blk =
        (const uint8_t *)a.comp + (INL ? (uint64_t)a.rel[bi] : __ldg(offs + bi) - __ldg(offs));
    const uint2 *f = (const uint2 *)blk;
    const uint2 a0 = __ldg(f), a1 = __ldg(f + 1), a2 = __ldg(f + 2), a3 = __ldg(f + 3);
    h.orig_len = a0.x;
    h.comp_len = a0.y;
    h.flags = a1.x;
    h.col_phase = a1.y;
    h.rowflag_off = a2.x;
    h.payload_off = a2.y;
    h.sel_off = a3.x;
    h.tail_off = a3.y;
    return blk;
}

__device__ __forceinline__ const uint8_t *block_at(const IbpDecodeArgs &a, uint32_t bi, IbpBlockHeader &h)
{
    return a.inline_offsets ? block_at<true>(a, bi, h) : block_at<false>(a, bi, h);
}

__device__ __forceinline__ Out out_for(const IbpDecodeArgs &a, uint32_t bi, const IbpBlockHeader &h, uint32_t w)
{
    Out out;
    out.dst = (uint8_t *)a.dst;
    out.origin = (int64_t)bi * a.block_size - (int64_t)a.skip;
    out.len = a.len;
    out.fast = out.origin >= 0 && (uint64_t)out.origin + (uint64_t)(h.orig_len / w) * w <= a.len &&
               ((uintptr_t)(out.dst + out.origin) % w) == 0;
    return out;
}

template <int W, Layout L>
__device__ void decode_blocks_cta(const IbpDecodeArgs &a, const Plan &p, Table<W, L> &tbl, Shared &sh)
{
    const Table<W, L> *t = table_if<W>(table_build<W>(p, tbl), tbl);
    const bool any_pred = plan_has_xform(p, IBP_XF_PRED_MASK);
    for (uint32_t bi = blockIdx.x; bi < a.nblocks; bi += gridDim.x) {
        IbpBlockHeader h;
        const uint8_t *blk = block_at(a, bi, h);
        const Out out = out_for(a, bi, h, W);
        if (h.flags & IBP_BLOCK_TOPCODED) { // ibp_k_decode_top's
        } else if (h.flags & IBP_BLOCK_RAW) {
            copy_raw(blk + IBP_BLOCK_HEADER_SIZE, h.orig_len, out.dst, out.origin, out.len, threadIdx.x, kThreads);
        } else {
            decode_block_cta<W>(p, t, any_pred, h, block_view(a, bi, h, blk, W), out, sh);
            copy_tail(h, blk, W, out, threadIdx.x, kThreads);
        }
        __syncthreads();
    }
}

// Packed words (selectors) before word j0 of a block: R per packed row before j0's row, plus the
// words of its row before j0 when that row is packed; a popcount over the row flags.
__device__ uint32_t packed_before(const Plan &p, const Block &b, uint32_t j0)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t row0 = j0 / p.r;
    const uint32_t *flags = (const uint32_t *)b.rowflags;  // the section is 16-byte aligned and padded
    uint32_t rows = 0;
    for (uint32_t i = lane; i < row0 / 32; i += 32)
        rows += __popc(__ldg(flags + i));
    uint32_t n = warp_sum(rows) * p.r;
    const uint32_t f = __ldg(flags + row0 / 32);
    n += __popc(f & ((1u << (row0 % 32)) - 1u)) * p.r;
    if ((f >> (row0 % 32)) & 1)
        n += j0 - row0 * p.r;
    return n;
}

// A warp's copy of its segment's row flags, selectors and payload in shared memory, so that the
// lanes' scattered reads of fields cost shared-memory latency, not global.
struct SegStage {
    uint4 payload[(IBP_DECODE_SEG_WORDS * 8 + 48) / 16]; // at most 8 bytes a word, alignment, window
    uint32_t sel[36];                                    // 2-bit selectors of 512 words, misaligned
    uint32_t flags[20];                                  // row flags of up to 513 rows, misaligned
};

// Each lane of a segment's warp takes this many consecutive words: their selectors fit one 32-bit
// window, their sizes one sum, and the warp does one scan for the whole segment.
constexpr uint32_t kLaneRun = IBP_DECODE_SEG_WORDS / 32;
static_assert(kLaneRun == 16, "a lane's selectors are read as one 32-bit window");

// Copies n bytes (a multiple of 16) from a 16-byte-aligned global address into shared memory,
// the warp's lanes side by side, without going through registers where the GPU can.
__device__ __forceinline__ void stage_copy(uint4 *to, const uint8_t *from, uint32_t n)
{
    const uint32_t lane = threadIdx.x & 31;
#if __CUDA_ARCH__ >= 800
    for (uint32_t i = lane; i < n / 16; i += 32) {
        const uint32_t s = (uint32_t)__cvta_generic_to_shared(to + i);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(from + 16 * i) : "memory");
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
#else
    for (uint32_t i = lane; i < n / 16; i += 32)
        to[i] = __ldg((const uint4 *)from + i);
#endif
}

// A segment's words [j0, j1) of its block, where its staged copies begin, and the lane's run.
struct SegPos {
    uint32_t j0, j1;
    uint32_t flag_word0; // first staged row-flag word (32 rows a word)
    uint32_t sel_bit;    // the segment's first selector bit, relative to the staged selectors
    uint32_t pay_bit;    // the segment's first payload bit, relative to the staged payload
};

// Stages `bits` bits of payload from bit bit0 on (whole 16-byte words); returns where bit0 is in
// the staged copy.
__device__ __forceinline__ uint32_t stage_payload(const Block &b, uint32_t bit0, uint32_t bits, SegStage &st)
{
    const uint32_t first = bit0 / 8 / 16 * 16;
    const uint32_t pay_len = b.payload_words * 4;
    const uint32_t end = min(pay_len, ((bit0 + bits + 7) / 8 + 15) / 16 * 16);
    const uint32_t n = end > first ? min(end - first, (uint32_t)sizeof(st.payload)) : 0;
    stage_copy(st.payload, b.payload + first, n);
    return bit0 - first * 8;
}

// Stages the segment's row flags and selectors (and, with bits > 0, its payload of that many bits
// starting at bit0).  Whole 4- or 16-byte words of each section are read, never past it (sections
// are 16-byte aligned and padded).
__device__ SegPos stage_segment(const Plan &p, const Block &b, const IbpBlockHeader &h, uint32_t j0,
                                uint32_t j1, uint32_t sel0, uint32_t bit0, uint32_t bits, SegStage &st)
{
    const uint32_t lane = threadIdx.x & 31;
    SegPos sp;
    sp.j0 = j0;
    sp.j1 = j1;
    sp.flag_word0 = j0 / p.r / 32;
    const uint32_t nflag = min(20u, (j1 - 1) / p.r / 32 - sp.flag_word0 + 1);
    if (lane < nflag)
        st.flags[lane] = sp.flag_word0 + lane < b.flag_words
                             ? __ldg((const uint32_t *)b.rowflags + sp.flag_word0 + lane)
                             : 0;
    const uint32_t sel_word0 = sel0 * p.sb / 32;
    for (uint32_t i = lane; i < 36; i += 32)
        st.sel[i] = sel_word0 + i < b.sel_words ? __ldg(b.sel + sel_word0 + i) : 0;
    sp.sel_bit = sel0 * p.sb - sel_word0 * 32;
    sp.pay_bit = bits ? stage_payload(b, bit0, bits, st) : 0;
    __syncwarp();
    return sp;
}

// A lane's run of kLaneRun words: where it starts, which of its words sit in packed rows, and its
// selectors (the window of its first one on).
struct LaneRun {
    uint32_t j;      // block word of its first word
    uint32_t n;      // words of the run inside the segment (0 .. kLaneRun)
    uint32_t col;    // column of its first word
    uint32_t packed; // bit i: word i is in a packed row
};

__device__ __forceinline__ LaneRun lane_run(const Plan &p, const IbpBlockHeader &h, const SegStage &st,
                                            const SegPos &sp)
{
    const uint32_t lane = threadIdx.x & 31;
    LaneRun lr;
    lr.j = sp.j0 + lane * kLaneRun;
    lr.n = lr.j < sp.j1 ? min(kLaneRun, sp.j1 - lr.j) : 0;
    lr.col = (h.col_phase + lr.j) % p.c; // col_phase < C and j < 2^26: no overflow
    uint32_t row = lr.j / p.r, rpos = lr.j - row * p.r;
    lr.packed = 0;
    for (uint32_t i = 0; i < lr.n;) {
        const uint32_t fw = (row >> 5) - sp.flag_word0;
        const bool pk = fw < 20 && ((st.flags[fw] >> (row & 31)) & 1);
        const uint32_t take = min(lr.n - i, p.r - rpos); // words of this row in the run
        if (pk)
            lr.packed |= (take >= 32 ? ~0u : ((1u << take) - 1u)) << i;
        i += take;
        row++;
        rpos = 0;
    }
    return lr;
}

// The lane's selector window: the selectors of its run's packed words, side by side, given the
// packed words of the lanes before it.
__device__ __forceinline__ uint32_t lane_selectors(const Plan &p, const SegStage &st, uint32_t sel_bit,
                                                   uint32_t before)
{
    const uint32_t at = sel_bit + before * p.sb;
    const uint32_t wi = min(at / 32, 34u);
    return __funnelshift_r(st.sel[wi], st.sel[wi + 1], at & 31);
}

// What selector values 1-3 of a one-column plan save against a word stored whole (a selector
// above K reads as K, as the decoder reads it).
struct SelSavings {
    uint32_t s1, s2, s3;
};

template <int W, Layout L>
__device__ __forceinline__ SelSavings sel_savings(const Plan &p, const Table<W, L> *t)
{
    return SelSavings{8 * W - matched_bits<W>(p, t, 1, 0), 8 * W - matched_bits<W>(p, t, 2, 0),
                      8 * W - matched_bits<W>(p, t, 3, 0)};
}

// Bits the selectors in v save, by how many hold each value (bits of v that are not selectors
// counted must be 0).
__device__ __forceinline__ uint32_t word_savings(const Plan &p, const SelSavings &sv, uint32_t v)
{
    if (p.sb == 1)
        return (uint32_t)__popc(v) * sv.s1;
    const uint32_t lo = v & 0x55555555u, hi = (v >> 1) & 0x55555555u;
    const uint32_t c3 = __popc(lo & hi);
    return (__popc(lo) - c3) * sv.s1 + (__popc(hi) - c3) * sv.s2 + c3 * sv.s3;
}

// The next word of a lane's run: its selector (taken from win when the word is packed, else 0)
// and its field bits.
template <int W, Layout L>
__device__ __forceinline__ uint32_t run_word(const Plan &p, const Table<W, L> *t, bool packed, uint32_t &win,
                                             uint32_t col, uint32_t &s)
{
    s = 0;
    if (!packed)
        return 8 * W;
    s = min(win & (p.sb == 1 ? 1u : 3u), p.k);
    win >>= p.sb;
    return s ? matched_bits<W>(p, t, s, col) : 8 * W;
}

// Field bits of the lane's run, its selectors read from win.
template <int W, Layout L>
__device__ __forceinline__ uint32_t run_bits(const Plan &p, const Table<W, L> *t, const LaneRun &lr,
                                             uint32_t win)
{
    if (p.c == 1) {
        // One column: each selector value has one size, so the run's bits follow from how many
        // of its selectors hold each value.
        const uint32_t nsel = __popc(lr.packed) * p.sb; // at most 32 bits
        const uint32_t w = nsel >= 32 ? win : win & ((1u << nsel) - 1u);
        return 8 * W * lr.n - word_savings(p, sel_savings<W>(p, t), w);
    }
    uint32_t bits = 0, col = lr.col;
    for (uint32_t i = 0; i < lr.n; i++) {
        uint32_t s;
        bits += run_word<W>(p, t, (lr.packed >> i) & 1, win, col, s);
        if (++col == p.c)
            col = 0;
    }
    return bits;
}

// The lane's run of the staged segment, its selector window and its field bits.
template <int W, Layout L>
__device__ __forceinline__ uint32_t lane_fields(const Plan &p, const Table<W, L> *t, const IbpBlockHeader &h,
                                                const SegStage &st, const SegPos &sp, LaneRun &lr,
                                                uint32_t &win)
{
    lr = lane_run(p, h, st, sp);
    uint32_t npacked;
    const uint32_t before = warp_excl_scan<uint32_t>(__popc(lr.packed), npacked);
    win = lane_selectors(p, st, sp.sel_bit, before);
    return run_bits<W>(p, t, lr, win);
}

// The field of the word at bit `cursor` of the staged payload: its bits from the cursor on; bits
// above it are the next fields' (the deposit drops them from matched words, the whole-word run or
// the mask from whole words).
template <int W>
__device__ __forceinline__ typename WordT<W>::U staged_field(const SegStage &st, uint32_t cursor)
{
    using U = typename WordT<W>::U;
    const uint32_t *pay = (const uint32_t *)st.payload;
    constexpr uint32_t kPay32 = sizeof(st.payload) / 4;
    const uint32_t q = min(cursor / 32, kPay32 - 3), sh = cursor & 31;
    U field = (U)__funnelshift_r(pay[q], pay[q + 1], sh);
    if constexpr (W == 8)
        field |= (U)__funnelshift_r(pay[q + 1], pay[q + 2], sh) << 32;
    return field;
}

// Words [16 v, 16 v + 16 / W) of a lane's run packed into 16 bytes, next(i) giving word i (called
// in order of i).
template <int W, typename Next> __device__ __forceinline__ ulonglong2 pack16(Next &next, uint32_t v)
{
    constexpr uint32_t kPerVec = 16 / W;
    uint64_t acc[2] = {0, 0};
#pragma unroll
    for (uint32_t k = 0; k < kPerVec; k++)
        acc[(k * W) / 8] |= (uint64_t)next(v * kPerVec + k) << (8 * ((k * W) % 8));
    return make_ulonglong2(acc[0], acc[1]);
}

// 16-byte stores of 8-byte words unrolled this many: the next stores' loads and deposits overlap
// the last ones' (one at a time, a warp waited on the staged payload, then on its store).
constexpr uint32_t kUnroll8 = 2;

// Decodes a lane's run of words and stores those inside dst: next(i) gives word i of the run
// (called for i = 0, 1, ... in order).  Whole aligned runs inside dst go out 16 bytes at a time.
template <int W> struct ToGlobal {
    const Out &out;
    template <typename Next> __device__ __forceinline__ void operator()(const LaneRun &lr, Next next) const
    {
        const int64_t at0 = out.origin + (int64_t)lr.j * W;
        if (out.fast && lr.n == kLaneRun && ((uintptr_t)(out.dst + at0) & 15) == 0) {
#pragma unroll(W == 8 ? kUnroll8 : 1)
            for (uint32_t v = 0; v < kLaneRun * W / 16; v++)
                *(ulonglong2 *)(out.dst + at0 + 16 * v) = pack16<W>(next, v);
            return;
        }
        for (uint32_t i = 0; i < lr.n; i++) {
            const typename WordT<W>::U x = next(i);
            if (out.fast)
                store_aligned<W>(out.dst + at0 + (int64_t)i * W, x);
            else
                store_clipped<W>(out.dst, at0 + (int64_t)i * W, x, out.len);
        }
    }
};

// A whole segment landing aligned inside dst: each lane's run goes first into the warp's
// segment of shared memory (IBP_DECODE_SEG_WORDS words), then the warp stores the segment 512
// bytes an instruction.  Stored straight from the lanes' runs, each 16-byte store of a warp
// touches 32 lines kLaneRun * W bytes apart; so the fp32 weights (one column of 8-byte words)
// decode at 1.44-1.46 TB/s instead of 0.89-0.90 (H200, 256 MiB).  In shared memory a lane's
// 16-byte piece v sits at v ^ ((lane / (8 / P)) mod P) of its run (P pieces a run), so that
// neither the writes of eight lanes nor the warp's reads of eight consecutive pieces meet in a
// bank.  Other kernels than that one have it only where IBP_DECODE_*_VIA_WORDS says.
template <int W> struct ToGlobalVia {
    const Out &out;
    uint4 *buf;  // the warp's IBP_DECODE_SEG_WORDS words
    int64_t at0; // where the segment's first word lands, relative to out.dst
    template <typename Next> __device__ __forceinline__ void operator()(const LaneRun &lr, Next next) const
    {
        constexpr uint32_t kPieces = kLaneRun * W / 16; // a lane's 16-byte pieces
        static_assert(kPieces >= 1 && kPieces <= 8 && 8 % kPieces == 0, "a lane's run is 1-8 pieces");
        constexpr uint32_t kSpread = 8 / kPieces; // lanes a swizzle value spans
        const uint32_t lane = threadIdx.x & 31;
#pragma unroll(W == 8 ? kUnroll8 : kPieces)
        for (uint32_t v = 0; v < kPieces; v++) {
            const ulonglong2 x = pack16<W>(next, v);
            buf[kPieces * lane + (v ^ ((lane / kSpread) & (kPieces - 1)))] =
                make_uint4((uint32_t)x.x, (uint32_t)(x.x >> 32), (uint32_t)x.y, (uint32_t)(x.y >> 32));
        }
        __syncwarp();
#pragma unroll
        for (uint32_t i = lane; i < 32 * kPieces; i += 32) {
            const uint32_t l = i / kPieces, v = i % kPieces;
            *(uint4 *)(out.dst + at0 + 16 * (int64_t)i) =
                buf[kPieces * l + (v ^ ((l / kSpread) & (kPieces - 1)))];
        }
        __syncwarp();
    }
};

// Where byte b of a warp's decoded segment is in its buffer (IBP_DECODE_SEGP_BYTES): for words
// narrower than 8 bytes, after 16 bytes of padding for each 128 before it, so that the 16-byte
// stores of a quarter warp's runs (each 32 or 64 bytes) meet in no bank (four ways for 4-byte
// words without; uint8 images decoded 2-3% faster with it).
template <int W> __host__ __device__ constexpr uint32_t seg_at(uint32_t b)
{
    return W == 8 ? b : b + 16 * (b / 128);
}
static_assert(seg_at<2>(IBP_DECODE_SEG_WORDS * 2) == IBP_DECODE_SEGP_BYTES(2) / kWarps &&
                  seg_at<4>(IBP_DECODE_SEG_WORDS * 4) == IBP_DECODE_SEGP_BYTES(4) / kWarps &&
                  seg_at<8>(IBP_DECODE_SEG_WORDS * 8) == IBP_DECODE_SEGP_BYTES(8) / kWarps,
              "a warp's segment buffer holds its padded segment");

// Decodes a lane's run of words into the warp's segment buffer in shared memory (byte b of the
// segment at seg + seg_at(b)), for the predictors to be undone there.
template <int W> struct ToShared {
    uint8_t *seg;
    template <typename Next> __device__ __forceinline__ void operator()(const LaneRun &lr, Next next) const
    {
        uint8_t *at = seg + seg_at<W>((threadIdx.x & 31) * kLaneRun * W); // a run within 128 bytes
        if (lr.n == kLaneRun) {
            for (uint32_t v = 0; v < kLaneRun * W / 16; v++)
                *(ulonglong2 *)(at + 16 * v) = pack16<W>(next, v);
            return;
        }
        for (uint32_t i = 0; i < lr.n; i++)
            store_aligned<W>(at + i * W, next(i));
    }
};

// A lane's part of a staged segment: its run, its selector window and its field bits, then (once
// the payload is staged) its first field in the staged payload.
struct LaneStart {
    LaneRun lr;
    uint32_t win;
    uint32_t bits;
    uint32_t cursor;
};

template <int W, Layout L>
__device__ __forceinline__ LaneStart lane_start(const Plan &p, const Table<W, L> *t, const IbpBlockHeader &h,
                                                const SegStage &st, const SegPos &sp)
{
    LaneStart ls;
    ls.bits = lane_fields<W>(p, t, h, st, sp, ls.lr, ls.win);
    ls.cursor = 0;
    return ls;
}

// Places the warp's runs in the payload staged from bit pay_bit on: a scan of their bits.
__device__ __forceinline__ void lane_place(LaneStart &ls, uint32_t pay_bit)
{
    uint32_t total;
    ls.cursor = pay_bit + warp_excl_scan<uint32_t>(ls.bits, total);
}

// Decodes the staged segment of a plan without predictor columns whose every table entry is at
// most kRuns runs, each lane its run of words: a word is one entry lookup by selector (0 for
// words stored whole) and column, its field, and a deposit of four runs.  C1: one column; ZZ:
// some column is zigzag-coded.
template <int W, bool C1, bool ZZ, typename Sink, Layout L>
__device__ void decode_staged_runs(const Plan &p, const Table<W, L> &t, const SegStage &st,
                                   const LaneStart &ls, const Sink &sink)
{
    using U = typename WordT<W>::U;
    const LaneRun &lr = ls.lr;
    uint32_t win = ls.win, cursor = ls.cursor;
    const uint32_t smask = p.sb == 1 ? 1u : 3u;
    if (lr.packed != (1u << kLaneRun) - 1u) {
        // Give the words of raw rows selector 0 in place, so that word i's selector is field i.
        uint32_t spread = 0;
        for (uint32_t i = 0; i < kLaneRun; i++) {
            if ((lr.packed >> i) & 1) {
                spread |= (win & smask) << (p.sb * i);
                win >>= p.sb;
            }
        }
        win = spread;
    }
    uint32_t col = C1 ? 0 : lr.col;
    // One column of 8-byte words: the field sizes of selectors 0-3 a byte each, so that the cursor
    // runs ahead of the entries' loads (for narrower words the register costs sm_80 a spill).
    constexpr bool kSizes = C1 && W == 8;
    uint32_t sizes = 0;
    if constexpr (kSizes)
        for (uint32_t s = 0; s < 4; s++)
            sizes |= (EntryAt<W, L>{t, min(s, p.k)}.meta() & kMetaBits) << (8 * s);
    sink(lr, [&](uint32_t i) {
        const uint32_t s = min((win >> (p.sb * i)) & smask, p.k);
        const EntryAt<W, L> e{t, C1 ? s : s * p.c + col};
        const uint32_t meta = e.meta(); // once, before the field (read twice, sm_80 spilled)
        const U field = staged_field<W>(st, cursor);
        // past the run's end the cursor is not used
        cursor += kSizes ? (sizes >> (8 * s)) & kMetaBits : meta & kMetaBits;
        U x = runs_deposit<W>(e, field);
        if (ZZ && (meta & kMetaZigzag))
            x = unzigzag<W>(x);
        if (!C1 && ++col == p.c)
            col = 0;
        return x;
    });
}

// Decodes the staged segment of any plan without predictor columns, each lane its run of words,
// the masks from the table t (where it fits) or from the plan; zz: some column is zigzag-coded.
template <int W, typename Sink, Layout L>
__device__ void decode_staged_any(const Plan &p, const Table<W, L> *t, const SegStage &st,
                                  const LaneStart &ls, const Sink &sink, bool zz)
{
    using U = typename WordT<W>::U;
    const LaneRun &lr = ls.lr;
    uint32_t win = ls.win, cursor = ls.cursor;
    uint32_t col = lr.col;
    sink(lr, [&](uint32_t i) {
        uint32_t s;
        const uint32_t size = run_word<W>(p, t, (lr.packed >> i) & 1, win, col, s);
        const U field = staged_field<W>(st, cursor);
        cursor += size;
        U x = s ? matched_word<W>(p, t, s, col, field) : field & word_mask<W>();
        if (zz && (p.xform[col] & IBP_XF_ZIGZAG))
            x = unzigzag<W>(x);
        if (++col == p.c)
            col = 0;
        return x;
    });
}

// Decodes the staged segment, each lane from its placed start.
template <int W, bool C1, typename Sink, Layout L>
__device__ __forceinline__ void decode_lanes(const Plan &p, const Table<W, L> *t, TableKind kind, bool zz,
                                             const SegStage &st, const LaneStart &ls, const Sink &sink)
{
    if (kind != TableKind::runs)
        decode_staged_any<W>(p, t, st, ls, sink, zz);
    else if (zz)
        decode_staged_runs<W, C1, true>(p, *t, st, ls, sink);
    else
        decode_staged_runs<W, C1, false>(p, *t, st, ls, sink);
    __syncwarp();
}

// Whether segment s of block bi (header h) is not a packed one: a raw block's segment is copied
// by the warp, a top-coded block's left to ibp_k_decode_top.
template <int W>
__device__ __forceinline__ bool unpacked_segment(const IbpDecodeArgs &a, uint32_t bi, const IbpBlockHeader &h,
                                                 const uint8_t *blk, uint32_t s)
{
    if (!(h.flags & (IBP_BLOCK_RAW | IBP_BLOCK_TOPCODED)))
        return false;
    const uint32_t seg_bytes = IBP_DECODE_SEG_WORDS * W;
    const uint32_t at = s * seg_bytes;
    if (!(h.flags & IBP_BLOCK_TOPCODED) && at < h.orig_len) {
        const Out out = out_for(a, bi, h, W);
        copy_raw(blk + IBP_BLOCK_HEADER_SIZE + at, min(seg_bytes, h.orig_len - at), out.dst, out.origin + at,
                 out.len, threadIdx.x & 31, 32);
    }
    return true;
}

// Bits a one-column plan saves on selectors [first, first + n) of a block (whole words' bits
// less the stored ones), this thread's share of them when nthreads threads split the selector
// words (a selector above K reads as K).  Each thread loads kBatch of its words before it sums
// them, so that a long range (a block's earlier segments) waits for one round trip a batch, not
// one a word.
template <int W, uint32_t kBatch = 1, Layout L>
__device__ __forceinline__ uint32_t selector_savings(const Plan &p, const Table<W, L> *t, const Block &b,
                                                     uint32_t first, uint32_t n, uint32_t tid,
                                                     uint32_t nthreads)
{
    const SelSavings sv = sel_savings<W>(p, t);
    const uint32_t b0 = first * p.sb, b1 = (first + n) * p.sb;
    uint32_t sum = 0;
    for (uint32_t wi0 = b0 / 32 + tid; wi0 * 32 < b1; wi0 += kBatch * nthreads) {
        uint32_t v[kBatch];
#pragma unroll
        for (uint32_t k = 0; k < kBatch; k++) {
            const uint32_t wi = wi0 + k * nthreads;
            v[k] = wi * 32 < b1 && wi < b.sel_words ? __ldg(b.sel + wi) : 0;
        }
#pragma unroll
        for (uint32_t k = 0; k < kBatch; k++) {
            const uint32_t lo_bit = (wi0 + k * nthreads) * 32;
            if (lo_bit >= b1)
                break;
            uint32_t x = v[k];
            if (lo_bit < b0)
                x &= ~0u << (b0 - lo_bit);
            if (b1 - lo_bit < 32)
                x &= (1u << (b1 - lo_bit)) - 1u;
            sum += word_savings(p, sv, x);
        }
    }
    return sum;
}

// Words in packed rows before j0 and before j1 (j0 <= j1), from one pass over the row flags
// before j1 (the segment's count used to take a second pass, and a global round trip, of its own).
__device__ __forceinline__ void packed_before2(const Plan &p, const Block &b, uint32_t j0, uint32_t j1,
                                               uint32_t &n0, uint32_t &n1)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t row0 = j0 / p.r, row1 = j1 / p.r;
    const uint32_t *flags = (const uint32_t *)b.rowflags; // the section is 16-byte aligned and padded
    const uint32_t f0 = __ldg(flags + row0 / 32), f1 = __ldg(flags + row1 / 32);
    uint32_t rows0 = 0, rows1 = 0;
    for (uint32_t i = lane; i < row1 / 32; i += 32) {
        const uint32_t c = __popc(__ldg(flags + i));
        rows1 += c;
        rows0 += i < row0 / 32 ? c : 0;
    }
    rows0 = warp_sum(rows0) + __popc(f0 & ((1u << (row0 % 32)) - 1u));
    rows1 = warp_sum(rows1) + __popc(f1 & ((1u << (row1 % 32)) - 1u));
    n0 = rows0 * p.r + (((f0 >> (row0 % 32)) & 1) ? j0 - row0 * p.r : 0);
    n1 = rows1 * p.r + (((f1 >> (row1 % 32)) & 1) ? j1 - row1 * p.r : 0);
}

// A warp's segment [j0, j1) of a packed block whose first selector is sel: its payload bits,
// summed over the warp.  For one column by popcounts over its selectors; for more, each lane
// sums its run's field sizes over the staged flags and selectors, kept in ls for the decode.
template <int W, bool C1, Layout L>
__device__ __forceinline__ uint32_t count_segment(const Plan &p, const Table<W, L> *t, const Block &b,
                                                  const IbpBlockHeader &h, uint32_t j0, uint32_t j1,
                                                  uint32_t sel, uint32_t sel_end, SegStage &st, LaneStart &ls)
{
    if constexpr (C1) {
        const uint32_t nsel = sel_end - sel;
        return 8 * W * (j1 - j0) - warp_sum(selector_savings<W>(p, t, b, sel, nsel, threadIdx.x & 31, 32));
    } else {
        const SegPos sp = stage_segment(p, b, h, j0, j1, sel, 0, 0, st);
        ls = lane_start<W>(p, t, h, st, sp);
        return warp_sum(ls.bits);
    }
}

// Decodes the counted segment, its payload of `bits` bits starting at bit0.
template <int W, bool C1, typename Sink, Layout L>
__device__ __forceinline__ void decode_counted(const Plan &p, const Table<W, L> *t, TableKind kind, bool zz,
                                               const Block &b, const IbpBlockHeader &h, uint32_t j0,
                                               uint32_t j1, uint32_t sel, uint32_t bit0, uint32_t bits,
                                               SegStage &st, LaneStart &ls, const Sink &sink)
{
    if constexpr (C1) {
        const SegPos sp = stage_segment(p, b, h, j0, j1, sel, bit0, bits, st);
        ls = lane_start<W>(p, t, h, st, sp);
        lane_place(ls, sp.pay_bit);
    } else {
        const uint32_t pay_bit = stage_payload(b, bit0, bits, st);
        __syncwarp();
        lane_place(ls, pay_bit);
    }
    decode_lanes<W, C1>(p, t, kind, zz, st, ls, sink);
}

// The sum of part over the CTA (every thread gets it).
__device__ __forceinline__ uint32_t cta_sum(uint32_t part, uint32_t *red)
{
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    part = warp_sum(part);
    if (lane == 0)
        red[warp] = part;
    __syncthreads();
    uint32_t sum = 0;
    for (uint32_t q = 0; q < kWarps; q++)
        sum += red[q];
    __syncthreads();
    return sum;
}

// Payload bits of segments [sa, sb) of a packed block of a plan of several columns, summed by the
// CTA, its warps taking the segments in turn.
template <int W, Layout L>
__device__ uint32_t block_bits_range(const Plan &p, const Table<W, L> *t, const Block &b,
                                     const IbpBlockHeader &h, uint32_t sa, uint32_t sb, SegStage &st,
                                     uint32_t *red)
{
    uint32_t part = 0;
    for (uint32_t q = sa + (threadIdx.x >> 5); q < sb && q * IBP_DECODE_SEG_WORDS < b.nwords; q += kWarps) {
        const uint32_t q0 = q * IBP_DECODE_SEG_WORDS, q1 = min(b.nwords, q0 + IBP_DECODE_SEG_WORDS);
        LaneStart ls;
        part += count_segment<W, false>(p, t, b, h, q0, q1, packed_before(p, b, q0), 0, st, ls);
        __syncwarp(); // every lane has read the staged segment before the next is staged
    }
    // count_segment sums over the warp already: count each warp's part once.
    return cta_sum((threadIdx.x & 31) == 0 ? part : 0, red);
}

// Payload bits of the first s0 segments of a packed block, summed by the CTA: for one column its
// threads split the selectors, for more its warps the segments.
template <int W, bool C1, Layout L>
__device__ uint32_t block_bits_before(const Plan &p, const Table<W, L> *t, const Block &b,
                                      const IbpBlockHeader &h, uint32_t s0, SegStage &st, uint32_t *red)
{
    if constexpr (C1) {
        const uint32_t j0 = s0 * IBP_DECODE_SEG_WORDS;
        const uint32_t nsel = packed_before(p, b, j0);
        return 8 * W * j0 - cta_sum(selector_savings<W, 8>(p, t, b, 0, nsel, threadIdx.x, kThreads), red);
    } else {
        return block_bits_range<W>(p, t, b, h, 0, s0, st, red);
    }
}

// A CTA's record in the scratch (decode_abi.h).
struct DecodeRecord {
    uint64_t carry[IBP_DECODE_PRED_MAX_COLUMNS]; // per column residue, after the share
    uint32_t rel;                                // carry counts only the share's words
    uint32_t bits_rel;                           // bits count only the share's segments
    uint32_t bits;                               // payload bits of the share's part of its last block
    uint32_t unused;
};
static_assert(sizeof(DecodeRecord) == IBP_DECODE_SCRATCH_RECORD, "scratch layout");

__device__ __forceinline__ DecodeRecord *decode_records(const IbpDecodeArgs &a)
{
    return (DecodeRecord *)(a.scratch + IBP_DECODE_SCRATCH_HEADER);
}

// The CTA's share of the run's groups of segments, as ibp_decode_launch sized the grid.
struct Share {
    uint32_t nseg, per_block; // segments and groups of a block
    uint64_t g0, g1;
};

__device__ __forceinline__ Share cta_share(const IbpDecodeArgs &a, uint32_t w)
{
    Share sh;
    sh.nseg = ibp_decode_segments(w, a.block_size);
    sh.per_block = (sh.nseg + kWarps - 1) / kWarps;
    const uint64_t ngroups = (uint64_t)a.nblocks * sh.per_block;
    sh.g0 = blockIdx.x * ngroups / gridDim.x;
    sh.g1 = (blockIdx.x + 1) * ngroups / gridDim.x;
    return sh;
}

// A CTA's share starts at a group of kWarps segments, which the group index's entries mark.
static_assert(kWarps * IBP_DECODE_SEG_WORDS % IBP_INDEX_WORDS == 0,
              "a group of segments starts at an index entry");

// Payload bits of the first s0 segments (s0 > 0, a whole number of groups) of the CTA's first
// block, which the CTAs before it decode: from the block's group index where it has one (every
// block the codec writes), else from the records ibp_k_decode_count left, else counted here.
template <int W, bool C1, Layout L>
__device__ uint32_t share_bits_before(const IbpDecodeArgs &a, const Plan &p, const Table<W, L> *t,
                                      const Block &b, const IbpBlockHeader &h, uint32_t s0, SegStage &st,
                                      uint32_t *red)
{
    if (b.index)
        return __ldg(b.index + s0 * IBP_DECODE_SEG_WORDS / IBP_INDEX_WORDS - 1);
    if (C1 || !(a.flags & IBP_DECODE_ARG_COUNTED))
        return block_bits_before<W, C1>(p, t, b, h, s0, st, red);
    const DecodeRecord *recs = decode_records(a);
    uint32_t sum = 0;
    for (uint32_t q = blockIdx.x; q-- > 0;) {
        sum += recs[q].bits;
        if (!recs[q].bits_rel)
            break;
    }
    return sum;
}

// A warp's segment s of a group of a packed block, counted and placed after the block's earlier
// segments: `carry` holds their bits and gets the group's added (every warp of the CTA calls this
// for the same group).
struct Placed {
    uint32_t j0, j1; // its words
    uint32_t sel;    // its first selector
    uint32_t bits;   // its payload bits
    uint32_t before; // payload bits before it
};

template <int W, bool C1, Layout L>
__device__ __forceinline__ Placed place_segment(const Plan &p, const Table<W, L> *t, const Block &b,
                                                const IbpBlockHeader &h, uint32_t s, SegStage &st,
                                                LaneStart &ls, uint32_t *seg_bits, uint32_t &carry)
{
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    Placed pl;
    pl.j0 = s * IBP_DECODE_SEG_WORDS;
    pl.j1 = min(b.nwords, pl.j0 + IBP_DECODE_SEG_WORDS);
    pl.sel = 0;
    pl.bits = 0;
    if (pl.j0 < pl.j1) {
        uint32_t sel_end = 0;
        if constexpr (C1)
            packed_before2(p, b, pl.j0, pl.j1, pl.sel, sel_end);
        else
            pl.sel = packed_before(p, b, pl.j0);
        pl.bits = count_segment<W, C1>(p, t, b, h, pl.j0, pl.j1, pl.sel, sel_end, st, ls);
    }
    if (lane == 0)
        seg_bits[warp] = pl.bits;
    __syncthreads();
    uint32_t group = 0;
    pl.before = carry;
    for (uint32_t q = 0; q < kWarps; q++) {
        pl.before += q < warp ? seg_bits[q] : 0;
        group += seg_bits[q];
    }
    __syncthreads();
    carry += group;
    return pl;
}

// Which segmented kernels have the path through shared memory (IBP_DECODE_*_VIA_WORDS).
template <int W, bool C1>
constexpr bool kViaSegments = ((W == 8 ? (C1 ? IBP_DECODE_SEG1W8_VIA_WORDS : IBP_DECODE_SEGW8_VIA_WORDS)
                                       : (C1 ? IBP_DECODE_SEG1_VIA_WORDS : IBP_DECODE_SEG_VIA_WORDS)) &
                               W) != 0;

// Plans without predictor columns: a block's segments form groups of kWarps, each CTA takes a
// contiguous share of the groups, its warps a segment of a group each.  A CTA scan of the
// segments' payload bits and the bits of the block's earlier groups (carried from group to group,
// counted by the whole CTA for its first group in a block) place every segment's first field.
// C1: the plan has one column; INL: the launch carries the block offsets.
template <int W, bool C1, bool INL, Layout L>
__device__ void decode_segments(const IbpDecodeArgs &a, const Plan &p, Table<W, L> &tbl, SegStage *stages,
                                uint32_t *seg_bits, uint32_t *red, uint4 *via)
{
    const TableKind kind = table_build<W>(p, tbl);
    const Table<W, L> *t = table_if<W>(kind, tbl);
    // Whether some column is zigzag-coded, read from shared memory where it is used: held in a
    // register across the loop it cost the kernel of 4-byte words a spill, and answered again by
    // each group it cost a round trip to the plan.
    __shared__ bool zz_plan;
    const bool zz = plan_has_xform(p, IBP_XF_ZIGZAG);
    if (threadIdx.x == 0)
        zz_plan = zz; // read after place_segment's barriers
    SegStage &st = stages[threadIdx.x >> 5];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t nseg = ibp_decode_segments(W, a.block_size);
    const uint32_t per_block = (nseg + kWarps - 1) / kWarps; // groups of a block
    const uint64_t ngroups = (uint64_t)a.nblocks * per_block;
    const uint64_t g0 = blockIdx.x * ngroups / gridDim.x, g1 = (blockIdx.x + 1) * ngroups / gridDim.x;
    uint32_t bi = (uint32_t)(g0 / per_block), s0 = (uint32_t)(g0 % per_block) * kWarps;
    uint32_t carry = 0, carry_block = ~0u, header_block = ~0u;
    IbpBlockHeader h;
    const uint8_t *blk = nullptr;
    for (uint32_t left = (uint32_t)(g1 - g0); left;
         left--, s0 = s0 + kWarps >= nseg ? (bi++, 0) : s0 + kWarps) {
        const uint32_t s = s0 + warp;
        if (bi != header_block) // a block's groups follow each other: its header is read once
            blk = block_at<INL>(a, bi, h);
        header_block = bi;
        if (unpacked_segment<W>(a, bi, h, blk, s)) // the same block for the whole CTA
            continue;
        const Block b = block_view(a, bi, h, blk, W);
        if (s0 && s0 * IBP_DECODE_SEG_WORDS >= b.nwords) // past a short block's words
            continue;
        if (bi != carry_block)
            carry = s0 ? share_bits_before<W, C1>(a, p, t, b, h, s0, st, red) : 0;
        carry_block = bi;
        LaneStart ls;
        const Placed pl = place_segment<W, C1>(p, t, b, h, s, st, ls, seg_bits, carry);
        // The output's place only now: live across the count, it took registers the count needs.
        const Out out = out_for(a, bi, h, W);
        const int64_t at0 = out.origin + (int64_t)pl.j0 * W;
        if (kViaSegments<W, C1> && via && out.fast && pl.j1 - pl.j0 == IBP_DECODE_SEG_WORDS &&
            ((uintptr_t)(out.dst + at0) & 15) == 0)
            decode_counted<W, C1>(
                p, t, kind, zz_plan, b, h, pl.j0, pl.j1, pl.sel, pl.before, pl.bits, st, ls,
                ToGlobalVia<W>{out, via + (threadIdx.x >> 5) * (IBP_DECODE_SEG_WORDS * W / 16), at0});
        else if (pl.j0 < pl.j1)
            decode_counted<W, C1>(p, t, kind, zz_plan, b, h, pl.j0, pl.j1, pl.sel, pl.before, pl.bits, st, ls,
                                  ToGlobal<W>{out});
        const uint32_t n = (b.nwords + IBP_DECODE_SEG_WORDS - 1) / IBP_DECODE_SEG_WORDS;
        if (s == (n ? n - 1 : 0))
            copy_tail(h, blk, W, out, lane, 32);
    }
}

// ---- Plans with predictor columns of a period of at most 32 words ----
//
// ibp_k_decode_segp splits the run's groups of segments over CTAs as the decode above does.  A warp
// decodes its segment into shared memory, zigzag undone; a predictor column's words form chains one
// period (C words) apart, so the warp runs each chain of its segment from 0 (below), a CTA scan
// over the group's segments and the carry of the block's earlier groups give every segment its
// incoming value per chain, and the warp applies it and stores the segment.  Where a CTA's share
// begins inside a block, the carry of the block's earlier groups belongs to other CTAs: the share's
// first block is decoded relative to the share's start and ibp_k_decode_fix, run next with the same
// grid, applies the carry, which it finds in the records the CTAs before left in the scratch.

// The predictor of the column of block word j.
__device__ __forceinline__ uint32_t pred_of(const Plan &p, uint32_t phase, uint32_t j)
{
    return p.xform[(phase + j) % p.c] & IBP_XF_PRED_MASK;
}

// A warp undoes the predictors of its segment chain by chain: chain r (< C) is the segment's words
// r, r + C, r + 2C, ... (one column), and floor(32 / C) lanes share a chain, each a piece of
// consecutive words of it.  Each lane runs its piece's predictor serially in shared memory, one
// warp scan of the pieces' totals within each chain gives every piece what comes before it, and
// a second pass over the piece applies that.  (It replaced a reduce and a scan over the segment in
// steps of the lanes that are a whole number of periods: a shuffle scan a step, 35% of the
// instructions of int32 triples' decode.)
struct ChainPiece {
    uint32_t r;      // the lane's chain (C for lanes past floor(32 / C) C: none)
    uint32_t t0, t1; // its piece: words r + C t of the segment, t0 <= t < t1
    uint32_t first;  // the chain's first lane
};

__device__ __forceinline__ ChainPiece chain_piece(uint32_t n, uint32_t c)
{
    const uint32_t lane = threadIdx.x & 31, q = 32 / c;
    ChainPiece cp;
    cp.r = min(lane / q, c);
    cp.first = cp.r * q;
    const uint32_t len = cp.r < min(c, n) ? (n - cp.r + c - 1) / c : 0;
    const uint32_t per = ((n + c - 1) / c + q - 1) / q; // the longest chain over its lanes
    cp.t0 = min((lane - cp.first) * per, len);
    cp.t1 = min(cp.t0 + per, len);
    return cp;
}

// Word t of the lane's chain in seg.
template <int W>
__device__ __forceinline__ uint8_t *chain_word(uint8_t *seg, const ChainPiece &cp, uint32_t c, uint32_t t)
{
    return seg + seg_at<W>((cp.r + c * t) * W);
}

// The predictor of this lane's chain run over its piece of seg in place, from 0; returns the
// piece's total.
template <int W>
__device__ __forceinline__ typename WordT<W>::U chain_run(uint8_t *seg, const ChainPiece &cp, uint32_t c,
                                                          uint32_t pred)
{
    typename WordT<W>::U acc = 0;
#pragma unroll 4
    for (uint32_t t = cp.t0; t < cp.t1; t++) {
        uint8_t *at = chain_word<W>(seg, cp, c, t);
        acc = pred_op(pred, load_aligned<W>(at), acc);
        store_aligned<W>(at, acc);
    }
    return acc;
}

// What comes before this lane's piece in its chain (the totals of the chain's earlier pieces,
// by a warp scan), given its own total.
template <typename U>
__device__ __forceinline__ U chain_before(const ChainPiece &cp, uint32_t pred, U own, U &incl)
{
    const uint32_t lane = threadIdx.x & 31;
    incl = own;
#pragma unroll
    for (uint32_t d = 1; d < 32; d <<= 1) {
        const U y = shfl_up(incl, d);
        if (lane >= cp.first + d)
            incl = pred_op(pred, incl, y);
    }
    return pred == IBP_XF_PRED_DELTA ? incl - own : (pred == IBP_XF_PRED_XOR ? incl ^ own : 0);
}

// Applies `carry` (what comes before the piece, the segment's incoming value included) to the
// lane's piece of seg.
template <int W>
__device__ __forceinline__ void chain_apply(uint8_t *seg, const ChainPiece &cp, uint32_t c, uint32_t pred,
                                            typename WordT<W>::U carry)
{
#pragma unroll 4
    for (uint32_t t = cp.t0; t < cp.t1; t++) {
        uint8_t *at = chain_word<W>(seg, cp, c, t);
        store_aligned<W>(at, pred_op(pred, load_aligned<W>(at), carry));
    }
}

// The warp's decoded segment [j0, j1) of a block stored into dst; a word straddling an end of dst
// also goes whole to edge[] (the fix-up needs its bytes outside dst).
template <int W>
__device__ __forceinline__ void seg_store(const uint8_t *seg, uint32_t j0, uint32_t j1, const Out &out,
                                          uint64_t *edge)
{
    const uint32_t lane = threadIdx.x & 31;
    const int64_t at0 = out.origin + (int64_t)j0 * W;
    const uint32_t n = j1 - j0;
    const int64_t end = at0 + (int64_t)n * W;
    if (end <= 0 || at0 >= (int64_t)out.len)
        return; // wholly outside dst, so no word of it straddles an end either
    // A segment wholly inside dst stores as in a block wholly inside it.
    const bool inside = out.fast || (at0 >= 0 && end <= (int64_t)out.len);
    if (inside && n == IBP_DECODE_SEG_WORDS && ((uintptr_t)(out.dst + at0) & 15) == 0) {
        // The lane's pieces are 512 bytes apart, whole padded stretches: one address and constant
        // offsets (the compiler kept each piece's address live in a register of its own).
        const uint8_t *from = seg + seg_at<W>(16 * lane);
#pragma unroll
        for (uint32_t k = 0; k < IBP_DECODE_SEG_WORDS * W / 16 / 32; k++)
            *(uint4 *)(out.dst + at0 + 16 * (lane + 32 * k)) = *(const uint4 *)(from + seg_at<W>(512 * k));
        return;
    }
    for (uint32_t i = lane; i < n; i += 32) {
        const typename WordT<W>::U x = load_aligned<W>(seg + seg_at<W>(i * W));
        const int64_t at = at0 + (int64_t)i * W;
        if (out.fast) {
            store_aligned<W>(out.dst + at, x);
            continue;
        }
        store_clipped<W>(out.dst, at, x, out.len);
        if (at < (int64_t)out.len && at + W > 0 && (at < 0 || at + W > (int64_t)out.len))
            edge[at < 0 ? 0 : 1] = (uint64_t)x;
    }
}

static_assert(IBP_CARRY_MAX_COLUMNS == IBP_DECODE_PRED_MAX_COLUMNS,
              "the blocks of every plan the segmented predictor decode takes carry their predecessors");

// The carries of block entry g (g > 0) of a block with them (format.h), for residue `lane` of
// the words before the entry (lane < C): the original word of that residue just before the entry
// where its column has a predictor, else 0.
template <int W>
__device__ __forceinline__ typename WordT<W>::U entry_carry(const Plan &p, const IbpBlockHeader &h,
                                                            const uint8_t *blk, uint32_t g)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t at = g * IBP_INDEX_WORDS; // entry word; the carries are words at - C .. at - 1
    const bool pred = lane < p.c && pred_of(p, h.col_phase, at - p.c + lane);
    const uint32_t preds = __ballot_sync(kFull, pred); // bit i: word at - C + i has a predictor
    const uint32_t i = (lane + p.c - at % p.c) % p.c;  // word at - C + i is of residue lane
    if (lane >= p.c || !((preds >> i) & 1))
        return 0;
    const uint8_t *carries = blk + IBP_BLOCK_HEADER_SIZE + ibp_fmt_index_len(h.orig_len / W);
    const uint32_t k = (g - 1) * __popc(preds) + __popc(preds & ((1u << i) - 1u));
    return load_aligned<W>(carries + (size_t)k * W);
}

struct PredShared {
    uint64_t agg[kWarps][IBP_DECODE_PRED_MAX_COLUMNS]; // per segment of the group and residue
    uint64_t carry[IBP_DECODE_PRED_MAX_COLUMNS];       // per residue, before the group
};

template <int W, Layout L>
__device__ void decode_segments_pred(const IbpDecodeArgs &a, const Plan &p, Table<W, L> &tbl,
                                     SegStage *stages, uint8_t *segbuf, uint32_t *seg_bits, uint32_t *red,
                                     PredShared &ps)
{
    using U = typename WordT<W>::U;
    const TableKind kind = table_build<W>(p, tbl);
    const Table<W, L> *t = table_if<W>(kind, tbl);
    const bool zz = plan_has_xform(p, IBP_XF_ZIGZAG);
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    SegStage &st = stages[warp];
    uint8_t *seg = segbuf + warp * (IBP_DECODE_SEGP_BYTES(W) / kWarps);
    const Share sh = cta_share(a, W);
    uint64_t *edge = (uint64_t *)a.scratch;
    const uint32_t bi0 = (uint32_t)(sh.g0 / sh.per_block);
    // The share starts inside its first block, whose carries (where it has them) start the
    // predictors there; else they start from 0, relative to the share.
    bool head_rel = sh.g0 % sh.per_block != 0;
    uint32_t bi = bi0, s0 = (uint32_t)(sh.g0 % sh.per_block) * kWarps, last_bi = bi0;
    uint32_t carry = 0, carry_block = ~0u, pred_block = ~0u;
    for (uint32_t left = (uint32_t)(sh.g1 - sh.g0); left;
         left--, s0 = s0 + kWarps >= sh.nseg ? (bi++, 0) : s0 + kWarps) {
        last_bi = bi;
        const uint32_t s = s0 + warp;
        IbpBlockHeader h;
        const uint8_t *blk = block_at(a, bi, h);
        if (unpacked_segment<W>(a, bi, h, blk, s))
            continue;
        const Block b = block_view(a, bi, h, blk, W);
        if (s0 && s0 * IBP_DECODE_SEG_WORDS >= b.nwords)
            continue;
        if (bi != carry_block)
            carry = s0 ? share_bits_before<W, false>(a, p, t, b, h, s0, st, red) : 0;
        carry_block = bi;
        const bool carries = s0 && (h.flags & IBP_BLOCK_CARRIES);
        if (bi != pred_block && warp == 0) // the block's predictors start from 0 (or the share's start)
            ps.carry[lane] =
                carries ? (uint64_t)entry_carry<W>(p, h, blk, s0 * IBP_DECODE_SEG_WORDS / IBP_INDEX_WORDS)
                        : 0;
        if (bi == bi0 && carries)
            head_rel = false;
        pred_block = bi;
        LaneStart ls;
        const Placed pl = place_segment<W, false>(p, t, b, h, s, st, ls, seg_bits, carry);
        const uint32_t j0 = pl.j0, j1 = pl.j1;
        U agg = 0;
        if (j0 < j1)
            decode_counted<W, false>(p, t, kind, zz, b, h, j0, j1, pl.sel, pl.before, pl.bits, st, ls,
                                     ToShared<W>{seg});
        const ChainPiece cp = chain_piece(j1 - j0, p.c);
        const uint32_t pred = cp.r < p.c ? pred_of(p, h.col_phase, j0 + cp.r) : IBP_XF_PRED_NONE;
        U before = 0;
        if (j0 < j1) {
            U incl;
            before = chain_before<U>(cp, pred, chain_run<W>(seg, cp, p.c, pred), incl);
            // Lane r < C: chain r's total, its last lane's.
            agg = shfl_idx(incl, min(lane, p.c - 1) * (32 / p.c) + 32 / p.c - 1);
        }
        if (lane < p.c)
            ps.agg[warp][(j0 + lane) % p.c] = (uint64_t)agg;
        __syncthreads();
        // Lane r < C: the value of residue r before this segment and after the whole group.
        U in = 0, total = 0;
        if (lane < p.c) {
            const uint32_t pr = pred_of(p, h.col_phase, lane);
            in = (U)ps.carry[lane];
            for (uint32_t q = 0; q < warp; q++)
                in = pred_op(pr, in, (U)ps.agg[q][lane]);
            total = in;
            for (uint32_t q = warp; q < kWarps; q++)
                total = pred_op(pr, total, (U)ps.agg[q][lane]);
        }
        in = shfl_idx(in, (j0 + cp.r) % p.c);
        __syncthreads();
        if (warp == 0 && lane < p.c)
            ps.carry[lane] = (uint64_t)(total & word_mask<W>());
        // The output's place only now: live across the decode, it took registers the decode needs.
        const Out out = out_for(a, bi, h, W);
        if (j0 < j1) {
            chain_apply<W>(seg, cp, p.c, pred, pred_op(pred, before, in));
            __syncwarp();
            seg_store<W>(seg, j0, j1, out, edge);
            __syncwarp();
        }
        const uint32_t n = (b.nwords + IBP_DECODE_SEG_WORDS - 1) / IBP_DECODE_SEG_WORDS;
        if (s == (n ? n - 1 : 0))
            copy_tail(h, blk, W, out, lane, 32);
    }
    // The record the next CTAs' fix-ups read: the carry after the share's last group.
    __syncthreads();
    if (warp == 0) {
        DecodeRecord &r = decode_records(a)[blockIdx.x];
        r.carry[lane] = pred_block == last_bi ? ps.carry[lane] : 0;
        if (lane == 0)
            r.rel = head_rel && last_bi == bi0;
    }
}

// Applies to the words of a CTA's first block that ibp_k_decode_segp decoded relative to the
// share's start the carry of the block's words before the share: the records of the CTAs before
// it, back to the one whose share reaches the block's start.
template <int W> __device__ void fix_share(const IbpDecodeArgs &a, const Plan &p)
{
    using U = typename WordT<W>::U;
    __shared__ uint64_t carry[IBP_DECODE_PRED_MAX_COLUMNS]; // per residue
    __shared__ uint8_t preds[IBP_DECODE_PRED_MAX_COLUMNS];  // the predictor of each residue
    const Share sh = cta_share(a, W);
    if (sh.g0 % sh.per_block == 0 || sh.g0 >= sh.g1)
        return;
    const uint32_t bi = (uint32_t)(sh.g0 / sh.per_block);
    IbpBlockHeader h;
    const uint8_t *blk = block_at(a, bi, h);
    const uint32_t nwords = h.orig_len / W;
    const uint32_t g_end = (uint32_t)min(sh.g1 - (uint64_t)bi * sh.per_block, (uint64_t)sh.per_block);
    const uint32_t j_begin = (uint32_t)(sh.g0 % sh.per_block) * kWarps * IBP_DECODE_SEG_WORDS;
    const uint32_t j_end = min(nwords, g_end * kWarps * IBP_DECODE_SEG_WORDS);
    if ((h.flags & (IBP_BLOCK_RAW | IBP_BLOCK_CARRIES | IBP_BLOCK_TOPCODED)) ||
        j_begin >= j_end) // decoded exactly
        return;
    const DecodeRecord *recs = decode_records(a);
    bool any = false;
    if (threadIdx.x < p.c) {
        const uint32_t pr = pred_of(p, h.col_phase, threadIdx.x);
        U c = 0;
        for (uint32_t q = blockIdx.x; q-- > 0;) {
            c = pred_op(pr, c, (U)recs[q].carry[threadIdx.x]);
            if (!recs[q].rel)
                break;
        }
        c &= word_mask<W>();
        carry[threadIdx.x] = c;
        preds[threadIdx.x] = (uint8_t)pr;
        any = pr && c;
    }
    if (!__syncthreads_or(any))
        return;
    const Out out = out_for(a, bi, h, W);
    uint32_t j_scalar = j_begin;
    uint8_t *const base = out.dst + out.origin + (int64_t)j_begin * W;
    if (out.fast && ((uintptr_t)base & 15) == 0) {
        // 16 bytes a thread, kUnroll loads in flight before the first store.
        constexpr uint32_t kPer = 16 / W, kUnroll = 4;
        const uint32_t nvec = (j_end - j_begin) / kPer;
        for (uint32_t v0 = threadIdx.x; v0 < nvec; v0 += kThreads * kUnroll) {
            ulonglong2 x[kUnroll];
#pragma unroll
            for (uint32_t u = 0; u < kUnroll; u++)
                if (v0 + u * kThreads < nvec)
                    x[u] = *(const ulonglong2 *)(base + 16 * (size_t)(v0 + u * kThreads));
#pragma unroll
            for (uint32_t u = 0; u < kUnroll; u++) {
                const uint32_t v = v0 + u * kThreads;
                if (v >= nvec)
                    break;
                uint32_t res = (j_begin + v * kPer) % p.c;
                uint64_t half[2] = {x[u].x, x[u].y};
#pragma unroll
                for (uint32_t k = 0; k < kPer; k++) {
                    const uint32_t hi = k * W / 8, sh = 8 * (k * W % 8);
                    const uint64_t m = (uint64_t)word_mask<W>() << sh;
                    const U w = (U)((half[hi] & m) >> sh);
                    const U y = pred_op((uint32_t)preds[res], w, (U)carry[res]) & word_mask<W>();
                    half[hi] = (half[hi] & ~m) | ((uint64_t)y << sh);
                    if (++res == p.c)
                        res = 0;
                }
                *(ulonglong2 *)(base + 16 * (size_t)v) = make_ulonglong2(half[0], half[1]);
            }
        }
        j_scalar = j_begin + nvec * kPer;
    }
    const uint64_t *edge = (const uint64_t *)a.scratch;
    for (uint32_t j = j_scalar + threadIdx.x; j < j_end; j += kThreads) {
        const uint32_t res = j % p.c, pr = preds[res];
        const U k = (U)carry[res];
        if (pr && k) {
            const int64_t at = out.origin + (int64_t)j * W;
            if (out.fast) {
                store_aligned<W>(out.dst + at,
                                 pred_op(pr, load_aligned<W>(out.dst + at), k) & word_mask<W>());
            } else if (at < (int64_t)out.len && at + W > 0) {
                const bool straddles = at < 0 || at + W > (int64_t)out.len;
                const U x = straddles ? (U)edge[at < 0 ? 0 : 1] : load_clipped<W>(out.dst, at, out.len);
                store_clipped<W>(out.dst, at, pred_op(pr, x, k) & word_mask<W>(), out.len);
            }
        }
    }
}

// The payload bits of the CTA's share's part of its last block (the part the next CTAs' shares
// continue), for ibp_k_decode_seg and ibp_k_decode_segp to place their first segments without
// counting the block's earlier segments themselves.
template <int W, Layout L>
__device__ void count_share(const IbpDecodeArgs &a, const Plan &p, Table<W, L> &tbl, SegStage *stages,
                            uint32_t *red)
{
    const Table<W, L> *t = table_if<W>(table_build<W>(p, tbl), tbl);
    const Share sh = cta_share(a, W);
    const uint32_t bl = (uint32_t)((sh.g1 - 1) / sh.per_block);
    const uint64_t gs = max(sh.g0, (uint64_t)bl * sh.per_block);
    const uint32_t sa = (uint32_t)(gs - (uint64_t)bl * sh.per_block) * kWarps;
    const uint32_t sb = min(sh.nseg, (uint32_t)(sh.g1 - (uint64_t)bl * sh.per_block) * kWarps);
    IbpBlockHeader h;
    const uint8_t *blk = block_at(a, bl, h);
    uint32_t bits = 0;
    if (!(h.flags & (IBP_BLOCK_RAW | IBP_BLOCK_TOPCODED)))
        bits =
            block_bits_range<W>(p, t, block_view(a, bl, h, blk, W), h, sa, sb, stages[threadIdx.x >> 5], red);
    if (threadIdx.x == 0) {
        DecodeRecord &r = decode_records(a)[blockIdx.x];
        r.bits = bits;
        r.bits_rel = gs == sh.g0 && sh.g0 % sh.per_block != 0;
    }
}

// ---- Flagged selectors (codec/FORMAT.md "Flagged selectors") ----
//
// ibp_k_decode_unflag rewrites the selectors of each flagged block of a run in the fixed-width
// form into a.selx, where block_view() points the decode kernels.  Where every row of a block is
// packed, or rows are whole periods of the columns, selector k is of column (col_phase + k) % C,
// so the block is split among CTAs in shares of IbpDecodeArgs.unflag_words words of the
// fixed-width form, a word a thread (unflag_words).  Other blocks with raw rows go to one CTA
// whole (unflag_block), whose threads first take equal shares of the block's rows (their packed
// words place each thread's first selector), then equal shares of the groups of 8 selectors, four
// groups at a time so that each thread writes whole 32-bit words of its own.  Either way scans
// place each thread's plane bytes (one for each group whose flag is 0) and its others (a rank for
// each selector off its column's commonest).  Every read stays inside the block's sections
// whatever their contents.

struct UnflagShared {
    uint32_t red[kWarps];
    uint32_t k_at[kThreads + 1]; // selectors before each thread's share of the rows
    // the commonest selector of each column, repeated past C for a word's worth (unflag_words)
    uint32_t pred[((IBP_MAX_COLUMNS + 32) * 2 + 31) / 32 + 1];
};

// The sum over the CTA's warps before this thread's of a value every lane of a warp holds alike;
// total gets the sum over all of them.  Every thread calls it.
__device__ __forceinline__ uint32_t cta_warps_before(uint32_t v, uint32_t *red, uint32_t &total)
{
    const uint32_t warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0)
        red[warp] = v;
    __syncthreads();
    uint32_t before = 0, all = 0;
    for (uint32_t q = 0; q < (uint32_t)kWarps; q++) {
        before += q < warp ? red[q] : 0u;
        all += red[q];
    }
    __syncthreads();
    total = all;
    return before;
}

// The sum of v over the CTA's threads before this one; total gets the CTA's.  Every thread calls it.
__device__ __forceinline__ uint32_t cta_excl_scan(uint32_t v, uint32_t *red, uint32_t &total)
{
    uint32_t wt;
    const uint32_t x = warp_excl_scan<uint32_t>(v, wt);
    return cta_warps_before(wt, red, total) + x;
}

__device__ __forceinline__ uint32_t byte_in(const uint8_t *sec, uint32_t len, uint64_t at)
{
    return at < len ? sec[at] : 0u;
}

__device__ __forceinline__ uint32_t bit_in(const uint8_t *sec, uint32_t len, uint64_t bit)
{
    return (byte_in(sec, len, bit >> 3) >> (bit & 7)) & 1u;
}

__device__ void unflag_block(const IbpDecodeArgs &a, const Plan &p, uint32_t bi, UnflagShared &sh)
{
    IbpBlockHeader h;
    const uint8_t *blk = block_at(a, bi, h);
    if (!ibp_fmt_selflags(h.flags)) // the same for the whole CTA
        return;
    const uint32_t tid = threadIdx.x;
    // (a header claiming more than a block would have its selectors overrun the block's room)
    const uint32_t nwords = min(h.orig_len, a.block_size) / p.w, nrows = (nwords + p.r - 1) / p.r;
    const uint8_t *rf = blk + h.rowflag_off;
    const uint32_t rf_len = h.payload_off - h.rowflag_off;
    const uint8_t *sec = blk + h.sel_off;
    const uint32_t len = h.tail_off - h.sel_off;
    const uint32_t stride = ibp_decode_selx_stride(p.w, a.block_size);
    uint32_t *out = (uint32_t *)(a.selx + (uint64_t)bi * stride);

    // Each thread's share of the rows and the selectors before it.
    const uint32_t r0 = (uint32_t)((uint64_t)tid * nrows / kThreads);
    const uint32_t r1 = (uint32_t)((uint64_t)(tid + 1) * nrows / kThreads);
    uint32_t mine = 0;
    for (uint32_t r = r0; r < r1; r++)
        if (bit_in(rf, rf_len, r))
            mine += min(p.r, nwords - r * p.r);
    uint32_t n;
    sh.k_at[tid] = cta_excl_scan(mine, sh.red, n);
    if (tid == 0)
        sh.k_at[kThreads] = n;
    __syncthreads();

    // Each thread's share of the groups: [ga, gb), four at a time.
    const uint32_t groups = (n + 7) / 8, units = (groups + 3) / 4;
    const uint32_t ga = min(groups, 4u * (uint32_t)((uint64_t)tid * units / kThreads));
    const uint32_t gb = min(groups, 4u * (uint32_t)((uint64_t)(tid + 1) * units / kThreads));
    const uint64_t flags_bit = 8ull * ibp_fmt_round16(p.c);
    const uint32_t plane_off = ibp_fmt_round16(p.c) + ibp_fmt_round16((n + 63) / 64);
    uint32_t zeros = 0;
    for (uint32_t g = ga; g < gb; g++)
        zeros += bit_in(sec, len, flags_bit + g) ^ 1u;
    uint32_t planes;
    const uint32_t pa = cta_excl_scan(zeros, sh.red, planes);
    uint32_t others = 0;
    for (uint32_t g = ga, pi = pa; g < gb; g++) {
        if (bit_in(sec, len, flags_bit + g))
            continue;
        const uint32_t full = n - g * 8 >= 8 ? 0xffu : (1u << (n - g * 8)) - 1u;
        others += __popc(full & ~byte_in(sec, len, (uint64_t)plane_off + pi++));
    }
    uint32_t all_others;
    const uint32_t ra = cta_excl_scan(others, sh.red, all_others);
    const uint64_t rest_bit = 8ull * (plane_off + ibp_fmt_round16(planes));
    const uint32_t rb = p.k >= 3 ? 2u : p.k == 2 ? 1u : 0u;

    // The row and column of the share's first selector: in the row share of the last thread
    // whose selectors start at or before it.
    const uint32_t k0 = ga * 8;
    uint32_t lo = 0, hi = kThreads;
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (sh.k_at[mid] <= k0)
            lo = mid;
        else
            hi = mid;
    }
    uint32_t row = (uint32_t)((uint64_t)lo * nrows / kThreads), rpos = 0, rowlen = 0;
    for (uint32_t k = sh.k_at[lo]; ga < gb && row < nrows; row++) {
        if (!bit_in(rf, rf_len, row))
            continue;
        rowlen = min(p.r, nwords - row * p.r);
        if (k + rowlen > k0) {
            rpos = k0 - k;
            break;
        }
        k += rowlen;
    }
    uint32_t col = (uint32_t)(((uint64_t)h.col_phase + (uint64_t)row * p.r + rpos) % p.c);

    // The selectors of the share, 32 bits a store.
    uint64_t acc = 0;
    uint32_t accn = 0, wo = k0 * p.sb / 32, rest = ra;
    const uint32_t k_end = min(n, gb * 8);
    for (uint32_t g = ga, pi = pa; g < gb; g++) {
        const uint32_t bits =
            bit_in(sec, len, flags_bit + g) ? 0xffu : byte_in(sec, len, (uint64_t)plane_off + pi++);
        for (uint32_t i = 0; i < 8 && g * 8 + i < k_end; i++) {
            const uint32_t pr = byte_in(sec, len, col);
            uint32_t s = pr;
            if (!((bits >> i) & 1u)) {
                const uint64_t at = rest_bit + (uint64_t)rest++ * rb;
                const uint32_t r = rb ? (byte_in(sec, len, at >> 3) >> (at & 7)) & ((1u << rb) - 1u) : 0u;
                s = r < pr ? r : r + 1u;
            }
            acc |= (uint64_t)(s & (p.sb == 1 ? 1u : 3u)) << accn;
            accn += p.sb;
            if (accn == 32) {
                out[wo++] = (uint32_t)acc;
                acc = 0;
                accn = 0;
            }
            if (++rpos == rowlen) { // on to the next packed row
                rpos = 0;
                do
                    row++;
                while (row < nrows && !bit_in(rf, rf_len, row));
                rowlen = row < nrows ? min(p.r, nwords - row * p.r) : 0u;
                col = (uint32_t)(((uint64_t)h.col_phase + (uint64_t)row * p.r) % p.c);
            } else if (++col == p.c) {
                col = 0;
            }
        }
    }
    if (accn)
        out[wo] = (uint32_t)acc;
    // Zeros after the last selector, as the fixed-width section is padded.
    for (uint32_t i = (n * p.sb + 31) / 32 + tid; i < stride / 4; i += kThreads)
        out[i] = 0;
}

// popc(~b & 0xff) summed over bytes [0, nbytes) of p (at most len of them can be read), by the CTA.
__device__ __forceinline__ uint32_t cta_zero_bits(const uint8_t *p, uint32_t nbytes, uint32_t len,
                                                  uint32_t *red)
{
    nbytes = min(nbytes, len);
    uint32_t part = 0, j0 = 0;
    if (((uintptr_t)p & 15u) == 0) { // the sections are 16-aligned in any run the launcher accepts
        const uint4 *q = (const uint4 *)p;
        j0 = nbytes / 16 * 16;
        for (uint32_t j = threadIdx.x; j < nbytes / 16; j += kThreads) {
            const uint4 v = __ldg(q + j);
            part += 128u - __popc(v.x) - __popc(v.y) - __popc(v.z) - __popc(v.w);
        }
    }
    for (uint32_t j = j0 + threadIdx.x; j < nbytes; j += kThreads)
        part += 8u - __popc(p[j]);
    return cta_sum(part, red);
}

// 32 bits of sec at byte offset 4 * wi, zero past len; aligned loads where sec is 4-aligned.
__device__ __forceinline__ uint32_t u32_in(const uint8_t *sec, uint32_t len, uint64_t wi)
{
    if (((uintptr_t)sec & 3u) == 0 && 4 * wi + 4 <= len)
        return __ldg((const uint32_t *)sec + wi);
    return byte_in(sec, len, 4 * wi) | byte_in(sec, len, 4 * wi + 1) << 8 |
           byte_in(sec, len, 4 * wi + 2) << 16 | byte_in(sec, len, 4 * wi + 3) << 24;
}

// Set bits [ga, gb) of the bitmap bm (none past len), summed over the CTA (cta) or the warp; every
// thread of the CTA, or of the warp, calls it.
__device__ __forceinline__ uint32_t bits_set(const uint8_t *bm, uint32_t len, uint32_t ga, uint32_t gb,
                                             bool cta, uint32_t *red)
{
    uint32_t f = 0;
    const uint32_t step = cta ? kThreads : 32, first = ga / 32 + (cta ? threadIdx.x : threadIdx.x & 31);
    for (uint32_t j = first; j * 32 < gb; j += step) {
        const uint32_t left = gb - j * 32, below = ga > j * 32 ? ga - j * 32 : 0u;
        const uint32_t m = (left >= 32 ? ~0u : (1u << left) - 1u) & ~((1u << below) - 1u);
        f += __popc(u32_in(bm, len, j) & m);
    }
    return cta ? cta_sum(f, red) : warp_sum(f);
}

// The 32 bits of sec from bit `bit` on.
__device__ __forceinline__ uint32_t bits32_in(const uint8_t *sec, uint32_t len, uint64_t bit)
{
    return __funnelshift_r(u32_in(sec, len, bit >> 5), u32_in(sec, len, (bit >> 5) + 1), (uint32_t)bit & 31u);
}

// Zero bits of bytes [at, at + count) of sec (none past len), summed over the warp.
__device__ __forceinline__ uint32_t warp_zero_bits(const uint8_t *sec, uint32_t len, uint32_t at,
                                                   uint32_t count)
{
    uint32_t zeros = 0;
    const uint32_t end = at + count;
    for (uint32_t wi = at / 4 + (threadIdx.x & 31); wi * 4 < end; wi += 32) {
        const uint32_t lo = max(at, wi * 4) - wi * 4, hi = min(end, wi * 4 + 4) - wi * 4; // bytes of the word
        const uint32_t m = (hi == 4 ? ~0u : (1u << (8 * hi)) - 1u) & ~((1u << (8 * lo)) - 1u);
        zeros += __popc(~u32_in(sec, len, wi) & m);
    }
    return warp_sum(zeros);
}

static_assert(IBP_DECODE_UNFLAG_WORDS_MIN % kThreads == 0 && IBP_DECODE_UNFLAG_WORDS_MAX % kThreads == 0,
              "a warp's part of a share is whole rounds of its lanes");

// The fixed-width selector words [u0, u1) of a flagged block of n selectors, selector k of column
// (col_phase + k) % C, a word a thread: each warp takes an eighth of them, consecutive words, a
// round of 32 at a time.  A word starts from its columns' commonest selectors (a run of sb-bit
// entries in shared memory that repeats the C columns, read at the word's first column), and only
// the selectors its planes mark take their ranks from the others.  Where each warp's plane bytes
// and others start is counted from the flags and planes before it (the CTA's share, then its
// warps'); warp scans place each word's in a round.
__device__ void unflag_words(const Plan &p, const IbpBlockHeader &h, const uint8_t *sec, uint32_t len,
                             uint32_t n, uint32_t u0, uint32_t u1, uint32_t words, uint32_t *out,
                             UnflagShared &sh)
{
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t spw = 32 / p.sb, gpw = spw / 8; // selectors and groups of a word
    const uint32_t smask = p.sb == 1 ? 1u : 3u;
    const uint32_t groups = (n + 7) / 8;
    const uint32_t flags_byte = ibp_fmt_round16(p.c);
    const uint32_t plane_off = flags_byte + ibp_fmt_round16((n + 63) / 64);
    const uint8_t *flags = sec + flags_byte;
    const uint32_t flags_len = len > flags_byte ? len - flags_byte : 0u;
    const uint32_t rb = p.k >= 3 ? 2u : p.k == 2 ? 1u : 0u;
    if ((uint64_t)u0 * spw >= n) { // past the last selector: the section's zero padding
        for (uint32_t u = u0 + threadIdx.x; u < u1; u += kThreads)
            out[u] = 0;
        return;
    }
    // The commonest selectors of columns 0 .. C + spw - 1 (column j % C), sb bits each.
    const uint32_t pwords = ((p.c + spw) * p.sb + 31) / 32 + 1;
    for (uint32_t wi = threadIdx.x; wi < pwords; wi += kThreads) {
        uint32_t v = 0, col = wi * spw % p.c;
        for (uint32_t i = 0; i < spw; i++) {
            v |= (byte_in(sec, len, col) & smask) << (i * p.sb);
            if (++col == p.c)
                col = 0;
        }
        sh.pred[wi] = v;
    }
    // Groups before the share: g0 = u0 * gpw < groups.
    const uint32_t g0 = u0 * gpw;
    const uint32_t planes_total = groups - bits_set(flags, flags_len, 0, groups, true, sh.red);
    const uint32_t planes0 = g0 - bits_set(flags, flags_len, 0, g0, true, sh.red);
    const uint32_t rest0 = plane_off < len ? cta_zero_bits(sec + plane_off, planes0, len - plane_off, sh.red)
                                           : cta_sum(0, sh.red);
    const uint64_t rest_bit = 8ull * (plane_off + ibp_fmt_round16(planes_total));

    // The warp's part: words [wa, wb), groups [ga, gb), its plane bytes and others.
    const uint32_t part = words / kWarps;
    const uint32_t wa = min(u1, u0 + warp * part), wb = min(u1, wa + part);
    const uint32_t ga = min(groups, wa * gpw), gb = min(groups, wb * gpw);
    const uint32_t zeros = (gb - ga) - bits_set(flags, flags_len, ga, gb, false, sh.red);
    uint32_t unused;
    uint32_t planes = planes0 + cta_warps_before(zeros, sh.red, unused);
    // The last group's plane byte, when short, has zeros past the last selector: not others.
    const uint32_t pad =
        ga < gb && gb == groups && n % 8 && !bit_in(flags, flags_len, groups - 1) ? 8 - n % 8 : 0u;
    const uint32_t others =
        plane_off < len ? warp_zero_bits(sec + plane_off, len - plane_off, planes, zeros) - pad : 0u;
    uint32_t rest = rest0 + cta_warps_before(others, sh.red, unused);

    for (uint32_t base = wa; base < wb; base += 32) {
        const uint32_t u = base + lane;
        const uint32_t wga = min(groups, u * gpw), wgb = u < wb ? min(groups, wga + gpw) : wga;
        const uint32_t fl =
            wga < wgb ? (byte_in(flags, flags_len, wga / 8) >> (wga % 8)) & ((1u << (wgb - wga)) - 1u) : 0u;
        const uint32_t wzeros = (wgb - wga) - __popc(fl);
        uint32_t round_planes;
        const uint32_t pa = planes + warp_excl_scan<uint32_t>(wzeros, round_planes);
        planes += round_planes;
        const uint32_t window = wzeros ? bits32_in(sec, len, 8ull * (plane_off + pa)) : 0u;
        uint32_t same = 0;
        for (uint32_t g = 0, pi = 0; g < gpw; g++)
            same |= ((fl >> g) & 1u ? 0xffu : (window >> (8 * pi++)) & 0xffu) << (8 * g);
        // the word's selectors below n (none where u is past wb or n)
        const uint64_t k0 = (uint64_t)u * spw;
        const uint32_t nsel = u < wb && k0 < n ? (uint32_t)min((uint64_t)spw, n - k0) : 0u;
        uint32_t odd = ~same & (nsel == 32 ? ~0u : (1u << nsel) - 1u);
        uint32_t round_others;
        const uint32_t at = rest + warp_excl_scan<uint32_t>(__popc(odd), round_others);
        rest += round_others;
        if (u >= wb)
            continue;
        if (!nsel) {
            out[u] = 0;
            continue;
        }
        const uint32_t o = (uint32_t)(((uint64_t)h.col_phase + k0) % p.c) * p.sb;
        uint32_t word = __funnelshift_r(sh.pred[o >> 5], sh.pred[(o >> 5) + 1], o & 31u);
        if (nsel * p.sb < 32)
            word &= (1u << (nsel * p.sb)) - 1u;
        uint32_t win = odd && rb ? bits32_in(sec, len, rest_bit + (uint64_t)at * rb) : 0u;
        while (odd) {
            const uint32_t i = __ffs(odd) - 1, at_i = i * p.sb;
            odd &= odd - 1;
            const uint32_t pr = (word >> at_i) & smask, r = win & ((1u << rb) - 1u);
            win >>= rb;
            const uint32_t sel = r < pr ? r : r + 1u;
            word ^= ((pr ^ sel) & smask) << at_i;
        }
        out[u] = word;
    }
}

// A CTA's share of a flagged block: words [share * words, ...) of its rewritten
// selectors.  Blocks with raw rows are rewritten whole by their first share's CTA.
__device__ void unflag_share(const IbpDecodeArgs &a, const Plan &p, uint32_t bi, uint32_t share,
                             uint32_t words, UnflagShared &sh)
{
    IbpBlockHeader h;
    const uint8_t *blk = block_at(a, bi, h);
    if (!ibp_fmt_selflags(h.flags)) // the same for the whole CTA
        return;
    const uint32_t nwords = min(h.orig_len, a.block_size) / p.w, nrows = (nwords + p.r - 1) / p.r;
    const uint8_t *rf = blk + h.rowflag_off;
    const uint32_t rf_len = h.payload_off - h.rowflag_off;
    const uint32_t packed = bits_set(rf, rf_len, 0, nrows, true, sh.red);
    // Selector k is of column (col_phase + k) % C where every row is packed, and also where rows
    // are whole periods of the columns (every packed row but the last is R words long).
    if (packed != nrows && p.r % p.c != 0) {
        if (share == 0)
            unflag_block(a, p, bi, sh);
        return;
    }
    const uint32_t last_short = nrows * p.r - nwords; // words the last row lacks
    const uint32_t n = packed * p.r - (nrows && bit_in(rf, rf_len, nrows - 1) ? last_short : 0u);
    const uint32_t stride = ibp_decode_selx_stride(p.w, a.block_size);
    const uint32_t u0 = share * words, u1 = min(stride / 4, u0 + words);
    if (u0 >= u1)
        return;
    unflag_words(p, h, blk + h.sel_off, h.tail_off - h.sel_off, n, u0, u1, words,
                 (uint32_t *)(a.selx + (uint64_t)bi * stride), sh);
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 2) ibp_k_decode(IbpDecodeArgs a)
{
    __shared__ Shared sh;
    __shared__ TableAny tbl;
    const Plan p = load_plan(a.plan);
    switch (p.w) {
    case 2: decode_blocks_cta<2>(a, p, tbl.t2, sh); break;
    case 4: decode_blocks_cta<4>(a, p, tbl.t4, sh); break;
    default: decode_blocks_cta<8>(a, p, tbl.t8, sh); break;
    }
}

// The shared table of W-byte words in layout L.
template <int W, Layout L> __device__ __forceinline__ Table<W, L> &table_of(TableAny &u)
{
    if constexpr (L == Layout::sliced) {
        if constexpr (W == 2)
            return u.s2;
        else
            return u.s4;
    } else if constexpr (W == 2) {
        return u.t2;
    } else if constexpr (W == 4) {
        return u.t4;
    } else {
        return u.t8;
    }
}

// The segmented decode of plans of one column (C1) or more; INL: the launch carries the block
// offsets; WORDS: the word sizes it decodes, each size's bit set; L: its table's layout.  Each
// case is a kernel of its own: with the choice made inside one, registers ran short of the four
// CTAs a multiprocessor, and one column of 8-byte words, compiled apart from narrower words,
// decodes 35-40% faster.
template <bool C1, bool INL, unsigned WORDS, Layout L>
__device__ __forceinline__ void decode_segments_any(const IbpDecodeArgs &a)
{
    __shared__ TableAny tbl;
    __shared__ SegStage stages[kWarps];
    __shared__ uint32_t seg_bits[kWarps], red[kWarps];
    extern __shared__ uint4 via[]; // launched with IBP_DECODE_VIA_BYTES(W) of it, or none
    uint32_t dynamic;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic));
    const Plan p = load_plan(a.plan);
    if constexpr ((WORDS & 2u) != 0)
        if (p.w == 2)
            return decode_segments<2, C1, INL>(a, p, table_of<2, L>(tbl), stages, seg_bits, red,
                                               dynamic >= IBP_DECODE_VIA_BYTES(2) ? via : nullptr);
    if constexpr ((WORDS & 4u) != 0)
        if (p.w == 4)
            return decode_segments<4, C1, INL>(a, p, table_of<4, L>(tbl), stages, seg_bits, red,
                                               dynamic >= IBP_DECODE_VIA_BYTES(4) ? via : nullptr);
    if constexpr ((WORDS & 8u) != 0)
        if (p.w == 8)
            return decode_segments<8, C1, INL>(a, p, table_of<8, L>(tbl), stages, seg_bits, red,
                                               dynamic >= IBP_DECODE_VIA_BYTES(8) ? via : nullptr);
}

// A segmented kernel's two entry points: block offsets read from the offsets buffer, and carried
// in the launch's arguments (_inl).
#define IBP_SEG_KERNELS(NAME, PER_SM, C1, WORDS, L)                                                          \
    extern "C" __global__ void __launch_bounds__(kThreads, PER_SM) NAME(IbpDecodeArgs a)                     \
    {                                                                                                        \
        decode_segments_any<C1, false, WORDS, L>(a);                                                         \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(kThreads, PER_SM) NAME##_inl(IbpDecodeArgs a)               \
    {                                                                                                        \
        decode_segments_any<C1, true, WORDS, L>(a);                                                          \
    }

IBP_SEG_KERNELS(ibp_k_decode_seg1, IBP_DECODE_SEG1_CTAS_PER_SM, true, 2u | 4u, Layout::parts)
// One column of 8-byte words: fewer CTAs a multiprocessor leave the unrolled stores the registers
// they need.
IBP_SEG_KERNELS(ibp_k_decode_seg1w8, IBP_DECODE_SEG1W8_CTAS_PER_SM, true, 8u, Layout::parts)
// More columns keep more state (a column per lane, the field sizes of a lane's run): each word
// size's kernel fits three CTAs a multiprocessor only with 8-byte words in a kernel of their own.
// Plans of many table entries (IBP_DECODE_PARTS_ENTRIES_MAX) take the sliced table's kernel.
IBP_SEG_KERNELS(ibp_k_decode_seg, IBP_DECODE_SEG_CTAS_PER_SM, false, 2u | 4u, Layout::parts)
IBP_SEG_KERNELS(ibp_k_decode_segs, IBP_DECODE_SEG_CTAS_PER_SM, false, 2u | 4u, Layout::sliced)
IBP_SEG_KERNELS(ibp_k_decode_segw8, IBP_DECODE_SEGW8_CTAS_PER_SM, false, 8u, Layout::parts)
#undef IBP_SEG_KERNELS

// Plans with predictor columns of a period of at most 32 words; the segments' decoded words are
// kept in dynamic shared memory (IBP_DECODE_SEGP_BYTES(W)).  ibp_k_decode_segp keeps the plan's
// table in parts, ibp_k_decode_segps (2- and 4-byte words) sliced: a kernel each, as the two in
// one ran short of registers.
template <Layout L> __device__ __forceinline__ void decode_pred_any(const IbpDecodeArgs &a)
{
    __shared__ TableAny tbl;
    __shared__ SegStage stages[kWarps];
    __shared__ uint32_t seg_bits[kWarps], red[kWarps];
    __shared__ PredShared ps;
    extern __shared__ uint4 segbuf[];
    const Plan p = load_plan(a.plan);
    switch (p.w) {
    case 2:
        decode_segments_pred<2>(a, p, table_of<2, L>(tbl), stages, (uint8_t *)segbuf, seg_bits, red, ps);
        break;
    case 4:
        decode_segments_pred<4>(a, p, table_of<4, L>(tbl), stages, (uint8_t *)segbuf, seg_bits, red, ps);
        break;
    default:
        if constexpr (L == Layout::parts) // the launcher sends 8-byte words to parts only
            decode_segments_pred<8>(a, p, table_of<8, L>(tbl), stages, (uint8_t *)segbuf, seg_bits, red, ps);
        break;
    }
}

extern "C" __global__ void __launch_bounds__(kThreads, IBP_DECODE_SEGP_CTAS_PER_SM)
    ibp_k_decode_segp(IbpDecodeArgs a)
{
    decode_pred_any<Layout::parts>(a);
}

extern "C" __global__ void __launch_bounds__(kThreads, IBP_DECODE_SEGP_CTAS_PER_SM)
    ibp_k_decode_segps(IbpDecodeArgs a)
{
    decode_pred_any<Layout::sliced>(a);
}

// Run after ibp_k_decode_segp on the same stream with the same grid.
extern "C" __global__ void __launch_bounds__(kThreads) ibp_k_decode_fix(IbpDecodeArgs a)
{
    const Plan p = load_plan(a.plan);
    switch (p.w) {
    case 2:
        fix_share<2>(a, p);
        break;
    case 4:
        fix_share<4>(a, p);
        break;
    default:
        fix_share<8>(a, p);
        break;
    }
}

// Run first, before any other kernel of a run with blocks of flagged selectors.
extern "C" __global__ void __launch_bounds__(kThreads, IBP_DECODE_UNFLAG_CTAS_PER_SM)
    ibp_k_decode_unflag(IbpDecodeArgs a)
{
    __shared__ UnflagShared sh;
    const Plan p = load_plan(a.plan);
    // any other share size than the launcher's reads as the largest
    uint32_t words = IBP_DECODE_UNFLAG_WORDS_MAX;
    for (uint32_t w = IBP_DECODE_UNFLAG_WORDS_MIN; w < IBP_DECODE_UNFLAG_WORDS_MAX; w *= 2)
        words = a.unflag_words == w ? w : words;
    const uint32_t shares = ibp_decode_unflag_shares(p.w, a.block_size, words);
    for (uint64_t i = blockIdx.x; i < (uint64_t)a.nblocks * shares; i += gridDim.x) {
        unflag_share(a, p, (uint32_t)(i / shares), (uint32_t)(i % shares), words, sh);
        __syncthreads();
    }
}

// Run before ibp_k_decode_seg or ibp_k_decode_segp (plans of several columns) with their grid,
// when shares are short against a block.
extern "C" __global__ void __launch_bounds__(kThreads, IBP_DECODE_SEG_CTAS_PER_SM)
    ibp_k_decode_count(IbpDecodeArgs a)
{
    __shared__ TableAny tbl;
    __shared__ SegStage stages[kWarps];
    __shared__ uint32_t red[kWarps];
    const Plan p = load_plan(a.plan);
    switch (p.w) {
    case 2:
        count_share<2>(a, p, tbl.t2, stages, red);
        break;
    case 4:
        count_share<4>(a, p, tbl.t4, stages, red);
        break;
    default:
        count_share<8>(a, p, tbl.t8, stages, red);
        break;
    }
}

// ---- Top-byte coded blocks (codec/FORMAT.md "Top-byte coded runs", format.h IBP_BLOCK_TOPCODED) ----
//
// ibp_k_decode_top takes a run's top-coded blocks a CTA at a time.  Its threads first turn the
// block's frequencies into a table of the 4096 slots in shared memory (each slot's symbol, its
// frequency less one and its cumulative frequency in one word), then each warp decodes a group
// of 32 lanes.  In round r the group's lanes decode the top bytes of 32 consecutive words
// (r * lanes + 32 * group + lane), so each lane assembles its word from the byte planes and the
// warp stores 32 words at once.  The group's stream is read through a window of 128 of its
// 16-bit words in the warp's registers (four a lane), refilled 64 at a time well before they are
// needed: a renormalising read, placed by a ballot and a prefix popcount, is a shuffle.  A run's
// fields are this library's own, but every read stays inside the block whatever they say: a
// block whose layout does not fit is left alone, and stream reads past a group's end read 0.
namespace
{

constexpr uint32_t kTopScale = 1u << 12; // codec/topcode.h: 12-bit frequencies
constexpr uint32_t kTopLow = 1u << 16;   // states in [2^16, 2^32)

struct TopShared {
    uint32_t slot[kTopScale]; // symbol | (frequency - 1) << 8 | cumulative frequency << 20
    uint32_t entry[256];      // the same for the k-th symbol of the table
    uint32_t warp_sum[kWarps];
};

template <int W> struct TopWord;
template <> struct TopWord<2> {
    using U = uint16_t;
};
template <> struct TopWord<4> {
    using U = uint32_t;
};
template <> struct TopWord<8> {
    using U = unsigned long long;
};

// Where a run's sections lie (topcode.c's layout), from its header.
struct TopRun {
    const uint8_t *run;
    uint32_t words, tail, lanes, nsym;
    uint32_t table, freqs, offsets, states, streams, planes, plane_stride, tail_at, len, stream_bytes;
};

__device__ __forceinline__ uint32_t round16(uint32_t v)
{
    return (v + 15u) & ~15u;
}

// The run of block blk (header h), or false where its header or layout is not one a run of
// h.comp_len bytes can have.
__device__ __forceinline__ bool top_run(const uint8_t *blk, const IbpBlockHeader &h, uint32_t &w, TopRun &t)
{
    t.run = blk + IBP_BLOCK_HEADER_SIZE;
    if (h.comp_len < IBP_BLOCK_HEADER_SIZE + 16u)
        return false;
    const uint4 hd = __ldg((const uint4 *)t.run);
    const uint32_t orig_len = hd.x;
    t.stream_bytes = hd.y;
    t.lanes = hd.z & 0xffffu;
    w = (hd.z >> 16) & 0xffu;
    t.nsym = (hd.z >> 24) + 1u;
    if (orig_len != h.orig_len || (w != 2 && w != 4 && w != 8) || t.lanes < 32u || t.lanes > 1024u ||
        (t.lanes & (t.lanes - 1u)) || (t.stream_bytes & 1u) || t.stream_bytes > h.comp_len)
        return false;
    t.words = orig_len / w;
    t.tail = orig_len % w;
    t.table = 16u;
    t.freqs = t.table + ((t.nsym + 1u) & ~1u);
    t.offsets = (t.freqs + 2u * t.nsym + 3u) & ~3u;
    t.states = t.offsets + 4u * (t.lanes / 32u + 1u);
    t.streams = t.states + 4u * t.lanes;
    t.planes = round16(t.streams + t.stream_bytes);
    t.plane_stride = round16(t.words);
    const uint64_t tail_at = t.planes + (uint64_t)(w - 1u) * t.plane_stride;
    t.tail_at = (uint32_t)tail_at;
    t.len = round16((uint32_t)min(tail_at + t.tail, (uint64_t)UINT32_MAX - 15u));
    return tail_at + t.tail <= h.comp_len - IBP_BLOCK_HEADER_SIZE &&
           t.len == h.comp_len - IBP_BLOCK_HEADER_SIZE;
}

// The slot table of the run's frequencies into sh.slot (every thread of the CTA).  Frequencies
// that do not sum to 4096 give slots past their sum the last symbol: wrong bytes, no stray read.
__device__ void top_table(const TopRun &t, TopShared &sh)
{
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t f = tid < t.nsym ? __ldg((const uint16_t *)(t.run + t.freqs) + tid) : 0u;
    uint32_t incl = f;
    for (uint32_t q = 1; q < 32; q <<= 1) {
        const uint32_t y = __shfl_up_sync(kFull, incl, q);
        if (lane >= q)
            incl += y;
    }
    if (lane == 31)
        sh.warp_sum[warp] = incl;
    __syncthreads();
    uint32_t cum = incl - f;
    for (uint32_t q = 0; q < warp; q++)
        cum += sh.warp_sum[q];
    if (tid < t.nsym)
        sh.entry[tid] = t.run[t.table + tid] | ((f - 1u) & 0xfffu) << 8 | (min(cum, kTopScale - 1u) << 20);
    __syncthreads();
    for (uint32_t slot = tid; slot < kTopScale; slot += kThreads) {
        // the last symbol whose cumulative frequency is at most slot
        uint32_t lo = 0, n = t.nsym;
        while (n > 1) {
            const uint32_t half = n / 2;
            if ((sh.entry[lo + half] >> 20) <= slot)
                lo += half;
            n -= half;
        }
        sh.slot[slot] = sh.entry[lo];
    }
    __syncthreads();
}

// Rounds whose plane bytes a lane loads ahead of decoding them: a warp issues in order, so a round
// that loaded its own bytes would wait a whole memory latency before its store and the next
// round's loads.  Loaded a batch of rounds ahead, they arrive while the batch before decodes.
// About a dozen loads in flight a lane (a register each), whatever the word size.
template <int W> __host__ __device__ constexpr uint32_t top_ahead()
{
    return W == 2 ? 8u : W == 4 ? 4u : 2u;
}

// The plane bytes (all but the top byte) of the words of rounds [r0, r0 + top_ahead) this lane
// decodes in group g; 0 past the run's words.
template <int W>
__device__ __forceinline__ void top_planes(const TopRun &t, uint32_t g, uint32_t r0,
                                           typename TopWord<W>::U (&out)[top_ahead<W>()])
{
    constexpr uint32_t kTopAhead = top_ahead<W>();
    using U = typename TopWord<W>::U;
    const uint8_t *planes = t.run + t.planes;
#pragma unroll
    for (uint32_t u = 0; u < kTopAhead; u++) {
        const uint64_t i = (uint64_t)(r0 + u) * t.lanes + g * 32u + (threadIdx.x & 31);
        U v = 0;
        if (i < t.words) {
#pragma unroll
            for (int p = 0; p < W - 1; p++)
                v |= (U)__ldg(planes + (size_t)p * t.plane_stride + i) << (8 * p);
        }
        out[u] = v;
    }
}

// Warp `warp` of the CTA decodes groups warp, warp + kWarps, ... of the run into out.
template <int W> __device__ void top_groups(const TopRun &t, const TopShared &sh, const Out &out)
{
    using U = typename TopWord<W>::U;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t groups = t.lanes / 32u, rounds = (t.words + t.lanes - 1u) / t.lanes;
    const uint32_t *offs = (const uint32_t *)(t.run + t.offsets);
    const uint16_t *strm = (const uint16_t *)(t.run + t.streams);
    const uint32_t lt = (1u << lane) - 1u;
    constexpr uint32_t kTopAhead = top_ahead<W>();
    for (uint32_t g = warp; g < groups; g += kWarps) {
        const uint32_t o0 = __ldg(offs + g), o1 = __ldg(offs + g + 1u);
        const uint32_t end = min(max(o0, o1), t.stream_bytes) / 2u;
        uint32_t base = min(o0, t.stream_bytes) / 2u; // the stream word at the window's start
        const auto fetch = [&](uint32_t i) -> uint32_t { return i < end ? (uint32_t)__ldg(strm + i) : 0u; };
        uint32_t w0 = fetch(base + lane) | fetch(base + 32u + lane) << 16;
        uint32_t w1 = fetch(base + 64u + lane) | fetch(base + 96u + lane) << 16;
        uint32_t pos = 0; // the next unread word of the window
        uint32_t x = __ldg((const uint32_t *)(t.run + t.states) + g * 32u + lane);
        U cur[kTopAhead], next[kTopAhead];
        top_planes<W>(t, g, 0, cur);
        for (uint32_t r0 = 0; r0 < rounds; r0 += kTopAhead) {
            top_planes<W>(t, g, r0 + kTopAhead, next);
#pragma unroll
            for (uint32_t u = 0; u < kTopAhead; u++) {
                const uint32_t r = r0 + u;
                if (r >= rounds) // the same for the whole warp
                    break;
                const uint32_t i = r * t.lanes + g * 32u + lane;
                const bool valid = i < t.words;
                const uint32_t slot = x & (kTopScale - 1u);
                const uint32_t e = sh.slot[slot];
                const uint32_t nx = (((e >> 8) & 0xfffu) + 1u) * (x >> 12) + slot - (e >> 20);
                const bool need = valid && nx < kTopLow;
                const uint32_t bal = __ballot_sync(kFull, need), cnt = __popc(bal);
                const uint32_t k = pos + __popc(bal & lt);
                const uint32_t a0 = __shfl_sync(kFull, w0, k & 31u);
                uint32_t v = (k & 32u) ? a0 >> 16 : a0 & 0xffffu;
                if (pos + cnt > 64u) { // the same for the whole warp: reads reach the second half
                    const uint32_t a1 = __shfl_sync(kFull, w1, k & 31u);
                    if (k >= 64u)
                        v = a1 & 0xffffu;
                }
                if (valid)
                    x = need ? nx << 16 | v : nx;
                pos += cnt;
                if (pos >= 64u) {
                    pos -= 64u;
                    base += 64u;
                    w0 = w1;
                    w1 = fetch(base + 64u + lane) | fetch(base + 96u + lane) << 16;
                }
                if (!valid)
                    continue;
                const U word = cur[u] | (U)(e & 0xffu) << (8 * (W - 1));
                const int64_t at = out.origin + (int64_t)i * W;
                if (out.fast) {
                    *(U *)(out.dst + at) = word;
                } else {
#pragma unroll
                    for (int b = 0; b < W; b++)
                        if (at + b >= 0 && at + b < (int64_t)out.len)
                            out.dst[at + b] = (uint8_t)(word >> (8 * b));
                }
            }
#pragma unroll
            for (uint32_t u = 0; u < kTopAhead; u++)
                cur[u] = next[u];
        }
    }
}

} // namespace

// Decodes the run's top-coded blocks, and with IBP_DECODE_ARG_TOP_RAW its raw blocks too; leaves
// every other block's bytes to the other decode kernels.  A CTA per block at a time.
extern "C" __global__ void __launch_bounds__(kThreads, IBP_DECODE_TOP_CTAS_PER_SM)
    ibp_k_decode_top(IbpDecodeArgs a)
{
    __shared__ TopShared sh;
    for (uint32_t bi = blockIdx.x; bi < a.nblocks; bi += gridDim.x) {
        IbpBlockHeader h;
        const uint8_t *blk = block_at(a, bi, h);
        uint32_t w = 0;
        TopRun t;
        if (!(h.flags & IBP_BLOCK_TOPCODED)) { // the same for the whole CTA
            if ((h.flags & IBP_BLOCK_RAW) && (a.flags & IBP_DECODE_ARG_TOP_RAW)) {
                const Out out = out_for(a, bi, h, 1);
                copy_raw(blk + IBP_BLOCK_HEADER_SIZE, min(h.orig_len, a.block_size), out.dst, out.origin,
                         out.len, threadIdx.x, kThreads);
            }
            continue;
        }
        if (h.orig_len > a.block_size || !top_run(blk, h, w, t))
            continue;
        top_table(t, sh);
        const Out out = out_for(a, bi, h, w);
        if (w == 2)
            top_groups<2>(t, sh, out);
        else if (w == 4)
            top_groups<4>(t, sh, out);
        else
            top_groups<8>(t, sh, out);
        for (uint32_t j = threadIdx.x; j < t.tail; j += kThreads) {
            const int64_t at = out.origin + (int64_t)t.words * w + j;
            if (at >= 0 && (uint64_t)at < out.len)
                out.dst[at] = t.run[t.tail_at + j];
        }
        __syncthreads(); // the table is the next block's
    }
}

// ---- Clipped edges that go as they are ([transfer] edge_kernel) ----
//
// CTA i of ibp_k_copy_edges copies part of edge i % 2 of a (IbpEdgeArgs): its bytes read from
// pinned host memory by their device address, written to the destination, in the widest accesses
// both ends share an alignment for.  Each CTA's threads take consecutive accesses (a warp's reads
// are one run of host memory), the edge's CTAs strided over it.
namespace
{

template <typename T>
__device__ __forceinline__ void copy_units(const T *src, T *dst, uint64_t n, uint64_t id, uint64_t stride)
{
    for (uint64_t i = id; i < n; i += stride)
        dst[i] = src[i];
}

__device__ __forceinline__ void copy_edge(uint64_t src, uint64_t dst, uint64_t len, uint64_t id,
                                          uint64_t stride)
{
    if (!len)
        return;
    const unsigned unit = (src - dst) % 16 == 0 ? 16u : (src - dst) % 4 == 0 ? 4u : 1u;
    // bytes before dst reaches the unit's alignment, and after its last whole unit
    uint64_t head = (unit - dst % unit) % unit;
    head = head < len ? head : len;
    const uint64_t units = (len - head) / unit, tail = len - head - units * unit;
    if (id < head)
        ((uint8_t *)dst)[id] = ((const uint8_t *)src)[id];
    if (id < tail)
        ((uint8_t *)dst)[len - tail + id] = ((const uint8_t *)src)[len - tail + id];
    if (unit == 16)
        copy_units((const uint4 *)(src + head), (uint4 *)(dst + head), units, id, stride);
    else if (unit == 4)
        copy_units((const uint32_t *)(src + head), (uint32_t *)(dst + head), units, id, stride);
    else
        copy_units((const uint8_t *)src, (uint8_t *)dst, len, id, stride);
}

} // namespace

// Its grid: ibp_edge_grid(), blocks of IBP_EDGE_THREADS.
extern "C" __global__ void __launch_bounds__(IBP_EDGE_THREADS) ibp_k_copy_edges(IbpEdgeArgs a)
{
    // the edge picked by value, not by an index into the parameter (which would copy it to local memory)
    const bool e = blockIdx.x & 1u;
    const uint64_t id = (uint64_t)(blockIdx.x >> 1) * blockDim.x + threadIdx.x;
    copy_edge(e ? a.src[1] : a.src[0], e ? a.dst[1] : a.dst[0], e ? a.len[1] : a.len[0], id,
              (uint64_t)(gridDim.x >> 1) * blockDim.x);
}
