#!/usr/bin/env python3
"""The Ray recipe (deploy/ray/gpupart_ray.py) run as written: Ray on the CPU with one
logical GPU (ray.init(num_gpus=1)), two actors of num_gpus=0.5, each started with the
runtime_env share_env gives it, on gpupart's sim backend (a fixed 8 GiB device, so both
actors' devices have one identity) with the shared ledger in a scratch folder. Ray must
put both on GPU 0; each must get a partition of half the budget (one with a floor), hold
memory within it and be refused one granule past it (GPUPART_ELIMIT); `gpupart top --json`
over the folder must show one ledger with both partitions and both actors as members.
Ray listens on 127.0.0.1 only, with no dashboard and no usage reporting, its session
files and token in the scratch folder; tests/deploy/run runs this in a network namespace
of its own (loopback only) where `unshare -n` can make one.
Usage: test_ray.py GPUPART   (run with a Python that has ray and gpupart installed)"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

GPUPART = os.path.abspath(sys.argv[1])
RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "ray")
MIB, GIB = 1 << 20, 1 << 30
failures = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(f"{what}\n{detail}")
    return cond


def top(ledger):
    p = subprocess.run([GPUPART, "top", "--json", "--ledger-dir", ledger], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")})
    check(p.returncode == 0, f"gpupart top: exit {p.returncode}", p.stderr)
    return json.loads(p.stdout)["devices"] if p.returncode == 0 else []


def main():
    scratch = tempfile.mkdtemp(prefix="gpupart-ray-")
    ledger = os.path.join(scratch, "ledger")
    os.mkdir(ledger, 0o700)
    os.environ["HOME"] = scratch  # Ray writes its token under ~/.ray: the scratch folder's, not the user's
    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.abspath(RECIPE), os.environ.get("PYTHONPATH", "")])
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    sys.path.insert(0, os.path.abspath(RECIPE))
    import ray
    import gpupart_ray
    sim = {"GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": str(8 * GIB)}
    try:
        ray.init(num_gpus=1, num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=80 * MIB, log_to_driver=False, _temp_dir=os.path.join(scratch, "ray"))
        actors = {name: gpupart_ray.Worker.options(num_gpus=0.5, runtime_env=gpupart_ray.share_env(
            name, 0.5, floor, ledger, extra=sim)).remote() for name, floor in (("train", 0.25), ("serve", 0))}
        info = {name: ray.get(a.where.remote(), timeout=120) for name, a in actors.items()}
        for name, i in info.items():
            check(i["gpu_ids"] == ["0"] and i["cuda_visible_devices"] == "0", f"{name}: Ray's GPU", i)
            check(i["budget"] == 8 * GIB and i["limit"] == 4 * GIB, f"{name}: half of the budget", i)
        check(info["train"]["guarantee"] == 2 * GIB and info["serve"]["guarantee"] == 0, "the floors", info)
        for name, a in actors.items():
            check(ray.get(a.hold.remote(1 * GIB)) == "ok", f"{name}: 1 GiB within its share")
            past = info[name]["limit"] - 1 * GIB + 2 * MIB
            check(ray.get(a.hold.remote(past)) == "GPUPART_ELIMIT", f"{name}: one granule past its share was not refused")
            check(ray.get(a.hold.remote(past - 2 * MIB)) == "ok", f"{name}: the rest of its share")
        devices = top(ledger)
        if check(len(devices) == 1, f"top: {len(devices)} ledgers, wanted 1", json.dumps(devices)):
            d = devices[0]
            parts = {p["name"]: (p["limit"], p["guarantee"], p["in_use"]) for p in d["partitions"]}
            check(parts == {"train": (4 * GIB, 2 * GIB, 4 * GIB), "serve": (4 * GIB, 0, 4 * GIB)}, f"top: {parts}", json.dumps(d))
            pids = sorted(m["pid"] for m in d["members"] if m["alive"])
            check(pids == sorted(i["pid"] for i in info.values()), f"top: members {pids}", json.dumps(d))
        for a in actors.values():
            check(ray.get(a.release.remote()) == 0, "release")
        print(f"test_ray: ray {ray.__version__}: two actors of num_gpus=0.5 on GPU 0, partitions "
              f"{ {n: (i['limit'], i['guarantee']) for n, i in info.items()} }, each refused past its share")
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"test_ray: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
