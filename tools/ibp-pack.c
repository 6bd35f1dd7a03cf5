/* SPDX-License-Identifier: MIT
 * ibpshim: ibp-pack, the IBP codec on files (compress, decompress, check, plan, bench). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ibpshim/codec.h"

/* ---- progress: a watcher thread speaks up only for work that takes more than a second ---- */

typedef struct IbpProgress {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    const char *file;
    const char *phase;
    int done;
    int started;
} IbpProgress;

static double ibp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *ibp_progress_main(void *arg)
{
    IbpProgress *pr = arg;
    const double t0 = ibp_now();
    pthread_mutex_lock(&pr->lock);
    while (!pr->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        if (pthread_cond_timedwait(&pr->cond, &pr->lock, &until) == ETIMEDOUT && !pr->done)
            fprintf(stderr, "ibp-pack: %s: %s (%.0f s)\n", pr->file, pr->phase, ibp_now() - t0);
    }
    pthread_mutex_unlock(&pr->lock);
    return NULL;
}

static void ibp_progress_start(IbpProgress *pr, const char *file)
{
    memset(pr, 0, sizeof(*pr));
    pthread_mutex_init(&pr->lock, NULL);
    pthread_cond_init(&pr->cond, NULL);
    pr->file = file;
    pr->phase = "reading";
    pr->started = pthread_create(&pr->thread, NULL, ibp_progress_main, pr) == 0;
}

static void ibp_progress_phase(IbpProgress *pr, const char *phase)
{
    pthread_mutex_lock(&pr->lock);
    pr->phase = phase;
    pthread_mutex_unlock(&pr->lock);
}

static void ibp_progress_stop(IbpProgress *pr)
{
    pthread_mutex_lock(&pr->lock);
    pr->done = 1;
    pthread_cond_signal(&pr->cond);
    pthread_mutex_unlock(&pr->lock);
    if (pr->started)
        pthread_join(pr->thread, NULL);
    pthread_cond_destroy(&pr->cond);
    pthread_mutex_destroy(&pr->lock);
}

/* ---- files ---- */

