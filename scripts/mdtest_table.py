#!/usr/bin/env python3
"""mdtest's rates for scripts/bench-mdtest.sh.

Usage: mdtest_table.py rates OUT
       mdtest_table.py table RESULTS JSON "SYSTEMS" "PHASES"

`rates` prints one line of the four file rates of one mdtest output (its
"SUMMARY rate" block, the Mean column). `table` reads every
RESULTS/SYSTEM__PHASE__rRUN.out, writes all the rates to JSON and prints
one Markdown table: a row per phase and operation, a column per system
(the median over the runs, op/s) and sluice / mergerfs (the median of
each round's ratio).
"""
import glob
import json
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True

OPS = ["File creation", "File stat", "File read", "File removal"]
SHORT = {"File creation": "create", "File stat": "stat", "File read": "read", "File removal": "remove"}


def rates(path):
    """{operation: op/s} of one mdtest output (its SUMMARY rate block)."""
    text = open(path, encoding="utf-8", errors="replace").read()
    block = text.split("SUMMARY rate:", 1)
    if len(block) < 2:
        raise SystemExit(f"{path}: no 'SUMMARY rate' block (did mdtest finish?)")
    block = block[1].split("SUMMARY time:", 1)[0]
    out = {}
    for op in OPS:
        m = re.search(r"^\s*" + re.escape(op) + r"\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", block, re.M)
        if m:
            out[SHORT[op]] = float(m.group(3))
    return out


def fmt(v):
    return "–" if v is None else f"{v:,.0f}"


def main():
    if sys.argv[1] == "rates":
        r = rates(sys.argv[2])
        print(", ".join(f"{k} {fmt(v)}/s" for k, v in r.items()))
        return
    _, _, results, json_path, systems, phases = sys.argv
    systems, phases = systems.split(), phases.split()
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "*__*__r*.out"))):
        sys_name, phase, run = os.path.basename(path)[: -len(".out")].split("__")
        for op, v in rates(path).items():
            runs.append(dict(system=sys_name, phase=phase, run=int(run[1:]), op=op, ops_per_s=v))
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(dict(unit="op/s", runs=runs), f, indent=1)

    def median(system, phase, op):
        v = [r["ops_per_s"] for r in runs if (r["system"], r["phase"], r["op"]) == (system, phase, op)]
        return statistics.median(v) if v else None

    def round_ratios(phase, op):
        """sluice / mergerfs of each round that ran both: the systems of a
        round run within a minute of each other, so on a shared machine
        their ratio moves less than either rate."""
        rate = {(r["system"], r["run"]): r["ops_per_s"] for r in runs if (r["phase"], r["op"]) == (phase, op)}
        rounds = sorted({run for (_, run) in rate})
        return [
            rate[("sluice", n)] / rate[("mergerfs", n)]
            for n in rounds
            if ("sluice", n) in rate and rate.get(("mergerfs", n))
        ]

    ratio = "mergerfs" in systems and "sluice" in systems
    head = ["phase", "op"] + [f"{s} op/s" for s in systems] + (["sluice / mergerfs"] if ratio else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
    for phase in phases:
        for op in SHORT.values():
            cells = [median(s, phase, op) for s in systems]
            row = [phase, op] + [fmt(c) for c in cells]
            if ratio:
                r = round_ratios(phase, op)
                row.append(f"{statistics.median(r):.2f}×" if r else "–")
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
