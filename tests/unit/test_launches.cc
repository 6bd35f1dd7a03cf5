// SPDX-License-Identifier: MIT
// ibpshim: reading kernel launch arguments (interpose/launches.c) against the real registry, with
// the CUDA entry points and the router stood in for: which words are looked up, which regions are
// found (each once, past the inline few), the driver's buffer form, the parameter sizes asked once
// per function and again after an unload, a host stub sized through its CUfunction and a kernel
// handle as a CUkernel, and what is noted after the launch.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "interpose/launches.h"
#include "interpose/real.h"
#include "policy/registry.h"
}

namespace
{

// A function of the fake driver: its parameter sizes, and whether it answers as a CUkernel only.
struct FakeFunction {
    std::vector<size_t> sizes;
    bool kernel_only = false;
};

std::map<const void *, FakeFunction> functions;
std::map<const void *, const void *> stubs; // host stub -> its CUfunction
int info_calls = 0;

struct Noted {
    uintptr_t base;
    size_t n;
    cudaStream_t stream;
};
std::vector<Noted> noted;

CUresult param_info(void *f, size_t index, size_t *offset, size_t *size, bool as_kernel)
{
    info_calls++;
    const auto it = functions.find(f);
    if (it == functions.end() || it->second.kernel_only != as_kernel)
        return CUDA_ERROR_INVALID_HANDLE;
    if (index >= it->second.sizes.size())
        return CUDA_ERROR_INVALID_VALUE;
    *offset = 8 * index;
    *size = it->second.sizes[index];
    return CUDA_SUCCESS;
}

CUresult func_info(void *f, size_t index, size_t *offset, size_t *size)
{
    return param_info(f, index, offset, size, false);
}

CUresult kernel_info(void *f, size_t index, size_t *offset, size_t *size)
{
    return param_info(f, index, offset, size, true);
}

cudaError_t func_by_symbol(cudaFunction_t *f, const void *symbol)
{
    const auto it = stubs.find(symbol);
    if (it == stubs.end())
        return cudaErrorInvalidDeviceFunction;
    *f = (cudaFunction_t)it->second;
    return cudaSuccess;
}

} // namespace

// What launches.c takes from the rest of the shim.
extern "C" {
void *ibp_real_resolve(const char *name)
{
    return std::string(name) == "cudaGetFuncBySymbol" ? (void *)func_by_symbol : nullptr;
}

void *ibp_real_resolve_driver(const char *name)
{
    if (std::string(name) == "cuFuncGetParamInfo")
        return (void *)func_info;
    if (std::string(name) == "cuKernelGetParamInfo")
        return (void *)kernel_info;
    return nullptr;
}

int ibp_real_in_library(const void *, const char *)
{
    return 0;
}

void *ibp_real_get(IbpRealId)
{
    return nullptr;
}

int ibp_router_compressing(void)
{
    return 1;
}

void ibp_router_enqueued_write(IbpStreamApi, void *dst, size_t n, enum cudaMemcpyKind kind,
                               cudaStream_t stream)
{
    EXPECT_EQ(kind, cudaMemcpyDeviceToHost);
    noted.push_back({(uintptr_t)dst, n, stream});
}
}

// A host stub: an address in this test's code, as nvcc's stubs are in their object's.
static void stub_kernel() {}

namespace
{

// Fake addresses: the registry never dereferences region memory.
constexpr uintptr_t kBase = 0x7f0000000000ull;
constexpr size_t kSize = 1 << 20;

uintptr_t region(int i)
{
    return kBase + (uintptr_t)i * 2 * kSize;
}

struct Launches : ::testing::Test {
    void SetUp() override
    {
        for (int i = 0; i < 8; i++)
            ASSERT_GT(ibp_registry_add((const void *)region(i), kSize, IBP_REGION_PINNED_ALLOC, 0, nullptr),
                      0);
        functions.clear();
        stubs.clear();
        noted.clear();
        info_calls = 0;
        ibp_args_forget_layouts();
    }
    void TearDown() override
    {
        for (int i = 0; i < 8; i++)
            ibp_registry_remove((const void *)region(i));
        ibp_args_forget_layouts();
    }
};

std::vector<uintptr_t> bases(const IbpArgRegions &r)
{
    std::vector<uintptr_t> out;
    for (size_t i = 0; i < r.n; i++)
        out.push_back(ibp_args_at(&r, i)->base);
    return out;
}

TEST_F(Launches, PointersAndStructuresFindTheirRegionsOnce)
{
    const void *const f = (const void *)0x5000;
    // A pointer, a 4-byte value (never a pointer), a structure of eight words (two into one region,
    // one past the end of all, small integers), a 12-byte parameter (its first word read).
    functions[f] = {{8, 4, 64, 12}, false};
    uint64_t ptr = region(1) + 100;
    uint32_t small = 0x7f00;
    uint64_t words[8] = {region(2), region(2) + kSize - 1, region(7) + kSize + 5, 3, 0, region(3), 0xffff,
                         region(4)};
    unsigned char twelve[12];
    const uint64_t in5 = region(5) + 8;
    memcpy(twelve, &in5, 8);
    memset(twelve + 8, 0xff, 4);
    void *params[] = {&ptr, &small, words, twelve};
    IbpArgRegions r = {};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, nullptr);
    EXPECT_EQ(r.unread, 0);
    const std::vector<uintptr_t> want = {region(1), region(2), region(3), region(4), region(5)};
    EXPECT_EQ(bases(r), want) << "each region once, past the inline four";
    EXPECT_EQ(ibp_args_at(&r, 4)->size, kSize);
    ibp_args_noted(IBP_STREAM_API_LEGACY, &r, (cudaStream_t)0x1234, 1);
    ASSERT_EQ(noted.size(), 5u);
    for (size_t i = 0; i < noted.size(); i++) {
        EXPECT_EQ(noted[i].base, want[i]);
        EXPECT_EQ(noted[i].n, kSize);
        EXPECT_EQ(noted[i].stream, (cudaStream_t)0x1234);
    }
    EXPECT_EQ(r.n, 0u) << "noted releases";
}