static int ibp_read_file(const char *path, uint8_t **data, size_t *len)
{
    size_t cap = 1u << 20;
    size_t n = 0;
    uint8_t *buf = NULL;
    int rc = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    buf = malloc(cap);
    if (!buf) {
        rc = -ENOMEM;
        goto fail;
    }
    for (;;) {
        if (n == cap) {
            uint8_t *grown = realloc(buf, cap * 2u);
            if (!grown) {
                rc = -ENOMEM;
                goto fail;
            }
            buf = grown;
            cap *= 2u;
        }
        const ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            goto fail;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    *data = buf;
    *len = n;
    return 0;
fail:
    free(buf);
    close(fd);
    return rc;
}

static int ibp_write_file(const char *path, const void *data, size_t len)
{
    const uint8_t *p = data;
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    while (len) {
        const ssize_t put = write(fd, p, len);
        if (put < 0 && errno == EINTR)
            continue;
        if (put < 0) {
            const int rc = -errno;
            close(fd);
            return rc;
        }
        p += put;
        len -= (size_t)put;
    }
    return close(fd) ? -errno : 0;
}

static void ibp_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static int ibp_fail(const char *what, const char *path, int rc)
{
    fprintf(stderr, "ibp-pack: %s %s: %s\n", what, path, strerror(-rc));
    return 1;
}

/* ---- commands ---- */

typedef struct IbpArgs {
    unsigned threads;
    size_t block_size;
    int selector_flags;
    int top_coded;
    int json;
    const char *files[64];
    int nfiles;
} IbpArgs;

/* The plan flags the options ask for (--selector-flags, --top-coded). */
static unsigned plan_flags(const IbpArgs *a)
{
    return (a->selector_flags ? IBP_CODEC_PLAN_SELECTOR_FLAGS : 0u) |
           (a->top_coded ? IBP_CODEC_PLAN_TOP_CODED : 0u);
}

static int ibp_cmd_compress(const IbpArgs *a)
{
    uint8_t *in = NULL;
    void *out = NULL;
    size_t len = 0;
    size_t out_len = 0;
    IbpProgress pr;
    if (a->nfiles != 2) {
        fprintf(stderr, "usage: ibp-pack compress IN OUT [--threads N] [--json]\n");
        return 2;
    }
    int rc = ibp_read_file(a->files[0], &in, &len);
    if (rc)
        return ibp_fail("cannot read", a->files[0], rc);
    ibp_progress_start(&pr, a->files[0]);
    ibp_progress_phase(&pr, "planning and encoding");
    const double t0 = ibp_now();
    const IbpCodecPlanOptions opts = {.block_size = a->block_size, .flags = plan_flags(a)};
    rc = ibp_codec_file_compress(in, len, &opts, a->threads, &out, &out_len);
    const double secs = ibp_now() - t0;
    ibp_progress_stop(&pr);
    free(in);
    if (rc)
        return ibp_fail("cannot compress", a->files[0], rc);
    rc = ibp_write_file(a->files[1], out, out_len);
    free(out);
    if (rc)
        return ibp_fail("cannot write", a->files[1], rc);
    const double ratio = len ? (double)out_len / (double)len : 1.0;
    if (a->json)
        printf("{\"in\": \"%s\", \"out\": \"%s\", \"bytes\": %zu, \"compressed\": %zu, \"ratio\": %.4f, "
               "\"seconds\": %.3f}\n",
               a->files[0], a->files[1], len, out_len, ratio, secs);
    return 0;
}

static int ibp_cmd_decompress(const IbpArgs *a)
{
    uint8_t *in = NULL;
    size_t len = 0;
    uint64_t orig = 0;
    if (a->nfiles != 2) {
        fprintf(stderr, "usage: ibp-pack decompress IN OUT [--json]\n");
        return 2;
    }
    int rc = ibp_read_file(a->files[0], &in, &len);
    if (rc)
        return ibp_fail("cannot read", a->files[0], rc);
    rc = ibp_codec_file_orig_len(in, len, &orig);
    if (rc || orig > SIZE_MAX) {
        free(in);
        return ibp_fail("not an IBP file:", a->files[0], rc ? rc : -EFBIG);
    }
    uint8_t *out = malloc(orig ? (size_t)orig : 1u);
    if (!out) {
        free(in);
        return ibp_fail("cannot decompress", a->files[0], -ENOMEM);
    }
    const double t0 = ibp_now();
    rc = ibp_codec_file_decompress(in, len, out, (size_t)orig);
    const double secs = ibp_now() - t0;
    free(in);
    if (!rc)
        rc = ibp_write_file(a->files[1], out, (size_t)orig);
    free(out);
    if (rc)
        return ibp_fail("cannot decompress", a->files[0], rc);
    if (a->json)
        printf("{\"in\": \"%s\", \"out\": \"%s\", \"bytes\": %llu, \"seconds\": %.3f}\n", a->files[0],
               a->files[1], (unsigned long long)orig, secs);
    return 0;
}

static int ibp_check_one(const char *path, unsigned threads, int json)
{
    uint8_t *in = NULL;
    void *packed = NULL;
    uint8_t *back = NULL;
    size_t len = 0;
    size_t packed_len = 0;
    IbpProgress pr;
    int rc = ibp_read_file(path, &in, &len);
    if (rc)
        return ibp_fail("cannot read", path, rc);
    ibp_progress_start(&pr, path);
    ibp_progress_phase(&pr, "compressing");
    rc = ibp_codec_file_compress(in, len, NULL, threads, &packed, &packed_len);
    if (!rc) {
        ibp_progress_phase(&pr, "decompressing");
        back = malloc(len ? len : 1u);
        rc = back ? ibp_codec_file_decompress(packed, packed_len, back, len) : -ENOMEM;
    }
    ibp_progress_stop(&pr);
    const int same = !rc && memcmp(in, back, len) == 0;
    const double ratio = len ? (double)packed_len / (double)len : 1.0;
    if (json) {
        printf("{\"file\": ");
        ibp_json_string(stdout, path);
        printf(", \"bytes\": %zu, \"compressed\": %zu, \"ratio\": %.4f, \"ok\": %s", len, packed_len, ratio,
               same ? "true" : "false");
        if (rc)
            printf(", \"error\": \"%s\"", strerror(-rc));
        printf("}\n");
    } else if (rc) {
        printf("%s error: %s\n", path, strerror(-rc));
    } else {
        printf("%s ratio=%.4f %s\n", path, ratio, same ? "ok" : "MISMATCH");
    }
    free(in);
    free(packed);
    free(back);
    return same ? 0 : 1;
}

static int ibp_cmd_check(const IbpArgs *a)
{
    int bad = 0;
    if (a->nfiles < 1) {
        fprintf(stderr, "usage: ibp-pack check FILE... [--threads N] [--json]\n");
        return 2;
    }
    for (int i = 0; i < a->nfiles; i++)
        bad |= ibp_check_one(a->files[i], a->threads, a->json);
    return bad;
}

static int ibp_cmd_plan(const IbpArgs *a)
{
    uint8_t *in = NULL;
    size_t len = 0;
    IbpCodecPlan *plan = NULL;
    char text[1024];
    if (a->nfiles != 1) {
        fprintf(stderr, "usage: ibp-pack plan FILE [--threads N] [--json]\n");
        return 2;
    }
    int rc = ibp_read_file(a->files[0], &in, &len);
    if (rc)
        return ibp_fail("cannot read", a->files[0], rc);
    const IbpCodecPlanOptions opts = {.threads = a->threads};
    const double t0 = ibp_now();
    rc = ibp_codec_plan_create(in, len, &opts, &plan);
    const double secs = ibp_now() - t0;
    free(in);
    if (rc)
        return ibp_fail("cannot plan", a->files[0], rc);
    ibp_codec_plan_describe(plan, a->json, text, sizeof(text));
    if (a->json) {
        printf("{\"file\": ");
        ibp_json_string(stdout, a->files[0]);
        printf(", \"plan_seconds\": %.4f, \"threads\": %u, \"plan\": %s}\n", secs, opts.threads, text);
    } else {
        printf("%s: %s; planned in %.1f ms on %u threads\n", a->files[0], text, secs * 1e3, opts.threads);
    }
    ibp_codec_plan_destroy(&plan);
    return 0;
}

/* ---- bench ---- */

typedef struct IbpBenchDecode {
    const IbpCodecPlan *plan;
    void *const *blocks;
    const size_t *comp;
    size_t len;
    size_t nblocks;
    uint8_t *out;
    unsigned first;
    unsigned step;
    int rc;
} IbpBenchDecode;

static void *ibp_bench_decode_worker(void *arg)
{
    IbpBenchDecode *d = arg;
    const size_t bs = ibp_codec_plan_block_size(d->plan);
    for (size_t i = d->first; i < d->nblocks; i += d->step) {
        const size_t n = d->len - i * bs < bs ? d->len - i * bs : bs;
        const int rc = ibp_codec_block_decode(d->plan, d->blocks[i], d->comp[i], n, d->out + i * bs, n);
        if (rc)
            d->rc = rc;
    }
    return NULL;
}

static int ibp_bench_decode(const IbpCodecPlan *plan, void *const *blocks, const size_t *comp, size_t len,
                            size_t nblocks, uint8_t *out, unsigned threads)
{
    IbpBenchDecode d[64];
    pthread_t tid[64];
    int rc = 0;
    if (threads > 64u)
        threads = 64u;
    for (unsigned t = 0; t < threads; t++) {
        d[t] = (IbpBenchDecode){plan, blocks, comp, len, nblocks, out, t, threads, 0};
        if (t && pthread_create(&tid[t], NULL, ibp_bench_decode_worker, &d[t]))
            return -EAGAIN;
    }
    ibp_bench_decode_worker(&d[0]);
    for (unsigned t = 1; t < threads; t++)
        pthread_join(tid[t], NULL);
    for (unsigned t = 0; t < threads; t++)
        rc = rc ? rc : d[t].rc;
    return rc;
}

/* Repeats fn until at least half a second has passed; returns the best GB/s of one run. */
/* Best of at least 3 runs and half a second of CALL, in seconds (rc holds the last result). */
#define IBP_BEST_SECONDS(secs, call)                                                                         \
    do {                                                                                                     \
        const double start_ = ibp_now();                                                                     \
        double best_ = 1e30;                                                                                 \
        int runs_ = 0;                                                                                       \
        while (runs_ < 3 || ibp_now() - start_ < 0.5) {                                                      \
            const double t0_ = ibp_now();                                                                    \
            rc = (call);                                                                                     \
            const double dt_ = ibp_now() - t0_;                                                              \
            if (rc)                                                                                          \
                break;                                                                                       \
            best_ = dt_ < best_ ? dt_ : best_;                                                               \
            runs_++;                                                                                         \
        }                                                                                                    \
        (secs) = best_;                                                                                      \
    } while (0)

#define IBP_BENCH(gbps, len, call)                                                                           \
    do {                                                                                                     \
        double secs_;                                                                                        \
        IBP_BEST_SECONDS(secs_, call);                                                                       \
        (gbps) = (double)(len) / secs_ / 1e9;                                                                \
    } while (0)

static int ibp_cmd_bench(const IbpArgs *a)
{
    uint8_t *in = NULL;
    uint8_t *arena = NULL;
    uint8_t *out = NULL;
    void **blocks = NULL;
    size_t *comp = NULL;
    size_t len = 0;
    IbpCodecPlan *plan = NULL;
    IbpProgress pr;
    double enc1 = 0;
    double encn = 0;
    double dec1 = 0;
    double decn = 0;
    double decref = 0;
    double plan1 = 0;
    double plann = 0;
    double judge = 0;
    if (a->nfiles != 1) {
        fprintf(stderr, "usage: ibp-pack bench FILE [--threads N] [--block-size BYTES] [--selector-flags] "
                        "[--top-coded] [--json]\n");
        return 2;
    }
    int rc = ibp_read_file(a->files[0], &in, &len);
    if (rc)
        return ibp_fail("cannot read", a->files[0], rc);
    ibp_progress_start(&pr, a->files[0]);
    const unsigned nt = a->threads ? a->threads : 1u;
    ibp_progress_phase(&pr, "planning");
    const IbpCodecPlanOptions one = {.threads = 1, .block_size = a->block_size, .flags = plan_flags(a)};
    const IbpCodecPlanOptions many = {.threads = nt, .block_size = a->block_size, .flags = plan_flags(a)};
    IBP_BEST_SECONDS(plann, (ibp_codec_plan_destroy(&plan), ibp_codec_plan_create(in, len, &many, &plan)));
    if (!rc)
        IBP_BEST_SECONDS(plan1, (ibp_codec_plan_destroy(&plan), ibp_codec_plan_create(in, len, &one, &plan)));
    double judged = 0; /* what checking a reused plan costs instead (the shim's plan_reuse) */
    if (!rc)
        IBP_BEST_SECONDS(judge, ibp_codec_plan_judge(plan, in, len, &judged));
    if (rc)
        goto fail;
    const size_t bs = ibp_codec_plan_block_size(plan);
    const size_t nblocks = (len + bs - 1u) / bs;
    const size_t each = ibp_codec_block_bound(plan, bs);
    arena = aligned_alloc(16, nblocks * each + 16u);
    out = malloc(len + 1u);
    blocks = malloc((nblocks + 1u) * sizeof(*blocks));
    comp = malloc((nblocks + 1u) * sizeof(*comp));
    rc = -ENOMEM;
    if (!arena || !out || !blocks || !comp)
        goto fail;
    for (size_t i = 0; i < nblocks; i++)
        blocks[i] = arena + i * each;
    ibp_progress_phase(&pr, "encoding");
    IBP_BENCH(enc1, len, ibp_codec_region_encode(plan, in, len, 1, blocks, each, comp));
    if (rc)
        goto fail;
    IBP_BENCH(encn, len, ibp_codec_region_encode(plan, in, len, nt, blocks, each, comp));
    if (rc)
        goto fail;
    ibp_progress_phase(&pr, "decoding");
    IBP_BENCH(dec1, len, ibp_bench_decode(plan, blocks, comp, len, nblocks, out, 1));
    if (rc)
        goto fail;
    IBP_BENCH(decn, len, ibp_bench_decode(plan, blocks, comp, len, nblocks, out, nt));
    if (rc)
        goto fail;
    const char *backend = ibp_codec_backend();
    ibp_codec_force_reference(1);
    IBP_BENCH(decref, len, ibp_bench_decode(plan, blocks, comp, len, nblocks, out, 1));
    ibp_codec_force_reference(0);
    if (rc)
        goto fail;
    rc = -EBADMSG;
    if (memcmp(in, out, len))
        goto fail;
    size_t total = 0;
    for (size_t i = 0; i < nblocks; i++)
        total += comp[i];
    const double ratio = len ? (double)total / (double)len : 1.0;
    if (a->json) {
        printf("{\"file\": ");
        ibp_json_string(stdout, a->files[0]);
        printf(", \"bytes\": %zu, \"backend\": \"%s\", \"threads\": %u, \"block_ratio\": %.4f, "
               "\"plan_ms_1t\": %.2f, \"plan_ms_nt\": %.2f, \"judge_ms\": %.3f, \"encode_gbps_1t\": %.3f, "
               "\"encode_gbps_nt\": %.3f, \"decode_gbps_1t\": %.3f, \"decode_gbps_nt\": %.3f, "
               "\"decode_reference_gbps_1t\": %.3f}\n",
               len, backend, nt, ratio, plan1 * 1e3, plann * 1e3, judge * 1e3, enc1, encn, dec1, decn,
               decref);
    } else {
        printf("%s: %zu bytes, blocks ratio %.4f\n", a->files[0], len, ratio);
        printf("  plan: %.1f ms 1 thread, %.1f ms %u threads; judging the plan (reuse check) %.3f ms\n",
               plan1 * 1e3, plann * 1e3, nt, judge * 1e3);
        printf("  encode %s: %.2f GB/s 1 thread, %.2f GB/s %u threads\n", backend, enc1, encn, nt);
        printf("  decode %s: %.2f GB/s 1 thread, %.2f GB/s %u threads\n", backend, dec1, decn, nt);
        printf("  decode reference: %.2f GB/s 1 thread\n", decref);
    }
    rc = 0;
fail:
    ibp_progress_stop(&pr);
    ibp_codec_plan_destroy(&plan);
    free(in);
    free(arena);
    free(out);
    free(blocks);
    free(comp);
    return rc ? ibp_fail("bench failed on", a->files[0], rc) : 0;
}

static void ibp_usage(void)
{
    fprintf(stderr,
            "usage: ibp-pack compress IN OUT [--threads N] [--block-size BYTES] [--selector-flags] "
            "[--top-coded]\n"
            "                         [--json]\n"
            "       ibp-pack decompress IN OUT [--json]\n"
            "       ibp-pack check FILE... [--threads N] [--json]\n"
            "       ibp-pack plan FILE [--threads N] [--json]\n"
            "       ibp-pack bench FILE [--threads N] [--block-size BYTES] [--selector-flags] [--top-coded]\n"
            "                      [--json]\n");
}

int main(int argc, char **argv)
{
    IbpArgs a = {.threads = 0};
    if (argc < 2) {
        ibp_usage();
        return 2;
    }
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    a.threads = ncpu > 0 ? (unsigned)ncpu : 1u;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            a.json = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end = NULL;
            const unsigned long t = strtoul(argv[++i], &end, 10);
            if (!end || *end || t == 0 || t > 64) {
                fprintf(stderr, "ibp-pack: --threads takes 1..64\n");
                return 2;
            }
            a.threads = (unsigned)t;
        } else if (!strcmp(argv[i], "--selector-flags")) {
            a.selector_flags = 1; /* the flagged selector form where shorter (codec/FORMAT.md) */
        } else if (!strcmp(argv[i], "--top-coded")) {
            a.top_coded = 1; /* top-byte coded blocks where shorter (codec/FORMAT.md) */
        } else if (!strcmp(argv[i], "--block-size") && i + 1 < argc) {
            char *end = NULL;
            const unsigned long long b = strtoull(argv[++i], &end, 10);
            if (!end || *end || b < 4096 || b > (1u << 24) || (b & (b - 1))) {
                fprintf(stderr, "ibp-pack: --block-size takes a power of two from 4096 to 16777216\n");
                return 2;
            }
            a.block_size = (size_t)b;
        } else if (a.nfiles < 64) {
            a.files[a.nfiles++] = argv[i];
        } else {
            fprintf(stderr, "ibp-pack: at most 64 files\n");
            return 2;
        }
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "compress"))
        return ibp_cmd_compress(&a);
    if (!strcmp(cmd, "decompress"))
        return ibp_cmd_decompress(&a);
    if (!strcmp(cmd, "check"))
        return ibp_cmd_check(&a);
    if (!strcmp(cmd, "plan"))
        return ibp_cmd_plan(&a);
    if (!strcmp(cmd, "bench"))
        return ibp_cmd_bench(&a);
    ibp_usage();
    return 2;
}
