/* SPDX-License-Identifier: MIT
 * ibpshim: checking and listing the shim's configuration (the API behind the ibp-config tool). */
#ifndef IBPSHIM_CONFIG_H
#define IBPSHIM_CONFIG_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* These functions live in the static configuration library that tools link;
 * libibpshim.so does not export them.  Problems found in a configuration are
 * printed to standard error, one line each, as
 * "ibpshim: error: FILE:LINE: ..." (or "...: IBPSHIM_X=...").
 * Thread-safety: they read the process environment and the files named
 * there; call them from one thread at a time. */

typedef struct IbpshimConfigCounts {
    unsigned errors;   /* entries that were ignored (malformed, unknown, out of range, unreadable file) */
    unsigned warnings; /* entries that applied but deserve a look (a key set twice) */
} IbpshimConfigCounts;

/* Validates one ini file exactly as the shim would parse it, without the file
 * lookup and without environment overrides.
 * @return 0 when the file was read, with its problems counted in *counts;
 *         -ENOENT, -EACCES, -EISDIR, -EFBIG (larger than 1 MiB) or another
 *         negative errno when it could not be read (counted as one error). */
int ibpshim_config_check_file(const char *path, IbpshimConfigCounts *counts);

/* Loads the configuration as the shim does at start-up (file lookup, file,
 * IBPSHIM_* environment) and writes each option's effective value as an ini
 * file, each line followed by a comment saying where the value came from
 * ("default", "FILE:LINE" or the environment variable).
 * @return 0, or -EIO when writing to out failed.  Problems are counted in *counts. */
int ibpshim_config_write_effective(FILE *out, IbpshimConfigCounts *counts);

/* Writes every option with its default value as a commented ini file that the
 * shim reads back unchanged.  @return 0, or -EIO when writing to out failed. */
int ibpshim_config_write_defaults(FILE *out);

/* Writes the Markdown reference of every option (docs/CONFIG.md).
 * @return 0, or -EIO when writing to out failed. */
int ibpshim_config_write_docs(FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* IBPSHIM_CONFIG_H */
