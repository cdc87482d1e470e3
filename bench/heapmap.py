#!/usr/bin/env python3
"""Render a trove heap map (the JSON trove writes at exit when TROVE_HEAP_MAP=path is set)
into a PNG: one grid per 4 MiB segment, one cell per 8 KiB page, colored by what the page
holds and how full its superblock is.

  bench/heapmap.py heapmap.json [-o heapmap.png] [--cols N] [--quiet]

Expected input (every key optional; unknown keys and states are tolerated):
  {"segments": [{"base": "0x..", "size": 4194304, "page_size": 8192, "header_pages": 1,
                 "spans": [{"page": 10, "npages": 8, "kind": "small|medium|free",
                            "state": "current|partial|sparse|full|pool|cached|medium|free|dirty|purged",
                            "block_size": 64, "capacity": 1024, "used": 512, "owner": 3}]}],
   "large": [{"base": "0x..", "size": N}],
   "pool":  [{"block_size": 64, "superblocks": 2, "used": 10, "capacity": 2048}]}

Colors: superblocks of small blocks by fullness (used/capacity, light yellow = empty to dark
red = full), superblocks in the shared pool or cached in blue shades by fullness, medium
(page-run) objects green, free pages tan when dirty (still resident) and light grey when
purged (given back to the OS), segment header pages dark grey. The first page of each
multi-page superblock or object is drawn a little darker so that span boundaries show.
Without matplotlib the script prints the text summary only and says so.
"""

import argparse
import json
import math
import os
import sys
import textwrap

DEFAULT_SEGMENT = 4 << 20
DEFAULT_PAGE = 8 << 10

FIXED = {
    "header": (0.30, 0.30, 0.30),
    "medium": (0.35, 0.70, 0.35),
    "dirty": (0.80, 0.68, 0.50),
    "purged": (0.86, 0.86, 0.86),
    "free": (1.0, 1.0, 1.0),
    "unknown": (0.85, 0.30, 0.85),
    "uncovered": (0.97, 0.97, 0.97),
}


def lerp(a, b, x):
    return tuple(a[i] + (b[i] - a[i]) * x for i in range(3))


def small_color(fullness):
    """light yellow (empty) -> orange -> dark red (full)."""
    x = min(1.0, max(0.0, fullness))
    if x < 0.5:
        return lerp((1.0, 0.97, 0.70), (0.99, 0.55, 0.24), x / 0.5)
    return lerp((0.99, 0.55, 0.24), (0.60, 0.0, 0.05), (x - 0.5) / 0.5)


def pool_color(fullness):
    x = min(1.0, max(0.0, fullness))
    return lerp((0.78, 0.87, 0.97), (0.10, 0.30, 0.65), x)


def num(v, default=0):
    try:
        if isinstance(v, str):
            return int(v, 0)
        return int(v)
    except (TypeError, ValueError):
        return default


def span_category(sp):
    """(category, fullness or None) for a span."""
    kind = str(sp.get("kind", "") or "").lower()
    state = str(sp.get("state", "") or "").lower()
    cap, used = num(sp.get("capacity"), 0), num(sp.get("used"), 0)
    full = (used / cap) if cap > 0 else None
    if kind == "free" or state in ("free", "dirty", "purged"):
        if state in ("dirty", "purged"):
            return state, None
        return "free", None
    if state in ("pool", "cached"):     # "cached": a medium run in a thread's cache (free)
        return "pool", full if full is not None else 0.0
    if kind == "medium" or state == "medium":
        return "medium", None
    if kind == "small" or state in ("current", "partial", "sparse", "full"):
        if full is None:
            full = 1.0 if state == "full" else 0.5
        return "small", full
    return "unknown", None


def color_of(cat, full):
    if cat == "small":
        return small_color(full)
    if cat == "pool":
        return pool_color(full)
    return FIXED.get(cat, FIXED["unknown"])


def summarize(doc):
    segs = doc.get("segments") or []
    lines = []
    pages_by = {}
    spans_by_state = {}
    used_bytes = cap_bytes = 0
    for seg in segs:
        ps = num(seg.get("page_size"), num(doc.get("page_size"), DEFAULT_PAGE)) or DEFAULT_PAGE
        hp = num(seg.get("header_pages"), 0)
        if hp:
            pages_by["header"] = pages_by.get("header", 0) + hp
        for sp in seg.get("spans") or []:
            n = max(1, num(sp.get("npages"), 1))
            cat, _ = span_category(sp)
            pages_by[cat] = pages_by.get(cat, 0) + n
            st = str(sp.get("state", cat))
            spans_by_state[st] = spans_by_state.get(st, 0) + 1
            bs = num(sp.get("block_size"), 0)
            if cat in ("small", "pool"):
                used_bytes += bs * num(sp.get("used"), 0)
                cap_bytes += bs * num(sp.get("capacity"), 0)
        _ = ps
    large = doc.get("large") or []
    pool = doc.get("pool") or []
    lines.append("segments: %d" % len(segs))
    if pages_by:
        lines.append("pages by kind: " + ", ".join("%s %d" % kv for kv in sorted(pages_by.items())))
    if spans_by_state:
        lines.append("spans by state: " + ", ".join("%s %d" % kv for kv in sorted(spans_by_state.items())))
    if cap_bytes:
        lines.append("small blocks: %.1f KiB used of %.1f KiB capacity (%.0f%%)"
                     % (used_bytes / 1024, cap_bytes / 1024, 100.0 * used_bytes / cap_bytes))
    lines.append("large objects: %d, %.1f KiB" % (len(large), sum(num(l.get("size"), 0) for l in large) / 1024))
    if pool:
        items = ["%sB x%d (%d/%d)" % (p.get("block_size", "?"), num(p.get("superblocks"), 0),
                                      num(p.get("used"), 0), num(p.get("capacity"), 0)) for p in pool]
        lines.append("shared pool (block size x superblocks (used/capacity)): %d superblocks: %s"
                     % (sum(num(p.get("superblocks"), 0) for p in pool),
                        ", ".join(items[:10]) + (", ... (%d more sizes)" % (len(items) - 10) if len(items) > 10 else "")))
    return lines


