/* stability: Larson & Krishnan's requirements 7 and 8 (predictable speed, stability over
 * time) as a run: a steady server load whose size mix shifts, then idle time with light
 * traffic, sampled every 100 ms.
 *
 * Load: t worker threads each keep about --live-mb MiB of live blocks. Each operation
 * allocates a block from the current size mix (and writes it), then frees random blocks of the
 * thread's working set until its live bytes are back under the target; every 64 operations a
 * thread also swaps a random block with its neighbour thread (an atomic exchange slot), so
 * blocks migrate and are freed by threads that did not allocate them. The size mix changes
 * every segment (default 0.3 s): small (16-128 B), medium (128 B-4 KiB), large
 * (4-64 KiB), mixed (mostly small, 1% up to 256 KiB); two cycles of the four mixes.
 * Idle: the workers free all but 1% of their blocks, then do 16 small operations every 10 ms.
 *
 * The main thread samples throughput (operations since the last sample) and RSS
 * (/proc/self/statm) every 100 ms and prints them at the end as
 *   SAMPLE t=<s> throughput=<ops/s> rss_kib=<n>
 * RESULT metrics: throughput (load average, ops/s); throughput_drift (operations in the second
 * cycle / the first: 1.0 is stable, < 1 slowing down); rss_load_peak and rss_load_mean (KiB,
 * the highest and the mean of the samples under load: how closely RSS follows the live data
 * through the mix changes); rss_growth (RSS
 * growth since the start at the end of cycle 2 / at the end of cycle 1: 1.0 is stable, > 1 the
 * footprint creeps up under the same load); rss_idle (KiB at the end of idle); rss_idle_ratio
 * (RSS growth at the end of idle / peak RSS growth under load: near 0 means memory went back to
 * the OS); load_seconds (where idle starts, for plots); and the malloc and free latency
 * percentiles under load (every 64th call timed).
 */
#include "bench_util.h"

enum { PH_LOAD = 0, PH_IDLE = 1, PH_STOP = 2 };
#define NMIX 4
static const char *const mix_names[NMIX] = {"small", "medium", "large", "mixed"};

static struct {
  _Atomic int phase;
  _Atomic int mix;
  int64_t target, idle_target;
  long cap;
  uint64_t seed;
  int nthreads;
  _Atomic(void *) *slots; /* exchange slot of each thread (bu_map) */
  pthread_barrier_t start;
} G;

typedef struct {
  int index;
  void **a; /* working set */
  long n;
  int64_t live;
  bu_counter ops;
  bu_hist *hmalloc, *hfree;
} BU_ALIGNED worker_t;

static size_t draw_size(bu_rng *r, int mix) {
  switch (mix) {
  case 0:
    return (size_t)bu_rand_range(r, 16, 128);
  case 1:
    return (size_t)bu_rand_logsize(r, 128, 4096);
  case 2:
    return (size_t)bu_rand_logsize(r, 4096, 65536);
  default: {
    uint64_t u = bu_rand_below(r, 100);
    if (u < 90) return (size_t)bu_rand_logsize(r, 16, 256);
    if (u < 99) return (size_t)bu_rand_logsize(r, 256, 8192);
    return (size_t)bu_rand_logsize(r, 8192, 262144);
  }
  }
}

static void drop_one(worker_t *w, bu_rng *r, bool timed) {
  long k = (long)bu_rand_below(r, (uint64_t)w->n);
  void *p = w->a[k];
  w->a[k] = w->a[--w->n];
  w->live -= (int64_t)bu_check(p, "before free");
  if (timed) {
    uint64_t t0 = bu_ticks();
    free(p);
    uint64_t t1 = bu_ticks();
    bu_hist_add(w->hfree, bu_ticks_to_ns(t1 - t0));
  } else {
    free(p);
  }
}

static void add_one(worker_t *w, bu_rng *r, int mix, bool timed) {
  if (w->n >= G.cap) drop_one(w, r, false);
  size_t size = draw_size(r, mix);
  void *p;
  if (timed) {
    uint64_t t0 = bu_ticks();
    p = malloc(size);
    uint64_t t1 = bu_ticks();
    bu_need(p, size);
    bu_hist_add(w->hmalloc, bu_ticks_to_ns(t1 - t0));
  } else {
    p = bu_malloc(size);
  }
  bu_stamp(p, size);
  w->a[w->n++] = p;
  w->live += (int64_t)size;
}

