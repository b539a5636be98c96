// TODO(helper): implementation of stages/topk.h
#include "reference/stages/topk.h"
