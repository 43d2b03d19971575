#!/usr/bin/env python3
"""The tables of scripts/bench-liu.sh from its results directory.

Usage: liu_table.py RESULTS RUNS CASE...

RESULTS holds, per case, system (off, on) and run n, CASE-SYSTEM-n.json
(sluice-readers' output), CASE-SYSTEM-n.status.json (`sluice status
--json` at the end) and CASE-SYSTEM-n.load (the 1-minute load average
before the mount). Each cell is the median over the runs with the range
in brackets, "76.5 (70.1–80.2)"; a ratio is taken per run (runs paired by
their number) before the median.
"""
import json
import os
import statistics
import sys

sys.dont_write_bytecode = True

NAMES = {"none": "alone", "mpi-io-test": "interfered by mpi-io-test", "ior-mpi-io": "interfered by ior-mpi-io"}
PAPER = {"none": "264.7 / 304.5 (1.15×)", "mpi-io-test": "124.8 / 261.6 (2.10×)", "ior-mpi-io": "47.6 / 164.1 (3.45×)"}


def spread(values, unit="", decimals=1):
    """Median (min–max) of values, or – when there are none."""
    if not values:
        return "–"
    f = f"{{:.{decimals}f}}{unit}"
    if len(values) == 1:
        return f.format(values[0])
    return f"{f.format(statistics.median(values))} ({f.format(min(values))}–{f.format(max(values))})"


def files(status):
    """The per-file LiU counters of a `sluice status --json`, by path."""
    liu = status.get("liu") or {}
    return {f["path"]: f for f in liu.get("files", [])}


def pass_counters(d, case, n, passes):
    """Per-file counters of run n's measured (last) pass: the snapshot after
    it minus the one after the pass before (after-pass snapshots), else
    the whole run's (the end status)."""
    def snapshot(k):
        path = os.path.join(d, f"{case}-on-{n}.pass-{k}.status.json")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return files(json.load(f))

    last = snapshot(passes)
    if last is None:
        with open(os.path.join(d, f"{case}-on-{n}.status.json"), encoding="utf-8") as f:
            return files(json.load(f))
    before = snapshot(passes - 1) if passes > 1 else {}
    return {
        name: {k: (v - before.get(name, {}).get(k, 0) if isinstance(v, (int, float)) else v) for k, v in c.items()}
        for name, c in last.items()
    }


def main():
    d, runs, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

    def load(case, system, n, ext):
        with open(os.path.join(d, f"{case}-{system}-{n}.{ext}"), encoding="utf-8") as f:
            return f.read() if ext == "load" else json.load(f)

    summary, readers, counters, passes = [], [], [], []
    for case in cases:
        r = {(s, n): load(case, s, n, "json") for s in ("off", "on") for n in range(1, runs + 1)}
        st = {n: load(case, "on", n, "status.json")["liu"] for n in range(1, runs + 1)}
        loads = [float(load(case, s, n, "load")) for s in ("off", "on") for n in range(1, runs + 1)]
        last = {k: v["passes"][-1] for k, v in r.items()}
        t = {s: [last[(s, n)]["target_mb_s"] for n in range(1, runs + 1)] for s in ("off", "on")}
        i = {s: [last[(s, n)]["interferer_mb_s"] for n in range(1, runs + 1)] for s in ("off", "on")}
        agg = {s: [a + b for a, b in zip(t[s], i[s])] for s in t}
        ratio = [on / max(off, 1e-9) for off, on in zip(t["off"], t["on"])]
        alone = case == "none"
        summary.append(
            f"| {NAMES[case]} | {spread(t['off'])} | {spread(t['on'])} | {spread(ratio, '×', 2)} | "
            f"{min(ratio):.2f}× | {'–' if alone else spread([a / max(b, 1e-9) for b, a in zip(agg['off'], agg['on'])], '×', 2)} | "
            f"{spread(loads, '', 2)} | {PAPER[case]} |"
        )
        if not alone:
            iratio = [on / max(off, 1e-9) for off, on in zip(i["off"], i["on"])]
            readers.append(
                f"| {NAMES[case]} | {spread(t['off'])} → {spread(t['on'])} | "
                f"{spread(i['off'])} → {spread(i['on'])} | {spread(iratio, '×', 2)} | {min(iratio):.2f}× | "
                f"{spread(agg['off'])} → {spread(agg['on'])} | "
                f"{sum(1 for a, b in zip(agg['off'], agg['on']) if b < a)} of {runs} |"
            )
        measured = {n: pass_counters(d, case, n, len(r[("on", n)]["passes"])) for n in st}
        for name in ("target", "interferer"):
            rows = [measured[n][name] for n in measured if name in measured[n]]
            if not rows:
                continue

            def m(key):
                return spread([float(f[key]) for f in rows], "", 0)

            counters.append(
                f"| {NAMES[case]} | {name} | {m('loads')} | {m('read_aheads')} | {m('buffer_hits')} | {m('direct_reads')} | "
                f"{m('lagging_reads')} | {m('refused_loads')} | {m('evictions')} | {m('evicted_by_other')} | {m('evicted_unread')} | {m('lifts')} |"
            )
        for s in ("off", "on"):
            per_pass = [" → ".join(f"{p['target_mb_s']:.1f}" for p in r[(s, n)]["passes"]) for n in range(1, runs + 1)]
            passes.append(f"| {NAMES[case]} | {s} | {'; '.join(per_pass)} |")
        errors = sum(st[n]["errors"] for n in st)
        if errors:
            passes.append(f"| {NAMES[case]} | on | LiU errors: {errors} |")

    print(f"Target mpi-io-test, measured pass, over {runs} run(s): median (min–max).")
    print()
    print("| mpi-io-test read (measured pass) | MB/s LiU off | MB/s LiU on | on/off | lowest on/off | aggregate on/off | load avg (1 min) | paper MB/s w/o / w/ LiU |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(summary))
    if readers:
        print()
        print("Both readers under interference (MB/s in the target's measured pass, LiU off → on), and the aggregate (target + interferer):")
        print()
        print("| case | target | interferer | interferer on/off | lowest interferer on/off | aggregate | runs with aggregate below off |")
        print("|---|---|---|---:|---:|---|---:|")
        print("\n".join(readers))
    if counters:
        print()
        print("LiU's per-file counters in the measured pass of each LiU-on run (`sluice status --json`, `liu.files`, after the pass minus before), median (min–max):")
        print()
        print("| case | file | loads | of which read ahead | buffer hits | direct reads | lagging reads | refused loads | evictions | by the other file | evicted unread | lifts |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(counters))
    print()
    print("Target MB/s per pass, each run (the first pass learns; the last is measured):")
    print()
    print("| case | LiU | runs |")
    print("|---|---|---|")
    print("\n".join(passes))


if __name__ == "__main__":
    main()
