/* SPDX-License-Identifier: MIT
 * ibpshim: the empty image table of a library built without nvcc. */
#include "kernels/fatbins.h"

const IbpFatbin ibp_fatbins[1] = {{"", NULL, 0}};
const size_t ibp_fatbin_count = 0;
