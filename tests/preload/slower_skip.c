/* SPDX-License-Identifier: MIT
 * ibpshim: copies that [transfer] path = auto sends raw as slower than a plain copy (run with
 * FAKECUDA_KERNEL_DELAY_US, each decode of the fake takes 20 ms more, so every verdict after the
 * first timed run says slower, however fast the machine's copies are).  After such a
 * copy the next few pass without a plan, and so without a write-tracking query; the region is
 * written between copies all along, and every copy must still deliver the bytes the host holds
 * at the time of the call. */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("slower_skip", 1);
    const size_t n = 4u << 20;
    PreloadTrip t;
    uint8_t *host = preload_trip_open(&t, n);
    /* The first compressed copy is timed, whatever the speeds: the compressed path is measured. */
    preload_wait_compressed("slower_skip", "the first compressed copy", totals, preload_trip, &t);
    IbpshimTransferTotals a, b;
    CHECK(totals(&a) == 0, "totals");
    const int copies = 48;
    int writes = 0;
    for (int i = 0; i < copies; i++) {
        /* Now and then (a region written before every copy would be given up as churning), a
         * different page at an odd offset, straddling two pages. */
        if (i % 9 == 3) {
            const size_t at = ((size_t)i * 266239u + 4093u) % (n - 8192);
            for (size_t k = 0; k < 4100; k += 4) {
                const float v = (float)(i + 1) * 0.5f + (float)k;
                memcpy(host + at + k, &v, 4);
            }
            writes++;
        }
        preload_trip(&t);
    }
    CHECK(totals(&b) == 0, "totals");
    const uint64_t raw = (b.requested - a.requested) - (b.compressed_in - a.compressed_in);
    CHECK(raw > 0, "no copy went raw: the compressed path was judged faster than a plain copy");
    preload_trip_close(&t);
    printf(
        "slower_skip: ok (%d copies, %d writes between, every byte checked; %llu of %llu bytes compressed)\n",
        copies, writes, (unsigned long long)(b.compressed_in - a.compressed_in),
        (unsigned long long)(b.requested - a.requested));
    return 0;
}
