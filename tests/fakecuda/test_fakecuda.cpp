// SPDX-License-Identifier: MIT
// ibpshim: unit tests of the fake CUDA runtime and driver the CI runs every interposition test on.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <future>
#include <thread>
#include <vector>

#include "tests/fakecuda/fakecuda.h"
#include "tools/fill_kernel.h"

namespace {

// Holds a stream at a host function until opened, so tests can look at the world while work is
// queued but not executed.  The destructor opens it and waits until every enqueued host function has
// returned, so a failing test never deadlocks or leaves a worker touching a dead gate.
class Gate {
public:
    ~Gate()
    {
        open();
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return pending_ == 0; });
    }
    void open()
    {
        std::lock_guard<std::mutex> lock(mu_);
        open_ = true;
        cv_.notify_all();
    }
    void enqueue(cudaStream_t s)
    {
        {
            std::lock_guard<std::mutex> lock(mu_);
            pending_++;
        }
        const cudaError_t e = cudaLaunchHostFunc(s, &Gate::wait, this);
        if (e != cudaSuccess) {
            std::lock_guard<std::mutex> lock(mu_);
            pending_--;
        }
        ASSERT_EQ(e, cudaSuccess);
    }

private:
    static void wait(void *arg)
    {
        Gate *const g = static_cast<Gate *>(arg);
        std::unique_lock<std::mutex> lock(g->mu_);
        g->cv_.wait(lock, [g] { return g->open_; });
        g->pending_--;
        g->cv_.notify_all();
    }
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = false;
    int pending_ = 0;
};

// Polls an event for up to two seconds; true once it completed.
bool event_completes(cudaEvent_t ev)
{
    for (int i = 0; i < 2000; i++) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return true;
        if (e != cudaErrorNotReady)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

class Fake : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
        (void)cudaGetLastError();
        fakecuda_set_copy_delay_us(0);
    }
    void TearDown() override { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); }
};

TEST_F(Fake, DeviceProperties)
{
    int count = -1;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    EXPECT_EQ(count, 1);
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    EXPECT_STREQ(prop.name, "fakecuda");
    EXPECT_EQ(prop.multiProcessorCount, 132);
    EXPECT_EQ(prop.major, 9);
    EXPECT_EQ(prop.unifiedAddressing, 1);
    EXPECT_EQ(prop.canMapHostMemory, 1);
    EXPECT_GT(prop.sharedMemPerBlockOptin, prop.sharedMemPerBlock);
    int sms = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    EXPECT_EQ(sms, 132);
    EXPECT_EQ(cudaGetDeviceProperties(&prop, 1), cudaErrorInvalidDevice);
    EXPECT_EQ(cudaSetDevice(3), cudaErrorInvalidDevice);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    int v = 0;
    ASSERT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
    EXPECT_EQ(v, 13000);
    ASSERT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
    EXPECT_EQ(v, 13000);
    int dev = -1;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    EXPECT_EQ(dev, 0);
    EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
    EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
}

