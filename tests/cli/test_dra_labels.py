#!/usr/bin/env python3
"""A Kubernetes DRA claim's workload in the metrics: a job (the holder program, reading
the GPUPART_* variables as a container does) whose device comes from a DRA device
metadata file (KEP-5304) makes its partition in a shared ledger, labelled with the
claim, its namespace and the pod's name (POD_NAME, the downward API's); `gpupart
metrics`, the exporter and `gpupart top --json` show them. Labels scribbled into the ledger file are
escaped when printable and left out when not, and never break the exposition. Shares
test_cli.py's helpers.
Usage: test_dra_labels.py PATH/TO/gpupart PATH/TO/holder"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as t  # noqa: E402

MIB = t.MIB
SIM0_UUID = "GPU-00000000-0000-0000-0000-00000000005a"


def write_claim(root, generation, memory):
    d = os.path.join(root, "resourceclaims", "gpu-claim", "gpu")
    os.makedirs(d, exist_ok=True)
    meta = {"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "DeviceMetadata",
            "metadata": {"name": "gpu-claim", "namespace": "team-a", "uid": "u", "generation": generation},
            "requests": [{"name": "gpu", "devices": [{"driver": "gpu.example.com", "pool": "p", "name": "g",
                          "attributes": {"uuid": {"string": SIM0_UUID}, "gpupart.io/memory": {"int": memory}}}]}]}
    with open(os.path.join(d, "gpu.example.com-metadata.json"), "w") as f:
        f.write(json.dumps(meta) + "\n")


class ClaimJob:
    """One job of the claim in a temporary ledger folder: its partition 'job' as gpupart
    cdi's variables declare it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="gpupart-dra-labels-")
        self.dir = os.path.join(self.root, "ledgers")
        os.mkdir(self.dir, 0o700)
        write_claim(os.path.join(self.root, "meta"), 1, 256 * MIB)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPART_") and k != "POD_NAME"}
        env.update({"GPUPART_TEST_HOLDER_ENV": "1", "GPUPART_SHARED": "1", "GPUPART_LEDGER_DIR": self.dir,
                    "GPUPART_DRA_METADATA_DIR": os.path.join(self.root, "meta"),
                    "GPUPART_PARTITIONS": "job:256MiB", "GPUPART_PARTITION": "job", "POD_NAME": "trainer-0"})
        self.proc = subprocess.Popen([t.HOLDER, self.dir, "1024"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if line != "ready\n":
            raise RuntimeError(f"holder: {line!r} {self.proc.stderr.read()}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        subprocess.run(["rm", "-rf", self.root])

    def ledger(self):
        names = [n for n in os.listdir(self.dir) if n.endswith(".ledger")]
        return os.path.join(self.dir, names[0])

    def scribble(self, old, new):
        """Writes new over the bytes old (a label as the job wrote it) in the ledger file."""
        with open(self.ledger(), "r+b") as f:
            data = f.read()
            at = data.find(old)
            t.check(at >= 0 and data.count(old) == 1, f"the label {old!r} is in the file once")
            f.seek(at)
            f.write(new)

    def metrics(self):
        out, _ = t.expect_rc(["metrics", "--ledger-dir", self.dir], 0)
        t.promtool_check(out, "metrics with a claim's labels")
        return out

    def partition(self):
        snap = t.top_json(self)
        parts = snap["devices"][0]["partitions"] if len(snap["devices"]) == 1 else []
        t.check(len(parts) == 1 and parts[0]["name"] == "job", "one partition, the job's", snap)
        return parts[0] if parts else {}

    def env(self):
        return {"GPUPART_LEDGER_DIR": self.dir}


LABELS = {"partition": "job", "claim": "gpu-claim", "namespace": "team-a", "pod": "trainer-0"}


def test_a_claim_s_partition_carries_its_labels():
    with ClaimJob() as j:
        out = j.metrics()
        t.check('partition="job",claim="gpu-claim",namespace="team-a",pod="trainer-0"} 268435456' in out,
                "the limit's series names the claim, its namespace and the pod", out)
        fam = t.parse_metrics(out)
        if fam is not None:
            t.check(t.samples_of(fam, "gpupart_partition_limit_bytes", **LABELS) == [256 * MIB], "parsed", out)
            t.check(len(t.samples_of(fam, "gpupart_member_partition_in_use_bytes", **LABELS)) == 1,
                    "a member's series of the partition too", out)
        p = j.partition()
        t.check(p.get("claim") == "gpu-claim" and p.get("namespace") == "team-a" and p.get("pod") == "trainer-0",
                "top --json names them", p)
        with t.Exporter(j) as e:
            status, _, body = e.get("/metrics")
            t.check(status == 200 and b'claim="gpu-claim",namespace="team-a",pod="trainer-0"' in body,
                    "the exporter's /metrics too", body)


def test_printable_scribbled_labels_are_escaped():
    with ClaimJob() as j:
        j.scribble(b"gpu-claim\0", b'ev"il\\}\0')
        out = j.metrics()
        t.check('claim="ev\\"il\\\\}"' in out, "a quote and a backslash are escaped", out)
        fam = t.parse_metrics(out)
        if fam is not None:
            t.check(t.samples_of(fam, "gpupart_partition_limit_bytes", claim='ev"il\\}') == [256 * MIB], "read back",
                    out)
        t.check(j.partition().get("claim") == 'ev"il\\}', "top --json as written")


def test_labels_that_are_not_printable_or_not_ended_are_left_out():
    for bad in (b"x\ny\0", b"e\x1b[31m\0", b"\xff\xfe\0", b"A" * 256):
        with ClaimJob() as j:
            j.scribble(b"gpu-claim\0", bad)
            out = j.metrics()
            t.check('partition="job"}' in out and "claim=" not in out and "pod=" not in out,
                    f"{bad[:16]!r}: the partition's series without the labels", out)
            t.check("\x1b" not in out and "\ny" not in out, "nothing of them in the text", out)
            p = j.partition()
            t.check(p.get("claim") is None and p.get("pod") is None and p.get("limit") == 256 * MIB,
                    "top --json: no labels, the figures still", p)


def main():
    t.GPUPART = os.path.abspath(sys.argv[1])
    t.HOLDER = os.path.abspath(sys.argv[2])
    return t.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())
