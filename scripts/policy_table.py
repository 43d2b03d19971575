#!/usr/bin/env python3
"""Write placement policies through the mount -> Markdown table (scripts/bench-policy.sh).

Usage:
    scripts/policy_table.py [--update DOC --meta FILE] [--plot PNG] RESULTS_DIR
    scripts/policy_table.py --record RESULTS_DIR --policy P --pattern X --procs N
        --run R --seconds S --bytes B --drain-seconds D --fio-json F
        --status-json F [--verify-json F] [--log-bytes L]

RESULTS_DIR/runs.jsonl holds one JSON object per run (bench-policy.sh
appends them with --record, which reads fio's JSON output and the
`sluice status --json` snapshot taken after the write phase): policy,
pattern, procs, run, seconds (wall clock of the fio write run, end fsync
included), bytes (written), fio_bw (fio's aggregate write bw, bytes/s),
fast_bytes, forced_to_log_bytes, capacity_bytes, write_through_bytes,
region_waits (the status counters), files ({path: {fast_bytes,
capacity_bytes}} from the status' `files` list, null when the status has
none), drain_seconds, verified_bytes, log_bytes (regions x region
size), status_policy (the policy the status names).

The table goes to stdout: one row per (pattern, writers), per policy the
median MiB/s (2^20 bytes/s: bytes / wall-clock seconds) with the min–max
over runs, the ratios cost/fast-all and cost/max(capacity-only, fast-all)
of the medians, per policy the median share of the written bytes placed in
the fast tier's log ((fast_bytes + forced_to_log_bytes) / (that +
capacity_bytes); for the mixed pattern the share of rand.dat and of seq.dat
from the per-file split, `n/a (all N%)` when the status has none), and per policy
the median seconds of `sluice drain`. A second table gives fio's own
aggregate write bandwidth.

With --update DOC, the text of --meta FILE, the tables and the plot (if
drawn) are written into DOC between `<!-- bench-policy:begin -->` and
`<!-- bench-policy:end -->` (the rest of DOC is kept; DOC is created if
missing). With --plot PNG, a grouped bar chart of the medians (min–max as
error bars) is drawn with gnuplot; without gnuplot the plot is skipped with
a message.
"""

import argparse
import json
import os
import statistics
import sys

from fio_table import fmt_ratio, grouped_bars, update as update_doc  # the same directory

POLICIES = ["capacity-only", "fast-all", "ssdup", "ssdup+", "cost"]
PATTERNS = ["segmented-contiguous", "segmented-random", "strided", "mixed", "single-sequential"]
MIXED_FILES = ["rand.dat", "seq.dat"]
RUNS_FILE = "runs.jsonl"
BEGIN = "<!-- bench-policy:begin -->"
END = "<!-- bench-policy:end -->"
MIB = 1 << 20


def fail(msg):
    sys.exit(f"policy_table.py: {msg}")


# --- recording one run --------------------------------------------------------

def read_json(path):
    """A JSON document; fio may print notes before it, so start at the first '{'."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find("{")
    if start < 0:
        raise ValueError(f"{path}: no JSON in the file")
    return json.loads(text[start:])


def fio_totals(path, ddir):
    """(io bytes, aggregate bw bytes/s) of direction ddir over fio's job entries."""
    data = read_json(path)
    jobs = data.get("jobs") or []
    if not jobs:
        raise ValueError(f"{path}: no jobs in the fio output")
    bad = [j.get("jobname", "?") for j in jobs if j.get("error", 0)]
    if bad:
        raise ValueError(f"{path}: fio reports an error for job(s) {', '.join(bad)}")
    return (sum(j[ddir]["io_bytes"] for j in jobs), sum(j[ddir]["bw_bytes"] for j in jobs))


