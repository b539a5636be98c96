// TODO(helper): implementation of stages/indexer.h
#include "reference/stages/indexer.h"
