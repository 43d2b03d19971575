#!/usr/bin/env python3
"""NOT IOR: a stand-in for IOR 4 and mdtest 4 when they are not installed.

scripts/bench-io500.sh runs this only where `ior` or `mdtest` is absent,
and says so in its output and its results page. The ranks are processes
(no MPI); they write and read exactly the offsets IOR 4.0.0 would
(src/ior.c, WriteOrRead and GetOffsetArrayRandom) for the options below,
with IOR's short flags:

  ior    --ranks N [-w] [-r] [-R] [-e] [-F] [-z] [-C] [-Q K] [-G SEED]
         [--random-offset-seed SEED] -t XFER -b BLOCK [-s SEGMENTS] -o PATH
         [-O summaryFile=F] [-O summaryFormat=JSON] [-a POSIX] [-k] [-g]
  mdtest --ranks N -n FILES [-u] [-t] [-w BYTES] [-e BYTES] [-G SEED]
         -d DIR (-C | -T | -E [-X]) [-L] [-F] [-P] [-N K]

Offsets (rank r of N, transfer j, segment i): file per process (-F): file
PATH.%08d of r, offset i*BLOCK + j*XFER; shared file: i*N*BLOCK + r*BLOCK +
j*XFER; -z on a shared file: glibc srandom(seed) and rand() % N deal each
XFER of the N*BLOCK segment to a rank, then rand() shuffles each rank's list
(the same libc calls as IOR, through ctypes). -C on one node moves no rank
(IOR shifts by tasks-per-node, which is N here), so reads are the writer's.
Data: every transfer is the 16 bytes (offset, seed) repeated, checked on
-R; not IOR's byte pattern. The summary file has IOR's JSON shape
(tests[0].Results[0].bwMiB and totalTime) plus "fallback": true; mdtest's
text summary has its "File creation/stat/read" rate lines.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import os
import struct
import sys
import time

BANNER = "io500_fallback.py: NOT IOR/mdtest: the project's stand-in (same offsets, no MPI)"


def size(text):
    """IOR's sizes: 47008, 256k, 2m, 1g (binary)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower()
    return int(t[:-1]) * units[t[-1]] if t[-1] in units else int(t)


