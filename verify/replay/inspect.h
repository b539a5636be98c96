#pragma once
// What a capture holds (`dsv4-verify inspect`): its attributes, configuration, layers with their
// ratio, calls with start_pos / seqlen / kind, every dataset with shape and dtype, the reader's
// notes, and what a replay would have to derive because the capture lacks it.
#include <ostream>

#include "verify/capture/capture.h"

namespace dsv4::verify {

// `capture` as read_capture returned it (already validated).
void describe_capture(std::ostream& out, const Capture& capture);

}  // namespace dsv4::verify
