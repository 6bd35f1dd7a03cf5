/* SPDX-License-Identifier: MIT
 * ibpshim: process-wide start-up and shut-down of the shim. */
#ifndef IBP_INTERPOSE_SHIM_H
#define IBP_INTERPOSE_SHIM_H

#include "config/config.h"

/* Reads the environment and configuration once.  Called by the library
 * constructor and again (cheaply) by hooks that may run before it, e.g. from
 * another library's constructor.  Thread-safety: any thread, any time. */
void ibp_shim_init(void);

/* The configuration loaded at start-up (file, environment, defaults), never NULL once
 * ibp_shim_init() returned.  Immutable. */
const IbpConfig *ibp_shim_config(void);

#endif /* IBP_INTERPOSE_SHIM_H */
