// TODO(helper): implementation of kv_cache.h
#include "reference/kv_cache.h"