TEST_F(Fake, PointerAttributes)
{
    void *dev = nullptr, *pinned = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 1000), cudaSuccess);
    ASSERT_EQ(cudaHostAlloc(&pinned, 5000, cudaHostAllocMapped), cudaSuccess);
    std::vector<uint8_t> pageable(4096);
    std::vector<uint8_t> reg(8192);
    ASSERT_EQ(cudaHostRegister(reg.data(), reg.size(), cudaHostRegisterDefault), cudaSuccess);

    cudaPointerAttributes a;
    ASSERT_EQ(cudaPointerGetAttributes(&a, (char *)dev + 10), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    EXPECT_EQ(a.device, 0);
    EXPECT_EQ(a.devicePointer, (char *)dev + 10);
    EXPECT_EQ(a.hostPointer, nullptr);
    ASSERT_EQ(cudaPointerGetAttributes(&a, (char *)pinned + 4999), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeHost);
    EXPECT_EQ(a.hostPointer, (char *)pinned + 4999);
    EXPECT_EQ(a.devicePointer, (char *)pinned + 4999);
    ASSERT_EQ(cudaPointerGetAttributes(&a, reg.data() + 100), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeHost);
    ASSERT_EQ(cudaPointerGetAttributes(&a, pageable.data()), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
    EXPECT_EQ(a.devicePointer, nullptr);

    // Driver view: range start and size of an interior pointer.
    CUdeviceptr start = 0;
    size_t size = 0;
    CUmemorytype type;
    int ordinal = -1;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                   CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[] = {&start, &size, &type, &ordinal};
    ASSERT_EQ(cuPointerGetAttributes(4, attrs, data, (CUdeviceptr)dev + 999), CUDA_SUCCESS);
    EXPECT_EQ(start, (CUdeviceptr)dev);
    EXPECT_EQ(size, 1000u);
    EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE);
    EXPECT_EQ(ordinal, 0);
    // One past the end of a device allocation belongs to nothing.
    EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)dev + 1000),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)pageable.data()),
              CUDA_ERROR_INVALID_VALUE);
    void *host = nullptr;
    EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)dev),
              CUDA_ERROR_INVALID_VALUE);

    void *mapped = nullptr;
    ASSERT_EQ(cudaHostGetDevicePointer(&mapped, (char *)pinned + 7, 0), cudaSuccess);
    EXPECT_EQ(mapped, (char *)pinned + 7);
    EXPECT_EQ(cudaHostGetDevicePointer(&mapped, pageable.data(), 0), cudaErrorInvalidValue);
    EXPECT_EQ(cudaHostGetDevicePointer(&mapped, pinned, 1), cudaErrorInvalidValue);

    EXPECT_EQ(cudaHostUnregister(reg.data()), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    ASSERT_EQ(cudaPointerGetAttributes(&a, dev), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
}

TEST_F(Fake, MisuseErrorCodes)
{
    std::vector<uint8_t> host(1 << 16);
    void *dev = nullptr, *pinned = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 4096), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&pinned, 4096), cudaSuccess);

    EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFree((char *)dev + 1), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFree(pinned), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFreeHost(host.data()), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFreeHost(dev), cudaErrorInvalidValue);
    EXPECT_EQ(cudaHostAlloc(&pinned, 16, 0x80), cudaErrorInvalidValue);
    EXPECT_EQ(cudaHostRegister(host.data(), host.size(), 0x40), cudaErrorInvalidValue);
    EXPECT_EQ(cudaHostRegister(dev, 100, 0), cudaErrorInvalidValue);

    ASSERT_EQ(cudaHostRegister(host.data() + 1000, 2000, cudaHostRegisterPortable), cudaSuccess);
    EXPECT_EQ(cudaHostRegister(host.data() + 2999, 10, 0), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_EQ(cudaHostRegister(host.data(), 1001, 0), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_EQ(cudaHostRegister(host.data() + 500, 5000, 0), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_EQ(cudaHostRegister(pinned, 10, 0), cudaErrorInvalidValue); // CUDA 13 answers so for cudaHostAlloc memory
    EXPECT_EQ(cudaHostRegister(host.data(), 1000, 0), cudaSuccess); // adjacent is fine
    EXPECT_EQ(cudaHostUnregister(host.data() + 1001), cudaErrorInvalidValue);
    EXPECT_EQ(cudaHostUnregister(host.data() + 1000), cudaSuccess);
    EXPECT_EQ(cudaHostUnregister(host.data() + 1000), cudaErrorHostMemoryNotRegistered);
    EXPECT_EQ(cudaHostUnregister(host.data()), cudaSuccess);

    // Out of bounds of a known device allocation, and device addresses that belong to nothing.
    EXPECT_EQ(cudaMemcpy(dev, host.data(), 4097, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpy((char *)dev + 4000, host.data(), 97, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpy(host.data(), (char *)dev + 4096, 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpyAsync(dev, host.data(), 5000, cudaMemcpyDefault, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemset(dev, 0, 4097), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemset(host.data(), 0, 16), cudaErrorInvalidValue);
    // Wrong direction (swapped arguments) and kinds that do not exist.
    EXPECT_EQ(cudaMemcpy(host.data(), dev, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), 16, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpy(host.data(), dev, 16, cudaMemcpyHostToHost), cudaSuccess); // unchecked in CUDA 13
    EXPECT_EQ(cudaMemcpy(nullptr, nullptr, 0, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), 16, (cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
    // Streams and events that do not exist (any more).
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaMemcpyAsync(dev, pinned, 16, cudaMemcpyHostToDevice, s), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, 0x10), cudaErrorInvalidValue);
    cudaEvent_t ev = nullptr;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(ev), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(ev, 0), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaEventQuery(ev), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaEventCreateWithFlags(&ev, cudaEventInterprocess), cudaErrorInvalidValue);

    EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    // Zero-size operations are no-ops.
    void *none = &host;
    EXPECT_EQ(cudaMalloc(&none, 0), cudaSuccess);
    EXPECT_EQ(none, nullptr);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), 0, cudaMemcpyHostToDevice), cudaSuccess);

    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST_F(Fake, CopyRoundTripAllKindsAndOffsets)
{
    const size_t n = 3 * 4096 + 7;
    std::vector<uint8_t> src(n), back(n);
    fill_pattern(src.data(), n, 1);
    void *dev = nullptr, *dev2 = nullptr;
    uint8_t *pinned = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, n), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev2, n), cudaSuccess);
    ASSERT_EQ(cudaHostAlloc((void **)&pinned, n, cudaHostAllocWriteCombined | cudaHostAllocPortable), cudaSuccess);

    const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDefault};
    for (const cudaMemcpyKind kind : kinds) {
        for (const size_t off : {size_t(0), size_t(1), size_t(3), size_t(4095)}) {
            for (const size_t len : {size_t(1), size_t(2), size_t(13), n - off}) {
                if (off + len > n)
                    continue;
                memset(back.data(), 0, n);
                ASSERT_EQ(cudaMemset(dev, 0, n), cudaSuccess);
                ASSERT_EQ(cudaMemcpy((char *)dev + off, src.data() + off, len, kind), cudaSuccess);
                ASSERT_EQ(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost), cudaSuccess);
                for (size_t i = 0; i < n; i++) {
                    const uint8_t want = i >= off && i < off + len ? src[i] : 0;
                    ASSERT_EQ(back[i], want) << "kind " << kind << " off " << off << " len " << len << " at " << i;
                }
            }
        }
    }
    ASSERT_EQ(cudaMemcpy(dev, src.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev2, dev, n, cudaMemcpyDeviceToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(pinned, dev2, n, cudaMemcpyDefault, 0), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(0), cudaSuccess);
    EXPECT_EQ(memcmp(pinned, src.data(), n), 0);
    memset(back.data(), 0, n);
    ASSERT_EQ(cudaMemcpy(back.data(), pinned, n, cudaMemcpyHostToHost), cudaSuccess);
    EXPECT_EQ(memcmp(back.data(), src.data(), n), 0);

    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFree(dev2), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST_F(Fake, FreshDeviceMemoryIsNotZero)
{
    void *dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    uint8_t back[64] = {0};
    ASSERT_EQ(cudaMemcpy(back, dev, sizeof(back), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_NE(back[0], 0);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST_F(Fake, PinnedAsyncSourceIsReadWhenTheStreamGetsThere)
{
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    uint8_t *pinned = nullptr;
    void *dev = nullptr;
    ASSERT_EQ(cudaMallocHost((void **)&pinned, 256), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev, 256), cudaSuccess);
    memset(pinned, 1, 256);
    fakecuda_reset_stats();
    {
        Gate gate;
        gate.enqueue(s);
        ASSERT_EQ(cudaMemcpyAsync(dev, pinned, 256, cudaMemcpyHostToDevice, s), cudaSuccess);
        memset(pinned, 2, 256); // the hazard: written after the call, before the copy ran
        FakecudaStats st;
        fakecuda_stats(&st);
        EXPECT_EQ(st.h2d_bytes, 0u) << "async copy ran before its stream reached it";
        EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
        gate.open();
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    }
    uint8_t back[256];
    ASSERT_EQ(cudaMemcpy(back, dev, 256, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(back[i], 2);
    FakecudaStats st;
    fakecuda_stats(&st);
    EXPECT_EQ(st.h2d_bytes, 256u);
    EXPECT_EQ(st.h2d_calls, 1u);
    EXPECT_EQ(st.h2d_staged_calls, 0u);
    EXPECT_EQ(st.d2h_bytes, 256u);
    EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST_F(Fake, PageableAsyncSourceIsConsumedAtCallTime)
{
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    std::vector<uint8_t> pageable(300, 1);
    void *dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 300), cudaSuccess);
    fakecuda_reset_stats();
    {
        Gate gate;
        gate.enqueue(s);
        ASSERT_EQ(cudaMemcpyAsync(dev, pageable.data(), 300, cudaMemcpyHostToDevice, s), cudaSuccess);
        memset(pageable.data(), 2, 300);
        gate.open();
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    }
    uint8_t back[300];
    ASSERT_EQ(cudaMemcpy(back, dev, 300, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 300; i++)
        ASSERT_EQ(back[i], 1);
    FakecudaStats st;
    fakecuda_stats(&st);
    EXPECT_EQ(st.h2d_staged_calls, 1u);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST_F(Fake, DestinationIsStaleUntilSynchronized)
{
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    uint8_t *pinned = nullptr;
    void *dev = nullptr;
    ASSERT_EQ(cudaMallocHost((void **)&pinned, 64), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    ASSERT_EQ(cudaMemset(dev, 7, 64), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    memset(pinned, 0, 64);
    {
        Gate gate;
        gate.enqueue(s);
        ASSERT_EQ(cudaMemcpyAsync(pinned, dev, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_EQ(pinned[0], 0);
        gate.open();
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    }
    EXPECT_EQ(pinned[63], 7);
    // Pageable destinations are written before the call returns.
    uint8_t pageable[64] = {0};
    {
        Gate gate;
        gate.enqueue(s);
        std::thread opener([&gate] {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            gate.open();
        });
        ASSERT_EQ(cudaMemcpyAsync(pageable, dev, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
        EXPECT_EQ(pageable[0], 7);
        opener.join();
    }
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// A stream with a pinned and a device buffer of n bytes, for the stream-order tests.
void stream_and_buffers(cudaStream_t *s, uint8_t **pinned, void **dev, size_t n)
{
    ASSERT_EQ(cudaStreamCreate(s), cudaSuccess);
    ASSERT_EQ(cudaMallocHost((void **)pinned, n), cudaSuccess);
    ASSERT_EQ(cudaMalloc(dev, n), cudaSuccess);
}

TEST_F(Fake, StreamRunsItsWorkInOrder)
{
    cudaStream_t s = nullptr;
    const size_t n = 1 << 16;
    uint8_t *pinned = nullptr;
    void *dev = nullptr;
    ASSERT_NO_FATAL_FAILURE(stream_and_buffers(&s, &pinned, &dev, n));
    fakecuda_set_copy_delay_us(200);
    for (int round = 1; round <= 20; round++) {
        ASSERT_EQ(cudaMemsetAsync(dev, round, n, s), cudaSuccess);
        ASSERT_EQ(cudaMemcpyAsync(pinned, dev, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        ASSERT_EQ(pinned[round * 7], round);
    }
    fakecuda_set_copy_delay_us(0);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// What a stream callback saw when it ran.
struct CallbackSeen {
    std::atomic<int> runs{0};
    cudaStream_t stream = nullptr;
    cudaError_t status = cudaErrorUnknown;
    uint8_t first = 0; // the first byte of the copy enqueued before it
    const uint8_t *pinned = nullptr;
};

void CUDART_CB record_callback(cudaStream_t stream, cudaError_t status, void *arg)
{
    CallbackSeen *const seen = static_cast<CallbackSeen *>(arg);
    seen->stream = stream;
    seen->status = status;
    seen->first = seen->pinned[0];
    seen->runs++;
}

TEST_F(Fake, StreamCallbackRunsInStreamOrder)
{
    cudaStream_t s = nullptr;
    const size_t n = 1 << 16;
    uint8_t *pinned = nullptr;
    void *dev = nullptr;
    ASSERT_NO_FATAL_FAILURE(stream_and_buffers(&s, &pinned, &dev, n));
    memset(pinned, 0, n);
    CallbackSeen seen;
    seen.pinned = pinned;
    {
        Gate gate;
        gate.enqueue(s);
        ASSERT_EQ(cudaMemsetAsync(dev, 0x3c, n, s), cudaSuccess);
        ASSERT_EQ(cudaMemcpyAsync(pinned, dev, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
        ASSERT_EQ(cudaStreamAddCallback(s, record_callback, &seen, 0), cudaSuccess);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(seen.runs.load(), 0) << "the callback ran before the work ahead of it";
    }
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(seen.runs.load(), 1);
    EXPECT_EQ(seen.stream, s);
    EXPECT_EQ(seen.status, cudaSuccess);
    EXPECT_EQ(seen.first, 0x3c);
    // The per-thread default stream is handed back as the application passed it (0).
    seen.stream = s;
    ASSERT_EQ(cudaStreamAddCallback_ptsz(nullptr, record_callback, &seen, 0), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize_ptsz(nullptr), cudaSuccess);
    EXPECT_EQ(seen.runs.load(), 2);
    EXPECT_EQ(seen.stream, nullptr);
    // Refused as the real runtime refuses them: nothing runs.
    EXPECT_EQ(cudaStreamAddCallback(s, nullptr, nullptr, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamAddCallback(s, record_callback, &seen, 1), cudaErrorInvalidValue);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaStreamAddCallback(s, record_callback, &seen, 0), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(seen.runs.load(), 2);
    (void)cudaGetLastError();
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST_F(Fake, LegacyStreamWaitsForBlockingStreams)
{
    cudaStream_t blocking, nonblocking;
    ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
    {
        Gate gate;
        gate.enqueue(blocking);
        ASSERT_EQ(cudaEventRecord(ev, 0), cudaSuccess); // the legacy stream waits behind the gate
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_EQ(cudaEventQuery(ev), cudaErrorNotReady);
        EXPECT_EQ(cudaStreamQuery(0), cudaErrorNotReady);
        gate.open();
        EXPECT_TRUE(event_completes(ev));
    }
    {
        Gate gate;
        gate.enqueue(nonblocking);
        ASSERT_EQ(cudaEventRecord(ev, cudaStreamLegacy), cudaSuccess); // non-blocking streams are exempt
        EXPECT_TRUE(event_completes(ev));
        gate.open();
    }
    EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(nonblocking), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
}

TEST_F(Fake, BlockingStreamsWaitForTheLegacyStream)
{
    cudaStream_t blocking, nonblocking;
    ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t a, b;
    ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
    {
        Gate gate;
        gate.enqueue(0);
        ASSERT_EQ(cudaEventRecord(a, blocking), cudaSuccess);
        ASSERT_EQ(cudaEventRecord(b, nonblocking), cudaSuccess);
        EXPECT_TRUE(event_completes(b));
        EXPECT_EQ(cudaEventQuery(a), cudaErrorNotReady);
        float ms = 0;
        EXPECT_EQ(cudaEventElapsedTime(&ms, b, a), cudaErrorNotReady);
        gate.open();
        EXPECT_TRUE(event_completes(a));
        EXPECT_EQ(cudaEventElapsedTime(&ms, b, a), cudaSuccess);
        EXPECT_GE(ms, 0.0f);
    }
    EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(nonblocking), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(a), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(b), cudaSuccess);
}

TEST_F(Fake, EventsAndCrossStreamWaits)
{
    cudaStream_t a, b;
    ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t ev, done, untimed;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(ev), cudaSuccess); // never recorded
    float ms = 0;
    EXPECT_EQ(cudaEventElapsedTime(&ms, ev, done), cudaErrorInvalidResourceHandle);
    {
        Gate gate;
        gate.enqueue(a);
        ASSERT_EQ(cudaEventRecord(ev, a), cudaSuccess);
        ASSERT_EQ(cudaStreamWaitEvent(b, ev, 0), cudaSuccess);
        ASSERT_EQ(cudaEventRecord(done, b), cudaSuccess);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
        // Re-recording after the wait was issued does not change what b waits for.
        gate.open();
        ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
        EXPECT_EQ(cudaEventQuery(ev), cudaSuccess);
    }
    ASSERT_EQ(cudaEventRecord(untimed, a), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(untimed), cudaSuccess);
    EXPECT_EQ(cudaEventElapsedTime(&ms, ev, untimed), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaStreamWaitEvent(b, ev, 5), cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(done), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(untimed), cudaSuccess);
}

TEST_F(Fake, CaptureRecordsWithoutExecutingAndReplays)
{
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint8_t *pinned = nullptr;
    void *dev = nullptr;
    ASSERT_EQ(cudaMallocHost((void **)&pinned, 128), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev, 128), cudaSuccess);
    ASSERT_EQ(cudaMemset(dev, 0, 128), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    memset(pinned, 5, 128);
    fakecuda_reset_stats();

    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    unsigned long long id = 0;
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id, &g, nullptr, nullptr, nullptr), cudaSuccess);
    EXPECT_NE(id, 0u);
    EXPECT_NE(g, nullptr);
    ASSERT_EQ(cudaMemcpyAsync(dev, pinned, 128, cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync((char *)dev + 64, 9, 64, s), cudaSuccess);
    FakecudaStats st;
    fakecuda_stats(&st);
    EXPECT_EQ(st.h2d_calls + st.memset_calls, 0u) << "captured work must not execute";
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    ASSERT_NE(graph, nullptr);
    uint8_t back[128];
    ASSERT_EQ(cudaMemcpy(back, dev, 128, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back[0], 0);

    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int round = 0; round < 2; round++) {
        memset(pinned, 6 + round, 128);
        ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(back, dev, 128, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(back[0], 6 + round);
        EXPECT_EQ(back[63], 6 + round);
        EXPECT_EQ(back[64], 9);
    }
    fakecuda_stats(&st);
    EXPECT_EQ(st.h2d_calls, 2u);
    EXPECT_EQ(st.memset_calls, 2u);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);

    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// A captured cuStreamWriteValue32 and a cuStreamBatchMemOp each become one node, as on the
// driver; the nodes describe their writes, run at each launch, and an executable graph's node can
// be pointed elsewhere.
TEST_F(Fake, CapturedStreamMemoryOperationsAreNodes)
{
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint8_t *pinned = nullptr;
    ASSERT_EQ(cudaMallocHost((void **)&pinned, 256), cudaSuccess);
    memset(pinned, 0, 256);
    const CUdeviceptr at = (CUdeviceptr)(uintptr_t)pinned;

    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cuStreamWriteValue32_v2((CUstream)s, at, 0x11223344u, 0), CUDA_SUCCESS);
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[0].writeValue.address = at + 8;
    ops[0].writeValue.value64 = 0x0102030405060708ull;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[1].writeValue.address = at + 20;
    ops[1].writeValue.value = 0xa5a5a5a5u;
    ASSERT_EQ(cuStreamBatchMemOp_v2((CUstream)s, 2, ops, 0), CUDA_SUCCESS);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(pinned[0], 0) << "captured writes must not execute";

    cudaGraphNode_t nodes[2] = {nullptr, nullptr};
    size_t count = 2;
    ASSERT_EQ(cudaGraphGetNodes(graph, nodes, &count), cudaSuccess);
    ASSERT_EQ(count, 2u);
    CUgraphNodeType type;
    CUDA_BATCH_MEM_OP_NODE_PARAMS p;
    ASSERT_EQ(cuGraphNodeGetType((CUgraphNode)nodes[1], &type), CUDA_SUCCESS);
    EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    ASSERT_EQ(cuGraphBatchMemOpNodeGetParams((CUgraphNode)nodes[1], &p), CUDA_SUCCESS);
    ASSERT_EQ(p.count, 2u);
    EXPECT_EQ(p.paramArray[0].writeValue.address, at + 8);
    EXPECT_EQ(p.paramArray[1].writeValue.value, 0xa5a5a5a5u);
    EXPECT_EQ(cuGraphMemsetNodeGetParams((CUgraphNode)nodes[1], nullptr), CUDA_ERROR_INVALID_VALUE);

    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    uint32_t v32 = 0;
    uint64_t v64 = 0;
    memcpy(&v32, pinned, 4);
    EXPECT_EQ(v32, 0x11223344u);
    memcpy(&v64, pinned + 8, 8);
    EXPECT_EQ(v64, 0x0102030405060708ull);
    memcpy(&v32, pinned + 20, 4);
    EXPECT_EQ(v32, 0xa5a5a5a5u);

    // The executable graph's first node now writes 128 bytes further; the graph's own node is
    // unchanged, and a different count is refused.
    CUDA_BATCH_MEM_OP_NODE_PARAMS moved;
    ASSERT_EQ(cuGraphBatchMemOpNodeGetParams((CUgraphNode)nodes[0], &moved), CUDA_SUCCESS);
    CUstreamBatchMemOpParams op = moved.paramArray[0];
    op.writeValue.address += 128;
    op.writeValue.value = 0x55667788u;
    moved.paramArray = &op;
    ASSERT_EQ(cuGraphExecBatchMemOpNodeSetParams((CUgraphExec)exec, (CUgraphNode)nodes[0], &moved),
              CUDA_SUCCESS);
    CUstreamBatchMemOpParams two[2] = {op, op};
    moved.paramArray = two;
    moved.count = 2;
    EXPECT_EQ(cuGraphExecBatchMemOpNodeSetParams((CUgraphExec)exec, (CUgraphNode)nodes[0], &moved),
              CUDA_ERROR_INVALID_VALUE);
    memset(pinned, 0, 256);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    memcpy(&v32, pinned + 128, 4);
    EXPECT_EQ(v32, 0x55667788u);
    EXPECT_EQ(pinned[0], 0);
    ASSERT_EQ(cuGraphBatchMemOpNodeGetParams((CUgraphNode)nodes[0], &p), CUDA_SUCCESS);
    EXPECT_EQ(p.paramArray[0].writeValue.address, at);

    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST_F(Fake, IllegalCallsDuringCaptureInvalidateIt)
{
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    std::vector<uint8_t> pageable(64);
    void *dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaStreamCaptureStatus status;

    // Synchronizing a capturing stream.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);

    // Pageable memory can be captured: the graph reads it at each launch.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(dev, pageable.data(), 64, cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    memset(pageable.data(), 0x42, pageable.size());
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    uint8_t back[64] = {0};
    ASSERT_EQ(cudaMemcpyAsync(back, dev, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(back[63], 0x42);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);

    // Host queries of an event recorded in the capture.
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(ev, s), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(ev), cudaErrorCapturedEvent);
    EXPECT_EQ(cudaStreamWaitEvent(s, ev, 0), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    ASSERT_EQ(cudaEventRecord(ev, s), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(ev), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);

    // The legacy stream while a blocking stream captures: asking is refused, issuing work invalidates.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    EXPECT_EQ(cudaStreamIsCapturing(0, &status), cudaErrorStreamCaptureImplicit);
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    EXPECT_EQ(cudaMemsetAsync(dev, 0, 64, 0), cudaErrorStreamCaptureImplicit);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);

    // Allocation during a global-mode capture; the legacy stream itself cannot capture.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    void *more = nullptr;
    EXPECT_EQ(cudaMalloc(&more, 64), cudaErrorStreamCaptureUnsupported);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);

    // Ending a thread-local capture from another thread.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaError_t other = cudaSuccess;
    std::thread([&] { other = cudaStreamEndCapture(s, &graph); }).join();
    EXPECT_EQ(other, cudaErrorStreamCaptureWrongThread);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);

    (void)cudaGetLastError();
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST_F(Fake, GetProcAddressByBaseName)
{
    void *fn = nullptr;
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
    EXPECT_EQ(q, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(fn, (void *)&cuMemAlloc_v2);
    ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyHtoDAsync", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q),
              CUDA_SUCCESS);
    EXPECT_EQ(fn, (void *)&cuMemcpyHtoDAsync_v2);
    ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyHtoDAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                  &q),
              CUDA_SUCCESS);
    EXPECT_EQ(fn, (void *)&cuMemcpyHtoDAsync_v2_ptsz);
    ASSERT_EQ(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 12000, 0, &q), CUDA_SUCCESS);
    EXPECT_EQ(fn, (void *)&cuStreamGetCaptureInfo_v2);
    ASSERT_EQ(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 13000, 0, &q), CUDA_SUCCESS);
    EXPECT_EQ(fn, (void *)&cuStreamGetCaptureInfo_v3);
    EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchThing", &fn, 12000, 0, &q), CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(q, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT_EQ(fn, nullptr);
    EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 3000, 0, &q), CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(q, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0x100, &q), CUDA_ERROR_INVALID_VALUE);

    // Drive a copy through looked-up pointers, as the shim does.
    using AllocFn = CUresult (*)(CUdeviceptr *, size_t);
    using FreeFn = CUresult (*)(CUdeviceptr);
    using HtoDFn = CUresult (*)(CUdeviceptr, const void *, size_t);
    using DtoHFn = CUresult (*)(void *, CUdeviceptr, size_t);
    void *p_alloc, *p_free, *p_htod, *p_dtoh;
    ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc", &p_alloc, 12000, 0, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(cuGetProcAddress_v2("cuMemFree", &p_free, 12000, 0, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyHtoD", &p_htod, 12000, 0, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyDtoH", &p_dtoh, 12000, 0, nullptr), CUDA_SUCCESS);
    CUdeviceptr d = 0;
    ASSERT_EQ(reinterpret_cast<AllocFn>(p_alloc)(&d, 33), CUDA_SUCCESS);
    const char msg[33] = "thirty-two bytes and a nul here";
    char back[33] = {0};
    ASSERT_EQ(reinterpret_cast<HtoDFn>(p_htod)(d, msg, 33), CUDA_SUCCESS);
    ASSERT_EQ(reinterpret_cast<DtoHFn>(p_dtoh)(back, d, 33), CUDA_SUCCESS);
    EXPECT_STREQ(back, msg);
    EXPECT_EQ(reinterpret_cast<DtoHFn>(p_dtoh)(back, d, 34), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(reinterpret_cast<HtoDFn>(p_htod)((CUdeviceptr)back, msg, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(reinterpret_cast<FreeFn>(p_free)(d), CUDA_SUCCESS);
}

// The shim's way in: primary context of device 0 pushed around its own work, on a thread that never
// touched the runtime.
TEST_F(Fake, DriverContextsAndSelftestKernel)
{
    std::thread([] {
        CUdeviceptr d = 0;
        ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
        EXPECT_EQ(cuMemAlloc_v2(&d, 64), CUDA_ERROR_INVALID_CONTEXT);
        CUcontext ctx = nullptr, cur = nullptr;
        ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, ctx);
        CUdevice dev = -1;
        ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
        EXPECT_EQ(dev, 0);
        int v = 0;
        ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0), CUDA_SUCCESS);
        EXPECT_EQ(v, 227 * 1024);
        ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0), CUDA_SUCCESS);
        EXPECT_GT(v, 0);

        CUmodule mod = nullptr;
        const char bad[16] = "not an image";
        EXPECT_EQ(cuModuleLoadData(&mod, bad), CUDA_ERROR_INVALID_IMAGE);
        unsigned char elf[64] = {0x7f, 'E', 'L', 'F'};
        ASSERT_EQ(cuModuleLoadData(&mod, elf), CUDA_SUCCESS);
        CUfunction fn = nullptr;
        EXPECT_EQ(cuModuleGetFunction(&fn, mod, "ibp_k_nothing"), CUDA_ERROR_NOT_FOUND);
        ASSERT_EQ(cuModuleGetFunction(&fn, mod, "ibp_k_selftest"), CUDA_SUCCESS);
        ASSERT_EQ(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000), CUDA_SUCCESS);
        ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn), CUDA_SUCCESS);
        EXPECT_EQ(v, 100000);
        EXPECT_EQ(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20),
                  CUDA_ERROR_INVALID_VALUE);
        int blocks = 0;
        ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, 256, 0), CUDA_SUCCESS);
        EXPECT_EQ(blocks, 8);

        const uint32_t n = 1001, seed = 0xdeadbeef;
        ASSERT_EQ(cuMemAlloc_v2(&d, n * 4), CUDA_SUCCESS);
        CUstream s = nullptr;
        ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        void *params[] = {&d, (void *)&n, (void *)&seed};
        EXPECT_EQ(cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, s, params, params), CUDA_ERROR_INVALID_VALUE);
        EXPECT_EQ(cuLaunchKernel(fn, 4, 1, 1, 2048, 1, 1, 0, s, params, nullptr), CUDA_ERROR_INVALID_VALUE);
        EXPECT_EQ(cuLaunchKernel(fn, 0, 1, 1, 256, 1, 1, 0, s, params, nullptr), CUDA_ERROR_INVALID_VALUE);
        EXPECT_EQ(cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 200000, s, params, nullptr), CUDA_ERROR_INVALID_VALUE);
        fakecuda_reset_stats();
        ASSERT_EQ(cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
        std::vector<uint32_t> out(n);
        ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), d, n * 4, s), CUDA_SUCCESS); // pageable: returns when done
        for (uint32_t i = 0; i < n; i++)
            ASSERT_EQ(out[i], (uint32_t)(i * 2654435761u) ^ seed) << i;
        FakecudaStats st;
        fakecuda_stats(&st);
        EXPECT_EQ(st.kernel_launches, 1u);
        EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
        EXPECT_EQ(cuModuleUnload(mod), CUDA_SUCCESS);
        EXPECT_EQ(cuModuleGetFunction(&fn, mod, "ibp_k_selftest"), CUDA_ERROR_INVALID_HANDLE);
        ASSERT_EQ(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, ctx);
        EXPECT_EQ(cuCtxPopCurrent_v2(&cur), CUDA_ERROR_INVALID_CONTEXT);
        EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    }).join();
}

