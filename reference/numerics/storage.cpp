// TODO(helper): implementation of numerics/storage.h
#include "reference/numerics/storage.h"
