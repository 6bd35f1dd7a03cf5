/* SPDX-License-Identifier: MIT
 * ibpshim: a random sequence of everything that writes a compressed region behind a copy's back
 * (host writes, device-to-host copies and memsets, 1D or pitched, host functions, graphs with host
 * nodes or copies into it), each followed by copies of the whole region that must deliver exactly
 * its bytes.  The seed
 * (STRESS_SEED) and the number of operations (STRESS_OPS) can be set; both are printed. */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

/* A host function's (or host node's) work: inverts [at, at + len) of the region. */
typedef struct Invert {
    uint8_t *at;
    size_t len;
    int owned; /* freed by the function (a host function's; a host node's is reused) */
} Invert;

static void CUDART_CB invert(void *arg)
{
    Invert *const v = arg;
    for (size_t i = 0; i < v->len; i++)
        v->at[i] = (uint8_t)~v->at[i];
    if (v->owned)
        free(v);
}

static void *dev;
static uint8_t *back;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev, back);
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A range inside [0, n): mostly short, sometimes up to a MiB (writes over much of the region
 * leave no run long enough to go compressed). */
static void pick_range(size_t n, size_t *off, size_t *len)
{
    const size_t max = rnd() % 8 == 0 ? 1u << 20 : 32u << 10;
    *len = 1 + rnd() % max;
    *off = rnd() % (n - *len + 1);
}

