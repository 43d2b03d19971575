#!/usr/bin/env python3
"""Combine several runs of scripts/bench-bbos.sh into one table of
medians (with min-max) and a plot of them.

Usage: bbos_runs.py PNG RUN.md...

Each RUN.md is a DOC that bench-bbos.sh wrote (its table between the
`bench-bbos` markers). Prints the Markdown table (median, and min-max
over the runs, per over-subscription and scheme) and draws PNG: checkpoint
throughput and mean latency per scheme, median bars with min-max error
bars (gnuplot, through fio_table.grouped_bars).
"""
import re
import statistics
import sys

sys.dont_write_bytecode = True
from fio_table import grouped_bars  # noqa: E402

COLUMNS = ("ckpt MB/s", "latency mean s", "restart hit ratio", "demoted MiB")


def rows(path):
    text = open(path, encoding="utf-8").read()
    block = text.split("<!-- bench-bbos:begin -->")[1].split("<!-- bench-bbos:end -->")[0]
    out = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 10 or not re.match(r"^[0-9.]+$", cells[0]):
            continue
        latency = float(cells[4].split("/")[0])
        ratio = re.search(r"\(([0-9.]+)\)", cells[7])
        out.append(((cells[0], cells[1]), {
            "ckpt MB/s": float(cells[3]),
            "latency mean s": latency,
            "restart hit ratio": float(ratio.group(1)) if ratio else 0.0,
            "demoted MiB": float(cells[6]),
        }))
    return out


def main():
    png, runs = sys.argv[1], sys.argv[2:]
    cells = {}
    order = []
    for path in runs:
        for key, values in rows(path):
            if key not in cells:
                order.append(key)
            cells.setdefault(key, []).append(values)
    print("| DWPP/S | scheme | runs | " + " | ".join(f"{c} median (min–max)" for c in COLUMNS) + " |")
    print("|---|---|---:|" + "---:|" * len(COLUMNS))
    for key in order:
        vs = cells[key]
        parts = []
        for c in COLUMNS:
            xs = [v[c] for v in vs]
            parts.append(f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})")
        print(f"| {key[0]} | {key[1]} | {len(vs)} | " + " | ".join(parts) + " |")
    labels = ["ckpt MB/s", "latency mean s"]
    grouped_bars(
        png,
        labels,
        [f"{s} ({o}×)" for o, s in order],
        [[[v[l] for v in cells[k]] for k in order] for l in labels],
        tool="bbos_runs.py",
        title=f"BBOS through the mount, synchronised bursts: median of {len(runs)} runs",
        xlabel="quantity (checkpoint MB/s; mean checkpoint latency in s)",
        ylabel="MB/s or s (median; bars: min-max)",
        size="900,480",
    )


if __name__ == "__main__":
    main()