def per_file(status):
    """{path: {fast_bytes, capacity_bytes}} from the status' `files`, or None."""
    files = status.get("files")
    if not isinstance(files, list):
        return None
    out = {}
    for f in files:
        try:
            out[str(f["path"])] = {"fast_bytes": int(f["fast_bytes"]),
                                   "capacity_bytes": int(f["capacity_bytes"])}
        except (KeyError, TypeError, ValueError):
            continue
    return out


def log_bytes(status):
    """regions x region_bytes of the mount, from its status, or None."""
    regions, size = status.get("regions"), status.get("region_bytes")
    if isinstance(regions, list) and isinstance(size, int):
        return len(regions) * size
    return None


def record(a):
    fio_bytes, fio_bw = fio_totals(a.fio_json, "write")
    if fio_bytes != a.bytes:
        raise ValueError(f"{a.fio_json}: fio wrote {fio_bytes} bytes, the pattern has {a.bytes}")
    status = read_json(a.status_json)
    verified = None
    if a.verify_json:
        verified, _ = fio_totals(a.verify_json, "read")
        if verified != a.bytes:
            raise ValueError(f"{a.verify_json}: fio verified {verified} bytes, the pattern has {a.bytes}")
    row = {
        "policy": a.policy,
        "pattern": a.pattern,
        "procs": a.procs,
        "run": a.run,
        "seconds": a.seconds,
        "bytes": a.bytes,
        "fio_bw": fio_bw,
        "fast_bytes": int(status.get("fast_bytes", 0)),
        "forced_to_log_bytes": int(status.get("forced_to_log_bytes", 0)),
        "capacity_bytes": int(status.get("capacity_bytes", 0)),
        "write_through_bytes": int(status.get("write_through_bytes", 0)),
        "region_waits": int(status.get("region_waits", 0)),
        "files": per_file(status),
        "drain_seconds": a.drain_seconds,
        "verified_bytes": verified,
        "log_bytes": a.log_bytes if a.log_bytes is not None else log_bytes(status),
        "status_policy": status.get("policy"),
    }
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, RUNS_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
    return row


# --- the tables -------------------------------------------------------------------

def load(results):
    path = os.path.join(results, RUNS_FILE)
    runs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    runs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: {e}") from e
    if not runs:
        raise ValueError(f"{path}: no runs")
    return runs


def ordered(seen, known):
    """The seen names in the order of known (first mention), then the others sorted."""
    known = list(dict.fromkeys(known))
    return [x for x in known if x in seen] + sorted(set(seen) - set(known))


def mibs(run):
    return run["bytes"] / run["seconds"] / MIB if run["seconds"] > 0 else 0.0


def fast_share(run):
    fast = run.get("fast_bytes", 0) + run.get("forced_to_log_bytes", 0)
    total = fast + run.get("capacity_bytes", 0)
    return fast / total if total else None


def file_share(run, name):
    """Fast-tier share of the file whose path ends in name, or None."""
    files = run.get("files")
    if not files:
        return None
    for path, b in files.items():
        if path == name or path.endswith("/" + name):
            total = b["fast_bytes"] + b["capacity_bytes"]
            return b["fast_bytes"] / total if total else None
    return None


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt_mibs(x):
    if x is None:
        return "–"
    return f"{x:,.1f}" if x < 10 else f"{x:,.0f}"


def fmt_pct(x):
    return "n/a" if x is None else f"{100 * x:.0f}%"


class Cells:
    """The runs grouped by (pattern, procs) and policy."""

    def __init__(self, runs, policy_order=None):
        self.cells = {}
        for r in runs:
            self.cells.setdefault(((r["pattern"], int(r["procs"])), r["policy"]), []).append(r)
        seen_p = {p for _, p in self.cells}
        self.policies = ordered(seen_p, (policy_order or []) + POLICIES)
        seen_rows = {row for row, _ in self.cells}
        pats = ordered({pat for pat, _ in seen_rows}, PATTERNS)
        self.rows = sorted(seen_rows, key=lambda row: (pats.index(row[0]), row[1]))

    def get(self, row, policy):
        return self.cells.get((row, policy), [])

    def median_mibs(self, row, policy):
        return med([mibs(r) for r in self.get(row, policy)])


