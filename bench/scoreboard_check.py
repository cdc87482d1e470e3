#!/usr/bin/env python3
"""CTest bench_scoreboard: `bench/run --scoreboard` on a made-up run whose ratios are known.

Also the speedup plot's ideal line under `--replot --cores N` (check_plot_cores). Checks the
orientation of each kind of metric (throughput: higher is better; time and blowup:
lower is better), that a cell where trove trails names the peer that leads, the mark of a
cell whose repetitions spread widely, the peak-RSS columns, the count of cells where trove
leads, that a benchmark without peers gets no row, and that a run without trove is
refused."""
import os
import subprocess
import sys
import tempfile

RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")

ROWS = [
    # throughput: 120 against 100 -> 1.20; 90 against jemalloc's 150 -> 0.60 (jemalloc)
    ("larson-small", "trove", 1, "throughput", 120, "ops/s"),
    ("larson-small", "glibc", 1, "throughput", 100, "ops/s"),
    ("larson-small", "jemalloc", 1, "throughput", 60, "ops/s"),
    ("larson-small", "trove", 2, "throughput", 90, "ops/s"),
    ("larson-small", "glibc", 2, "throughput", 100, "ops/s"),
    ("larson-small", "jemalloc", 2, "throughput", 150, "ops/s"),
    # repetitions: trove's agree, jemalloc's at 2 threads spread by 1.5x -> that cell gets "~"
    ("larson-small", "trove", 1, "spread", 1.1, "ratio"),
    ("larson-small", "trove", 2, "spread", 1.1, "ratio"),
    ("larson-small", "jemalloc", 2, "spread", 1.5, "ratio"),
    # peak RSS: glibc's 1000 against trove's 2000 -> 0.50 (glibc); 2000 against 1000 -> 2.00
    ("larson-small", "trove", 1, "peak_rss", 2000, "KiB"),
    ("larson-small", "glibc", 1, "peak_rss", 1000, "KiB"),
    ("larson-small", "jemalloc", 1, "peak_rss", 4000, "KiB"),
    ("larson-small", "trove", 2, "peak_rss", 1000, "KiB"),
    ("larson-small", "glibc", 2, "peak_rss", 2000, "KiB"),
    ("larson-small", "jemalloc", 2, "peak_rss", 3000, "KiB"),
    # time, lower is better: glibc's 1.0 s against trove's 2.0 -> 0.50 (glibc)
    ("sizesweep", "trove", 1, "time", 2.0, "s"),
    ("sizesweep", "glibc", 1, "time", 1.0, "s"),
    ("sizesweep", "jemalloc", 1, "time", 4.0, "s"),
    # blowup, lower is better: level -> 1.00
    ("blowup-pc", "trove", 1, "blowup", 1.1, "ratio"),
    ("blowup-pc", "glibc", 1, "blowup", 1.1, "ratio"),
    # no peer: no row
    ("rptest", "trove", 1, "throughput", 5, "ops/s"),
]

EXPECT = [
    "| larson-small | throughput | 1.20 | 0.60 (jemalloc) ~ | 0.50 (glibc) | 2.00 |",
    "spread by more than 25% (max / min): read such a cell as level unless the gap is wider "
    "(1 of the 4 cells)",
    "| sizesweep | time | 0.50 (glibc) | - | - | - |",
    "| blowup-pc | blowup | 1.00 | - | - | - |",
    "trove at or ahead of the best peer in 2 of 4 cells, within 5% in 2",
]


def write(d, rows):
    with open(os.path.join(d, "latest.csv"), "w") as f:
        f.write("benchmark,allocator,threads,metric,value,unit\n")
        for r in rows:
            f.write("%s,%s,%d,%s,%g,%s\n" % r)


def check_spread(failures):
    """bench/run's spread(): max / min over the repetitions that have the metric."""
    import types
    mod = load_run()
    reps = [types.SimpleNamespace(metrics={"throughput": (v, "ops/s")}) for v in (2.0, 3.0, 2.5)]
    reps.append(types.SimpleNamespace(metrics={}))          # a repetition without the metric
    got = mod.spread(reps, "throughput")
    if got is None or abs(got - 1.5) > 1e-9:
        failures.append("spread of 2, 3 and 2.5: %r, not 1.5" % got)
    if mod.spread(reps[:1], "throughput") is not None:
        failures.append("spread of one repetition is not None")


def load_run():
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("bench_run", RUN)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_run", loader))
    loader.exec_module(mod)
    return mod


class FakeAxes:
    """Records what plot_bench draws; everything else is a no-op."""
    def __init__(self, lines):
        self.lines = lines

    def plot(self, xs, ys, **kw):
        self.lines.append((list(xs), list(ys), kw.get("label")))

    def __getattr__(self, name):
        return lambda *a, **k: None


class FakePlt:
    def __init__(self):
        self.lines = []

    def subplots(self, rows, cols, **kw):
        return FakeAxes(self.lines), [FakeAxes(self.lines) for _ in range(rows * cols)]

    def __getattr__(self, name):
        return lambda *a, **k: None


def check_plot_cores(failures):
    """The speedup panel's ideal line: min(t, cores) / min(t1, cores), with cores from
    --cores (PLOT_CORES) when a run from a machine with more CPUs is drawn again."""
    mod = load_run()
    bench = next(b for b in mod.BENCHES if b.name == "larson-small")
    tlist = [1, 2, 4, 8, 16]
    med = {("larson-small", "trove", t): {"throughput": (100.0 * t, "ops/s"), "peak_rss": (1000, "KiB")}
           for t in tlist}
    for cores in (16, 2):
        mod.PLOT_CORES = cores
        plt = FakePlt()
        mod.plot_bench(plt, bench, [("trove", None)], tlist, med, {}, tempfile.gettempdir())
        ideal = [l for l in plt.lines if l[2] and l[2].startswith("ideal")]
        want = [float(min(t, cores)) for t in tlist]
        if len(ideal) != 1 or ideal[0][1] != want or ideal[0][2] != "ideal (%d cores)" % cores:
            failures.append("--cores %d: ideal line %r, wanted %r labelled 'ideal (%d cores)'"
                            % (cores, ideal, want, cores))


def main():
    failures, out = [], ""
    check_spread(failures)
    check_plot_cores(failures)
    with tempfile.TemporaryDirectory() as d:
        write(d, ROWS)
        r = subprocess.run([sys.executable, RUN, "--scoreboard", d], capture_output=True, text=True)
        out = r.stdout
        if r.returncode != 0:
            failures.append("exit status %d: %s" % (r.returncode, r.stderr.strip()))
        for line in EXPECT:
            if line not in out:
                failures.append("missing: " + line)
        if "rptest" in out:
            failures.append("a benchmark without peers got a row")
        write(d, [x for x in ROWS if x[1] != "trove"])
        r = subprocess.run([sys.executable, RUN, "--scoreboard", d], capture_output=True, text=True)
        if r.returncode == 0:
            failures.append("a run without trove was not refused")
    if failures:
        print("output:\n" + out)
        for f in failures:
            print("FAIL: " + f)
        return 1
    print("scoreboard: %d checks passed" % (len(EXPECT) + 6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
