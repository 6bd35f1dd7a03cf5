// SPDX-License-Identifier: MIT
// ibpshim: the Driver API layer and the embedded-kernel pipeline, against whatever libcuda.so.1 the
// loader finds (the fake one under the unit suite; none at all in the no-driver test).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

extern "C" {
#include "kernels/driver.h"
#include "kernels/module.h"
}

TEST(Driver, LoadsOrExplainsWhy)
{
    const IbpDriver *drv = ibp_driver_get();
    const bool expect_driver = std::getenv("IBP_EXPECT_DRIVER") != nullptr;
    if (expect_driver) {
        ASSERT_NE(drv, nullptr) << ibp_driver_error();
        EXPECT_GE(drv->version, 12000);
        EXPECT_STREQ(ibp_driver_error(), "");
        int count = 0;
        ASSERT_EQ(drv->cuDeviceGetCount(&count), CUDA_SUCCESS);
        EXPECT_GE(count, 1);
    } else if (drv) {
        GTEST_SKIP() << "a CUDA driver is installed system-wide; the no-driver path is not reachable here";
    } else {
        EXPECT_NE(std::string(ibp_driver_error()).find("libcuda.so.1"), std::string::npos) << ibp_driver_error();
    }
}

TEST(Driver, ResultNamesWithoutDriver)
{
    EXPECT_STREQ(ibp_driver_result_name(CUDA_SUCCESS), "CUDA_SUCCESS");
    EXPECT_STREQ(ibp_driver_result_name(CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
}

TEST(Kernels, SelftestThroughTheDriver)
{
    char why[256] = "";
    const int err = ibp_kernels_selftest(0, 100003, why, sizeof(why));
    if (!ibp_driver_get()) {
        EXPECT_EQ(err, -ENODEV) << why;
        return;
    }
    if (!ibp_kernels_built()) {
        EXPECT_EQ(err, -ENOTSUP) << why;
        return;
    }
    EXPECT_EQ(err, 0) << why;
    EXPECT_EQ(std::string(why).rfind("ok:", 0), 0u) << why;
}

TEST(Kernels, ModuleCacheReturnsOneEntryPerContext)
{
    const IbpDriver *drv = ibp_driver_get();
    if (!drv || !ibp_kernels_built())
        GTEST_SKIP() << "needs a driver and embedded kernels";
    CUdevice dev;
    CUcontext ctx;
    ASSERT_EQ(drv->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(drv->cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    ASSERT_EQ(drv->cuCtxPushCurrent(ctx), CUDA_SUCCESS);
    const IbpModule *a = nullptr, *b = nullptr;
    ASSERT_EQ(ibp_module_get(ctx, &a), 0);
    ASSERT_EQ(ibp_module_get(ctx, &b), 0);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a->ctx, ctx);
    EXPECT_GT(a->sm_count, 0);
    for (int k = 0; k < IBP_KERNEL_COUNT; k++)
        EXPECT_NE(a->fn[k], nullptr);
    CUcontext popped;
    drv->cuCtxPopCurrent(&popped);
    drv->cuDevicePrimaryCtxRelease(dev);
}
