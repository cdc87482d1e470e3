/* passive-false: see falseshare.h for what it does and its source. */
#define FS_NAME "passive-false"
#define FS_BATCH 1
#define FS_PASSIVE 1
#define FS_DEFAULT_REPS 200000L
#define FS_DEFAULT_REPS_S "200000"
#define FS_DESC \
  "Hoard's passive-false: objects allocated together by the main thread are freed by the\n" \
  "worker threads, which then allocate, write and free small objects (as active-false)."
#include "falseshare.h"