/* Swap a random block with the neighbour's exchange slot. */
static void exchange(worker_t *w, bu_rng *r) {
  if (w->n == 0) return;
  long k = (long)bu_rand_below(r, (uint64_t)w->n);
  void *give = w->a[k];
  size_t gsize = bu_check(give, "before exchange");
  void *got = atomic_exchange_explicit(&G.slots[(w->index + 1) % G.nthreads], give,
                                       memory_order_acq_rel);
  w->live -= (int64_t)gsize;
  if (got) {
    w->a[k] = got;
    w->live += (int64_t)bu_check(got, "after exchange");
  } else {
    w->a[k] = w->a[--w->n];
  }
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  uint64_t ops = 0;
  pthread_barrier_wait(&G.start);
  for (;;) {
    int phase = atomic_load_explicit(&G.phase, memory_order_relaxed);
    if (phase == PH_STOP) break;
    if (phase == PH_LOAD) {
      int mix = atomic_load_explicit(&G.mix, memory_order_relaxed);
      for (int i = 0; i < 64; i++) {
        bool timed = i == 0;
        add_one(w, &rng, mix, timed);
        while (w->live > G.target && w->n > 0) {
          drop_one(w, &rng, timed);
          timed = false;
        }
      }
      exchange(w, &rng);
      ops += 64;
      bu_counter_set(&w->ops, ops);
    } else { /* idle: back to 1%, then a trickle of small operations */
      while (w->live > G.idle_target && w->n > 0) drop_one(w, &rng, false);
      for (int i = 0; i < 16; i++) {
        add_one(w, &rng, 0, false);
        while (w->live > G.idle_target && w->n > 1) drop_one(w, &rng, false);
      }
      ops += 16;
      bu_counter_set(&w->ops, ops);
      bu_sleep(0.01);
    }
  }
  return NULL;
}

