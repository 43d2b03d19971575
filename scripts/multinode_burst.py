#!/usr/bin/env python3
"""The measuring parts of scripts/bench-multinode-ondemand.sh.

  multinode_burst.py now
      CLOCK_MONOTONIC now, in seconds (one clock for every process here)
  multinode_burst.py write MNT NODE FILES SIZE BS START OUT
      at monotonic time START, write FILES files MNT/nNODE-fJ of SIZE bytes
      each in BS-byte writes, each ended by fsync and close; OUT gets JSON:
      the seconds from START until each close returned
  multinode_burst.py read PATH NODE FILE SIZE BS OUT
      open PATH (node NODE's file FILE), read it to its last byte and check
      every byte against what `write` put there; OUT gets JSON: seconds to
      the open's return and to the last byte, and whether every byte and
      the size were right
  multinode_burst.py disk STATE
      the shared emulated disk's state file (crates/env/src/shared_disk.rs)
      as JSON: services so far and the platter's busy seconds
  multinode_burst.py holder-write-back LOG PATH
      the first of the holder's log's "recall answered" lines for PATH
      (debug level of sluice_engine::engine::held) as JSON: its write-back
      seconds and when it was logged (epoch seconds); or nothing
  multinode_burst.py table RESULTS.jsonl NODES FILES SIZE BS
      the Markdown table of the runs in RESULTS.jsonl (one JSON per run)

The bytes: chunk k of file J of node N is a block of BS bytes drawn from
random.Random("N-J") with (N, J, k) over its first 24 bytes, so a stale,
short, shifted or foreign chunk fails the check.
"""
import datetime
import json
import os
import random
import re
import statistics
import struct
import sys
import time

sys.dont_write_bytecode = True


def block(node, index, bs):
    return random.Random(f"{node}-{index}").randbytes(bs)


def chunk(base, node, index, k):
    return struct.pack("<QQQ", node, index, k) + base[24:]


