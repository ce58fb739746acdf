#!/usr/bin/env python3
"""Where a process's wall time goes: CPU per thread, disk I/O, and waiting.

Runs a command (after `--`) and samples it every `--every` seconds from /proc until it
exits: each thread's CPU time (user + system, summed by thread name with digits dropped, so
that `journal-io-0` and `journal-io-1` count as one row), the process's bytes read from and
written to storage, its major page faults, and the host's I/O pressure (`/proc/pressure/io`,
the share of time some task waited on I/O). Prints a timeline, then a summary: per thread
name, CPU seconds and the share of the wall time that is.

    python3 perf/proc_sample.py [--every S] [--drop-caches] -- COMMAND ARGS...

`--drop-caches` syncs and drops the page cache first (root only), so that a start reads its
files from the disk, as after a reboot. The command's own output goes to stdout as it runs.
Standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_ids(pid):
    """The ids of the live threads of `pid` (none once it is gone)."""
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def thread_times(pid):
    """{thread name without digits: CPU seconds} for the live threads of `pid`."""
    out = {}
    for tid in thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime and stime are fields 14 and 15 of stat; fields[0] is field 3.
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        key = re.sub(r"\d+", "N", name)
        out[key] = out.get(key, 0.0) + cpu
    return out


def proc_io(pid):
    """(read_bytes, write_bytes) of `pid` from /proc/PID/io, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/io") as f:
            kv = dict(line.split(": ") for line in f.read().splitlines())
        return int(kv["read_bytes"]), int(kv["write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def majflt(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2 :].split()[9])
    except (OSError, IndexError, ValueError):
        return None


def io_pressure_total_us():
    """Microseconds some task waited on I/O since boot (PSI), or None without PSI."""
    try:
        with open("/proc/pressure/io") as f:
            some = f.readline()
        return int(some.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--drop-caches", action="store_true", help="sync and drop the page cache first")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given (put it after --)")
    if args.drop_caches:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        print("page cache dropped", file=sys.stderr)

    start = time.monotonic()
    psi0 = io_pressure_total_us()
    child = subprocess.Popen(cmd)
    last = {}
    last_io = (0, 0)
    last_t = start
    peak = {}
    io = (0, 0)
    faults = 0
    print(f"{'t s':>7} {'read MB/s':>10} {'write MB/s':>11} {'io wait %':>9}  busiest threads (CPU % of one core)",
          file=sys.stderr)
    psi_last = psi0
    while child.poll() is None:
        time.sleep(args.every)
        now = time.monotonic()
        times = thread_times(child.pid)
        got = proc_io(child.pid)
        f = majflt(child.pid)
        if got is None or not times:
            continue
        io, faults = got, (f if f is not None else faults)
        for k, v in times.items():
            peak[k] = max(peak.get(k, 0.0), v)
        dt = now - last_t
        psi = io_pressure_total_us()
        wait = (psi - psi_last) / 1e6 / dt * 100 if psi is not None and psi_last is not None else float("nan")
        busy = sorted(((v - last.get(k, 0.0)) / dt * 100, k) for k, v in times.items())[::-1][:4]
        print(
            f"{now - start:7.1f} {(io[0] - last_io[0]) / dt / 1e6:10.1f} {(io[1] - last_io[1]) / dt / 1e6:11.1f} {wait:9.0f}  "
            + ", ".join(f"{k} {p:.0f}" for p, k in busy if p >= 1),
            file=sys.stderr,
        )
        last, last_io, last_t, psi_last = times, io, now, psi
    wall = time.monotonic() - start
    psi1 = io_pressure_total_us()
    print(f"\nwall {wall:.1f} s, exit status {child.returncode}")
    print(f"read {io[0] / 2**30:.2f} GiB, wrote {io[1] / 2**30:.2f} GiB (until the last sample), major faults {faults}")
    if psi0 is not None and psi1 is not None:
        print(f"some task waited on I/O for {(psi1 - psi0) / 1e6:.1f} s of the {wall:.1f} s (host-wide PSI)")
    print(f"{'thread':<28} {'CPU s':>8} {'% of wall':>9}")
    for k, v in sorted(peak.items(), key=lambda kv: -kv[1]):
        if v >= 0.05:
            print(f"{k:<28} {v:8.1f} {v / wall * 100:9.1f}")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