def row_label(row):
    pattern, procs = row
    return f"{pattern}, {procs} writer{'s' if procs != 1 else ''}"


def md_table(head, lines, left=1):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join(["---"] * left + ["---:"] * (len(head) - left)) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def main_table(c):
    head = ["pattern, writers"]
    head += [f"{p} MiB/s" for p in c.policies]
    head += ["cost/fast-all", "cost/max(capacity-only, fast-all)"]
    head += [f"fast tier {p}" for p in c.policies]
    head += [f"drain s {p}" for p in c.policies]
    lines = []
    for row in c.rows:
        line = [row_label(row)]
        for p in c.policies:
            v = [mibs(r) for r in c.get(row, p)]
            line.append("–" if not v else f"{fmt_mibs(statistics.median(v))} ({fmt_mibs(min(v))}–{fmt_mibs(max(v))})")
        cost, fa, co = (c.median_mibs(row, p) for p in ("cost", "fast-all", "capacity-only"))
        best = max((x for x in (fa, co) if x is not None), default=None)
        line += [fmt_ratio(cost, fa), fmt_ratio(cost, best)]
        for p in c.policies:
            runs = c.get(row, p)
            if not runs:
                line.append("–")
            elif row[0] == "mixed":
                shares = [med([file_share(r, n) for r in runs]) for n in MIXED_FILES]
                if all(s is None for s in shares):
                    line.append(f"n/a (all {fmt_pct(med([fast_share(r) for r in runs]))})")
                else:
                    line.append(" / ".join(f"{n.split('.')[0]} {fmt_pct(s)}" for n, s in zip(MIXED_FILES, shares)))
            else:
                line.append(fmt_pct(med([fast_share(r) for r in runs])))
        for p in c.policies:
            d = med([r.get("drain_seconds") for r in c.get(row, p)])
            line.append("–" if d is None else f"{d:.2f}" if d < 10 else f"{d:.1f}")
        lines.append(line)
    return md_table(head, lines)


def fio_table(c):
    head = ["pattern, writers"] + [f"{p} fio MiB/s" for p in c.policies]
    lines = []
    for row in c.rows:
        line = [row_label(row)]
        for p in c.policies:
            line.append(fmt_mibs(med([r["fio_bw"] / MIB for r in c.get(row, p)])))
        lines.append(line)
    return md_table(head, lines)


def notes(c, runs):
    out = []
    n = max(len(v) for v in c.cells.values())
    out.append(f"- {n} run{'s' if n != 1 else ''} per cell; MiB/s = 2^20 bytes/s, bytes written / "
               "wall-clock seconds of the fio write run (end fsync included, verification not)")
    out.append("- fast tier = share of the written bytes placed in the log (`fast_bytes + forced_to_log_bytes` "
               "of `sluice status --json` after the write phase); mixed: rand.dat / seq.dat from the "
               "status' per-file split (`n/a`: this sluice's status has no `files`; `all`: both files together)")
    for p in c.policies:
        waited = [r for r in runs if r["policy"] == p and (r.get("region_waits") or r.get("write_through_bytes"))]
        if waited:
            wt = sum(r.get("write_through_bytes", 0) for r in waited)
            out.append(f"- {p}: writers waited for log room in {len(waited)} of "
                       f"{sum(1 for r in runs if r['policy'] == p)} runs "
                       f"({wt / MIB:,.1f} MiB written through to the capacity tier)")
    unverified = [r for r in runs if r.get("verified_bytes") is None]
    if unverified:
        out.append(f"- **{len(unverified)} runs were not verified**")
    else:
        out.append(f"- all {len(runs)} runs verified (fio crc32c, read back through the mount after the drain)")
    return "\n".join(out)


