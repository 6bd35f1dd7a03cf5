// SPDX-License-Identifier: MIT
// ibpshim: ordered records of the shim's own events against the fake CUDA: a record seen complete
// answers for the earlier ones of its stream, and for nothing on another stream.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

extern "C" {
#include "kernels/driver.h"
#include "kernels/order.h"
}

namespace
{

typedef CUresult (*LaunchHostFunc)(CUstream, CUhostFn, void *);

// A host function that holds its stream until the gate opens.
void CUDA_CB hold(void *arg)
{
    auto *gate = static_cast<std::atomic<int> *>(arg);
    while (!gate->load())
        std::this_thread::yield();
}

class Order : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        drv_ = ibp_driver_get();
        if (!drv_)
            GTEST_SKIP() << "needs a CUDA driver (the fake one in CI)";
        launch_host_ = reinterpret_cast<LaunchHostFunc>(dlsym(RTLD_DEFAULT, "cuLaunchHostFunc"));
        if (!launch_host_)
            launch_host_ =
                reinterpret_cast<LaunchHostFunc>(dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuLaunchHostFunc"));
        ASSERT_NE(launch_host_, nullptr);
        ASSERT_EQ(drv_->cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuDevicePrimaryCtxRetain(&ctx_, dev_), CUDA_SUCCESS);
        ASSERT_EQ(drv_->cuCtxPushCurrent(ctx_), CUDA_SUCCESS);
        pushed_ = true;
        for (auto &s : streams_)
            ASSERT_EQ(drv_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        for (auto &e : events_)
            ASSERT_EQ(drv_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    }

    void TearDown() override
    {
        gate_ = 1;
        for (auto s : streams_)
            if (s) {
                drv_->cuStreamSynchronize(s);
                drv_->cuStreamDestroy(s);
            }
        for (auto e : events_)
            if (e)
                drv_->cuEventDestroy(e);
        if (pushed_) {
            CUcontext popped;
            drv_->cuCtxPopCurrent(&popped);
            drv_->cuDevicePrimaryCtxRelease(dev_);
        }
    }

    const IbpDriver *drv_ = nullptr;
    LaunchHostFunc launch_host_ = nullptr;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
    CUstream streams_[2] = {};
    CUevent events_[4] = {};
    std::atomic<int> gate_{0};
    bool pushed_ = false;
};

TEST_F(Order, ACompletedRecordAnswersForTheEarlierOnesOfItsStream)
{
    CUstream a = streams_[0], b = streams_[1];
    IbpOrderMark m[4];
    ASSERT_EQ(launch_host_(a, hold, &gate_), CUDA_SUCCESS);
    ASSERT_EQ(launch_host_(b, hold, &gate_), CUDA_SUCCESS);
    ASSERT_EQ(ibp_order_record(drv_, events_[0], a, &m[0]), CUDA_SUCCESS);
    ASSERT_EQ(ibp_order_record(drv_, events_[1], b, &m[1]), CUDA_SUCCESS); // another stream, between
    ASSERT_EQ(ibp_order_record(drv_, events_[2], a, &m[2]), CUDA_SUCCESS);
    EXPECT_NE(m[0].stream, 0u);
    EXPECT_EQ(m[0].stream, m[2].stream);
    EXPECT_NE(m[0].stream, m[1].stream);
    EXPECT_LT(m[0].seq, m[1].seq);
    EXPECT_LT(m[1].seq, m[2].seq);
    // Held: nothing has completed, and nothing is known.
    EXPECT_EQ(ibp_order_query(drv_, events_[2], m[2]), CUDA_ERROR_NOT_READY);
    for (const auto &mark : m)
        EXPECT_FALSE(ibp_order_known_done(mark));
    // Stream a runs on; b stays held.
    gate_ = 1;
    ASSERT_EQ(drv_->cuStreamSynchronize(a), CUDA_SUCCESS);
    gate_ = 0;
    ASSERT_EQ(launch_host_(b, hold, &gate_), CUDA_SUCCESS); // b's record is behind this one
    IbpOrderMark late;
    ASSERT_EQ(ibp_order_record(drv_, events_[3], b, &late), CUDA_SUCCESS);
    EXPECT_FALSE(ibp_order_known_done(m[0])); // not asked yet
    EXPECT_EQ(ibp_order_query(drv_, events_[2], m[2]), CUDA_SUCCESS);
    EXPECT_TRUE(ibp_order_known_done(m[0])) << "the earlier record of the same stream";
    EXPECT_TRUE(ibp_order_known_done(m[2]));
    EXPECT_FALSE(ibp_order_known_done(late)) << "a record of another stream, later in number";
    EXPECT_EQ(ibp_order_query(drv_, events_[3], late), CUDA_ERROR_NOT_READY);
    // A mark of no stream (a failed record) is never known.
    EXPECT_FALSE(ibp_order_known_done(IbpOrderMark{0, 1}));
    gate_ = 1;
    ASSERT_EQ(drv_->cuStreamSynchronize(b), CUDA_SUCCESS);
    EXPECT_EQ(ibp_order_query(drv_, events_[3], late), CUDA_SUCCESS);
    EXPECT_TRUE(ibp_order_known_done(m[1]));
}

// Records of several threads on one stream take numbers in the order the driver took them: after
// the newest is seen complete, every record is known complete.
TEST_F(Order, ThreadsRecordingOnOneStream)
{
    CUstream a = streams_[0];
    ASSERT_EQ(launch_host_(a, hold, &gate_), CUDA_SUCCESS);
    constexpr int kThreads = 4, kEach = 200;
    std::vector<IbpOrderMark> marks(kThreads * kEach);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++)
        ts.emplace_back([&, t] {
            ASSERT_EQ(drv_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
            CUevent ev;
            ASSERT_EQ(drv_->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
            for (int i = 0; i < kEach; i++)
                ASSERT_EQ(ibp_order_record(drv_, ev, a, &marks[t * kEach + i]), CUDA_SUCCESS);
            drv_->cuEventDestroy(ev);
        });
    for (auto &t : ts)
        t.join();
    IbpOrderMark last;
    ASSERT_EQ(ibp_order_record(drv_, events_[0], a, &last), CUDA_SUCCESS);
    for (const auto &mark : marks) {
        EXPECT_LT(mark.seq, last.seq);
        EXPECT_FALSE(ibp_order_known_done(mark));
    }
    gate_ = 1;
    ASSERT_EQ(drv_->cuStreamSynchronize(a), CUDA_SUCCESS);
    EXPECT_EQ(ibp_order_query(drv_, events_[0], last), CUDA_SUCCESS);
    for (const auto &mark : marks)
        EXPECT_TRUE(ibp_order_known_done(mark));
}

} // namespace
