// TODO(helper): implementation of precision.h
#include "reference/precision.h"