TEST_F(Fake, MadeContextsAreDestroyedWithTheirMemory)
{
    std::thread([] {
        ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
        CUcontext primary = nullptr, a = nullptr, b = nullptr, cur = nullptr;
        ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
        CUctxCreateParams affinity = {};
        affinity.numExecAffinityParams = 1;
        EXPECT_EQ(cuCtxCreate_v4(&a, &affinity, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(cuCtxCreate_v4(&a, nullptr, 0, 99), CUDA_ERROR_INVALID_DEVICE);
        ASSERT_EQ(cuCtxCreate_v4(&a, nullptr, 0, 0), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, a); // made current
        EXPECT_NE(a, primary);
        CUdeviceptr d = 0;
        void *pinned = nullptr;
        ASSERT_EQ(cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
        ASSERT_EQ(cuMemHostAlloc(&pinned, 4096, 0), CUDA_SUCCESS);
        std::vector<uint8_t> reg(8192);
        ASSERT_EQ(cuMemHostRegister_v2(reg.data(), reg.size(), 0), CUDA_SUCCESS);
        EXPECT_EQ(cuCtxDestroy_v2(primary), CUDA_ERROR_INVALID_CONTEXT);
        ASSERT_EQ(cuCtxDestroy_v2(a), CUDA_SUCCESS);
        EXPECT_EQ(cuCtxDestroy_v2(a), CUDA_ERROR_INVALID_CONTEXT);
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, nullptr); // off the thread's stack
        EXPECT_EQ(cuCtxSetCurrent(a), CUDA_ERROR_INVALID_CONTEXT);

        // The next one gets the destroyed one's handle; the memory made in the old one is gone.
        ASSERT_EQ(cuCtxCreate_v2(&b, 0, 0), CUDA_SUCCESS);
        EXPECT_EQ(b, a);
        size_t size = 0;
        CUdeviceptr base = 0;
        EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, d), CUDA_ERROR_NOT_FOUND);
        EXPECT_EQ(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
        EXPECT_EQ(cuMemHostUnregister(reg.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
        CUdeviceptr again = 0;
        ASSERT_EQ(cuMemAlloc_v2(&again, 4096), CUDA_SUCCESS);
        EXPECT_EQ(again, d); // first fit: the freed addresses come back
        EXPECT_EQ(cuMemFree_v2(again), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxDestroy(b), CUDA_SUCCESS);
        EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    }).join();
}

// A green context converts to a context of its own handle, which it does not make current;
// cuCtxFromGreenCtx answers that context every time, and cuCtxDestroy leaves it to
// cuGreenCtxDestroy, which invalidates it and the green handle.  What is allocated or registered
// while it is current is the primary context's: it outlives the green context (a registration did
// on an H100 with driver 580.159) and the made context that takes the slot after, and goes with a
// reset of the primary context.
TEST_F(Fake, GreenContextMemoryIsThePrimaryContexts)
{
    std::thread([] {
        ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
        CUdevResource sm = {}, several[2] = {};
        EXPECT_EQ(cuDeviceGetDevResource(0, &sm, CU_DEV_RESOURCE_TYPE_INVALID),
                  CUDA_ERROR_INVALID_RESOURCE_TYPE);
        EXPECT_EQ(cuDeviceGetDevResource(99, &sm, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_DEVICE);
        EXPECT_EQ(cuDeviceGetDevResource(0, nullptr, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_VALUE);
        ASSERT_EQ(cuDeviceGetDevResource(0, &sm, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
        int sms = 0;
        ASSERT_EQ(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
        EXPECT_EQ(sm.type, CU_DEV_RESOURCE_TYPE_SM);
        EXPECT_EQ(sm.sm.smCount, (unsigned)sms);
        EXPECT_EQ(sm.sm.smCount % sm.sm.smCoscheduledAlignment, 0u);

        CUdevResourceDesc desc = nullptr;
        CUdevResource forged = {};
        forged.type = CU_DEV_RESOURCE_TYPE_SM;
        EXPECT_EQ(cuDevResourceGenerateDesc(&desc, &forged, 1), CUDA_ERROR_INVALID_VALUE);
        EXPECT_EQ(cuDevResourceGenerateDesc(&desc, &sm, 0), CUDA_ERROR_INVALID_VALUE);
        several[0] = several[1] = sm;
        EXPECT_EQ(cuDevResourceGenerateDesc(&desc, several, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
        ASSERT_EQ(cuDevResourceGenerateDesc(&desc, &sm, 1), CUDA_SUCCESS);

        CUgreenCtx g = nullptr;
        EXPECT_EQ(cuGreenCtxCreate(&g, desc, 0, 0), CUDA_ERROR_INVALID_VALUE); // the stream flag is required
        EXPECT_EQ(cuGreenCtxCreate(&g, nullptr, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
        EXPECT_EQ(cuGreenCtxCreate(nullptr, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
        ASSERT_EQ(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
        CUcontext ctx = nullptr, again = nullptr, cur = nullptr;
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, nullptr); // not made current
        unsigned flags = 0;
        int active = 0;
        ASSERT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
        EXPECT_EQ(active, 1); // the primary context retained
        EXPECT_EQ(cuCtxFromGreenCtx(nullptr, g), CUDA_ERROR_INVALID_VALUE);
        ASSERT_EQ(cuCtxFromGreenCtx(&ctx, g), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxFromGreenCtx(&again, g), CUDA_SUCCESS);
        EXPECT_EQ(again, ctx);
        CUcontext primary = nullptr;
        ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
        EXPECT_NE(ctx, primary); // a handle of its own here (a real driver's is not known)
        ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        CUdeviceptr d = 0;
        ASSERT_EQ(cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
        std::vector<uint8_t> reg(8192);
        ASSERT_EQ(cuMemHostRegister_v2(reg.data(), reg.size(), 0), CUDA_SUCCESS);
        EXPECT_EQ(cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT); // the green context's to end

        ASSERT_EQ(cuGreenCtxDestroy(g), CUDA_SUCCESS);
        EXPECT_EQ(cuGreenCtxDestroy(g), CUDA_ERROR_INVALID_CONTEXT);
        EXPECT_EQ(cuCtxFromGreenCtx(&again, g), CUDA_ERROR_INVALID_CONTEXT);
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, nullptr); // off the thread's stack
        EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
        CUcontext made = nullptr;
        ASSERT_EQ(cuCtxCreate_v2(&made, 0, 0), CUDA_SUCCESS);
        EXPECT_EQ(made, ctx); // the slot is free again
        size_t size = 0;
        CUdeviceptr base = 0;
        EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, d), CUDA_SUCCESS); // the memory stays
        EXPECT_EQ(base, d);
        EXPECT_EQ(cuMemHostRegister_v2(reg.data(), reg.size(), 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        ASSERT_EQ(cuCtxDestroy_v2(made), CUDA_SUCCESS);

        // Not the made context's that took the slot: the primary context's, reset with it.
        ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
        EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, d), CUDA_SUCCESS);
        ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
        EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, d), CUDA_ERROR_NOT_FOUND);
        EXPECT_EQ(cuMemHostUnregister(reg.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
        ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
        EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    }).join();
}

// A context destroyed while current elsewhere stays current there, and calls in it fail with
// CUDA_ERROR_CONTEXT_IS_DESTROYED: on another thread, and below the top of the destroying
// thread's own stack, which only loses its top entry.
TEST_F(Fake, DestroyedContextsFailWhereTheyStayCurrent)
{
    std::thread([] {
        ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
        CUcontext a = nullptr, b = nullptr, cur = nullptr;
        ASSERT_EQ(cuCtxCreate_v2(&a, 0, 0), CUDA_SUCCESS);
        CUdeviceptr d = 0;
        // current on another thread, which calls in it before and after it is destroyed here
        std::promise<void> current, destroyed;
        std::thread other([a, &current, &destroyed] {
            ASSERT_EQ(cuCtxSetCurrent(a), CUDA_SUCCESS);
            CUdeviceptr x = 0;
            EXPECT_EQ(cuMemAlloc_v2(&x, 256), CUDA_SUCCESS);
            EXPECT_EQ(cuMemFree_v2(x), CUDA_SUCCESS);
            current.set_value();
            destroyed.get_future().wait();
            EXPECT_EQ(cuMemAlloc_v2(&x, 256), CUDA_ERROR_CONTEXT_IS_DESTROYED);
            CUcontext still = nullptr;
            EXPECT_EQ(cuCtxGetCurrent(&still), CUDA_SUCCESS);
            EXPECT_EQ(still, a);
        });
        current.get_future().wait();
        ASSERT_EQ(cuCtxCreate_v2(&b, 0, 0), CUDA_SUCCESS); // pushed above a
        ASSERT_EQ(cuCtxDestroy_v2(a), CUDA_SUCCESS);       // below the top: not popped
        destroyed.set_value();
        other.join();
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, b);
        EXPECT_EQ(cuMemAlloc_v2(&d, 256), CUDA_SUCCESS); // in b
        EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxDestroy_v2(b), CUDA_SUCCESS); // the top: popped, a current again
        ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, a);
        EXPECT_EQ(cuMemAlloc_v2(&d, 256), CUDA_ERROR_CONTEXT_IS_DESTROYED);
        std::thread([a] {
            ASSERT_EQ(cuCtxSetCurrent(a), CUDA_ERROR_INVALID_CONTEXT); // no longer a context
        }).join();
        ASSERT_EQ(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
        EXPECT_EQ(cur, a);
    }).join();
}

TEST_F(Fake, ManyThreadsManyStreams)
{
    const int threads = 4, rounds = 8;
    const size_t n = 64 * 1024 + 3;
    std::atomic<int> failures{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) {
        pool.emplace_back([t, n, &failures] {
            const bool per_thread = t % 2;
            cudaStream_t s = cudaStreamPerThread;
            if (!per_thread && cudaStreamCreate(&s) != cudaSuccess) {
                failures++;
                return;
            }
            uint8_t *pinned = nullptr;
            void *dev = nullptr;
            std::vector<uint8_t> back(n);
            if (cudaHostAlloc((void **)&pinned, n, 0) != cudaSuccess || cudaMalloc(&dev, n) != cudaSuccess) {
                failures++;
                return;
            }
            for (int r = 0; r < rounds; r++) {
                fill_pattern(pinned, n, (uint32_t)(t * 100 + r));
                if (cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, s) != cudaSuccess ||
                    cudaMemcpyAsync(back.data(), dev, n, cudaMemcpyDeviceToHost, s) != cudaSuccess)
                    failures++;
                if (memcmp(back.data(), pinned, n) != 0)
                    failures++;
            }
            if (cudaStreamSynchronize(s) != cudaSuccess || cudaFree(dev) != cudaSuccess ||
                cudaFreeHost(pinned) != cudaSuccess)
                failures++;
            if (!per_thread && cudaStreamDestroy(s) != cudaSuccess)
                failures++;
        });
    }
    for (std::thread &th : pool)
        th.join();
    EXPECT_EQ(failures.load(), 0);
}

TEST_F(Fake, FreeReallocReusesAddressesSafely)
{
    void *a = nullptr, *b = nullptr;
    ASSERT_EQ(cudaMalloc(&a, 1 << 20), cudaSuccess);
    ASSERT_EQ(cudaFree(a), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, 1 << 20), cudaSuccess);
    EXPECT_EQ(a, b); // first fit hands the same range back, as the real allocator often does
    uint8_t byte = 3;
    EXPECT_EQ(cudaMemcpy(b, &byte, 1, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaFree(b), cudaSuccess);
}

// An injected failure refuses exactly the calls it names, does none of their work, and counts.
// PTX loads as a library or a module; its kernels' parameter layout is answered, launches take the
// arguments as a list or one buffer (the wrong size refused), and a captured launch is a kernel node
// whose arguments an executable graph can change.
TEST_F(Fake, KernelsTakeTheirArgumentsEveryWay)
{
    CUmodule bad = nullptr;
    EXPECT_EQ(cuModuleLoadData(&bad, "not an image at all"), CUDA_ERROR_INVALID_IMAGE);
    cudaLibrary_t lib = nullptr;
    cudaKernel_t kernel = nullptr;
    ASSERT_EQ(cudaLibraryLoadData(&lib, ibp_fill_ptx, nullptr, nullptr, 0, nullptr, nullptr, 0), cudaSuccess);
    ASSERT_EQ(cudaLibraryGetKernel(&kernel, lib, "ibp_test_fill"), cudaSuccess);
    EXPECT_EQ(cudaLibraryGetKernel(&kernel, lib, "no_such_kernel"), cudaErrorSymbolNotFound);
    ASSERT_EQ(cudaLibraryGetKernel(&kernel, lib, "ibp_test_fill"), cudaSuccess);
    const size_t want_offset[] = {0, 8, 16}, want_size[] = {8, 4, 8};
    for (size_t i = 0; i < 3; i++) {
        size_t offset = 99, size = 99;
        ASSERT_EQ(cuFuncGetParamInfo((CUfunction)kernel, i, &offset, &size), CUDA_SUCCESS);
        EXPECT_EQ(offset, want_offset[i]);
        EXPECT_EQ(size, want_size[i]);
    }
    size_t offset, size;
    EXPECT_EQ(cuFuncGetParamInfo((CUfunction)kernel, 3, &offset, &size), CUDA_ERROR_INVALID_VALUE);

    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint32_t *pinned = nullptr;
    ASSERT_EQ(cudaMallocHost((void **)&pinned, 64 * sizeof(uint32_t)), cudaSuccess);
    memset(pinned, 0, 64 * sizeof(uint32_t));
    uint32_t *dst = pinned, value = 0x11111111u;
    uint64_t words = 16;
    void *params[] = {&dst, &value, &words};
    ASSERT_EQ(cudaLaunchKernel((const void *)kernel, dim3(2), dim3(32), params, 0, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(pinned[0], value);
    EXPECT_EQ(pinned[15], value);
    EXPECT_EQ(pinned[16], 0u);

    struct {
        uint32_t *dst;
        uint32_t value, pad;
        uint64_t words;
    } buf = {pinned + 16, 0x22222222u, 0, 8};
    size_t buf_size = sizeof(buf);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size,
                     CU_LAUNCH_PARAM_END};
    ASSERT_EQ(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, nullptr, extra),
              CUDA_SUCCESS);
    size_t short_size = 16;
    void *short_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &short_size,
                           CU_LAUNCH_PARAM_END};
    EXPECT_EQ(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, nullptr, short_extra),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, params, extra),
              CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(pinned[16], 0x22222222u);
    EXPECT_EQ(pinned[23], 0x22222222u);
    EXPECT_EQ(pinned[24], 0u);

    // Captured: a kernel node with the function and its own copy of the arguments.
    dst = pinned + 32;
    value = 0x33333333u;
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    const cudaLaunchConfig_t config = {dim3(1), dim3(32), 0, s, nullptr, 0};
    ASSERT_EQ(cudaLaunchKernelExC(&config, (const void *)kernel, params), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    dst = nullptr;
    cudaGraphNode_t node = nullptr;
    size_t count = 1;
    ASSERT_EQ(cudaGraphGetNodes(graph, &node, &count), cudaSuccess);
    CUgraphNodeType type;
    ASSERT_EQ(cuGraphNodeGetType((CUgraphNode)node, &type), CUDA_SUCCESS);
    EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
    CUDA_KERNEL_NODE_PARAMS p;
    ASSERT_EQ(cuGraphKernelNodeGetParams_v2((CUgraphNode)node, &p), CUDA_SUCCESS);
    EXPECT_EQ(p.func, (CUfunction)kernel);
    uint32_t *captured = nullptr;
    memcpy(&captured, p.kernelParams[0], sizeof(captured));
    EXPECT_EQ(captured, pinned + 32);
    // The one attribute: device-updatable, which is set once and for good.
    CUkernelNodeAttrValue attr;
    ASSERT_EQ(cuGraphKernelNodeGetAttribute((CUgraphNode)node,
                                            CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &attr),
              CUDA_SUCCESS);
    EXPECT_EQ(attr.deviceUpdatableKernelNode.deviceUpdatable, 0);
    cudaKernelNodeAttrValue on;
    memset(&on, 0, sizeof(on));
    on.deviceUpdatableKernelNode.deviceUpdatable = 1;
    ASSERT_EQ(cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeDeviceUpdatableKernelNode, &on),
              cudaSuccess);
    ASSERT_EQ(cuGraphKernelNodeGetAttribute((CUgraphNode)node,
                                            CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &attr),
              CUDA_SUCCESS);
    EXPECT_EQ(attr.deviceUpdatableKernelNode.deviceUpdatable, 1);
    cudaKernelNodeAttrValue off;
    memset(&off, 0, sizeof(off));
    EXPECT_EQ(cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeDeviceUpdatableKernelNode, &off),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuGraphKernelNodeGetAttribute((CUgraphNode)node, CU_LAUNCH_ATTRIBUTE_PRIORITY, &attr),
              CUDA_ERROR_INVALID_VALUE);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    dst = pinned + 48;
    value = 0x44444444u;
    const cudaKernelNodeParams moved = {(void *)kernel, dim3(1), dim3(32), 0, params, nullptr};
    ASSERT_EQ(cudaGraphExecKernelNodeSetParams(exec, node, &moved), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(pinned[32], 0u) << "the executable graph's node was moved";
    EXPECT_EQ(pinned[48], 0x44444444u);
    EXPECT_EQ(pinned[63], 0x44444444u);

    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaLibraryUnload(lib), cudaSuccess);
}

TEST(FailureInjection, RefusesTheArmedCallsOnly)
{
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    CUdeviceptr d = 0;
    ASSERT_EQ(cuMemAlloc_v2(&d, 16), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8_v2(d, 0, 16), CUDA_SUCCESS);
    const unsigned before = fakecuda_injected_failures();
    fakecuda_fail_calls("cuMemcpyHtoDAsync", 1, 1, CUDA_ERROR_LAUNCH_FAILED);
    const uint8_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {9, 10, 11, 12};
    EXPECT_EQ(cuMemcpyHtoDAsync_v2(d, a, 4, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyHtoDAsync_v2(d + 4, b, 4, nullptr), CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_EQ(cuMemcpyHtoDAsync_v2(d + 8, c, 4, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(fakecuda_injected_failures(), before + 1);
    uint8_t out[12];
    ASSERT_EQ(cuMemcpyDtoH_v2(out, d, 12), CUDA_SUCCESS);
    const uint8_t want[12] = {1, 2, 3, 4, 0, 0, 0, 0, 9, 10, 11, 12};
    EXPECT_EQ(memcmp(out, want, 12), 0);
    // Other entry points are not affected; a stream wait fails once, then works again.
    CUstream s = nullptr;
    CUevent ev = nullptr;
    ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    fakecuda_fail_calls("cuStreamWaitEvent", 0, 1, 0);
    ASSERT_EQ(cuEventRecord(ev, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamWaitEvent(s, ev, 0), CUDA_ERROR_UNKNOWN);
    EXPECT_EQ(cuStreamWaitEvent(s, ev, 0), CUDA_SUCCESS);
    EXPECT_EQ(fakecuda_injected_failures(), before + 2);
    fakecuda_fail_calls("cuLaunchKernel", 0, 0, 0); // disarmed
    EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT_EQ(cuEventDestroy_v2(ev), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

TEST(Sticky, IllegalAddressInKernelIsReportedAtSync)
{
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    CUmodule mod = nullptr;
    unsigned char fatbin[16] = {0x50, 0xed, 0x55, 0xba};
    ASSERT_EQ(cuModuleLoadData(&mod, fatbin), CUDA_SUCCESS);
    CUfunction fn = nullptr;
    ASSERT_EQ(cuModuleGetFunction(&fn, mod, "ibp_k_selftest"), CUDA_SUCCESS);
    CUdeviceptr d = 0;
    ASSERT_EQ(cuMemAlloc_v2(&d, 64), CUDA_SUCCESS);
    const uint32_t n = 17, seed = 1; // 68 bytes into a 64-byte allocation
    void *params[] = {&d, (void *)&n, (void *)&seed};
    ASSERT_EQ(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaStreamSynchronize(0), cudaErrorIllegalAddress);
}

TEST(NoDevice, EveryCallReportsNoDevice)
{
    int count = 5;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
    EXPECT_EQ(count, 0);
    void *p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorNoDevice);
    EXPECT_EQ(cudaHostAlloc(&p, 16, 0), cudaErrorNoDevice);
    EXPECT_EQ(cudaFree(nullptr), cudaErrorNoDevice);
    cudaStream_t s;
    EXPECT_EQ(cudaStreamCreate(&s), cudaErrorNoDevice);
    EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
    CUdeviceptr d;
    EXPECT_EQ(cuMemAlloc_v2(&d, 16), CUDA_ERROR_NO_DEVICE);
    EXPECT_EQ(cudaGetLastError(), cudaErrorNoDevice);
}

} // namespace
