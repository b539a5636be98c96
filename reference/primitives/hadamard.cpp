// TODO(helper): implementation of primitives/hadamard.h
#include "reference/primitives/hadamard.h"
