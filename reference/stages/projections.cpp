// TODO(helper): implementation of stages/projections.h
#include "reference/stages/projections.h"
