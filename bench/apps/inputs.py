"""Inputs that bench/apps/run writes before timing: generated, so that no large file is kept in
the repository, and deterministic (fixed seeds), so that every allocator gets the same work.

  doc.ps     40 pages of text in seven fonts and 200 Bezier curves a page (PostScript), which
             run.py converts once to doc.pdf for Ghostscript to render (mimalloc-bench's gs
             renders a large PDF the same way)
  lia.smt2   120 queries (push / check-sat / pop) of 45 random linear integer constraints each
             over 60 bounded integers, for z3 (mimalloc-bench runs z3 on an SMT-LIB problem)
"""

import random

FONTS = ["Times-Roman", "Helvetica", "Courier", "Times-Bold", "Helvetica-Oblique",
         "Palatino-Roman", "NewCenturySchlbk-Roman"]
WORDS = ("allocator superblock thread heap segment page free list remote blowup fragmentation "
         "scalable memory server request").split()


def write_ps(path, pages=40):
    r = random.Random(1)
    out = ["%!PS-Adobe-3.0"]
    for _ in range(pages):
        for line in range(60):
            font, size = r.choice(FONTS), r.choice([7, 8, 9, 10, 12])
            text = " ".join(r.choice(WORDS) for _ in range(10))
            out.append("/%s findfont %d scalefont setfont 40 %d moveto (%s) show"
                       % (font, size, 780 - line * 12, text))
        for _ in range(200):
            x, y = r.uniform(0, 600), r.uniform(0, 600)
            pts = " ".join("%.1f %.1f" % (r.uniform(0, 600), r.uniform(0, 800)) for _ in range(6))
            out.append("newpath %.1f %.1f moveto %s curveto %.2f setgray 0.3 setlinewidth stroke"
                       % (x, y, pts, r.random()))
        out.append("showpage")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def write_smt2(path, queries=120, nvars=60, per_query=45):
    r = random.Random(7)
    out = ["(set-option :produce-models true)"]
    out += ["(declare-const x%d Int)" % i for i in range(nvars)]
    out += ["(assert (and (>= x%d -50) (<= x%d 50)))" % (i, i) for i in range(nvars)]
    for _ in range(queries):
        out.append("(push)")
        for _ in range(per_query):
            vs = r.sample(range(nvars), 4)
            terms = " ".join("(* %d x%d)" % (r.randint(-9, 9), v) for v in vs)
            op = r.choice(["<=", ">=", "distinct"])
            if op == "distinct":
                out.append("(assert (or (distinct x%d x%d) (> (+ %s) %d)))"
                           % (vs[0], vs[1], terms, r.randint(-40, 40)))
            else:
                out.append("(assert (%s (+ %s) %d))" % (op, terms, r.randint(-60, 60)))
        out += ["(check-sat)", "(pop)"]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
