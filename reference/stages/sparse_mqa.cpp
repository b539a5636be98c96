// TODO(helper): implementation of stages/sparse_mqa.h
#include "reference/stages/sparse_mqa.h"
