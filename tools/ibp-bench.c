/* SPDX-License-Identifier: MIT
 * ibpshim: ibp-bench FILE: the compressed path on a GPU against a plain pinned copy, in one process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibpshim/bench.h"
#include "size_arg.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ibp-bench FILE [--size BYTES] [--iters N] [--device D] [--chunk BYTES]\n"
               "         [--copy-streams 1|2] [--decode-streams 1-4] [--last-decode-on-copy]\n"
               "         [--paired] [--tail BYTES]\n"
               "         [--trace] [--max-sms N] [--offsets device|mapped] [--word-size 2|4|8]\n"
               "         [--selector-flags] [--top-coded] [--split PERMILLE[,PERMILLE...]]\n"
               "         [--raw-tail BYTES[,BYTES...]] [--raw-tail-own-stream] [--shim-raw-tail BYTES]\n"
               "         [--json]\n"
               "Plans and compresses FILE as the shim would (tiled up to --size bytes, default 1 GiB),\n"
               "then times on the GPU, original bytes per second: a plain pinned copy, the DMA of the\n"
               "compressed run alone (no decode: the bound of every path through the copy engine), DMA\n"
               "of the run then decode, the same pipelined (chunks of --chunk compressed bytes,\n"
               "default as the shim's: an eighth of the run, at least 16 MiB; their DMAs on one\n"
               "stream as in the shim or alternating over two with --copy-streams 2, decoded as each\n"
               "lands on a decode stream, or going round --decode-streams N of them, or with --paired\n"
               "each chunk's DMA and decode on one stream, two alternating (--last-decode-on-copy:\n"
               "the last chunk's decode on its DMA's stream, not waiting for another stream's event);\n"
               "the last chunks shrink down to about --tail BYTES, default 2 MiB as the shim's\n"
               "pipeline_tail, halving what is left once less than two chunks are, and half that\n"
               "for runs compressed below 0.7; 0 = equal chunks), the kernel reading the pinned run\n"
               "directly (zero-copy), and decode alone, the paths taking turns in each of --iters (1-64)\n"
               "rounds (medians).  Each timed run uses the next of several copies\n"
               "of the device buffers, together more than twice the GPU's L2.  --max-sms bounds every\n"
               "decode's grid to N CTAs (as [transfer] max_sms).  As in the shim, a decode of up to\n"
               "255 blocks carries their offsets in its arguments, and the DMA paths send a longer\n"
               "run's offsets ahead of it; --offsets mapped has every decode read the pinned table\n"
               "through its mapped address.  --trace times each chunk of one more pipelined run:\n"
               "when its DMA ended, its decode started and ended.  --word-size plans words of that many\n"
               "bytes instead of the planner's choice (the rest of the plan still searched).\n"
               "--selector-flags stores blocks' selectors in the flagged form where it is smaller,\n"
               "each decode rewriting them first (as ibp-pack compress --selector-flags).\n"
               "--top-coded lets blocks take the top-byte coded form where it is smaller, decoded by\n"
               "its own kernel (as the shim's [policy] top_coded and ibp-pack compress --top-coded).\n"
               "--split times split runs too, one for each share given (up to 8, permille of the\n"
               "compressed run, whole blocks from its end): that end decoded zero-copy on a stream of\n"
               "its own while the rest goes the pipelined way, both started together.\n"
               "--raw-tail times the pipelined path with a raw tail too, one for each size given (up\n"
               "to 8, original bytes, whole blocks from the run's end): that end copied as it is, a\n"
               "DMA after the last chunk's, which the last chunk's decode overlaps; on the last\n"
               "chunk's stream as in the shim, or with --raw-tail-own-stream on a stream of its own.\n"
               "--shim-raw-tail judges the path the shim would take with that [transfer]\n"
               "pipeline_raw_tail (default 0, the shim's).\n");
}

static void json_split(const IbpshimBenchResult *r, int k)
{
    printf("{\"share\": %u, \"zc_compressed\": %zu, \"zc_bytes\": %zu, \"gbps\": %.2f}", r->split[k].share,
           r->split[k].zc_compressed, r->split[k].zc_bytes, r->split[k].gbps);
}

static void json_raw_tail(const IbpshimBenchResult *r, int k)
{
    printf("{\"asked\": %zu, \"bytes\": %zu, \"compressed\": %zu, \"gbps\": %.2f}", r->raw_tail[k].asked,
           r->raw_tail[k].bytes, r->raw_tail[k].compressed, r->raw_tail[k].gbps);
}

/* A JSON member "key": [...] of n entries, each printed by one (none when n is 0). */
static void json_array(const char *key, int n, void (*one)(const IbpshimBenchResult *, int),
                       const IbpshimBenchResult *r)
{
    if (!n)
        return;
    printf(", \"%s\": [", key);
    for (int k = 0; k < n; k++) {
        fputs(k ? ", " : "", stdout);
        one(r, k);
    }
    printf("]");
}

