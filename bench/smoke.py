"""Smoke test of gpupart-bench: runs it with tiny operation counts on the simulated
device and checks the exit status and that the JSON output parses and carries every
metric of the benchmark contract. Functional only: no timing is judged here."""
import json
import os
import subprocess
import sys
import tempfile

FIELDS = ["backend", "workload", "policy", "ns_per_op", "p50_ns", "p99_ns", "driver_allocs",
          "driver_frees", "peak_in_use", "peak_reserved", "fragmentation", "floor_reserved", "floor_fragmentation", "modeled_driver_ms",
          "failed", "cpu", "build_type", "optimization", "compiler"]
POLICIES = {"driver", "growth", "prealloc", "partitions"}


def run(args):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def check_rows(rows):
    assert isinstance(rows, list) and rows, "empty JSON"
    for row in rows:
        missing = [f for f in FIELDS if f not in row]
        assert not missing, f"row {row.get('workload')}/{row.get('policy')} lacks {missing}"
        if row["backend"] == "sim":
            assert row["error"] is None, f"sim row failed: {row}"
            assert row["ns_per_op"] > 0 and row["peak_reserved"] >= row["peak_in_use"] > 0, row
            assert 0 <= row["fragmentation"] < 1, row
    policies = {r["policy"] for r in rows if r["backend"] == "sim"}
    assert policies == POLICIES, f"policies run: {policies}"
    workloads = {r["workload"] for r in rows}
    for name in ["transformer", "inference", "rmm_random", "vma_algorithms", "adversarial"]:
        assert name in workloads, f"workload {name} missing"
    driver = [r for r in rows if r["backend"] == "sim" and r["policy"] == "driver"]
    assert all(r["driver_allocs"] > 0 for r in driver), "driver policy made no driver call"


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        csv = os.path.join(d, "out.csv")
        run([exe, "--backend", "sim", "--ops", "3000", "--repeat", "1", "--json", out, "--csv", csv])
        with open(out) as f:
            check_rows(json.load(f))
        with open(csv) as f:
            assert f.readline().startswith("backend,workload,policy"), "CSV header"
        micro = os.path.join(d, "micro.json")
        run([exe, "--micro", "--micro-scale", "0.002", "--repeat", "1", "--json", micro])
        with open(micro) as f:
            figures = json.load(f)
        assert len(figures) >= 8, f"only {len(figures)} micro figures"
        for fig in figures:
            for field in ["cpu", "build_type", "optimization", "compiler"]:
                assert fig.get(field), f"micro figure {fig['name']} lacks {field}"


if __name__ == "__main__":
    main()
