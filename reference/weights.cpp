// TODO(helper): implementation of weights.h
#include "reference/weights.h"
