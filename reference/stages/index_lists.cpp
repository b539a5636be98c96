// TODO(helper): implementation of stages/index_lists.h
#include "reference/stages/index_lists.h"
