// SPDX-License-Identifier: MIT
// ibpshim: include/ibpshim/codec.h compiles on its own as C++.
#include "ibpshim/codec.h"
