/* SPDX-License-Identifier: MIT
 * ibpshim: libFuzzer target: reading an untrusted transfer report (ibp-report's loader) must
 * either succeed with every array it promises or fail with a message, never crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/report_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    IbpViewReport r;
    char msg[512];
    msg[0] = '\0';
    if (ibp_view_load_buffer(&r, "fuzz", data, size, msg, sizeof(msg)) != 0) {
        /* Refused: with a message of one line, and nothing left to free. */
        if (!msg[0] || strchr(msg, '\n') || r.root || r.sites || r.regions || r.series)
            abort();
        return 0;
    }
    if (r.version < 1 || r.version > 4 || !r.schema || !r.generator || !r.reason ||
        (r.site_count && !r.sites) || (r.region_count && !r.regions) || (r.sample_count && !r.series))
        abort();
    /* Every string the viewer prints is there. */
    size_t n = strlen(r.generator) + strlen(r.reason);
    for (size_t i = 0; i < r.site_count; i++)
        n += strlen(r.sites[i].label) + strlen(r.sites[i].key);
    for (size_t i = 0; i < r.region_count; i++)
        n += strlen(r.regions[i].base);
    (void)n;
    ibp_view_free(&r);
    return 0;
}
