/* SPDX-License-Identifier: MIT
 * ibpshim: the top-byte coded form (codec/FORMAT.md, "Top-byte coded runs"). */
#include "codec/topcode.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/internal.h"

_Static_assert(sizeof(IbpTopHeader) == 16, "the header is 16 bytes, no padding");

#define SCALE (1u << IBP_TOP_SCALE_BITS)
#define GROUP 32u

static size_t round16(size_t v)
{
    return (v + 15u) & ~(size_t)15u;
}

static int lanes_ok(unsigned lanes)
{
    return lanes >= IBP_TOP_LANES_MIN && lanes <= IBP_TOP_LANES_MAX && !(lanes & (lanes - 1u));
}

/* Where each section of a run lies, from its header's fields. */
typedef struct Layout {
    size_t words, tail;
    size_t table, freqs, offsets, states, streams, planes, plane_stride, tail_at, len;
} Layout;

static Layout layout(size_t orig_len, unsigned w, unsigned lanes, unsigned nsym, size_t stream_bytes)
{
    Layout l;
    l.words = orig_len / w;
    l.tail = orig_len % w;
    l.table = sizeof(IbpTopHeader);
    l.freqs = l.table + ((nsym + 1u) & ~1u);
    l.offsets = (l.freqs + 2u * nsym + 3u) & ~(size_t)3u;
    l.states = l.offsets + 4u * (lanes / GROUP + 1u);
    l.streams = l.states + 4u * lanes;
    l.planes = round16(l.streams + stream_bytes);
    l.plane_stride = round16(l.words);
    l.tail_at = l.planes + (w - 1u) * l.plane_stride;
    l.len = round16(l.tail_at + l.tail);
    return l;
}

