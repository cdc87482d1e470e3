#!/usr/bin/env python3
"""The heap map (issue 5): test_stats writes a snapshot; it must be valid JSON, its page runs
must tile every segment exactly, and it must account for every superblock, medium and large
object the statistics report.

usage: test_heapmap.py TEST_STATS_BINARY
"""
import json
import os
import re
import subprocess
import sys
import tempfile

failures = []
checks = 0


def check(name, cond, detail=""):
    global checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)))
    if not cond:
        failures.append(name)


with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "map.json")
    p = subprocess.run([sys.argv[1], path], capture_output=True, text=True, timeout=300)
    check("test_stats passes", p.returncode == 0, p.stderr)
    m = re.search(r"superblocks=(\d+) medium=(\d+) large=(\d+) segments=(\d+)", p.stdout)
    check("statistics printed", m is not None, p.stdout[:300])
    doc = json.load(open(path))
sbs, medium, large, segments = (int(x) for x in m.groups())
check("segments", len(doc["segments"]) == segments, (len(doc["segments"]), segments))
n_small = n_medium = 0
for seg in doc["segments"]:
    pages = seg["size"] // seg["page_size"]
    at = seg["header_pages"]
    for span in seg["spans"]:
        if span["page"] != at:
            check("spans tile segment %s" % seg["base"], False, span)
            break
        at += span["npages"]
        if span["kind"] == "small":
            n_small += 1
            check("used <= capacity", 0 <= span["used"] <= span["capacity"], span)
            check("small span has an owner or is pooled",
                  span["owner"] > 0 or span["state"] == "pool", span)
        elif span["kind"] == "medium":
            n_medium += span["used"]
        else:
            check("free span state", span["state"] in ("dirty", "purged"), span)
    check("spans cover segment %s" % seg["base"], at == pages, (at, pages))
check("every superblock in the map", n_small == sbs, (n_small, sbs))
check("every medium object in the map", n_medium == medium, (n_medium, medium))
check("every large object in the map", len(doc["large"]) == large, (len(doc["large"]), large))
print("%d passed, %d failed" % (checks - len(failures), len(failures)))
sys.exit(1 if failures else 0)
