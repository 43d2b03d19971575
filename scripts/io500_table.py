#!/usr/bin/env python3
"""The records and tables of scripts/bench-io500.sh.

  io500_table.py record RESULTS --phase P --system S --run N --bytes B
        --write FILE... [--read FILE...] --status JSON --status-after JSON
        [--drain-seconds D] --load L [--fallback]
      appends one run to RESULTS/runs.jsonl. FILEs are IOR's JSON summaries
      (-O summaryFormat=JSON; several for phases of several instances run
      at once) or mdtest's text output (its "SUMMARY rate" table). The JSONs
      are `sluice status --json` right after the write phase and right
      after the drain.
  io500_table.py table RESULTS
      prints the Markdown tables (medians of the runs, min-max) and the
      targets of issue 32 as ratios of medians.

Bandwidth: IOR phases bytes / the longest IOR `totalTime` of the phase's
instances (open, writes, fsync and close; for one instance this is IOR's
own bwMiB), in MiB/s = 2^20 bytes/s. mdtest phases: mdtest's rate
(files/s). Tiers, from the status: to the log = fast_bytes +
forced_to_log_bytes; straight to the capacity tier = capacity_bytes +
write_through_bytes + fast_fallback_bytes; written to the capacity tier by
every path, after the drain = that + flushed_bytes + synced_bytes (more
than the phase's bytes when the log's bytes reach the disk twice); the
drain moved the growth of flushed_bytes + synced_bytes across it (not
buffered_bytes: a region being flushed still counts all its bytes as
buffered until it is released).
"""
import json
import re
import statistics
import sys

MIB = 1 << 20
DISK, SSD = "disk", "ssd"  # the reference rows' phases
SHOWN = {DISK: "disk: 1 rank", SSD: "ssd: 1 rank"}
IOR_PHASES = ["ior-easy", "ior-hard", "mixed"]
MD_PHASES = ["mdtest-easy", "mdtest-hard"]


def ior_seconds(path):
    """Longest totalTime of the IOR JSON summary in path (one test, one rep)."""
    text = open(path).read()
    data = json.loads(text[text.find("{"):])
    return max(r["totalTime"] for t in data["tests"] for r in t["Results"])


def mdtest_rate(path):
    """The first non-zero operation rate in mdtest's SUMMARY rate table."""
    text = open(path).read()
    section = text.split("SUMMARY rate", 1)[1].split("SUMMARY time", 1)[0]
    for op in ("File creation", "File read", "File stat"):
        m = re.search(r"^\s*" + op + r"\s+([\d.]+)", section, flags=re.M)
        if m and float(m.group(1)) > 0:
            return float(m.group(1))
    raise ValueError(f"{path}: no file rate in mdtest's summary")


def value(phase, paths, nbytes):
    if not paths:
        return None
    if phase in MD_PHASES:
        return mdtest_rate(paths[0])
    return nbytes / max(ior_seconds(p) for p in paths) / MIB


