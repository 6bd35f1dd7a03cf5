// SPDX-License-Identifier: MIT
// ibpshim: include/ibpshim/config.h compiles on its own as C++.
#include "ibpshim/config.h"
