#!/usr/bin/env python3
"""fio JSON results -> one Markdown table (scripts/bench-mount.sh).

Usage:
    scripts/fio_table.py [--update DOC --meta FILE] [--plot PNG] RESULT.json...

Each result file is named SYSTEM__ROW__rN.json (the `__rN` part, the
repetition, is optional): SYSTEM is one of raw, mergerfs, sluice-default,
sluice-no-passthrough, sluice, sluice-fast-all (others are shown after
them), ROW one of the rows below.
A file's throughput is the sum of `jobs[*].write.bw_bytes` (one entry with
--group_reporting), in MB/s (10^6 bytes/s). With several repetitions a cell
holds their median and a second table shows min-max.

The table goes to stdout. With --update DOC, the text of --meta FILE, the
table(s) and the targets are also written into DOC between the lines
`<!-- bench-mount:begin -->` and `<!-- bench-mount:end -->` (the rest of DOC,
e.g. a hand-written reading, is kept; DOC is created if it is missing).
With --plot PNG, a grouped bar chart of the medians (min-max as error bars)
is drawn into PNG with gnuplot (`apt-get install gnuplot-nox`); without
gnuplot the plot is skipped with a message.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

SYSTEMS = [
    ("raw", "raw dir"),
    ("mergerfs", "mergerfs"),
    ("sluice-default", "sluice (defaults)"),
    ("sluice-no-passthrough", "sluice (defaults, no passthrough)"),
    ("sluice", "sluice (ssdup+)"),
    ("sluice-fast-all", "sluice (fast-all)"),
]
ROWS = [
    ("seq-1M-1job", "seq write 1 MiB, 1 job"),
    ("seq-1M-4jobs", "seq write 1 MiB, 4 jobs"),
    ("rand-256K-1job", "rand write 256 KiB, 1 job"),
    ("rand-256K-4jobs", "rand write 256 KiB, 4 jobs"),
]
# (numerator, denominator, header)
RATIOS = [
    ("sluice-default", "raw", "defaults/raw"),
    ("sluice-default", "mergerfs", "defaults/mergerfs"),
    ("sluice-no-passthrough", "mergerfs", "no passthrough/mergerfs"),
    ("sluice", "raw", "sluice/raw"),
    ("sluice", "mergerfs", "sluice/mergerfs"),
    ("sluice-fast-all", "raw", "fast-all/raw"),
]
BEGIN = "<!-- bench-mount:begin -->"
END = "<!-- bench-mount:end -->"
NAME = re.compile(r"^(?P<sys>[A-Za-z0-9.+-]+)__(?P<row>[A-Za-z0-9.+-]+)(?:__r(?P<run>\d+))?\.json$")


def throughput(path):
    """MB/s of one fio JSON file: write bw summed over its job entries."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # fio may print notes before the JSON document; start at the first '{'.
    start = text.find("{")
    if start < 0:
        raise ValueError(f"{path}: no JSON in the file")
    data = json.loads(text[start:])
    jobs = data.get("jobs") or []
    if not jobs:
        raise ValueError(f"{path}: no jobs in the fio output")
    bad = [j.get("jobname", "?") for j in jobs if j.get("error", 0)]
    if bad:
        raise ValueError(f"{path}: fio reports an error for job(s) {', '.join(bad)}")
    return sum(j["write"]["bw_bytes"] for j in jobs) / 1e6


def load(paths):
    """{(system, row): [MB/s per run]}, and the systems/rows in table order."""
    cells = {}
    for p in paths:
        m = NAME.match(os.path.basename(p))
        if not m:
            raise ValueError(f"{p}: name is not SYSTEM__ROW[__rN].json")
        cells.setdefault((m["sys"], m["row"]), []).append(throughput(p))
    known_s = [s for s, _ in SYSTEMS]
    known_r = [r for r, _ in ROWS]
    seen_s = {s for s, _ in cells}
    seen_r = {r for _, r in cells}
    systems = [s for s in known_s if s in seen_s] + sorted(seen_s - set(known_s))
    rows = [r for r in known_r if r in seen_r] + sorted(seen_r - set(known_r))
    return cells, systems, rows


def label(key, table):
    return dict(table).get(key, key)


def median(cells, s, r):
    v = cells.get((s, r))
    return statistics.median(v) if v else None


def fmt_bw(x):
    return "–" if x is None else f"{x:,.0f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def table(cells, systems, rows):
    ratios = [(n, d, h) for n, d, h in RATIOS if n in systems and d in systems]
    head = ["row (MB/s)"] + [label(s, SYSTEMS) for s in systems] + [h for _, _, h in ratios]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in rows:
        line = [label(r, ROWS)] + [fmt_bw(median(cells, s, r)) for s in systems]
        line += [fmt_ratio(median(cells, n, r), median(cells, d, r)) for n, d, _ in ratios]
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def spread(cells, systems, rows):
    head = ["row: min–max MB/s (runs)"] + [label(s, SYSTEMS) for s in systems]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * len(systems)) + "|"]
    for r in rows:
        line = [label(r, ROWS)]
        for s in systems:
            v = cells.get((s, r))
            line.append("–" if not v else f"{min(v):,.0f}–{max(v):,.0f} ({len(v)})")
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def targets(cells, rows):
    """The issue's two targets, checked on the medians."""
    out = []
    for who in ("sluice-default", "sluice-no-passthrough", "sluice", "sluice-fast-all"):
        worst = None
        for r in rows:
            a, b = median(cells, who, r), median(cells, "mergerfs", r)
            if a is None or b is None:
                continue
            if worst is None or a / b < worst[0]:
                worst = (a / b, r)
        if worst:
            ok = "met" if worst[0] >= 1.0 else "NOT met"
            out.append(f"- {label(who, SYSTEMS)} ≥ mergerfs on every row: **{ok}** "
                       f"(lowest ratio {worst[0]:.2f}× on {label(worst[1], ROWS)})")
    for who in ("sluice-default", "sluice-fast-all", "sluice"):
        parts, all_ok, any_row = [], True, False
        for r in rows:
            if not r.startswith("rand"):
                continue
            a, b = median(cells, who, r), median(cells, "raw", r)
            if a is None or b is None:
                continue
            any_row = True
            all_ok &= a / b >= 0.8
            parts.append(f"{a / b:.2f}× on {label(r, ROWS)}")
        if any_row:
            ok = "met" if all_ok else "NOT met"
            out.append(f"- random-write absorption, {label(who, SYSTEMS)} ≥ 0.8× raw dir: "
                       f"**{ok}** ({'; '.join(parts)})")
    return "\n".join(out)


