// TODO(helper): implementation of stages/output_projection.h
#include "reference/stages/output_projection.h"
