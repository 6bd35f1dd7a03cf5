/* SPDX-License-Identifier: MIT
 * ibpshim: process-wide start-up and shut-down of the shim. */
#include "interpose/shim.h"

#include <pthread.h>

#include "common/log.h"
#include "ibp_build_config.h"
#include "ibpshim/ibpshim.h"
#include "report/counters.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void shim_init_once(void)
{
    ibp_log_init_from_env();
    IBP_DEBUG("libibpshim %s loaded (compressed path %s)", IBP_VERSION,
              IBP_HAVE_KERNELS ? "built" : "not built: library compiled without decode kernels");
}

void ibp_shim_init(void)
{
    pthread_once(&init_once, shim_init_once);
}

__attribute__((constructor)) static void shim_constructor(void)
{
    ibp_shim_init();
}

__attribute__((destructor)) static void shim_destructor(void)
{
    ibp_counters_log();
}

__attribute__((visibility("default"))) const char *ibpshim_version(void)
{
    return IBP_VERSION;
}

__attribute__((visibility("default"))) int ibpshim_compression_built(void)
{
    return IBP_HAVE_KERNELS;
}
