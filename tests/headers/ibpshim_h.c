/* SPDX-License-Identifier: MIT
 * ibpshim: include/ibpshim/ibpshim.h compiles on its own as C. */
#include "ibpshim/ibpshim.h"
