/* SPDX-License-Identifier: MIT
 * ibpshim: fuzz target for the ini path: any bytes parse without a crash, and every resulting value is
 * in range and survives format + parse unchanged. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_value(const IbpConfigOption *opt, const IbpConfig *a, const IbpConfig *b)
{
    const char *const fa = (const char *)a + opt->offset;
    const char *const fb = (const char *)b + opt->offset;
    switch (opt->type) {
    case IBP_CONFIG_BOOL:
        return *(const bool *)fa == *(const bool *)fb;
    case IBP_CONFIG_INT:
    case IBP_CONFIG_ENUM:
        return *(const int *)fa == *(const int *)fb;
    case IBP_CONFIG_SIZE:
    case IBP_CONFIG_DURATION:
        return *(const uint64_t *)fa == *(const uint64_t *)fb;
    case IBP_CONFIG_DOUBLE:
        return *(const double *)fa == *(const double *)fb;
    case IBP_CONFIG_STRING:
        return strcmp(fa, fb) == 0;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static IbpConfig cfg, again;
    static IbpConfigReport report;
    static IbpConfigValue value;
    static char text[IBP_CONFIG_STRING_MAX + 3];
    static int quiet_fd = -2;

    /* Messages are still formatted (that code is under test), just not shown. */
    if (quiet_fd == -2) {
        quiet_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (quiet_fd >= 0)
            ibp_log_set_fd(quiet_fd);
    }
    memset(&report, 0, sizeof(report));
    ibp_config_defaults(&cfg);
    ibp_config_parse_buffer(&cfg, &report, "fuzz.ini", (const char *)data, size);
    ibp_config_validate(&cfg, &report);

    const IbpConfigOption *const opts = ibp_config_options();
    again = cfg;
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        char why[192];
        ibp_config_value_format(&opts[i], &cfg, text, sizeof(text));
        if (ibp_config_value_parse(&opts[i], text, &value, why, sizeof(why)) != 0)
            abort(); /* a value the loader accepted must be valid */
        ibp_config_value_store(&opts[i], &value, &again);
        if (!same_value(&opts[i], &cfg, &again))
            abort();
        if (report.source[i].origin == IBP_CONFIG_ORIGIN_FILE && report.source[i].line == 0)
            abort();
    }
    return 0;
}
