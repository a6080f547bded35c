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
POLICIES = {"driver", "growth", "prealloc", "partitions", "expandable"}


def run(args, rc=0):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    if r.returncode != rc:
        sys.exit(f"{' '.join(args)} exited {r.returncode}, not {rc}\n{r.stdout}\n{r.stderr}")
    return r.stdout if rc == 0 else r.stderr


def table(text):
    """The text table's rows as dicts keyed by its header's column names."""
    lines = text.splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith("backend "))
    names = lines[head].split()
    return [dict(zip(names, l.split())) for l in lines[head + 1:] if l and not l.startswith("#")]


def check_table_and_floor(exe, d):
    """The table shows the scale applied to each workload (a workload fitted into a small
    device is not its full size) and a floor that is the workload's, in [0, 1), the same in
    every policy's row; --backend takes a list."""
    out = os.path.join(d, "scaled.json")
    text = run([exe, "--backend", "sim,sim", "--workload", "transformer,vma_algorithms", "--ops", "2000",
                "--repeat", "1", "--mem-cap", "64", "--json", out])
    with open(out) as f:
        rows = json.load(f)
    shown = table(text)
    assert len(shown) == len(rows), (text, rows)
    for row, line in zip(rows, shown):
        assert (line["workload"], line["policy"]) == (row["workload"], row["policy"]), (line, row)
        assert abs(float(line["scale"]) - row["scale"]) <= 0.0005 * max(1, row["scale"]), (line, row)
        assert 0 <= row["floor_fragmentation"] < 1 and 0 <= float(line["floor"]) < 1, (line, row)
    scaled = {r["workload"]: r["scale"] for r in rows}
    assert scaled["transformer"] < 1, f"transformer's peak is far above 64 MiB: scaled {scaled}"
    for name in scaled:
        floors = {r["floor_fragmentation"] for r in rows if r["workload"] == name}
        assert len(floors) == 1, f"{name}: one floor for every policy, not {floors}"
    err = run([exe, "--backend", "sim,bogus"], rc=2)
    assert "unknown backend 'bogus'" in err, err
    listed = run([exe, "--backend", "vulkan,sim", "--workload", "adversarial", "--ops", "300", "--repeat", "1",
                  "--policy", "growth"])
    assert [r["backend"] for r in table(listed)][0] == "sim", listed


def check_configured(exe, d):
    """The configured policy runs only when named, reads the caller's GPUPART_* variables
    (a partition declared in them holds its limit: the replay is refused past it) and puts
    every allocation of a built-in workload in partition p0."""
    out = os.path.join(d, "configured.json")
    base = {k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")}
    args = [exe, "--backend", "sim", "--workload", "transformer", "--ops", "2000", "--repeat", "1",
            "--policy", "configured,growth", "--json", out]
    subprocess.run(args, env=base, check=True, capture_output=True, timeout=240)
    with open(out) as f:
        rows = {r["policy"]: r for r in json.load(f)}
    assert rows["configured"]["error"] is None and rows["configured"]["failed"] == 0, rows
    assert rows["configured"]["peak_in_use"] == rows["growth"]["peak_in_use"], rows
    subprocess.run(args, env={**base, "GPUPART_PARTITIONS": "p0:4MiB"}, check=True, capture_output=True, timeout=240)
    with open(out) as f:
        limited = {r["policy"]: r for r in json.load(f)}
    assert limited["configured"]["failed"] > 0 and limited["configured"]["peak_reserved"] <= 4 << 20, limited
    assert limited["growth"]["failed"] == 0, "the comparison policies ignore the environment"


def check_rows(rows):
    assert isinstance(rows, list) and rows, "empty JSON"
    for row in rows:
        missing = [f for f in FIELDS if f not in row]
        assert not missing, f"row {row.get('workload')}/{row.get('policy')} lacks {missing}"
        if row["backend"] == "sim":
            assert row["error"] is None, f"sim row failed: {row}"
            assert row["ns_per_op"] > 0 and row["peak_reserved"] >= row["peak_in_use"] > 0, row
            assert 0 <= row["fragmentation"] < 1, row
        assert 0 <= row["floor_fragmentation"] < 1, row
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
        check_table_and_floor(exe, d)
        check_configured(exe, d)
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
