// SPDX-License-Identifier: MIT
// ibpshim: the device staging pool against the fake CUDA: one allocation per context cut into
// buffers in a ring, reuse only after the stream that released a buffer got past it, live buffers
// never overlapping, and what an exhausted pool does.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <random>
#include <thread>

extern "C" {
#include "kernels/driver.h"
#include "kernels/staging.h"
}

namespace
{

constexpr size_t MiB = (size_t)1 << 20;

class Staging : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        drv_ = ibp_driver_get();
        if (!drv_)
            GTEST_SKIP() << "needs a CUDA driver (the fake one in CI)";
        ASSERT_EQ(drv_->cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuDevicePrimaryCtxRetain(&ctx_, dev_), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuCtxPushCurrent(ctx_), CUDA_SUCCESS);
        pushed_ = true;
        ASSERT_EQ(drv_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    }

    void TearDown() override
    {
        if (stream_)
            drv_->cuStreamDestroy(stream_);
        if (pushed_) {
            CUcontext popped;
            drv_->cuCtxPopCurrent(&popped);
            drv_->cuDevicePrimaryCtxRelease(dev_);
        }
    }

    const IbpDriver *drv_ = nullptr;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
    CUstream stream_ = nullptr;
    bool pushed_ = false;
};

// The pool is per context and lives as long as the process: its size is set once, here.
TEST_F(Staging, BoundReuseAndExhaustion)
{
    ibp_staging_configure(24 * MiB, 0);
    IbpStagingBuf *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 9 * MiB + 512 * 1024 + 1, &a), 0);
    EXPECT_EQ(a->size, 9 * MiB + 512 * 1024 + 256); // rounded to 256 bytes, no size classes
    EXPECT_EQ(a->waited_ns, 0u);
    ASSERT_EQ(ibp_staging_acquire(ctx_, 10 * MiB, &b), 0);
    EXPECT_EQ(b->ptr, a->ptr + a->size); // cut one after the other
    // 19.5 MiB in use: a third does not fit, and this pool may not wait.
    EXPECT_EQ(ibp_staging_acquire(ctx_, 9 * MiB, &c), -EBUSY);
    // Above the pool's size on its own: never.
    EXPECT_EQ(ibp_staging_acquire(ctx_, 25 * MiB, &c), -EBUSY);

    // Released on a stream with work queued: its space is reused once the stream got past it; the
    // end of the ring is too short for 9 MiB, so the buffer wraps to the start.
    ASSERT_EQ(drv_->cuMemcpyDtoDAsync(a->ptr + a->size / 2, a->ptr, a->size / 2, stream_), CUDA_SUCCESS);
    const CUdeviceptr a_ptr = a->ptr;
    ASSERT_EQ(ibp_staging_release(a, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    ASSERT_EQ(ibp_staging_acquire(ctx_, 9 * MiB, &c), 0);
    EXPECT_EQ(c->ptr, a_ptr);
    EXPECT_EQ(c->waited_ns, 0u);

    // A pool that waits: with both buffers released on a stream that is still busy, an acquire
    // waits for the oldest and gets a buffer; the time it waited is on the buffer.
    ibp_staging_configure(24 * MiB, 1);
    ASSERT_EQ(drv_->cuMemcpyDtoDAsync(b->ptr + b->size / 2, b->ptr, b->size / 2, stream_), CUDA_SUCCESS);
    ASSERT_EQ(ibp_staging_release(b, stream_), 0);
    ASSERT_EQ(ibp_staging_release(c, stream_), 0);
    IbpStagingBuf *d = nullptr, *e = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 10 * MiB, &d), 0);
    const uint64_t d_waited = d->waited_ns;
    ASSERT_EQ(drv_->cuMemcpyDtoDAsync(d->ptr + d->size / 2, d->ptr, d->size / 2, stream_), CUDA_SUCCESS);
    ASSERT_EQ(ibp_staging_release(d, stream_), 0);
    // Space comes back in order: 20 MiB in one piece only once everything before it is done.
    ASSERT_EQ(ibp_staging_acquire(ctx_, 20 * MiB, &e), 0);
    EXPECT_LT(d_waited + e->waited_ns, 10ull * 1000 * 1000 * 1000);

    // All given back: the whole pool serves one run.
    ASSERT_EQ(ibp_staging_release(e, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    IbpStagingBuf *big = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 24 * MiB, &big), 0);
    EXPECT_EQ(big->size, 24 * MiB);
    ASSERT_EQ(ibp_staging_release(big, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
}

// Runs of every size acquired and released in random interleavings, a few held at once (as
// threads enqueueing copies hold them): no two held buffers share a byte, every buffer lies inside
// the pool, and the pool keeps serving.  An acquire may give up (-EBUSY) only while the oldest
// buffer is one this thread holds, which nobody else will release.
TEST_F(Staging, HeldBuffersNeverOverlap)
{
    ibp_staging_configure(24 * MiB, 1);
    std::mt19937_64 rng(5);
    std::deque<IbpStagingBuf *> held;
    CUdeviceptr lo = ~(CUdeviceptr)0, hi = 0;
    int acquired = 0, gave_up = 0;
    for (int step = 0; step < 3000; step++) {
        if (held.size() < 3 && rng() % 2) {
            const size_t want = 1 + rng() % (rng() % 8 ? 512 * 1024 : 6 * MiB);
            IbpStagingBuf *b = nullptr;
            const int rc = ibp_staging_acquire(ctx_, want, &b);
            if (rc == -EBUSY && !held.empty()) {
                gave_up++;
                continue;
            }
            ASSERT_EQ(rc, 0) << "step " << step;
            acquired++;
            EXPECT_GE(b->size, want);
            EXPECT_EQ(b->size % 256, 0u);
            for (const IbpStagingBuf *o : held)
                ASSERT_TRUE(b->ptr + b->size <= o->ptr || o->ptr + o->size <= b->ptr) << "step " << step;
            lo = std::min(lo, b->ptr);
            hi = std::max(hi, b->ptr + b->size);
            held.push_back(b);
        } else if (!held.empty()) {
            const size_t k = rng() % 4 ? 0 : rng() % held.size(); // mostly the oldest first
            IbpStagingBuf *b = held[k];
            held.erase(held.begin() + (long)k);
            if (rng() % 2) {
                ASSERT_EQ(drv_->cuMemcpyDtoDAsync(b->ptr + b->size / 2, b->ptr, b->size / 2, stream_), CUDA_SUCCESS);
            }
            ASSERT_EQ(ibp_staging_release(b, stream_), 0);
        }
    }
    EXPECT_LE(hi - lo, 24 * MiB);
    EXPECT_GT(acquired, 1000);
    EXPECT_LT(gave_up * 10, acquired);
    for (IbpStagingBuf *b : held)
        ASSERT_EQ(ibp_staging_release(b, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
}

// A host function that holds its stream until the gate opens.
void CUDA_CB hold_stream(void *arg)
{
    auto *gate = static_cast<std::atomic<int> *>(arg);
    while (!gate->load())
        std::this_thread::yield();
}

// Buffers released on two streams in turn, one of them held: the other's completed releases say
// nothing of the held one's (a completed record answers only for its own stream), so the ring
// gives back no space past the held stream's oldest buffer until that stream gets past it.
TEST_F(Staging, AnotherStreamsCompletionsDoNotFreeAHeldStreamsBuffers)
{
    using LaunchHostFunc = CUresult (*)(CUstream, CUhostFn, void *);
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    const auto launch_host = lib ? (LaunchHostFunc)dlsym(lib, "cuLaunchHostFunc") : nullptr;
    ASSERT_NE(launch_host, nullptr);
    CUstream held = nullptr;
    ASSERT_EQ(drv_->cuStreamCreate(&held, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    std::atomic<int> gate{0};
    ASSERT_EQ(launch_host(held, hold_stream, &gate), CUDA_SUCCESS);
    ibp_staging_configure(24 * MiB, 0);
    // Whatever earlier tests left in the ring is given back first.
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    IbpStagingBuf *whole = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 24 * MiB, &whole), 0);
    ASSERT_EQ(ibp_staging_release(whole, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);

    IbpStagingBuf *bufs[4] = {};
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(ibp_staging_acquire(ctx_, 4 * MiB, &bufs[i]), 0) << i;
        ASSERT_EQ(ibp_staging_release(bufs[i], i % 2 ? stream_ : held), 0) << i;
    }
    const CUdeviceptr first = bufs[0]->ptr; // released on the held stream
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    IbpStagingBuf *tail = nullptr, *more = nullptr;
    ASSERT_EQ(ibp_staging_acquire(ctx_, 8 * MiB, &tail), 0); // the ring's free end
    EXPECT_EQ(tail->ptr, first + 16 * MiB);
    EXPECT_EQ(ibp_staging_acquire(ctx_, 4 * MiB, &more), -EBUSY)
        << "space past a buffer of the held stream was given back";
    gate = 1;
    ASSERT_EQ(drv_->cuStreamSynchronize(held), CUDA_SUCCESS);
    ASSERT_EQ(ibp_staging_acquire(ctx_, 4 * MiB, &more), 0);
    EXPECT_EQ(more->ptr, first);
    ASSERT_EQ(ibp_staging_release(more, stream_), 0);
    ASSERT_EQ(ibp_staging_release(tail, stream_), 0);
    ASSERT_EQ(drv_->cuStreamSynchronize(stream_), CUDA_SUCCESS);
    drv_->cuStreamDestroy(held);
}

// A device short of memory: the ring is made a half, a quarter .. of the size set, and with no
// memory at all the context's acquires fail at once until the retry time, not one allocation
// attempt per copy.  Contexts of devices 1 and 2 (the pool of device 0 is set up above).
TEST_F(Staging, ShortOfMemoryHalvesThenRemembers)
{
    int count = 0;
    ASSERT_EQ(drv_->cuDeviceGetCount(&count), CUDA_SUCCESS);
    if (count < 3)
        GTEST_SKIP() << "needs three (fake) devices: FAKECUDA_DEVICES=3";
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    using FailFn = void (*)(const char *, unsigned, unsigned, int);
    using HitsFn = unsigned (*)(void);
    const FailFn fail = lib ? (FailFn)dlsym(lib, "fakecuda_fail_calls") : nullptr;
    const HitsFn hits = lib ? (HitsFn)dlsym(lib, "fakecuda_injected_failures") : nullptr;
    if (!fail || !hits)
        GTEST_SKIP() << "needs the fake CUDA's failure injection";
    ibp_staging_configure(64 * MiB, 0);
    CUdevice d1 = 0, d2 = 0;
    CUcontext c1 = nullptr, c2 = nullptr;
    ASSERT_EQ(drv_->cuDeviceGet(&d1, 1), CUDA_SUCCESS);
    ASSERT_EQ(drv_->cuDeviceGet(&d2, 2), CUDA_SUCCESS);
    ASSERT_EQ(drv_->cuDevicePrimaryCtxRetain(&c1, d1), CUDA_SUCCESS);
    ASSERT_EQ(drv_->cuDevicePrimaryCtxRetain(&c2, d2), CUDA_SUCCESS);

    // 64 and 32 MiB refused: a 16 MiB ring.
    ASSERT_EQ(drv_->cuCtxPushCurrent(c1), CUDA_SUCCESS);
    fail("cuMemAlloc", 0, 2, CUDA_ERROR_OUT_OF_MEMORY);
    const unsigned before = hits();
    IbpStagingBuf *a = nullptr, *b = nullptr;
    ASSERT_EQ(ibp_staging_acquire(c1, 16 * MiB, &a), 0);
    EXPECT_EQ(hits() - before, 2u);
    EXPECT_EQ(ibp_staging_acquire(c1, 1, &b), -EBUSY) << "the ring is 16 MiB, all of it held";
    ASSERT_EQ(ibp_staging_release(a, nullptr), 0);
    ASSERT_EQ(drv_->cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(ibp_staging_acquire(c1, 17 * MiB, &b), -EBUSY) << "above the smaller ring's size";
    CUcontext popped = nullptr;
    ASSERT_EQ(drv_->cuCtxPopCurrent(&popped), CUDA_SUCCESS);

    // Nothing at all: 64, 32 and 16 MiB tried once, then no more tries for a while.
    ASSERT_EQ(drv_->cuCtxPushCurrent(c2), CUDA_SUCCESS);
    fail("cuMemAlloc", 0, 100, CUDA_ERROR_OUT_OF_MEMORY);
    const unsigned before2 = hits();
    EXPECT_EQ(ibp_staging_acquire(c2, MiB, &b), -ENOMEM);
    EXPECT_EQ(hits() - before2, 3u);
    EXPECT_EQ(ibp_staging_acquire(c2, MiB, &b), -ENOMEM);
    EXPECT_EQ(hits() - before2, 3u) << "the failure is remembered";
    fail("cuMemAlloc", 0, 0, 0);
    ASSERT_EQ(drv_->cuCtxPopCurrent(&popped), CUDA_SUCCESS);
    drv_->cuDevicePrimaryCtxRelease(d1);
    drv_->cuDevicePrimaryCtxRelease(d2);
}

} // namespace
