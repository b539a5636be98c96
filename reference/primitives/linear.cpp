// TODO(helper): implementation of primitives/linear.h
#include "reference/primitives/linear.h"