def record(argv):
    import argparse

    p = argparse.ArgumentParser(prog="io500_table.py record")
    p.add_argument("results")
    p.add_argument("--phase", required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--write", nargs="+", required=True)
    p.add_argument("--read", nargs="*", default=[])
    p.add_argument("--status", required=True)
    p.add_argument("--status-after", required=True, help="sluice status --json after the drain")
    p.add_argument("--drain-seconds", type=float)
    p.add_argument("--load", type=float, required=True, help="1-minute load average at the start")
    p.add_argument("--fallback", action="store_true")
    a = p.parse_args(argv)
    s, after = json.load(open(a.status)), json.load(open(a.status_after))

    def direct(st):  # written straight to the capacity tier
        return st["capacity_bytes"] + st.get("write_through_bytes", 0) + st.get("fast_fallback_bytes", 0)

    def from_log(st):  # moved from the log to the capacity tier
        return st["flushed_bytes"] + st["synced_bytes"] + st.get("written_back_bytes", 0)

    row = dict(
        phase=a.phase,
        system=a.system,
        run=a.run,
        bytes=a.bytes,
        write=value(a.phase, a.write, a.bytes),
        read=value(a.phase, a.read, a.bytes),
        to_log_bytes=s["fast_bytes"] + s.get("forced_to_log_bytes", 0),
        to_capacity_bytes=direct(s),
        capacity_written_bytes=direct(after) + from_log(after),
        buffered_bytes=s["buffered_bytes"],
        drained_bytes=from_log(after) - from_log(s),
        region_waits=s.get("region_waits", 0),
        drain_s=a.drain_seconds,
        load=a.load,
        fallback=a.fallback,
    )
    with open(f"{a.results}/runs.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    unit = "files/s" if a.phase in MD_PHASES else "MiB/s"
    print(f"write {fmt(row['write'])} {unit}, {fmt(row['to_log_bytes'] / MIB)} MiB to log, "
          f"{fmt(row['to_capacity_bytes'] / MIB)} MiB to capacity, drain {fmt(row['drain_s'])} s "
          f"({fmt(row['drained_bytes'] / MIB)} MiB), {fmt(row['capacity_written_bytes'] / MIB)} MiB written to "
          f"capacity in all, read-back {fmt(row['read'])} {unit}")


def fmt(x, unit=""):
    if x is None:
        return "–"
    return (f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}") + unit


def spread(xs):
    """'median (min–max)' of xs, or the one value."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    if len(xs) == 1:
        return fmt(xs[0])
    return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def drain_rate(r):
    """MiB/s the drain moved, when it moved at least 1 MiB."""
    if r["drain_s"] and r["drained_bytes"] >= MIB:
        return r["drained_bytes"] / MIB / r["drain_s"]
    return None


def table(argv):
    results = argv[0]
    runs = [json.loads(line) for line in open(f"{results}/runs.jsonl")]
    cells = {}
    for r in runs:
        cells.setdefault((r["phase"], r["system"]), []).append(r)
    n_runs = max(len(v) for v in cells.values())

    def m(phase, system, key):
        return med([r[key] for r in cells.get((phase, system), [])])

    disk = med([r["write"] for r in runs if r["phase"] == DISK])  # whatever its system's label
    out = []
    if any(r["fallback"] for r in runs):
        out.append("**NOT IOR: IOR or mdtest was missing, so scripts/io500_fallback.py (the project's stand-in, "
                   "same offsets, no MPI) ran the rows marked (fallback).**\n")
    out.append(f"IOR phases: medians of {n_runs} runs (min–max). Write = bytes / IOR's time for open, writes, "
               "fsync (`-e`) and close; × disk = write / the disk row's median; MiB to the log and straight to "
               "the capacity tier: where the writes went (`sluice status` after them); capacity writes: MiB "
               "written to the capacity tier by every path once drained (straight, flushed and synced; above "
               "the phase's MiB when bytes of the log reach the disk twice); drained: MiB the flusher moved "
               "during `sluice drain`, and its rate; read-back = IOR `-r -R` after the drain (every byte "
               "checked).\n")
    out.append("| phase | system | write MiB/s | × disk | MiB to log | MiB straight to capacity | capacity writes "
               "MiB | drained MiB | drain s | drain MiB/s | read-back MiB/s |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    systems = list(dict.fromkeys(r["system"] for r in runs if r["phase"] in IOR_PHASES + MD_PHASES))
    for phase in IOR_PHASES + [DISK, SSD]:  # the references last: the plot's legend follows the systems' order
        for system in list(dict.fromkeys(r["system"] for r in runs if r["phase"] == phase)):
            rs = cells[(phase, system)]
            w = med([r["write"] for r in rs])
            drained = med([r["drained_bytes"] / MIB for r in rs])
            rate = med([drain_rate(r) for r in rs])
            tag = " (fallback)" if any(r["fallback"] for r in rs) else ""
            out.append(f"| {SHOWN.get(phase, phase)}{tag} | {system} | {spread([r['write'] for r in rs])} | "
                       f"{fmt(w / disk if disk and w else None, '×')} | "
                       f"{fmt(med([r['to_log_bytes'] / MIB for r in rs]))} | "
                       f"{fmt(med([r['to_capacity_bytes'] / MIB for r in rs]))} | "
                       f"{fmt(med([r['capacity_written_bytes'] / MIB for r in rs]))} | {fmt(drained)} | "
                       f"{spread([r['drain_s'] for r in rs])} | {fmt(rate)} | {spread([r['read'] for r in rs])} |")
    md_rows = [p for p in MD_PHASES if any(k[0] == p for k in cells)]
    if md_rows:
        out.append("")
        out.append(f"mdtest phases: medians of {n_runs} runs (min–max), files per second. Create = mdtest `-C`; "
                   "read-back after the drain = `-T` (stat) for mdtest-easy, `-E -X` (read 3901 bytes and check "
                   "them) for mdtest-hard.\n")
        out.append("| phase | system | create files/s | MiB to log | MiB straight to capacity | drained MiB | "
                   "drain s | read-back files/s |")
        out.append("|---|---|--:|--:|--:|--:|--:|--:|")
        for phase in md_rows:
            for system in systems:
                rs = cells.get((phase, system))
                if not rs:
                    continue
                tag = " (fallback)" if any(r["fallback"] for r in rs) else ""
                out.append(f"| {phase}{tag} | {system} | {spread([r['write'] for r in rs])} | "
                           f"{fmt(med([r['to_log_bytes'] / MIB for r in rs]))} | "
                           f"{fmt(med([r['to_capacity_bytes'] / MIB for r in rs]))} | "
                           f"{fmt(med([r['drained_bytes'] / MIB for r in rs]))} | "
                           f"{spread([r['drain_s'] for r in rs])} | {spread([r['read'] for r in rs])} |")
    out.append("")
    out.append("Targets of issue 32 (ratios of medians; later work is judged against them):\n")
    out.append("| target | measured | |")
    out.append("|---|--:|---|")

    def target(name, x, bound):
        if x is None:
            out.append(f"| {name} | not measured | |")
        else:
            out.append(f"| {name} | {x:.2f}× | {'met' if x >= bound else 'missed'} |")

    for phase in IOR_PHASES:
        w = m(phase, "default, close-to-open", "write")
        target(f"{phase}, default (close-to-open) ≥ 0.7× disk", w / disk if w and disk else None, 0.7)
    for phase in IOR_PHASES + MD_PHASES:
        d, f = m(phase, "default, node-local", "write"), m(phase, "fast-all, node-local", "write")
        target(f"{phase}, default ≥ 0.8× fast-all (node-local)", d / f if d and f else None, 0.8)
    for phase in IOR_PHASES:
        rs = cells.get((phase, "fast-all, node-local"), [])
        rate = med([drain_rate(r) for r in rs])
        target(f"drain of {phase} (fast-all, node-local: contiguous once sorted) ≥ 0.8× disk",
               rate / disk if rate and disk else None, 0.8)
    print("\n".join(out))


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"]:
        record(sys.argv[2:])
    elif sys.argv[1:2] == ["table"]:
        table(sys.argv[2:])
    else:
        sys.exit(__doc__)