def segment_grid(seg, doc):
    """A (rows, cols, colors) grid for one segment."""
    size = num(seg.get("size"), num(doc.get("segment_size"), DEFAULT_SEGMENT)) or DEFAULT_SEGMENT
    ps = num(seg.get("page_size"), num(doc.get("page_size"), DEFAULT_PAGE)) or DEFAULT_PAGE
    npages = max(1, size // ps)
    cols = 32 if npages >= 32 else npages
    rows = int(math.ceil(npages / cols))
    cells = [FIXED["uncovered"]] * (rows * cols)
    for p in range(min(num(seg.get("header_pages"), 0), npages)):
        cells[p] = FIXED["header"]
    for sp in seg.get("spans") or []:
        first = num(sp.get("page"), -1)
        n = max(1, num(sp.get("npages"), 1))
        if first < 0 or first >= npages:
            continue
        cat, full = span_category(sp)
        c = color_of(cat, full)
        for p in range(first, min(npages, first + n)):
            cells[p] = c
        if n > 1 and cat not in ("free", "dirty", "purged"):
            cells[first] = tuple(x * 0.8 for x in c)
    return rows, cols, cells


def render(doc, out, title, seg_cols=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except Exception:
        return False
    segs = doc.get("segments") or []
    grids = [segment_grid(s, doc) for s in segs]
    if not grids:
        grids = []
    n = len(grids)
    gc = seg_cols or max(1, int(math.ceil(math.sqrt(n))) if n else 1)
    gr = max(1, int(math.ceil(n / gc))) if n else 1
    rmax = max((g[0] for g in grids), default=16)
    cmax = max((g[1] for g in grids), default=32)
    gap = 2
    H = gr * (rmax + gap) - gap
    W = gc * (cmax + gap) - gap
    img = [[(1.0, 1.0, 1.0)] * W for _ in range(H)]
    for i, (rows, cols, cells) in enumerate(grids):
        oy, ox = (i // gc) * (rmax + gap), (i % gc) * (cmax + gap)
        for k, c in enumerate(cells):
            img[oy + k // cols][ox + k % cols] = c
    scale = 0.09
    fig_w = max(7.0, min(40.0, W * scale + 1.5))
    fig_h = max(3.0, min(60.0, H * scale + 2.2))
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    ax.imshow(img, interpolation="nearest", aspect="equal")
    for i, s in enumerate(segs):
        oy, ox = (i // gc) * (rmax + gap), (i % gc) * (cmax + gap)
        ax.text(ox, oy - 0.6, str(s.get("base", "segment %d" % i)), fontsize=5, va="bottom", ha="left")
    ax.set_xticks([])
    ax.set_yticks([])
    for sp in ax.spines.values():
        sp.set_visible(False)
    legend = [
        Patch(color=small_color(0.05), label="small superblock, nearly empty"),
        Patch(color=small_color(0.5), label="small superblock, half full"),
        Patch(color=small_color(1.0), label="small superblock, full"),
        Patch(color=pool_color(0.5), label="superblock in pool / cached"),
        Patch(color=FIXED["medium"], label="medium object (page run)"),
        Patch(color=FIXED["dirty"], label="free page, dirty (resident)"),
        Patch(color=FIXED["purged"], label="free page, purged"),
        Patch(color=FIXED["header"], label="segment header"),
        Patch(color=FIXED["unknown"], label="unknown state"),
    ]
    ax.legend(handles=legend, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    summary = summarize(doc)
    ax.set_title(title + "\n" + "; ".join(summary[:2]), fontsize=8, pad=14)
    width = max(60, int(fig_w * 20))
    foot = [w for line in summary[2:] for w in textwrap.wrap(line, width)]
    fig.text(0.01, 0.01, "\n".join(foot), fontsize=6, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description="Render a trove heap map JSON into a PNG.")
    ap.add_argument("json", help="heap map written by trove (TROVE_HEAP_MAP=path)")
    ap.add_argument("-o", "--output", help="PNG to write (default: the JSON's name with .png)")
    ap.add_argument("--cols", type=int, default=None, help="segments per row (default: about a square)")
    ap.add_argument("--quiet", action="store_true", help="do not print the text summary")
    args = ap.parse_args()
    try:
        with open(args.json) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("heapmap: cannot read %s: %s" % (args.json, e), file=sys.stderr)
        return 1
    if not isinstance(doc, dict):
        print("heapmap: %s: not a JSON object" % args.json, file=sys.stderr)
        return 1
    out = args.output or (os.path.splitext(args.json)[0] + ".png")
    if not args.quiet:
        for line in summarize(doc):
            print(line)
    ok = render(doc, out, os.path.basename(args.json), args.cols)
    if not ok:
        print("heapmap: matplotlib is not installed: no PNG (python3 -m pip install matplotlib)")
        return 0
    if not args.quiet:
        print("wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