def ior_offsets(a, rank):
    """(path, [offset, ...]) of rank's transfers, in IOR's order."""
    n, xfer, block = a.ranks, a.t, a.b
    path = f"{a.o}.{rank:08d}" if a.F else a.o
    if not a.z:
        per = [j * xfer for j in range(block // xfer)]
        return path, [o + (i * block if a.F else i * n * block + rank * block) for i in range(a.s) for o in per]
    libc = ctypes.CDLL(None)
    seed = a.random_offset_seed + (rank if a.F else 0)
    libc.srandom(seed)
    if a.F:
        mine = [j * xfer for j in range(block // xfer)]
    else:  # IOR makes this pass twice from srandom(seed): to count, then to fill
        mine = [o for o in range(0, block * n, xfer) if libc.rand() % n == rank]
    for k in range(len(mine)):  # IOR's shuffle, continuing the same rand() sequence
        v = libc.rand() % len(mine)
        mine[v], mine[k] = mine[k], mine[v]
    seg = block if a.F else n * block
    return path, [o + i * seg for i in range(a.s) for o in mine]


def pattern(offset, seed, length):
    unit = struct.pack("<QQ", offset, seed & 0xFFFFFFFFFFFFFFFF)
    return (unit * (length // 16 + 1))[:length]


def ior_rank(a, rank, barrier, out):
    path, offsets = ior_offsets(a, rank)
    errors = 0
    barrier.wait()
    t0 = time.time()
    if a.w:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o664)
        for off in offsets:
            os.pwrite(fd, pattern(off, a.G, a.t), off)
        if a.e:
            os.fsync(fd)
    else:
        fd = os.open(path, os.O_RDONLY)
        for off in offsets:
            data = os.pread(fd, a.t, off)
            if a.R and data != pattern(off, a.G, a.t):
                errors += 1
    os.close(fd)
    t1 = time.time()
    barrier.wait()
    out.put((rank, t0, t1, len(offsets) * a.t, errors))


def mdtest_name(a, rank, i):
    tree = f"mdtest_tree.{rank}.0" if a.u else "mdtest_tree.0"
    return os.path.join(a.d, "test-dir.0-0", tree, f"file.mdtest.{rank}.{i}")


def mdtest_rank(a, rank, barrier, out):
    errors = 0
    if a.C:
        os.makedirs(os.path.dirname(mdtest_name(a, rank, 0)), exist_ok=True)
    barrier.wait()
    t0 = time.time()
    for i in range(a.n):
        name = mdtest_name(a, rank, i)
        if a.C:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o664)
            if a.w:
                os.write(fd, pattern(rank * a.n + i, a.G, a.w))
            os.close(fd)
        elif a.T:
            os.stat(name)
        else:
            fd = os.open(name, os.O_RDONLY)
            data = os.read(fd, a.e) if a.e else b""
            os.close(fd)
            if a.X and data != pattern(rank * a.n + i, a.G, a.e):
                errors += 1
    t1 = time.time()
    barrier.wait()
    out.put((rank, t0, t1, a.n, errors))


def run(a, target):
    barrier, out = mp.Barrier(a.ranks), mp.Queue()
    procs = [mp.Process(target=target, args=(a, r, barrier, out)) for r in range(a.ranks)]
    for p in procs:
        p.start()
    done = [out.get() for _ in procs]
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        sys.exit(f"{BANNER}: a rank failed")
    seconds = max(d[2] for d in done) - min(d[1] for d in done)
    return seconds, sum(d[3] for d in done), sum(d[4] for d in done)


def main():
    print(BANNER, file=sys.stderr)
    tool = sys.argv[1] if len(sys.argv) > 1 else ""
    p = argparse.ArgumentParser(prog=f"io500_fallback.py {tool}", description=BANNER)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("-G", type=int, default=0)
    for flag in "FLPgkuXT":
        p.add_argument("-" + flag, action="store_true")
    if tool == "ior":
        for flag in "wrRezC":
            p.add_argument("-" + flag, action="store_true")
        p.add_argument("-t", type=size, required=True)
        p.add_argument("-b", type=size, required=True)
        p.add_argument("-s", type=int, default=1)
        p.add_argument("-o", required=True)
        p.add_argument("-Q", type=int, default=1)
        p.add_argument("-a", default="POSIX")
        p.add_argument("-O", action="append", default=[])
        p.add_argument("--random-offset-seed", type=int, default=-1)
        a = p.parse_args(sys.argv[2:])
        if a.w == a.r:
            sys.exit("io500_fallback.py ior: give one of -w and -r")
        if a.b % a.t or (a.z and a.random_offset_seed < 0):
            sys.exit("io500_fallback.py ior: BLOCK must be a multiple of XFER; -z needs --random-offset-seed")
        seconds, moved, errors = run(a, ior_rank)
        opts = dict(o.split("=", 1) for o in a.O)
        access = "write" if a.w else "read"
        result = dict(access=access, bwMiB=moved / seconds / (1 << 20), totalTime=seconds, errors=errors)
        print(f"{access}: {result['bwMiB']:.2f} MiB/s, {moved} bytes in {seconds:.3f} s, {errors} errors")
        if "summaryFile" in opts:
            with open(opts["summaryFile"], "w") as f:
                json.dump(dict(Version="fallback", fallback=True, tests=[dict(Results=[result])]), f)
        if errors:
            print(f"WARNING: Incorrect data on read ({errors} errors found).")
            sys.exit(64)
    elif tool == "mdtest":
        for flag in "CEt":
            p.add_argument("-" + flag, action="store_true")
        p.add_argument("-n", type=int, required=True)
        p.add_argument("-w", type=int, default=0)
        p.add_argument("-e", type=int, default=0)
        p.add_argument("-d", required=True)
        p.add_argument("-N", type=int, default=1)
        a = p.parse_args(sys.argv[2:])
        if a.C + a.T + a.E != 1:
            sys.exit("io500_fallback.py mdtest: give one of -C, -T and -E")
        seconds, files, errors = run(a, mdtest_rank)
        op = "File creation" if a.C else "File stat" if a.T else "File read"
        rate = files / seconds
        print("SUMMARY rate: (of 1 iterations)")
        print(f"   {op:<28}{rate:>15.3f}{rate:>15.3f}{rate:>15.3f}{0:>15.3f}")
        if errors:
            print(f"ERROR: {errors} files read back wrong")
            sys.exit(1)
    else:
        sys.exit(f"usage: io500_fallback.py ior|mdtest ... ({BANNER})")


if __name__ == "__main__":
    main()