/* --NAME's size argument v into *out: above 0, or with zero (what 0 means) also 0; else a
 * message and -1. */
static int size_opt(const char *name, const char *v, const char *zero, size_t *out)
{
    size_t b = 0;
    if (ibp_size_parse(v, &b) || (!b && !zero)) {
        fprintf(stderr, "ibp-bench: --%s takes a size (4096, 512K, 64M, 1.5G)%s%s, not '%s'\n", name,
                zero ? ", 0 for " : " above 0", zero ? zero : "", v);
        return -1;
    }
    *out = b;
    return 0;
}

/* --NAME's whole number v in [lo, hi] into *out; else a message and -1. */
static int count_opt(const char *name, const char *v, long lo, long hi, long *out)
{
    if (ibp_count_parse(v, lo, hi, out)) {
        fprintf(stderr, "ibp-bench: --%s takes %ld to %ld, not '%s'\n", name, lo, hi, v);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    IbpshimBenchOptions opts = {.size = (size_t)1 << 30, .iters = 9, .device = 0, .tail = (size_t)2 << 20};
    int json = 0;
    for (int i = 1; i < argc; i++) {
        long num = 0;
        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            if (size_opt("size", argv[++i], NULL, &opts.size))
                return 2;
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            if (count_opt("iters", argv[++i], 1, IBPSHIM_BENCH_ITERS_MAX, &num))
                return 2;
            opts.iters = (int)num;
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            if (size_opt("chunk", argv[++i], "the shim's default", &opts.chunk))
                return 2;
        } else if (!strcmp(argv[i], "--tail") && i + 1 < argc) {
            if (size_opt("tail", argv[++i], "equal chunks", &opts.tail))
                return 2;
        } else if (!strcmp(argv[i], "--paired")) {
            opts.paired = 1;
        } else if (!strcmp(argv[i], "--last-decode-on-copy")) {
            opts.last_decode_on_copy = 1;
        } else if (!strcmp(argv[i], "--raw-tail-own-stream")) {
            opts.raw_tail_own_stream = 1;
        } else if (!strcmp(argv[i], "--shim-raw-tail") && i + 1 < argc) {
            if (size_opt("shim-raw-tail", argv[++i], "none", &opts.shim_raw_tail))
                return 2;
        } else if (!strcmp(argv[i], "--selector-flags")) {
            opts.selector_flags = 1;
        } else if (!strcmp(argv[i], "--top-coded")) {
            opts.top_coded = 1;
        } else if (!strcmp(argv[i], "--split") && i + 1 < argc) {
            const char *v = argv[++i];
            for (char *end = (char *)v; *v; v = end + (*end == ',')) {
                const unsigned long share = strtoul(v, &end, 10);
                if (end == v || share < 1 || share > 1000 || (*end && *end != ',') ||
                    opts.nsplits == IBPSHIM_BENCH_SPLITS_MAX) {
                    fprintf(stderr,
                            "ibp-bench: --split takes up to %d shares of 1 to 1000 permille, not '%s'\n",
                            IBPSHIM_BENCH_SPLITS_MAX, argv[i]);
                    return 2;
                }
                opts.splits[opts.nsplits++] = (unsigned)share;
            }
        } else if (!strcmp(argv[i], "--raw-tail") && i + 1 < argc) {
            for (const char *v = argv[++i]; *v;) {
                char one[32] = "";
                const size_t n = strcspn(v, ",");
                if (n < sizeof(one))
                    memcpy(one, v, n);
                const size_t bytes = ibp_size_arg(one);
                if (!bytes || opts.nraw_tails == IBPSHIM_BENCH_RAW_TAILS_MAX) {
                    fprintf(stderr, "ibp-bench: --raw-tail takes up to %d sizes above 0, not '%s'\n",
                            IBPSHIM_BENCH_RAW_TAILS_MAX, argv[i]);
                    return 2;
                }
                opts.raw_tails[opts.nraw_tails++] = bytes;
                v += n + (v[n] == ',');
            }
        } else if (!strcmp(argv[i], "--trace")) {
            opts.trace = 1;
        } else if (!strcmp(argv[i], "--copy-streams") && i + 1 < argc) {
            if (count_opt("copy-streams", argv[++i], 1, 2, &num))
                return 2;
            opts.copy_streams = (int)num;
        } else if (!strcmp(argv[i], "--decode-streams") && i + 1 < argc) {
            if (count_opt("decode-streams", argv[++i], 1, 4, &num))
                return 2;
            opts.decode_streams = (int)num;
        } else if (!strcmp(argv[i], "--max-sms") && i + 1 < argc) {
            if (count_opt("max-sms", argv[++i], 0, 65535, &num))
                return 2;
            opts.max_sms = (unsigned)num;
        } else if (!strcmp(argv[i], "--offsets") && i + 1 < argc && !strcmp(argv[i + 1], "mapped")) {
            opts.offsets_mapped = 1;
            i++;
        } else if (!strcmp(argv[i], "--offsets") && i + 1 < argc && !strcmp(argv[i + 1], "device")) {
            i++;
        } else if (!strcmp(argv[i], "--word-size") && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "2") && strcmp(v, "4") && strcmp(v, "8")) {
                fprintf(stderr, "ibp-bench: --word-size takes 2, 4 or 8, not '%s'\n", v);
                return 2;
            }
            opts.word_size = (unsigned)atoi(v);
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (count_opt("device", argv[++i], 0, 1023, &num))
                return 2;
            opts.device = (int)num;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ibp-bench: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *data = len > 0 ? malloc((size_t)len) : NULL;
    if (!data || fread(data, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "ibp-bench: cannot read %s\n", path);
        fclose(f);
        free(data);
        return 2;
    }
    fclose(f);
    IbpshimBenchResult r;
    const int err = ibpshim_bench(data, (size_t)len, &opts, &r);
    free(data);
    if (err == -ENODEV) {
        printf("ibp-bench: no CUDA driver or GPU here, skipped\n");
        return 77;
    }
    if (err) {
        fprintf(stderr, "ibp-bench: %s: failed (%s)\n", path, strerror(-err));
        return 1;
    }
    if (json) {
        printf("{\"file\": \"%s\", \"device\": \"%s\", \"bytes\": %zu, \"compressed\": %zu, \"ratio\": %.4f, "
               "\"verified\": %s, \"raw_gbps\": %.2f, \"dma_only_gbps\": %.2f, \"dma_decode_gbps\": %.2f, "
               "\"pipelined_gbps\": %.2f, "
               "\"zerocopy_gbps\": %.2f, \"decode_gbps\": %.2f, \"ideal_speedup\": %.3f, \"chunk\": %zu, "
               "\"tail\": %zu, \"paired\": %s, \"max_sms\": %u, \"offsets\": \"%s\", \"rotation\": %d, "
               "\"word_size\": %u, \"columns\": %u, \"decode_streams\": %d, \"last_decode_on_copy\": %s, "
               "\"selector_flags\": %s, \"top_coded\": %s, \"blocks\": %u, \"top_blocks\": %u, "
               "\"shim_path\": \"%s\", \"shim_raw_tail\": %zu, "
               "\"raw_tail_own_stream\": %s",
               path, r.device_name, r.bytes, r.compressed, r.ratio, r.verified ? "true" : "false", r.raw_gbps,
               r.dma_only_gbps, r.dma_decode_gbps, r.pipelined_gbps, r.zerocopy_gbps, r.decode_gbps,
               1.0 / r.ratio, r.chunk, r.tail, opts.paired ? "true" : "false", opts.max_sms,
               opts.offsets_mapped ? "mapped" : "device", r.rotation, r.word_size, r.columns,
               opts.decode_streams ? opts.decode_streams : 1, opts.last_decode_on_copy ? "true" : "false",
               opts.selector_flags ? "true" : "false", opts.top_coded ? "true" : "false", r.blocks,
               r.top_blocks,
               r.shim_pipelined == 1   ? "pipelined"
               : r.shim_pipelined == 2 ? "pipelined_alone"
                                       : "dma_then_decode",
               r.shim_raw_tail, opts.raw_tail_own_stream ? "true" : "false");
        json_array("splits", r.nsplits, json_split, &r);
        json_array("raw_tails", r.nraw_tails, json_raw_tail, &r);
        if (opts.trace) {
            printf(", \"trace_us\": %.1f, \"trace\": [", r.trace_us);
            for (unsigned k = 0; k < r.trace_chunks && k < IBPSHIM_BENCH_TRACE_MAX; k++)
                printf("%s{\"compressed\": %zu, \"bytes\": %zu, \"dma_end_us\": %.1f, "
                       "\"decode_start_us\": %.1f, \"decode_end_us\": %.1f}",
                       k ? ", " : "", r.trace[k].compressed, r.trace[k].bytes, r.trace[k].dma_end_us,
                       r.trace[k].decode_start_us, r.trace[k].decode_end_us);
            printf("]");
        }
        printf("}\n");
    } else {
        char top[64] = "";
        if (opts.top_coded)
            snprintf(top, sizeof(top), ", %u of %u blocks top-coded", r.top_blocks, r.blocks);
        printf("ibp-bench: %s on %s, %.1f MiB, ratio %.4f (%u-byte words, %u columns%s%s), decode %s\n", path,
               r.device_name, (double)r.bytes / 1048576.0, r.ratio, r.word_size, r.columns,
               opts.selector_flags ? ", flagged selectors" : "", top, r.verified ? "verified" : "WRONG");
        printf("  %-26s %10s %8s\n", "path", "GB/s", "speedup");
        printf("  %-26s %10.1f %8.3f\n", "raw pinned H2D", r.raw_gbps, 1.0);
        printf("  %-26s %10.1f %8.3f  (the run's DMA alone, no decode)\n", "DMA only", r.dma_only_gbps,
               r.dma_only_gbps / r.raw_gbps);
        printf("  %-26s %10.1f %8.3f\n", "DMA + decode", r.dma_decode_gbps, r.dma_decode_gbps / r.raw_gbps);
        char decoded_on[96] = "";
        if (opts.paired)
            snprintf(decoded_on, sizeof(decoded_on), ", each decoded on its DMA's stream");
        else if (opts.decode_streams > 1)
            snprintf(decoded_on, sizeof(decoded_on), ", decodes going round %d streams%s",
                     opts.decode_streams, opts.last_decode_on_copy ? ", the last on its DMA's" : "");
        else if (opts.last_decode_on_copy)
            snprintf(decoded_on, sizeof(decoded_on), ", the last decoded on its DMA's stream");
        printf("  %-26s %10.1f %8.3f  (chunks of %.1f MiB%s)\n", "DMA + decode, pipelined", r.pipelined_gbps,
               r.pipelined_gbps / r.raw_gbps, (double)r.chunk / 1048576.0, decoded_on);
        printf("  %-26s %10.1f %8.3f\n", "zero-copy decode", r.zerocopy_gbps, r.zerocopy_gbps / r.raw_gbps);
        for (int k = 0; k < r.nsplits; k++) {
            char name[48];
            snprintf(name, sizeof(name), "split, %u%% zero-copy", (r.split[k].share + 5) / 10);
            printf("  %-26s %10.1f %8.3f  (%.2f of %.2f MB zero-copy)\n", name, r.split[k].gbps,
                   r.split[k].gbps / r.raw_gbps, (double)r.split[k].zc_compressed / 1e6,
                   (double)(r.compressed) / 1e6);
        }
        for (int k = 0; k < r.nraw_tails; k++) {
            char name[48];
            snprintf(name, sizeof(name), "pipelined, %.2f MiB raw", (double)r.raw_tail[k].bytes / 1048576.0);
            printf("  %-26s %10.1f %8.3f  (%.2f MB of the run not sent)\n", name, r.raw_tail[k].gbps,
                   r.raw_tail[k].gbps / r.raw_gbps, (double)r.raw_tail[k].compressed / 1e6);
        }
        printf("  %-26s %10.1f\n", "decode only (D2D)", r.decode_gbps);
        printf("  ideal speedup 1/ratio: %.3f\n", 1.0 / r.ratio);
        printf("  the shim's dma path for this run: %s",
               r.shim_pipelined == 1   ? "pipelined"
               : r.shim_pipelined == 2 ? "pipelined while no other compressed copy is in flight"
                                       : "DMA, then decode");
        if (r.shim_raw_tail)
            printf(", the last %.2f MiB raw", (double)r.shim_raw_tail / 1048576.0);
        printf("\n");
        if (opts.max_sms)
            printf("  decode grids of at most %u CTAs\n", opts.max_sms);
        printf("  block offsets read from %s memory; %d copies of the device buffers\n",
               opts.offsets_mapped ? "pinned host (mapped)" : "device", r.rotation);
        if (opts.trace) {
            printf("  traced pipelined run: %.1f us, %u chunks (us from its start)\n", r.trace_us,
                   r.trace_chunks);
            printf("  %5s %10s %10s %9s %9s %9s %8s\n", "chunk", "comp KiB", "orig KiB", "DMA end",
                   "dec start", "dec end", "DMA GB/s");
            double prev = 0;
            for (unsigned k = 0; k < r.trace_chunks && k < IBPSHIM_BENCH_TRACE_MAX; k++) {
                const IbpshimBenchChunk *c = &r.trace[k];
                const double dt = c->dma_end_us - prev;
                printf("  %5u %10.1f %10.1f %9.1f %9.1f %9.1f %8.1f\n", k, (double)c->compressed / 1024.0,
                       (double)c->bytes / 1024.0, c->dma_end_us, c->decode_start_us, c->decode_end_us,
                       dt > 0 ? (double)c->compressed / (dt * 1e3) : 0.0);
                prev = c->dma_end_us;
            }
        }
    }
    return r.verified ? 0 : 1;
}
