// TODO(helper): implementation of layer.h
#include "reference/layer.h"