static unsigned long env_or(const char *name, unsigned long fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtoul(v, NULL, 0) : fallback;
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("stale_stress", 1);
    const size_t n = (16u << 20) + 777;
    const unsigned long seed = env_or("STRESS_SEED", 20261204), ops = env_or("STRESS_OPS", 600);
    rng_state = seed ? seed : 1;
    uint8_t *host = NULL, *noise = malloc(n);
    void *dev_noise = NULL;
    back = malloc(n);
    CHECK(back != NULL && noise != NULL, "malloc");
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev, n));
    CHECK_CUDA(cudaMalloc(&dev_noise, n));
    preload_fill_weights(host, n);
    for (size_t i = 0; i < n; i++)
        noise[i] = (uint8_t)rnd();
    CHECK_CUDA(cudaMemcpy(dev_noise, noise, n, cudaMemcpyHostToDevice));
    /* From pageable memory the blocking copy may return before it lands, queued on the legacy
     * stream, which the non-blocking streams below do not wait for. */
    CHECK_CUDA(cudaDeviceSynchronize());
    cudaStream_t s, cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));

    /* Two graphs: one copies device bytes into a range of the region, one inverts another range
     * in a host node. */
    const size_t g_off = (1u << 20) + 123, g_len = (96u << 10) + 5;
    Invert g_invert = {.at = host + (3u << 20) + 77, .len = (40u << 10) + 3, .owned = 0};
    cudaGraph_t graphs[2];
    cudaGraphExec_t execs[2];
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaMemcpyAsync(host + g_off, (uint8_t *)dev_noise + 4096, g_len, cudaMemcpyDeviceToHost, cs));
    CHECK_CUDA(cudaStreamEndCapture(cs, &graphs[0]));
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaLaunchHostFunc(cs, invert, &g_invert));
    CHECK_CUDA(cudaStreamEndCapture(cs, &graphs[1]));
    for (int g = 0; g < 2; g++)
        CHECK_CUDA(cudaGraphInstantiate(&execs[g], graphs[g], 0));

    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    unsigned long checks = 0, compressed_checks = 0, writes[6] = {0};
    for (unsigned long op = 0; op < ops; op++) {
        size_t off, len;
        const unsigned kind = (unsigned)(rnd() % 10);
        switch (kind) {
        case 0: /* host write, after the stream's earlier writes have landed */
            CHECK_CUDA(cudaStreamSynchronize(s));
            pick_range(n, &off, &len);
            for (size_t i = 0; i < len; i++)
                host[off + i] = (uint8_t)rnd();
            writes[0]++;
            break;
        case 1: { /* a device write: a copy of device bytes from anywhere, or a memset; 1D or pitched */
            pick_range(n, &off, &len);
            const size_t from = rnd() % (n - len + 1);
            const size_t rows = 1 + rnd() % 16, width = 1 + len / rows;
            const size_t pitch = width + rnd() % 4096, pitched = (rows - 1) * pitch + width;
            const int value = (int)(rnd() & 0xff);
            switch (pitched > n - off || pitched > n - from ? rnd() % 2 : rnd() % 4) {
            case 0:
                CHECK_CUDA(
                    cudaMemcpyAsync(host + off, (uint8_t *)dev_noise + from, len, cudaMemcpyDeviceToHost, s));
                break;
            case 1:
                CHECK_CUDA(cudaMemsetAsync(host + off, value, len, s));
                break;
            case 2:
                CHECK_CUDA(cudaMemcpy2DAsync(host + off, pitch, (uint8_t *)dev_noise + from, pitch, width,
                                             rows, cudaMemcpyDeviceToHost, s));
                break;
            default:
                CHECK_CUDA(cudaMemset2DAsync(host + off, pitch, value, width, rows, s));
                break;
            }
            writes[1]++;
            break;
        }
        case 2: { /* host function */
            Invert *const v = malloc(sizeof(*v));
            CHECK(v != NULL, "malloc");
            pick_range(n, &off, &len);
            *v = (Invert){.at = host + off, .len = len, .owned = 1};
            CHECK_CUDA(cudaLaunchHostFunc(s, invert, v));
            writes[2]++;
            break;
        }
        case 3: /* a graph's copy into the region */
        case 4: /* a graph's host node */
            CHECK_CUDA(cudaGraphLaunch(execs[kind - 3], s));
            writes[kind]++;
            break;
        case 5: /* checked copies until one goes compressed (the compressor caught up), 2 s at most */
            CHECK_CUDA(cudaStreamSynchronize(s));
            for (const double start = preload_now(); preload_now() - start < 2.0;) {
                IbpshimTransferTotals a, b;
                CHECK(totals(&a) == 0, "totals");
                copy_all(&waiting);
                CHECK(totals(&b) == 0, "totals");
                if (b.compressed_in > a.compressed_in)
                    break;
                usleep(20000);
            }
            writes[5]++;
            break;
        default: { /* a copy of the whole region, checked against it once the stream has passed it */
            IbpshimTransferTotals a, b;
            CHECK(totals(&a) == 0, "totals");
            CHECK_CUDA(cudaMemsetAsync(dev, 0x5c, n, s));
            CHECK_CUDA(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
            CHECK(totals(&b) == 0, "totals");
            CHECK_CUDA(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
            CHECK_CUDA(cudaStreamSynchronize(s));
            for (size_t i = 0; i < n; i++)
                CHECK(back[i] == host[i],
                      "seed %lu, operation %lu: byte %zu is 0x%02x, expected 0x%02x (%llu bytes of the copy "
                      "went "
                      "compressed)",
                      seed, op, i, back[i], host[i], (unsigned long long)(b.compressed_in - a.compressed_in));
            checks++;
            compressed_checks += b.compressed_in > a.compressed_in;
            break;
        }
        }
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    printf("stale_stress: seed %lu, %lu operations: %lu host writes, %lu device writes, %lu host "
           "functions, %lu + %lu graph launches, %lu waits; %lu copies checked, %lu of them partly "
           "compressed\n",
           seed, ops, writes[0], writes[1], writes[2], writes[3], writes[4], writes[5], checks,
           compressed_checks);
    CHECK(compressed_checks > 0, "no checked copy went compressed: the sequence tested nothing");
    for (int g = 0; g < 2; g++) {
        CHECK_CUDA(cudaGraphExecDestroy(execs[g]));
        CHECK_CUDA(cudaGraphDestroy(graphs[g]));
    }
    CHECK_CUDA(cudaStreamDestroy(cs));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(dev_noise));
    CHECK_CUDA(cudaFree(dev));
    CHECK_CUDA(cudaFreeHost(host));
    free(noise);
    free(back);
    printf("stale_stress: ok\n");
    return 0;
}
