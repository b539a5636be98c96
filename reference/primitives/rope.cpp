// TODO(helper): implementation of primitives/rope.h
#include "reference/primitives/rope.h"
