#pragma once
// Doctest CHECKs that two captures hold the same values bit for bit (-inf == -inf, -0.0 != 0.0):
// attributes, config, every layer's weights, linear kinds and calls, every stage tensor. path and
// notes are not compared (a capture written and read back has a new path and may gain notes).
#include "verify/capture/capture.h"

namespace dsv4::verify::testing {

void check_same(const Capture& a, const Capture& b);

}  // namespace dsv4::verify::testing
