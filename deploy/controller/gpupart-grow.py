#!/usr/bin/env python3
"""An example controller for gpupart's shared ledgers: "dynamic ratio adjustment from
monitoring". It reads `gpupart top --json` and, when a partition's bytes in use reach
--threshold of its limit, grows the limit by --step (never past --max, nor past the
device's budget less the other partitions' guarantees) with `gpupart resize`; with
--shrink, it gives back a step when use falls below half the threshold (never below
--min). It changes the ledger from outside: it is no member and holds no GPU memory.

Run it beside the jobs (a sidecar, a systemd timer, a cron job), with the jobs' ledger
folder:

    gpupart-grow.py --partition train --step 512MiB --max 12GiB --interval 10

Options:
    --partition NAME   the partition to watch (on every shared device that has it)
    --step BYTES       how much to grow or shrink at a time (default 256MiB)
    --threshold F      grow when in_use >= F * limit (default 0.9)
    --max BYTES        never grow past this (default: the device's budget)
    --min BYTES        never shrink below this (default: one step)
    --shrink           also shrink when use is low
    --interval SECS    time between looks (default 5); --once looks once and exits
    --gpupart PATH     the gpupart command (default: gpupart on PATH)
    --ledger-dir DIR   the ledger folder (default: the one programs use)
Exit status: 0, or 1 when gpupart top cannot be read. Each change is printed as one line.
"""
import argparse
import json
import re
import subprocess
import sys
import time

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 512MiB)")
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def gpupart(args, *words):
    cmd = [args.gpupart, *words] + (["--ledger-dir", args.ledger_dir] if args.ledger_dir else [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def target(args, dev, part):
    """The limit part should have now, or None to leave it."""
    limit, in_use = part["limit"], part["in_use"]
    others = dev["guarantees"] - part["guarantee"]
    ceiling = min(args.max or dev["budget"], dev["budget"] - others)
    if in_use >= args.threshold * limit and limit < ceiling:
        return min(limit + args.step, ceiling)
    floor = max(args.min or args.step, part["guarantee"], part["reserved"])
    if args.shrink and in_use < args.threshold / 2 * limit and limit - args.step >= floor:
        return limit - args.step
    return None


def look(args):
    top = gpupart(args, "top", "--json")
    if top.returncode != 0:
        print(f"gpupart-grow: gpupart top: {top.stderr.strip()}", file=sys.stderr)
        return 1
    for dev in json.loads(top.stdout)["devices"]:
        for part in dev.get("partitions", []):
            new = target(args, dev, part) if part["name"] == args.partition else None
            if new is None:
                continue
            r = gpupart(args, "resize", "--device", dev["file"], args.partition, "--limit", str(new))
            what = "grown" if new > part["limit"] else "shrunk"
            if r.returncode == 0:
                print(f"{dev['file']}: '{args.partition}' {what} from {part['limit']} to {new} bytes", flush=True)
            else:  # exit 3: its members still hold more; tried again at the next look
                print(f"{dev['file']}: '{args.partition}' not {what}: {r.stderr.strip()}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partition", required=True)
    p.add_argument("--step", type=size, default=256 << 20)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--max", type=size, default=0)
    p.add_argument("--min", type=size, default=0)
    p.add_argument("--shrink", action="store_true")
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--once", action="store_true")
    p.add_argument("--gpupart", default="gpupart")
    p.add_argument("--ledger-dir", dest="ledger_dir")
    args = p.parse_args()
    if not 0 < args.threshold <= 1 or args.step <= 0:
        p.error("--threshold is in (0, 1] and --step above 0")
    while True:
        rc = look(args)
        if args.once:
            return rc
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