def update(doc, block, title="Mount benchmark: sluice vs the raw directory vs mergerfs",
           markers=(BEGIN, END)):
    """Put BLOCK between the MARKERS in DOC (created with a `# TITLE` heading
    and a Reading section if missing). Shared with policy_table.py."""
    begin, end = markers
    new = f"{begin}\n{block.rstrip()}\n{end}\n"
    if os.path.exists(doc):
        with open(doc, encoding="utf-8") as f:
            text = f.read()
    else:
        text = (f"# {title}\n\n"
                f"{begin}\n{end}\n\n## Reading\n\n(to be written)\n")
    if begin in text and end in text and text.index(begin) < text.index(end):
        i, j = text.index(begin), text.index(end) + len(end)
        if j < len(text) and text[j] == "\n":
            j += 1
        text = text[:i] + new + text[j:]
    else:
        text = text.rstrip() + "\n\n" + new
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    with open(doc, "w", encoding="utf-8") as f:
        f.write(text)


def grouped_bars(png, labels, names, values, *, tool, title, xlabel, ylabel, size,
                 key="top left", extra="", decimals=1):
    """Grouped bars via gnuplot: group g is labels[g], its bar s (named
    names[s]) the median of values[g][s] with a min-max error bar. XLABEL
    says what the groups are, YLABEL the quantity with its unit. TOOL
    names the caller in messages. True if drawn (False: no gnuplot).
    Shared with policy_table.py and bench-doc.py."""
    if not shutil.which("gnuplot"):
        print(f"{tool}: gnuplot not found, {png} not drawn (apt-get install gnuplot-nox)", file=sys.stderr)
        return False
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.tsv")
        with open(data, "w", encoding="utf-8") as f:
            for lab, per_series in zip(labels, values):
                cols = [f'"{lab}"']
                for v in per_series:
                    v = v or [0.0]
                    cols += [f"{x:.{decimals}f}" for x in (statistics.median(v), min(v), max(v))]
                f.write("\t".join(cols) + "\n")
        plots = ", ".join(
            f"'{data}' using {2 + 3 * i}:{3 + 3 * i}:{4 + 3 * i}{':xtic(1)' if i == 0 else ''} title '{name}'"
            for i, name in enumerate(names)
        )
        script = f"""
set terminal pngcairo size {size} font 'DejaVu Sans,10'
set output '{png}'
set datafile separator '\\t'
set style data histogram
set style histogram errorbars gap 2 lw 1
set style fill solid 0.8 border -1
set xlabel '{xlabel}'
set ylabel '{ylabel}'
set title '{title}'
set yrange [0:*]
set key {key}
{extra}set grid ytics
plot {plots}
"""
        gp = os.path.join(tmp, "plot.gp")
        with open(gp, "w", encoding="utf-8") as f:
            f.write(script)
        subprocess.run(["gnuplot", gp], check=True)
    print(f"{tool}: plot written to {png}", file=sys.stderr)
    return True


def plot(cells, systems, rows, png):
    """Grouped bars, one group per row, one bar per system."""
    grouped_bars(
        png,
        [label(r, ROWS) for r in rows],
        [label(s, SYSTEMS) for s in systems],
        [[cells.get((s, r)) for s in systems] for r in rows],
        tool="fio_table.py",
        title=f"fio through the mount: {len(systems)} systems, median of runs",
        xlabel="fio job (write pattern, request size, jobs of SIZE each)",
        ylabel="MB/s (fio write bandwidth, median; bars: min-max)",
        size="1000,520",
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="fio JSON files named SYSTEM__ROW[__rN].json")
    ap.add_argument("--update", metavar="DOC", help="also write the tables into DOC between the markers")
    ap.add_argument("--meta", metavar="FILE", help="Markdown to put before the table in DOC")
    ap.add_argument("--plot", metavar="PNG", help="also draw the medians into PNG (needs gnuplot)")
    a = ap.parse_args()
    try:
        cells, systems, rows = load(a.results)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"fio_table.py: {e}")
    main_table = table(cells, systems, rows)
    print(main_table)
    runs = max(len(v) for v in cells.values())
    extra = ""
    if runs > 1:
        extra = f"\n\nMedian of {runs} runs per cell; the spread:\n\n" + spread(cells, systems, rows)
        print(extra[1:])
    tg = targets(cells, rows)
    if tg:
        print()
        print(tg)
    if a.update:
        meta = ""
        if a.meta:
            with open(a.meta, encoding="utf-8") as f:
                meta = f.read().rstrip() + "\n\n"
        block = meta + main_table + extra
        if tg:
            block += "\n\nTargets (issue 5), on the medians:\n\n" + tg
        update(a.update, block + "\n")
    if a.plot:
        plot(cells, systems, rows, a.plot)


if __name__ == "__main__":
    main()
