/* SPDX-License-Identifier: MIT
 * ibpshim: a graph instantiated to be launchable from the device may run whenever a kernel
 * launches it, so no host call marks its writes.  When such a graph copies into a compressed
 * region, copies go raw from its instantiation on, and every copy delivers the graph's bytes.
 * DEVICE_GRAPH_HOW picks how it comes to write the region: runtime (cudaGraphInstantiateWithFlags),
 * params (cudaGraphInstantiateWithParams), driver (the driver's cuGraphInstantiateWithFlags),
 * update (made writing elsewhere, then cudaGraphExecUpdate), or none (instantiated without the
 * flag: the region stays compressed).  One way per process: raw copies are for the rest of it. */
#include <stdint.h>
#include <string.h>

#include <cuda.h>

#include "tests/preload/preload_check.h"

typedef CUresult (*CuGraphInstantiateFn)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);

static void *dev_buf;
static uint8_t *back;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev_buf, back);
}

/* A graph of one device-to-host copy of len bytes from src into dst, captured on cs. */
static cudaGraph_t copy_graph(cudaStream_t cs, void *dst, const void *src, size_t len)
{
    cudaGraph_t graph = NULL;
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost, cs));
    CHECK_CUDA(cudaStreamEndCapture(cs, &graph));
    return graph;
}

/* Instantiates graph as `how` says; exits 77 when the device refuses graphs it could launch. */
static cudaGraphExec_t instantiate(cudaGraph_t graph, const char *how)
{
    cudaGraphExec_t exec = NULL;
    cudaError_t err;
    if (!strcmp(how, "none")) {
        err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    } else if (!strcmp(how, "params")) {
        cudaGraphInstantiateParams params = {.flags = cudaGraphInstantiateFlagDeviceLaunch};
        err = cudaGraphInstantiateWithParams(&exec, graph, &params);
    } else if (!strcmp(how, "driver")) {
        void *const fn = dlsym(RTLD_DEFAULT, "cuGraphInstantiateWithFlags");
        CHECK(fn != NULL, "cuGraphInstantiateWithFlags not found");
        const CUresult r = ((CuGraphInstantiateFn)fn)((CUgraphExec *)&exec, (CUgraph)graph,
                                                      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH);
        err = r == CUDA_SUCCESS               ? cudaSuccess
              : r == CUDA_ERROR_NOT_SUPPORTED ? cudaErrorNotSupported
                                              : cudaErrorInvalidValue;
    } else {
        err = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagDeviceLaunch);
    }
    if (err != cudaSuccess && strcmp(how, "none")) {
        printf("device_graph: %s: the device refused a graph it could launch (%s), skipped\n", how,
               cudaGetErrorName(err));
        exit(77);
    }
    CHECK_CUDA(err);
    return exec;
}

/* k copies of the region, each checked byte for byte; returns the compressed bytes they sent. */
static uint64_t copies(PreloadTotalsFn totals, const PreloadWaiting *w, int k)
{
    return preload_round_trips(totals, w, dev_buf, back, k);
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("device_graph", 1);
    const char *how = getenv("DEVICE_GRAPH_HOW");
    if (!how)
        how = "runtime";
    const int flagged = strcmp(how, "none") != 0;
    const size_t n = (4u << 20) + 1000, off = (1u << 20) + 3 * 4096 + 5, len = (40u << 10) + 9;
    uint8_t *host = NULL, *elsewhere = NULL, *patch = malloc(len);
    void *dev_patch = NULL;
    CHECK(patch != NULL, "malloc");
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaHostAlloc((void **)&elsewhere, len, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    CHECK_CUDA(cudaMalloc(&dev_patch, len));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    preload_fill_weights(host, n);
    cudaStream_t s, cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    PreloadWaiting w = {.host = host, .n = n, .s = s};
    const unsigned waited = preload_wait_compressed("device_graph", how, totals, copy_all, &w);

    const int update = !strcmp(how, "update");
    cudaGraph_t graph = copy_graph(cs, host + off, dev_patch, len);
    cudaGraph_t first = update ? copy_graph(cs, elsewhere, dev_patch, len) : NULL;
    const cudaGraphExec_t exec = instantiate(update ? first : graph, update ? "runtime" : how);
    if (update) {
        /* Writing elsewhere, the graph leaves the region compressed. */
        CHECK(copies(totals, &w, 2) > 0, "update: copies went raw before the graph wrote the region");
        cudaGraphExecUpdateResultInfo info;
        CHECK_CUDA(cudaGraphExecUpdate(exec, graph, &info));
    }
    const uint64_t after = copies(totals, &w, 4);
    if (flagged)
        CHECK(after == 0,
              "%s: a copy went compressed (%llu bytes) while a graph the device could launch "
              "writes the region",
              how, (unsigned long long)after);
    else
        CHECK(after > 0, "none: the region went raw for a graph only the host launches");

    for (size_t i = 0; i < len; i++)
        patch[i] = (uint8_t)~host[off + i];
    /* From pageable memory the copy may return before its DMA lands: s does not wait for it. */
    CHECK_CUDA(cudaMemcpy(dev_patch, patch, len, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(memcmp(host + off, patch, len) == 0, "%s: the graph did not write the region", how);
    copies(totals, &w, 2);
    printf("device_graph: %s: compressed after %u copies; after the instantiation, copies went %s and "
           "delivered the graph's bytes\n",
           how, waited, flagged ? "raw" : "compressed");

    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    if (first)
        CHECK_CUDA(cudaGraphDestroy(first));
    CHECK_CUDA(cudaStreamDestroy(cs));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(dev_patch));
    CHECK_CUDA(cudaFree(dev_buf));
    CHECK_CUDA(cudaFreeHost(elsewhere));
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    free(patch);
    return 0;
}
