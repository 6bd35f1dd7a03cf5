/* SPDX-License-Identifier: MIT
 * ibpshim: include/ibpshim/bench.h compiles on its own as C. */
#include "ibpshim/bench.h"
