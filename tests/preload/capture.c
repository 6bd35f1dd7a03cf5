/* SPDX-License-Identifier: MIT
 * ibpshim: the shim's own allocations and module loads (a pinned shadow on the compressor thread,
 * the staging ring, a plan's device copy and the kernels at the first compressed copy) happen
 * while the application captures a stream in global mode, as PyTorch does by default: they must
 * neither fail nor invalidate the capture, and the copies beside it go compressed and arrive whole. */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

static void *dev_buf;
static uint8_t *back;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev_buf, back);
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("capture", 1);
    const size_t n = (6u << 20) + 1000, small = 4096;
    uint8_t *host = NULL, *small_back = malloc(small);
    void *dev_small = NULL;
    CHECK(small_back != NULL, "malloc");
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    CHECK_CUDA(cudaMalloc(&dev_small, small));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    preload_fill_weights(host, n);
    cudaStream_t s, cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));

    /* Nothing of the shim's is allocated yet: the region was never copied. */
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaMemsetAsync(dev_small, 0x3c, small, cs));
    PreloadWaiting waiting = {.host = host, .n = n, .s = s, .capturing = 1};
    const unsigned copies =
        preload_wait_compressed("capture", "copies beside a global-mode capture", totals, copy_all, &waiting);
    /* Compressed copies back to back (the staging pool recycles, the shim asks after its own
     * events), then a device write into the region (its fence is asked after at the next copy,
     * which must send the new bytes), all while the capture goes on. */
    IbpshimTransferTotals before, after;
    CHECK(totals(&before) == 0, "totals");
    for (int i = 0; i < 4; i++)
        copy_all(&waiting);
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x77, n / 2, s));
    CHECK_CUDA(cudaMemcpyAsync(host + n / 4, dev_buf, n / 2, cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < 2; i++)
        copy_all(&waiting);
    CHECK(host[n / 4] == 0x77 && host[n / 4 + n / 2 - 1] == 0x77, "the device write did not land");
    CHECK(totals(&after) == 0, "totals");
    CHECK(after.compressed_in > before.compressed_in, "no copy after the first went compressed");
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CHECK_CUDA(cudaStreamIsCapturing(cs, &status));
    CHECK(status == cudaStreamCaptureStatusActive, "the capture was invalidated (status %d)", (int)status);
    cudaGraph_t graph = NULL;
    CHECK_CUDA(cudaStreamEndCapture(cs, &graph));
    cudaGraphExec_t exec = NULL;
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphLaunch(exec, cs));
    CHECK_CUDA(cudaStreamSynchronize(cs));
    CHECK_CUDA(cudaMemcpy(small_back, dev_small, small, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < small; i++)
        CHECK(small_back[i] == 0x3c, "the captured graph wrote 0x%02x at byte %zu", small_back[i], i);
    printf("capture: compressed after %u copies during a global-mode capture, which stayed valid\n", copies);

    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_CUDA(cudaStreamDestroy(cs));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(dev_small));
    CHECK_CUDA(cudaFree(dev_buf));
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    free(small_back);
    printf("capture: ok\n");
    return 0;
}