TEST_F(Launches, NothingIsNotedForALaunchThatFailed)
{
    const void *const f = (const void *)0x5008;
    functions[f] = {{8}, false};
    uint64_t ptr = region(0);
    void *params[] = {&ptr};
    IbpArgRegions r = {};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, nullptr);
    EXPECT_EQ(r.n, 1u);
    ibp_args_noted(IBP_STREAM_API_LEGACY, &r, nullptr, 0);
    EXPECT_TRUE(noted.empty());
}

TEST_F(Launches, SizesAreAskedOncePerFunctionUntilAnUnload)
{
    const void *const f = (const void *)0x5010;
    functions[f] = {{8, 8}, false};
    uint64_t a = region(0), b = 1;
    void *params[] = {&a, &b};
    for (int i = 0; i < 3; i++) {
        IbpArgRegions r = {};
        ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, nullptr);
        EXPECT_EQ(r.n, 1u);
        ibp_args_release(&r);
    }
    EXPECT_EQ(info_calls, 3) << "two parameters and the index past them, once";
    // After an unload the handle may name another kernel: asked again, and its new sizes hold.
    functions[f] = {{4, 8}, false};
    ibp_args_forget_layouts();
    b = region(6);
    IbpArgRegions r = {};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, nullptr);
    EXPECT_EQ(info_calls, 6);
    EXPECT_EQ(bases(r), std::vector<uintptr_t>{region(6)}) << "the first parameter is 4 bytes now";
    ibp_args_release(&r);
}

TEST_F(Launches, KernelHandlesAndHostStubsAreSizedByTheDriver)
{
    // The driver's launch with a CUkernel: refused as a function, answered as a kernel.
    const void *const k = (const void *)0x5020;
    functions[k] = {{8}, true};
    uint64_t p = region(2);
    void *params[] = {&p};
    IbpArgRegions r = {};
    ibp_args_read(&r, IBP_ARGS_DRIVER, k, params, nullptr);
    EXPECT_EQ(bases(r), std::vector<uintptr_t>{region(2)});
    ibp_args_release(&r);
    // The runtime's launch of a host stub goes through its CUfunction.
    const void *const cf = (const void *)0x5030;
    functions[cf] = {{8}, false};
    stubs[(const void *)stub_kernel] = cf;
    ibp_args_read(&r, IBP_ARGS_RUNTIME, (const void *)stub_kernel, params, nullptr);
    EXPECT_EQ(bases(r), std::vector<uintptr_t>{region(2)});
    ibp_args_release(&r);
    // A cudaKernel_t (not in any loaded object) is the CUkernel it stands for.
    ibp_args_read(&r, IBP_ARGS_RUNTIME, k, params, nullptr);
    EXPECT_EQ(bases(r), std::vector<uintptr_t>{region(2)});
    ibp_args_release(&r);
    // A stub the runtime does not know cannot be sized: unread, nothing found.
    static int unknown_stub;
    ibp_args_read(&r, IBP_ARGS_RUNTIME, (const void *)&unknown_stub, params, nullptr);
    EXPECT_EQ(r.unread, 1);
    EXPECT_EQ(r.n, 0u);
    ibp_args_release(&r);
}

TEST_F(Launches, TheDriversBufferFormIsReadWordByWord)
{
    struct {
        uint64_t p;
        uint32_t v, pad;
        uint64_t q, tiny;
    } buf = {region(3), 7, 0, region(0) + 17, 42};
    size_t size = sizeof(buf);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    IbpArgRegions r = {};
    ibp_args_read(&r, IBP_ARGS_DRIVER, (const void *)0x5040, nullptr, extra);
    EXPECT_EQ(bases(r), (std::vector<uintptr_t>{region(3), region(0)}));
    EXPECT_EQ(info_calls, 0) << "the buffer needs no sizes";
    ibp_args_release(&r);
    // A list with no end in its first 64 entries is read no further (AddressSanitizer would see).
    std::vector<void *> endless(64, (void *)0x7);
    ibp_args_read(&r, IBP_ARGS_DRIVER, (const void *)0x5040, nullptr, endless.data());
    EXPECT_EQ(r.n, 0u);
    ibp_args_release(&r);
}

TEST_F(Launches, ManyWordsAreLookedUpInBatches)
{
    // One structure of 300 words (more than a batch), a region's address in the last.
    const void *const f = (const void *)0x5050;
    functions[f] = {{300 * 8}, false};
    std::vector<uint64_t> words(300, 0x10000);
    words[0] = region(4);
    words[299] = region(7) + kSize - 8;
    void *params[] = {words.data()};
    IbpArgRegions r = {};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, nullptr);
    EXPECT_EQ(bases(r), (std::vector<uintptr_t>{region(4), region(7)}));
    ibp_args_release(&r);
    // No function, or no arguments: nothing read, nothing asked.
    ibp_args_read(&r, IBP_ARGS_DRIVER, nullptr, params, nullptr);
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, nullptr, nullptr);
    EXPECT_EQ(r.n, 0u);
    EXPECT_EQ(r.unread, 0);
}

} // namespace
