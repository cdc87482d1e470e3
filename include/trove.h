/* trove: a scalable, memory-lean malloc for long-running multithreaded servers.
 *
 * This is the whole public interface. Preloading libtrove.so (or linking -ltrove) replaces the
 * standard malloc family; the trove_ names below work whether or not the standard names are
 * overridden, so a program can also use trove side by side with another allocator.
 */
#ifndef TROVE_H
#define TROVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROVE_VERSION_MAJOR 0
#define TROVE_VERSION_MINOR 1

/* ---- the malloc family, with the C/POSIX/glibc error conventions ---- */
void  *trove_malloc(size_t size);
void   trove_free(void *p);
void  *trove_calloc(size_t count, size_t size);              /* overflow: NULL, errno ENOMEM */
void  *trove_realloc(void *p, size_t size);                  /* realloc(p, 0) frees, returns NULL */
void  *trove_reallocarray(void *p, size_t count, size_t size);
int    trove_posix_memalign(void **out, size_t alignment, size_t size); /* EINVAL, ENOMEM */
void  *trove_aligned_alloc(size_t alignment, size_t size);
void  *trove_memalign(size_t alignment, size_t size);
void  *trove_valloc(size_t size);
void  *trove_pvalloc(size_t size);
size_t trove_malloc_usable_size(const void *p);
int    trove_malloc_trim(size_t pad);    /* returns 1 if memory was given back to the OS */
const char *trove_version(void);

/* ---- statistics (issue 5): counters summed on request, nothing on the fast path ---- */
#define TROVE_STATS_CLASSES 128
typedef struct trove_class_stats_s {
  size_t block_size;      /* bytes per block; 0 marks an unused entry */
  size_t blocks_in_use;   /* live blocks (remote frees not yet collected count as live) */
  size_t blocks_capacity; /* blocks in all superblocks of this class */
  size_t superblocks;     /* superblocks of this class (owned and in the shared pool) */
} trove_class_stats_t;

typedef struct trove_stats_s {
  size_t in_use;             /* bytes in live blocks (block sizes, small + medium + large) */
  size_t peak_in_use;        /* highest in_use seen by a trove_stats_get call */
  size_t held;               /* bytes mapped from the OS (segments + large mappings) */
  size_t peak_held;
  size_t resident;           /* held minus what trove has purged (upper bound of RSS share) */
  size_t peak_resident;
  size_t process_rss;        /* the whole process's RSS, from /proc/self/statm (0 if unknown) */
  size_t segments;           /* 4 MiB segments mapped */
  size_t segments_huge;      /* of those, asking for transparent huge pages (TROVE_THP) */
  size_t huge_pauses;        /* huge pages paused after a slow fault (TROVE_THP_SLOW_US) */
  size_t large_objects;      /* objects mapped straight from the OS */
  size_t large_bytes;
  size_t medium_objects;     /* objects carved as page runs */
  size_t medium_bytes;
  size_t medium_cached_bytes; /* freed medium runs kept by threads for reuse (not in use) */
  size_t spare_bytes;        /* empty superblocks past K kept by threads for their next burst
                                (not in use; docs/DESIGN.md, "Spare superblocks") */
  size_t pool_superblocks;   /* superblocks in the shared pool (abandoned or released) */
  size_t pool_bytes;
  size_t free_page_bytes;    /* free page runs in segments, dirty + purged */
  size_t dirty_page_bytes;   /* free page runs not yet given back to the OS */
  size_t remote_frees;       /* frees by a thread other than the owner, collected so far */
  size_t purges;             /* madvise/munmap calls that returned memory */
  size_t purged_bytes;       /* bytes in those calls (a free run purged, merged with a freed
                                neighbour and purged again is counted again) */
  size_t slow_mallocs;       /* malloc calls that left the fast path */
  size_t superblocks_released; /* superblocks moved to the pool by the blowup rule */
  size_t superblocks_adopted;  /* superblocks taken from the pool */
  size_t superblocks_abandoned; /* full superblocks a heap let go (docs/DESIGN.md, invariant 6) */
  size_t superblocks_claimed;  /* abandoned ones taken up by another thread's free */
  size_t blocks_borrowed;    /* mallocs served by a block of a larger class (its own was used
                                up; see docs/DESIGN.md, "Borrowing") */
  size_t blocks_parked;      /* frees of blocks above 1 KiB handed to the class's next malloc
                                by free's slow path (a heap that parks often then parks
                                every free for a while, uncounted; docs/DESIGN.md, "Parking") */
  size_t blocks_purged;      /* idle free blocks above 4 KiB whose whole pages went back to
                                the OS (docs/DESIGN.md, "Idle free blocks") */
  size_t threads;            /* live thread heaps */
  size_t heaps_created;
  size_t arenas;             /* page heap arenas (TROVE_ARENAS) */
  size_t arenas_in_use;      /* arenas that hold segments */
  size_t lock_waits_pool;    /* times a thread found a shared pool lock taken */
  size_t lock_waits_pages;   /* times a thread found a page heap arena lock taken */
  trove_class_stats_t classes[TROVE_STATS_CLASSES];
} trove_stats_t;

void trove_stats_get(trove_stats_t *out);
void trove_stats_print(FILE *out);          /* human-readable; out == NULL means stderr */
int  trove_malloc_info(int options, FILE *out); /* glibc's malloc_info XML; options must be 0 */
int  trove_heap_map_write(const char *path); /* JSON snapshot of the heap; 0 on success */

/* Return free memory held by the calling thread and the shared pool to the OS at once. */
void trove_collect(void);

#ifdef __cplusplus
}
#endif
#endif /* TROVE_H */
