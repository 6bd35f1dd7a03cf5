/* SPDX-License-Identifier: MIT
 * ibpshim: process-wide start-up and shut-down of the shim. */
#ifndef IBP_INTERPOSE_SHIM_H
#define IBP_INTERPOSE_SHIM_H

/* Reads the environment and configuration once.  Called by the library
 * constructor and again (cheaply) by hooks that may run before it, e.g. from
 * another library's constructor.  Thread-safety: any thread, any time. */
void ibp_shim_init(void);

#endif /* IBP_INTERPOSE_SHIM_H */
