// TODO(helper): implementation of numerics/block_quant.h
#include "reference/numerics/block_quant.h"
