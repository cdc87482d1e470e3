/* active-false: see falseshare.h for what it does and its source. */
#define FS_NAME "active-false"
#define FS_BATCH 1
#define FS_PASSIVE 0
#define FS_DEFAULT_REPS 200000L
#define FS_DEFAULT_REPS_S "200000"
#define FS_DESC \
  "Hoard's active-false: each thread allocates one small object, writes it many times, frees it;\n" \
  "an allocator that puts different threads' objects in one cache line stops scaling."
#include "falseshare.h"
