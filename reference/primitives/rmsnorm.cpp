// TODO(helper): implementation of primitives/rmsnorm.h
#include "reference/primitives/rmsnorm.h"