typedef struct {
  double t, throughput;
  long rss;
} sample_t;

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(bu_ncpus());
  double live_mb = 16, interval = -1;
  long seg_samples = -1, idle_samples = -1, cycles = 2;
  const bu_opt opts[] = {
      {"live-mb", BU_OPT_DOUBLE, &live_mb, "live MiB per thread under load (16)"},
      {"interval", BU_OPT_DOUBLE, &interval, "seconds between samples (0.1, smoke 0.04)"},
      {"segment", BU_OPT_LONG, &seg_samples, "samples per size-mix segment (3; times --scale)"},
      {"idle", BU_OPT_LONG, &idle_samples, "samples of idle time (12; times --scale, min 3)"},
      {"cycles", BU_OPT_LONG, &cycles, "cycles of the four size mixes (2)"},
  };
  bu_parse_args(argc, argv,
                "Stability over time: a steady load with a shifting size mix, then idle time;\n"
                "throughput and RSS sampled every 100 ms.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (c.smoke && live_mb == 16) live_mb = 2;
  if (interval < 0) interval = c.smoke ? 0.04 : 0.1;
  if (seg_samples < 0) seg_samples = bu_scaled(c.smoke ? 1 : 3, c.scale, 1);
  if (idle_samples < 0) idle_samples = bu_scaled(c.smoke ? 3 : 12, c.scale, 3);
  if (live_mb <= 0 || interval < 0.005 || seg_samples < 1 || idle_samples < 1 || cycles < 1)
    bu_die("bad parameters");
  const int t = c.threads;
  G.target = (int64_t)(live_mb * 1048576.0);
  G.idle_target = G.target / 100;
  G.cap = (long)(G.target / 32) + 4096;
  G.seed = c.seed;
  G.nthreads = t;

  bu_ticks_calibrate();
  bu_warm_allocator();
  G.slots = bu_map(sizeof(*G.slots) * (size_t)t);
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].a = bu_map(sizeof(void *) * (size_t)G.cap);
    ws[i].hmalloc = bu_map(sizeof(bu_hist));
    ws[i].hfree = bu_map(sizeof(bu_hist));
    bu_prefault(ws[i].a, sizeof(void *) * (size_t)G.cap);
    bu_prefault(ws[i].hmalloc, sizeof(bu_hist));
    bu_prefault(ws[i].hfree, sizeof(bu_hist));
  }
  const long load_samples = seg_samples * NMIX * cycles;
  const long nsamples = load_samples + idle_samples;
  sample_t *s = bu_map(sizeof(sample_t) * (size_t)(nsamples + 1));
  long rss_base = bu_rss_kib();

  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  const double t0 = bu_now(); /* the workers are at the barrier already (or nearly) */
  pthread_barrier_wait(&G.start);
  uint64_t prev_ops = 0, cycle_ops[2] = {0, 0}, load_ops = 0;
  long rss_cycle_end[2] = {0, 0}, rss_peak = 0;
  double rss_sum = 0;
  double prev_t = 0;
  for (long k = 1; k <= nsamples; k++) {
    bu_sleep_until(t0 + (double)k * interval);
    double now = bu_now() - t0;
    uint64_t ops = 0;
    for (int i = 0; i < t; i++) ops += bu_counter_get(&ws[i].ops);
    long rss = bu_rss_kib();
    s[k].t = now;
    s[k].throughput = (double)(ops - prev_ops) / (now - prev_t);
    s[k].rss = rss;
    if (k <= load_samples) {
      long cyc = (k - 1) / (seg_samples * NMIX);
      if (cyc < 2) cycle_ops[cyc] += ops - prev_ops;
      if (rss > rss_peak) rss_peak = rss;
      rss_sum += (double)rss;
      if (k % (seg_samples * NMIX) == 0 && cyc < 2) rss_cycle_end[cyc] = rss;
    }
    prev_ops = ops;
    prev_t = now;
    if (k == load_samples) {
      load_ops = ops;
      atomic_store_explicit(&G.phase, PH_IDLE, memory_order_relaxed);
    } else if (k < load_samples && k % seg_samples == 0) {
      atomic_store_explicit(&G.mix, (int)((k / seg_samples) % NMIX), memory_order_relaxed);
    }
  }
  atomic_store_explicit(&G.phase, PH_STOP, memory_order_relaxed);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);

  const char *name = "stability";
  double load_secs = s[load_samples].t;
  bu_hist *hm = bu_map(sizeof(bu_hist)), *hf = bu_map(sizeof(bu_hist));
  for (int i = 0; i < t; i++) {
    bu_hist_merge(hm, ws[i].hmalloc);
    bu_hist_merge(hf, ws[i].hfree);
  }
  for (long k = 1; k <= nsamples; k++)
    printf("SAMPLE t=%.3f throughput=%.0f rss_kib=%ld\n", s[k].t, s[k].throughput, s[k].rss);
  long rss_idle = s[nsamples].rss;
  bu_result(name, t, "throughput", (double)load_ops / load_secs, "ops/s");
  if (cycles >= 2 && cycle_ops[0] > 0)
    bu_result(name, t, "throughput_drift", (double)cycle_ops[1] / (double)cycle_ops[0], "ratio");
  bu_result(name, t, "rss_load_peak", (double)rss_peak, "KiB");
  bu_result(name, t, "rss_load_mean", rss_sum / (double)load_samples, "KiB");
  if (cycles >= 2 && rss_cycle_end[0] > rss_base)
    bu_result(name, t, "rss_growth",
              (double)(rss_cycle_end[1] - rss_base) / (double)(rss_cycle_end[0] - rss_base), "ratio");
  bu_result(name, t, "rss_idle", (double)rss_idle, "KiB");
  if (rss_peak > rss_base)
    bu_result(name, t, "rss_idle_ratio",
              (double)(rss_idle > rss_base ? rss_idle - rss_base : 0) / (double)(rss_peak - rss_base),
              "ratio");
  bu_result(name, t, "load_seconds", load_secs, "s");
  bu_result_latency(name, t, "malloc", hm);
  bu_result_latency(name, t, "free", hf);
  bu_result_peak_rss(name, t);
  fprintf(stderr,
          "stability: %d threads, %.0f MiB live each, mixes %s/%s/%s/%s, %ld cycles, "
          "base RSS %ld KiB, timer overhead %.0f ns\n",
          t, live_mb, mix_names[0], mix_names[1], mix_names[2], mix_names[3], cycles, rss_base,
          bu_timer_overhead_ns);

  if (!c.keep_live) {
    for (int i = 0; i < t; i++)
      for (long k = 0; k < ws[i].n; k++) bu_free_checked(ws[i].a[k]);
    for (int i = 0; i < t; i++) {
      void *p = atomic_load_explicit(&G.slots[i], memory_order_acquire);
      if (p) bu_free_checked(p);
    }
  }
  return 0;
}
