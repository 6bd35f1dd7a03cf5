/* SPDX-License-Identifier: MIT
 * ibpshim: ibp-config, checks configuration files and shows the configuration the shim would use. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibpshim/config.h"

static void usage(FILE *out)
{
    fputs("usage: ibp-config --check FILE...   validate ini files (exit status 1 on any error)\n"
          "       ibp-config --show            effective configuration (lookup + file + IBPSHIM_* env)\n"
          "                                    with where each value came from\n"
          "       ibp-config --dump-defaults   every option at its default, as a commented ini file\n"
          "       ibp-config --dump-docs       the Markdown option reference (docs/CONFIG.md)\n"
          "       ibp-config --help\n",
          out);
}

static int check_files(int count, char *const *paths)
{
    int status = 0;
    for (int i = 0; i < count; i++) {
        IbpshimConfigCounts counts = {0, 0};
        const int rc = ibpshim_config_check_file(paths[i], &counts);
        if (rc < 0 || counts.errors > 0)
            status = 1;
        if (rc == 0)
            printf("%s: %u error(s), %u warning(s)\n", paths[i], counts.errors, counts.warnings);
    }
    return status;
}

static int written(int rc)
{
    if (rc < 0) {
        fprintf(stderr, "ibp-config: writing to standard output failed\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    enum { MODE_NONE, MODE_CHECK, MODE_SHOW, MODE_DEFAULTS, MODE_DOCS } mode = MODE_NONE;
    static const struct option long_options[] = {
        {"check", no_argument, NULL, 'c'},       {"show", no_argument, NULL, 's'},
        {"dump-defaults", no_argument, NULL, 'd'}, {"dump-docs", no_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        switch (c) {
        case 'c':
        case 's':
        case 'd':
        case 'm':
            if (mode != MODE_NONE) {
                fprintf(stderr, "ibp-config: give one of --check, --show, --dump-defaults, --dump-docs\n");
                return 2;
            }
            mode = c == 'c' ? MODE_CHECK : c == 's' ? MODE_SHOW : c == 'd' ? MODE_DEFAULTS : MODE_DOCS;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    const int rest = argc - optind;
    if (mode == MODE_NONE || (mode == MODE_CHECK) != (rest > 0)) {
        usage(stderr);
        return 2;
    }
    switch (mode) {
    case MODE_CHECK:
        return check_files(rest, argv + optind);
    case MODE_SHOW: {
        IbpshimConfigCounts counts = {0, 0};
        const int rc = written(ibpshim_config_write_effective(stdout, &counts));
        return rc ? rc : counts.errors > 0;
    }
    case MODE_DEFAULTS:
        return written(ibpshim_config_write_defaults(stdout));
    case MODE_DOCS:
        return written(ibpshim_config_write_docs(stdout));
    case MODE_NONE:
        break;
    }
    return 2;
}
