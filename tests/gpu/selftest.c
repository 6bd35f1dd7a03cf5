/* SPDX-License-Identifier: MIT
 * ibpshim: the embedded kernels build, load and run on every visible GPU (suite gpu). */
#include <errno.h>
#include <stdio.h>

#include "common/log.h"
#include "kernels/driver.h"
#include "kernels/module.h"

int main(void)
{
    ibp_log_init_from_env();
    const IbpDriver *drv = ibp_driver_get();
    if (!drv) {
        printf("gpu selftest skipped: no CUDA driver (%s)\n", ibp_driver_error());
        return 77;
    }
    int count = 0;
    if (drv->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        printf("gpu selftest skipped: the driver sees no GPU\n");
        return 77;
    }
    int failed = 0;
    for (int dev = 0; dev < count; dev++) {
        char why[256];
        /* 64 Mi words: several times the L2 and far past one wave of blocks. */
        const int err = ibp_kernels_selftest(dev, 64u << 20, why, sizeof(why));
        printf("device %d: %s\n", dev, why);
        failed |= err != 0;
    }
    return failed;
}
