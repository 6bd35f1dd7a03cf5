/* SPDX-License-Identifier: MIT
 * ibpshim: picks the block kernels for the running CPU, once; a switch forces the reference. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "codec/internal.h"

static const IbpCodecKernels *ibp_best_kernels = &ibp_codec_kernels_ref;
static pthread_once_t ibp_dispatch_once = PTHREAD_ONCE_INIT;
static int ibp_force_ref;

#if defined(__x86_64__)
/* pext/pdep are microcoded (tens to hundreds of cycles, data dependent) on AMD before Zen 3
 * (family 19h): there the run-by-run reference is faster, so BMI2 is only taken elsewhere. */
static int ibp_bmi2_fast(void)
{
    unsigned eax;
    unsigned ebx;
    unsigned ecx;
    unsigned edx;
    if (!__builtin_cpu_supports("bmi2") || !__builtin_cpu_supports("popcnt") ||
        !__builtin_cpu_supports("sse4.2"))
        return 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
        return 0;
    const int amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u; /* AuthenticAMD */
    const int hygon = ebx == 0x6f677948u;                                           /* HygonGenuine */
    if (!amd && !hygon)
        return 1;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return 0;
    const unsigned family = ((eax >> 8) & 0xfu) + (((eax >> 8) & 0xfu) == 0xfu ? ((eax >> 20) & 0xffu) : 0u);
    return family >= 0x19u;
}

/* The AVX2 level also needs BMI2; __builtin_cpu_supports checks that the OS saves the YMM state. */
static int ibp_avx2_usable(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") &&
           __builtin_cpu_supports("sse4.2");
}
#endif

static void ibp_dispatch_init(void)
{
    const char *env = getenv("IBPSHIM_CODEC_FORCE_REFERENCE");
    if (env && (!strcmp(env, "1") || !strcmp(env, "true") || !strcmp(env, "yes") || !strcmp(env, "on")))
        __atomic_store_n(&ibp_force_ref, 1, __ATOMIC_RELAXED);
#if defined(__x86_64__)
    if (ibp_bmi2_fast())
        ibp_best_kernels = ibp_avx2_usable() ? &ibp_codec_kernels_avx2 : &ibp_codec_kernels_bmi2;
#endif
}

const IbpCodecKernels *ibp_codec_kernels(void)
{
    pthread_once(&ibp_dispatch_once, ibp_dispatch_init);
    return __atomic_load_n(&ibp_force_ref, __ATOMIC_RELAXED) ? &ibp_codec_kernels_ref : ibp_best_kernels;
}

const IbpCodecKernels *ibp_codec_kernels_reference(void)
{
    return &ibp_codec_kernels_ref;
}

size_t ibp_codec_kernels_levels(const IbpCodecKernels **levels, size_t cap)
{
    size_t n = 0;
    if (n < cap)
        levels[n] = &ibp_codec_kernels_ref;
    n++;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") &&
        __builtin_cpu_supports("sse4.2")) {
        if (n < cap)
            levels[n] = &ibp_codec_kernels_bmi2;
        n++;
    }
    if (ibp_avx2_usable()) {
        if (n < cap)
            levels[n] = &ibp_codec_kernels_avx2;
        n++;
    }
#endif
    return n;
}

void ibp_codec_force_reference(int on)
{
    pthread_once(&ibp_dispatch_once, ibp_dispatch_init);
    __atomic_store_n(&ibp_force_ref, on != 0, __ATOMIC_RELAXED);
}

const char *ibp_codec_backend(void)
{
    return ibp_codec_kernels()->name;
}
