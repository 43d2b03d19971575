#!/usr/bin/env python3
"""Put a benchmark's table, and a plot of it, into its results document.

Usage: bench-doc.py NAME DOC TABLE ELAPSED_S COMMAND
       bench-doc.py --plot-only NAME DOC

Replaces the block between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
in DOC (created with a `# NAME` heading if missing) with the
table, when and where it was measured, and the command that measured it.
Shared by scripts/bench-liu.sh, scripts/bench-bbos.sh,
scripts/bench-xfer.sh, scripts/bench-io500.sh and
scripts/bench-multinode-ondemand.sh.

If PLOTS below names NAME, each of its plots is drawn from the numbers of
the table in the block (grouped bars with gnuplot, through the one
helper fio_table.grouped_bars that scripts/bench-mount.sh and
scripts/bench-policy.sh use) into a PNG beside DOC, and embedded at the
end of the block as "plot of the table above". --plot-only does that for
the table already recorded in DOC, without measuring anything.
"""
import datetime
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
from fio_table import grouped_bars  # noqa: E402 (after the line above)

# NAME -> plots, each drawn from one Markdown table of the block:
#   stem     PNG file name beside DOC, without .png
#   table    index of the table in the block (0 = the first)
#   group    column naming the bar groups (x axis)
#   series   column whose values name the bars of a group, with `value` the
#            column holding their height; or `values`: columns that are the
#            bars of each row
#   title, ylabel, xlabel: the axes, with units; key: gnuplot's key
#            position (default top left); decimals: of the plotted
#            values (default 1)
PLOTS = {
    "bench-liu": [
        dict(
            stem="liu-mount",
            table=0,
            group=0,
            values=["MB/s LiU off", "MB/s LiU on"],
            title="mpi-io-test read through the mount, LiU off and on (median of runs, min-max bars)",
            xlabel="interference",
            ylabel="read throughput, measured pass (MB/s)",
        )
    ],
    "bench-bbos": [
        dict(
            stem="bbos-mount",
            table=0,
            group="DWPP/S",
            series="scheme",
            value="ckpt MB/s (bytes / time in checkpoints)",
            title="Checkpoints through the mount, per scheme",
            xlabel="data written per planner period / burst-buffer size S (DWPP/S)",
            ylabel="checkpoint throughput (MB/s)",
        )
    ],
    "bench-io500": [
        dict(
            stem="io500",
            table=0,
            group="phase",
            series="system",
            value="write MiB/s",
            title="IO500 IOR phases through the mount, emulated SSD + 7200 rpm disk (median of runs, min-max bars)",
            key="outside right top",
            xlabel="phase (disk, ssd: one rank writing one file, the references)",
            ylabel="write, fsync before close (MiB/s)",
        ),
        dict(
            stem="io500-mdtest",
            table=1,
            group="phase",
            series="system",
            value="create files/s",
            title="IO500 mdtest phases through the mount (median of runs, min-max bars)",
            key="outside right top",
            xlabel="phase",
            ylabel="files created per second",
        ),
    ],
    "bench-multinode-ondemand": [
        dict(
            stem="multinode-ondemand",
            table=0,
            group=0,
            values=["burst (s)", "cross-node read (s)", "holder write-back (s)"],
            title="Checkpoint burst on 3 mounts over one shared emulated disk, and a cross-node read (median of runs, min-max bars)",
            xlabel="mount.consistency (a missing bar: not measured or not applicable)",
            ylabel="seconds (lower is better)",
            decimals=2,
        )
    ],
    "lads-bench": [
        dict(
            stem="lads-bench",
            table=0,
            group="set",
            series="tool",
            value="MB/s",
            title="Loopback transfer, median of rounds",
            key="outside right top",
            xlabel="file set (small: 1 MB files; big: 256 MiB files) and the cache state of the source",
            ylabel="throughput (MB/s)",
        ),
        dict(
            stem="lads-bench-local",
            table=1,
            group="set",
            series="tool",
            value="MB/s",
            title="Local copy on one disk, median of rounds",
            key="outside right top",
            xlabel="file set (small: 1 MB files; big: 256 MiB files) and the cache state of the source",
            ylabel="throughput (MB/s)",
        ),
        dict(
            stem="lads-bench-pfs",
            table=3,
            group="set",
            series="mode",
            value="MB/s",
            title="Big set from an emulated PFS, 16 targets, 4 congested 8x",
            xlabel="file set",
            ylabel="throughput (MB/s)",
        ),
    ],
}


