/* cache-scratch: see falseshare.h for what it does and its source. */
#define FS_NAME "cache-scratch"
#define FS_BATCH 8
#define FS_PASSIVE 1
#define FS_DEFAULT_REPS 25000L
#define FS_DEFAULT_REPS_S "25000"
#define FS_DESC \
  "cache-scratch: objects allocated together by the main thread, dealt round-robin, are\n" \
  "freed by the workers, which then run cache-thrash (passive false sharing)."
#include "falseshare.h"
