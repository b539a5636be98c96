// TODO(helper): implementation of config.h
#include "reference/config.h"