def tables(text):
    """The Markdown tables in text, each as (header cells, rows of cells)."""
    found, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line[1:-1].split("|")]
            if current is None:
                current = (cells, [])
                found.append(current)
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current[1].append(cells)
        else:
            current = None
    return found


def number(cell):
    """The number a cell starts with ("2.82×", "1,552", "76.5"), else None."""
    m = re.match(r"-?[\d,]*\.?\d+", cell.strip())
    return float(m.group(0).replace(",", "")) if m else None


def numbers(cell):
    """A bar's values from a cell: [median, min, max] from "76.5 (70.1–80.2)"
    (drawn with a min-max error bar), else [the number], else None."""
    m = re.match(r"\s*(-?[\d,]*\.?\d+)\S*\s*\((-?[\d,]*\.?\d+)\s*[–-]\s*(-?[\d,]*\.?\d+)\)", cell)
    if m:
        return [float(g.replace(",", "")) for g in m.groups()]
    x = number(cell)
    return None if x is None else [x]


def column(header, key):
    """Index of column key (an index, or a header's text)."""
    if isinstance(key, int):
        return key
    if key not in header:
        raise ValueError(f"no column {key!r} in {header}")
    return header.index(key)


def draw(spec, block, png):
    """Draws spec's plot of the table in block into png; True if drawn."""
    found = tables(block)
    if spec["table"] >= len(found):
        raise ValueError(f"the block has {len(found)} tables, the plot wants table {spec['table']}")
    header, rows = found[spec["table"]]
    g = column(header, spec["group"])
    groups = list(dict.fromkeys(r[g] for r in rows))
    if "series" in spec:
        s, v = column(header, spec["series"]), column(header, spec["value"])
        names = list(dict.fromkeys(r[s] for r in rows))
        cell = {(r[g], r[s]): numbers(r[v]) for r in rows}
        values = [[cell.get((grp, n)) for n in names] for grp in groups]
    else:
        cols = [column(header, c) for c in spec["values"]]
        names = [header[c] for c in cols]
        by_group = {r[g]: r for r in rows}
        values = [[numbers(by_group[grp][c]) for c in cols] for grp in groups]
    return grouped_bars(
        png,
        groups,
        names,
        values,
        tool="bench-doc.py",
        title=spec["title"],
        ylabel=spec["ylabel"],
        size="1000,520",
        key=spec.get("key", "top left"),
        xlabel=spec["xlabel"],
        decimals=spec.get("decimals", 1),
    )


def plots(name, doc, block):
    """Draws NAME's plots of block beside doc; the Markdown that embeds them."""
    md = []
    for spec in PLOTS.get(name, []):
        png = os.path.join(os.path.dirname(os.path.abspath(doc)), spec["stem"] + ".png")
        if draw(spec, block, png):
            md.append(f"![{spec['title']}]({spec['stem']}.png)")
    if not md:
        return ""
    return "\nPlot of the tables above, drawn from their numbers by scripts/bench-doc.py:\n\n" + "\n".join(md) + "\n"


def plot_only(name, doc):
    """Redraws NAME's plots from the table recorded in doc and embeds them."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = open(doc).read()
    m = re.search(re.escape(begin) + "(.*?)" + re.escape(end), text, flags=re.S)
    if not m:
        sys.exit(f"bench-doc.py: {doc} has no {begin} block")
    body = m.group(1).split("\nPlot of the tables above")[0].rstrip("\n") + "\n"
    block = f"{begin}{body}{plots(name, doc, body)}{end}"
    with open(doc, "w") as f:
        f.write(text[: m.start()] + block + text[m.end():])


def main() -> None:
    if sys.argv[1:2] == ["--plot-only"]:
        plot_only(*sys.argv[2:4])
        return
    name, doc, table, elapsed, command = sys.argv[1:6]
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    # As scripts/bench-lib.sh's sluice_commit: a tree measured before its
    # commit says so.
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "crates", "Cargo.toml", "Cargo.lock"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if dirty:
        rev += " (with uncommitted changes under crates/)"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    drawn = plots(name, doc, table)
    block = f"""{begin}
Measured {now} in {elapsed} s on {os.cpu_count()} CPUs, sluice {rev}, with

```sh
{command}
```

{table}
{drawn}{end}"""
    if os.path.exists(doc):
        text = open(doc).read()
    else:
        text = f"# {name}\n\n{begin}\n{end}\n"
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    with open(doc, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
