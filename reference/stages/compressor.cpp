// TODO(helper): implementation of stages/compressor.h
#include "reference/stages/compressor.h"