def update(doc, block):
    update_doc(doc, block, title="Write placement policies through the mount",
               markers=(BEGIN, END))


def plot(c, png):
    """Grouped bars, one group per (pattern, writers), one bar per policy. True if drawn."""
    return grouped_bars(
        png,
        [f'{row[0]}\\n{row[1]} writer{"s" if row[1] != 1 else ""}' for row in c.rows],
        c.policies,
        [[[mibs(r) for r in c.get(row, p)] for p in c.policies] for row in c.rows],
        tool="policy_table.py",
        title="Write placement policies through the mount (fio, IOR offsets; fast: ssd, capacity: hdd)",
        xlabel="IOR access pattern and writers (one shared file)",
        ylabel="MiB/s (bytes / wall clock incl. end fsync; median, bars min-max)",
        size=f"{max(800, 160 * len(c.rows) + 200)},540",
        key="outside right top",
        extra="set bmargin 5\nset xlabel offset 0,-1\n",  # room for two-line group labels
        decimals=2,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", metavar="RESULTS_DIR", help=f"directory holding {RUNS_FILE}")
    ap.add_argument("--update", metavar="DOC", help="also write the tables into DOC between the markers")
    ap.add_argument("--meta", metavar="FILE", help="Markdown to put before the tables in DOC")
    ap.add_argument("--plot", metavar="PNG", help="also draw the medians into PNG (needs gnuplot)")
    ap.add_argument("--policies", help="column order of the policies (space separated)")
    rec = ap.add_argument_group("--record: append one run to RESULTS_DIR/" + RUNS_FILE)
    rec.add_argument("--record", action="store_true")
    rec.add_argument("--policy")
    rec.add_argument("--pattern")
    rec.add_argument("--procs", type=int)
    rec.add_argument("--run", type=int)
    rec.add_argument("--seconds", type=float, help="wall clock of the fio write run")
    rec.add_argument("--bytes", type=int, help="bytes the pattern writes")
    rec.add_argument("--drain-seconds", type=float)
    rec.add_argument("--fio-json", help="fio's JSON output of the write run")
    rec.add_argument("--status-json", help="`sluice status --json` after the write run")
    rec.add_argument("--verify-json", help="fio's JSON output of the verification run")
    rec.add_argument("--log-bytes", type=int, help="log size of the mount (default: from the status)")
    a = ap.parse_args()

    if a.record:
        need = ["policy", "pattern", "procs", "run", "seconds", "bytes", "fio_json", "status_json"]
        missing = [n for n in need if getattr(a, n) is None]
        if missing:
            fail("--record needs " + ", ".join("--" + n.replace("_", "-") for n in missing))
        try:
            record(a)
        except (OSError, ValueError, KeyError) as e:
            fail(str(e))
        return

    try:
        runs = load(a.results)
        c = Cells(runs, a.policies.split() if a.policies else None)
    except (OSError, ValueError, KeyError) as e:
        fail(str(e))
    table = main_table(c)
    fio = fio_table(c)
    nt = notes(c, runs)
    print(table)
    print()
    print(nt)
    print()
    print("fio's own aggregate write bandwidth (median MiB/s; fio's time includes the end fsync, not fio's start):")
    print()
    print(fio)
    drawn = False
    if a.plot:
        drawn = plot(c, a.plot)
    if a.update:
        meta = ""
        if a.meta:
            with open(a.meta, encoding="utf-8") as f:
                meta = f.read().rstrip() + "\n\n"
        block = meta + table + "\n\n" + nt + "\n\n"
        block += ("fio's own aggregate write bandwidth (median MiB/s; fio's time includes the end fsync, "
                  "not fio's start):\n\n" + fio + "\n")
        if drawn:
            rel = os.path.relpath(os.path.abspath(a.plot), os.path.dirname(os.path.abspath(a.update)))
            block += f"\n![MiB/s per policy and pattern]({rel})\n"
        update(a.update, block)


if __name__ == "__main__":
    main()
