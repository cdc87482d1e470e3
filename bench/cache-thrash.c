/* cache-thrash: see falseshare.h for what it does and its source. */
#define FS_NAME "cache-thrash"
#define FS_BATCH 8
#define FS_PASSIVE 0
#define FS_DEFAULT_REPS 25000L
#define FS_DEFAULT_REPS_S "25000"
#define FS_DESC \
  "cache-thrash: each thread allocates a batch of 8 small objects, writes them many times,\n" \
  "frees them; threads whose objects share cache lines stop scaling."
#include "falseshare.h"