def write(mnt, node, files, size, bs, start, out):
    node, files, size, bs, start = int(node), int(files), int(size), int(bs), float(start)
    bases = [block(node, j, bs) for j in range(files)]
    delay = start - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    closes = []
    for j in range(files):
        fd = os.open(os.path.join(mnt, f"n{node}-f{j}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for k in range(size // bs):
            data = chunk(bases[j], node, j, k)
            done = 0
            while done < len(data):
                done += os.write(fd, data[done:])
        os.fsync(fd)
        os.close(fd)
        closes.append(time.monotonic() - start)
    with open(out, "w") as f:
        json.dump({"node": node, "closes_s": closes, "burst_s": closes[-1]}, f)


def read_full(fd, n):
    """Up to n bytes: fewer only at the end of the file."""
    parts, got = [], 0
    while got < n:
        data = os.read(fd, n - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def read(path, node, index, size, bs, out):
    node, index, size, bs = int(node), int(index), int(size), int(bs)
    base = block(node, index, bs)
    started_epoch = time.time()
    t0 = time.monotonic()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        result = {"error": f"open: {e.strerror}", "open_s": time.monotonic() - t0}
    else:
        opened = time.monotonic() - t0
        good, seen, k, first_bad = 0, 0, 0, None
        while True:
            data = read_full(fd, bs)
            if not data:
                break
            if data == chunk(base, node, index, k)[: len(data)]:
                good += len(data)
            elif first_bad is None:
                first_bad = k * bs
            seen += len(data)
            k += 1
        total = time.monotonic() - t0
        os.close(fd)
        result = {
            "open_started_epoch": started_epoch,
            "open_s": opened,
            "total_s": total,
            "bytes_seen": seen,
            "bytes_right": good,
            "verified": seen == size and good == size,
            "first_bad_offset": first_bad,
        }
    with open(out, "w") as f:
        json.dump(result, f)


def disk(state):
    try:
        with open(state, "rb") as f:
            raw = f.read(48)
    except FileNotFoundError:
        raw = b""
    if len(raw) < 48 or raw[:8] != b"SLUHDD01":
        print(json.dumps({"services": 0, "busy_s": 0.0}))
        return
    _, _, _, services, busy_ns = struct.unpack("<QQQQQ", raw[8:48])
    print(json.dumps({"services": services, "busy_s": busy_ns / 1e9}))


def holder_write_back(log, path):
    pattern = re.compile(r"^(\S+Z)\s.*recall answered path=(\S+) write_back_s=([0-9.eE+-]+)")
    with open(log, errors="replace") as f:
        for line in f:
            m = pattern.search(line)
            # The first answer is the one that wrote the file back; the
            # requester's later re-asks find nothing left to write.
            if m and m.group(2).strip('"') == path:
                at = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
                print(json.dumps({"write_back_s": float(m.group(3)), "answered_epoch": at.timestamp()}))
                return


def cell(values, fmt="{:.2f}"):
    """median (min–max) of values, '—' for none."""
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def table(results, nodes, files, size, bs):
    runs = [json.loads(line) for line in open(results) if line.strip()]
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    by = {m: [r for r in runs if r["mode"] == m] for m in modes}
    nodes = int(nodes)
    mib = int(size) >> 20
    print(
        "| mode | burst (s) | burst per node, median (s) | × node-local | "
        "cross-node read (s) | of which the open (s) | holder write-back (s) | "
        "read − write-back (s) | holder picked the recall up after (s) | after the open (s) | reads right | "
        "disk busy in the burst (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    local = [r["burst_max_s"] for r in by.get("node-local", [])]
    for m in modes:
        rs = by[m]
        bursts = [r["burst_max_s"] for r in rs]
        per_node = " / ".join(
            f"{statistics.median([r['burst_s'][i] for r in rs]):.2f}" for i in range(nodes)
        )
        ratio = (
            f"{statistics.median(bursts) / statistics.median(local):.2f}"
            if local
            else "—"
        )
        right = [r for r in rs if r["read"].get("verified")]
        reads = [r["read"]["total_s"] for r in right]
        opens = [r["read"]["open_s"] for r in right]
        wbs = [r.get("holder_write_back_s") for r in rs]
        answered = [r for r in right if r.get("holder_write_back_s") is not None]
        excess = [r["read"]["total_s"] - r["holder_write_back_s"] for r in answered]
        pickup = [r["holder_picked_up_s"] for r in answered if r.get("holder_picked_up_s") is not None]
        after = [r["read"]["total_s"] - r["read"]["open_s"] for r in right]
        print(
            f"| {m} | {cell(bursts)} | {per_node} | {ratio} | {cell(reads)} | {cell(opens)} | "
            f"{cell(wbs)} | {cell(excess)} | {cell(pickup)} | {cell(after)} | "
            f"{len(right)} of {len(rs)} | "
            f"{cell([r['disk_busy_burst_s'] for r in rs])} |"
        )
    print()
    print(
        f"{nodes} mounts, each writing {files} files × {mib} MiB in {int(bs) >> 10} KiB writes "
        f"(fsync, close); burst = from the common start until that node's last close returned "
        f"(the column: the slowest node). Cross-node read = node 1 opens node 0's last file "
        f"(n0-f{int(files) - 1}) right after every burst ended and reads it to the last byte, "
        f"every byte checked; a read that did not see the whole file is not timed "
        f"(\"reads right\"). Holder write-back: node 0's own time from picking the recall "
        f"up to removing the mark (its log); "
        f"picked up after: from node 1's open to that moment (the log line's time less the write-back); "
        f"the differences are per run. "
        f"Cells: median (min–max) of {len(runs) // max(1, len(modes))} runs."
    )


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "now":
        print(f"{time.monotonic():.6f}")
    elif cmd == "write":
        write(*args)
    elif cmd == "read":
        read(*args)
    elif cmd == "disk":
        disk(*args)
    elif cmd == "holder-write-back":
        holder_write_back(*args)
    elif cmd == "table":
        table(*args)
    else:
        sys.exit(f"multinode_burst.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