size_t ibp_top_bound(size_t n, unsigned w, unsigned lanes)
{
    if ((w != 2 && w != 4 && w != 8) || !lanes_ok(lanes))
        return 0;
    /* a symbol emits at most one 16-bit word (renormalisation), plus a word of slack a lane */
    const size_t words = n / w;
    return layout(n, w, lanes, 256, 2u * words + 2u * lanes).len;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Frequencies summing to SCALE, every present symbol at least 1, from counts over `total` words:
 * each scaled down, the remainder given to (or taken from) the largest. */
static void quantize(const uint64_t *count, uint64_t total, uint32_t *freq)
{
    int64_t sum = 0;
    unsigned big = 0;
    for (unsigned s = 0; s < 256; s++) {
        freq[s] = count[s] ? (uint32_t)(count[s] * SCALE / total) : 0u;
        if (count[s] && !freq[s])
            freq[s] = 1;
        sum += freq[s];
        if (count[s] > count[big])
            big = s;
    }
    /* too much: take from the largest frequencies first, never below 1 */
    while (sum > (int64_t)SCALE) {
        unsigned m = big;
        for (unsigned s = 0; s < 256; s++)
            m = freq[s] > freq[m] ? s : m;
        const uint32_t cut = (uint32_t)(sum - (int64_t)SCALE) < freq[m] - 1u ? (uint32_t)(sum - (int64_t)SCALE)
                                                                             : freq[m] - 1u;
        freq[m] -= cut;
        sum -= cut;
    }
    freq[big] += (uint32_t)((int64_t)SCALE - sum);
}

int ibp_top_encode(const void *src, size_t n, unsigned w, unsigned lanes, void *out, size_t cap,
                   size_t *out_len)
{
    if (!out_len || (!src && n) || !out || (w != 2 && w != 4 && w != 8) || !lanes_ok(lanes) ||
        n > UINT32_MAX)
        return -EINVAL;
    const uint8_t *const in = src;
    const size_t words = n / w;
    uint64_t count[256] = {0};
    for (size_t i = 0; i < words; i++)
        count[in[i * w + w - 1]]++;
    if (!words)
        count[0] = 1;
    uint32_t freq[256], cum[256];
    quantize(count, words ? words : 1u, freq);
    unsigned nsym = 0;
    for (unsigned s = 0, c = 0; s < 256; s++) {
        cum[s] = c;
        c += freq[s];
        nsym += freq[s] != 0;
    }
    /* Encode each group's symbols in the reverse of the decode order (rounds backwards, lanes
     * backwards within a round), its renormalisation words collected backwards. */
    const unsigned groups = lanes / GROUP;
    uint16_t *const words16 = malloc((words + lanes) * sizeof(uint16_t) + 1u);
    uint32_t *const state = malloc(lanes * sizeof(uint32_t));
    size_t *const group_len = malloc(groups * sizeof(size_t));
    if (!words16 || !state || !group_len) {
        free(words16);
        free(state);
        free(group_len);
        return -ENOMEM;
    }
    const size_t rounds = (words + lanes - 1u) / lanes;
    size_t at = 0; /* words16 holds group 0's stream forwards, then group 1's, ... */
    for (unsigned g = 0; g < groups; g++) {
        const size_t start = at;
        for (unsigned l = 0; l < GROUP; l++)
            state[g * GROUP + l] = IBP_TOP_STATE_LOW;
        for (size_t r = rounds; r-- > 0;)
            for (unsigned l = GROUP; l-- > 0;) {
                const size_t i = r * lanes + g * GROUP + l;
                if (i >= words)
                    continue;
                const unsigned s = in[i * w + w - 1];
                uint64_t x = state[g * GROUP + l];
                const uint64_t x_max = ((uint64_t)(IBP_TOP_STATE_LOW >> IBP_TOP_SCALE_BITS) << 16) * freq[s];
                if (x >= x_max) {
                    words16[at++] = (uint16_t)x;
                    x >>= 16;
                }
                state[g * GROUP + l] = (uint32_t)(((x / freq[s]) << IBP_TOP_SCALE_BITS) + x % freq[s] + cum[s]);
            }
        /* collected backwards: the decoder reads them forwards */
        for (size_t a = start, b = at; a + 1u < b; a++, b--) {
            const uint16_t t = words16[a];
            words16[a] = words16[b - 1u];
            words16[b - 1u] = t;
        }
        group_len[g] = at - start;
    }
    const Layout lay = layout(n, w, lanes, nsym, 2u * at);
    int err = 0;
    if (cap < lay.len) {
        err = -ENOBUFS;
        goto done;
    }
    uint8_t *const o = out;
    memset(o, 0, lay.len);
    /* the header (IbpTopHeader, little endian; reserved left 0) */
    put32(o, (uint32_t)n);
    put32(o + 4, (uint32_t)(2u * at));
    put16(o + 8, (uint16_t)lanes);
    o[10] = (uint8_t)w;
    o[11] = (uint8_t)(nsym - 1u);
    for (unsigned s = 0, k = 0; s < 256; s++)
        if (freq[s]) {
            o[lay.table + k] = (uint8_t)s;
            put16(o + lay.freqs + 2u * k, (uint16_t)freq[s]);
            k++;
        }
    size_t off = 0;
    for (unsigned g = 0; g <= groups; g++) {
        put32(o + lay.offsets + 4u * g, (uint32_t)off);
        if (g < groups)
            off += 2u * group_len[g];
    }
    for (unsigned l = 0; l < lanes; l++)
        put32(o + lay.states + 4u * l, state[l]);
    for (size_t k = 0; k < at; k++)
        put16(o + lay.streams + 2u * k, words16[k]);
    for (unsigned p = 0; p + 1u < w; p++)
        for (size_t i = 0; i < words; i++)
            o[lay.planes + p * lay.plane_stride + i] = in[i * w + p];
    memcpy(o + lay.tail_at, in + words * w, lay.tail);
    *out_len = lay.len;
done:
    free(words16);
    free(state);
    free(group_len);
    return err;
}

/* Zero bytes in [from, to) of p: 1. */
static int zeros(const uint8_t *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (p[i])
            return 0;
    return 1;
}

int ibp_top_decode(const void *in_, size_t len, void *dst, size_t n)
{
    const uint8_t *const in = in_;
    if (!in || len < sizeof(IbpTopHeader) || (!dst && n))
        return -EBADMSG;
    const uint32_t orig_len = get32(in), stream_bytes = get32(in + 4);
    const unsigned lanes = get16(in + 8), w = in[10], nsym = in[11] + 1u;
    if (orig_len != n || (w != 2 && w != 4 && w != 8) || !lanes_ok(lanes) || (stream_bytes & 1u) ||
        get32(in + 12) != 0 || stream_bytes > len)
        return -EBADMSG;
    const Layout lay = layout(orig_len, w, lanes, nsym, stream_bytes);
    if (lay.len != len)
        return -EBADMSG;
    /* the table: symbols strictly increasing, frequencies at least 1 summing to SCALE */
    uint8_t slot_sym[SCALE];
    uint32_t freq[256] = {0}, cum[256] = {0};
    uint32_t total = 0;
    for (unsigned k = 0; k < nsym; k++) {
        const unsigned s = in[lay.table + k];
        const uint32_t f = get16(in + lay.freqs + 2u * k);
        if ((k && s <= in[lay.table + k - 1u]) || !f || f > SCALE - total)
            return -EBADMSG;
        freq[s] = f;
        cum[s] = total;
        memset(slot_sym + total, (int)s, f);
        total += f;
    }
    if (total != SCALE || !zeros(in, lay.table + nsym, lay.freqs) || !zeros(in, lay.freqs + 2u * nsym, lay.offsets))
        return -EBADMSG;
    /* group streams: offsets from 0 to stream_bytes, even, nondecreasing */
    const unsigned groups = lanes / GROUP;
    if (get32(in + lay.offsets) != 0 || get32(in + lay.offsets + 4u * groups) != stream_bytes)
        return -EBADMSG;
    for (unsigned g = 0; g < groups; g++) {
        const uint32_t a = get32(in + lay.offsets + 4u * g), b = get32(in + lay.offsets + 4u * (g + 1u));
        if (b < a || (b & 1u))
            return -EBADMSG;
    }
    if (!zeros(in, lay.streams + stream_bytes, lay.planes) || !zeros(in, lay.tail_at + lay.tail, lay.len))
        return -EBADMSG;
    for (unsigned p = 0; p + 1u < w; p++)
        if (!zeros(in, lay.planes + p * lay.plane_stride + lay.words, lay.planes + (p + 1u) * lay.plane_stride))
            return -EBADMSG;
    uint8_t *const out = dst;
    const size_t rounds = (lay.words + lanes - 1u) / lanes;
    for (unsigned g = 0; g < groups; g++) {
        size_t rd = lay.streams + get32(in + lay.offsets + 4u * g);
        const size_t end = lay.streams + get32(in + lay.offsets + 4u * (g + 1u));
        uint32_t x[GROUP];
        for (unsigned l = 0; l < GROUP; l++) {
            x[l] = get32(in + lay.states + 4u * (g * GROUP + l));
            if (x[l] < IBP_TOP_STATE_LOW)
                return -EBADMSG;
        }
        for (size_t r = 0; r < rounds; r++)
            for (unsigned l = 0; l < GROUP; l++) {
                const size_t i = r * lanes + g * GROUP + l;
                if (i >= lay.words)
                    continue;
                const uint32_t slot = x[l] & (SCALE - 1u);
                const unsigned s = slot_sym[slot];
                x[l] = freq[s] * (x[l] >> IBP_TOP_SCALE_BITS) + slot - cum[s];
                if (x[l] < IBP_TOP_STATE_LOW) {
                    if (rd + 2u > end)
                        return -EBADMSG;
                    x[l] = x[l] << 16 | get16(in + rd);
                    rd += 2;
                }
                out[i * w + w - 1u] = (uint8_t)s;
            }
        /* every lane back where its encoder started, every word of the stream read */
        for (unsigned l = 0; l < GROUP; l++)
            if (x[l] != IBP_TOP_STATE_LOW)
                return -EBADMSG;
        if (rd != end)
            return -EBADMSG;
    }
    for (unsigned p = 0; p + 1u < w; p++) {
        const uint8_t *const plane = in + lay.planes + p * lay.plane_stride;
        for (size_t i = 0; i < lay.words; i++)
            out[i * w + p] = plane[i];
    }
    memcpy(out + lay.words * w, in + lay.tail_at, lay.tail);
    return 0;
}

/* ---- Blocks of the form (format.h IBP_BLOCK_TOPCODED) ---- */

/* Lanes for a block of `words` words: about 256 symbols a lane (a lane's state costs 4 bytes,
 * a thread a lane on the GPU), from 32 to IBP_TOP_LANES_DEFAULT. */
static unsigned block_lanes(size_t words)
{
    unsigned lanes = IBP_TOP_LANES_MIN;
    while (lanes < IBP_TOP_LANES_DEFAULT && (size_t)lanes * 2u * 256u <= words)
        lanes *= 2u;
    return lanes;
}

int ibp_block_encode_any(const IbpCodecKernels *k, const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                         uint32_t phase, uint8_t *dst, size_t cap, size_t *comp_len)
{
    int rc = k->encode(p, src, len, phase, dst, cap, comp_len);
    if (rc || !p->top_coded || len < 2u)
        return rc;
    /* The word size whose top bytes' entropy, with the other bytes as they are and the lanes'
     * states, comes to the fewest bits (the coder lands within 1% of that), from one pass
     * counting the top bytes of all three: those of 8-byte words are among those of 4-byte
     * words, which are among those of 2-byte words.  Only that one is coded. */
    uint32_t count[3][256] = {{0}};
    for (uint32_t i = 1; i < len; i += 2) {
        const uint8_t b = src[i];
        count[0][b]++;
        if ((i & 3u) == 3u) {
            count[1][b]++;
            if ((i & 7u) == 7u)
                count[2][b]++;
        }
    }
    unsigned w = 0;
    double least = 0;
    for (unsigned c = 0; c < 3; c++) {
        const unsigned ww = 2u << c;
        const double words = (double)(len / ww);
        double bits = 8.0 * (double)(len - len / ww) + 32.0 * block_lanes(len / ww);
        for (unsigned b = 0; b < 256; b++)
            if (count[c][b])
                bits -= count[c][b] * log2((double)count[c][b] / words);
        if (!w || bits < least) {
            w = ww;
            least = bits;
        }
    }
    const size_t bound = ibp_top_bound(len, w, block_lanes(len / w));
    uint8_t *const best = malloc(bound);
    size_t best_len = 0;
    if (!best || ibp_top_encode(src, len, w, block_lanes(len / w), best, bound, &best_len) != 0) {
        free(best);
        return 0; /* the block stays as k->encode wrote it */
    }
    if (IBP_BLOCK_HEADER_SIZE + best_len < *comp_len) {
        IbpBlockHeader h;
        memset(&h, 0, sizeof(h));
        h.orig_len = len;
        h.comp_len = (uint32_t)(IBP_BLOCK_HEADER_SIZE + best_len);
        h.flags = IBP_BLOCK_TOPCODED;
        memcpy(dst, &h, sizeof(h));
        memcpy(dst + IBP_BLOCK_HEADER_SIZE, best, best_len);
        *comp_len = h.comp_len;
    }
    free(best);
    return 0;
}

int ibp_top_block_decode(const IbpBlockHeader *h, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                         uint8_t *dst, uint32_t limit)
{
    if (!ibp_block_sized(h, blk_len, orig_len) || h->col_phase || h->rowflag_off || h->payload_off ||
        h->sel_off || h->tail_off)
        return -EBADMSG;
    const uint8_t *const run = blk + IBP_BLOCK_HEADER_SIZE;
    const size_t run_len = h->comp_len - IBP_BLOCK_HEADER_SIZE;
    if (limit == orig_len)
        return ibp_top_decode(run, run_len, dst, orig_len);
    uint8_t *const all = malloc(orig_len ? orig_len : 1u);
    if (!all)
        return -ENOMEM;
    const int rc = ibp_top_decode(run, run_len, all, orig_len);
    if (!rc)
        memcpy(dst, all, limit);
    free(all);
    return rc;
}
