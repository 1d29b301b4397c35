/* malloc_debug's shared settings and state (debug_config.h). */
#include "debug_config.h"

struct ur_debug ur_debug;
