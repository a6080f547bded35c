#!/usr/bin/env python3
"""gpupart cdi as a DRA driver's NodePrepareResources would run it, for two claims on one
GPU of a node: its output validated against the CDI project's JSON schema (vendored in
cdi-schema/, read with PyPI's jsonschema), checked against the CDI specification's rules
that the schema leaves out (names, kind, NAME=VALUE environment entries, the oldest
version that has every field used), and then applied: each claim's container is played
by a real gpupart program (deploy_job) given the spec's environment, with the ledger
mount's container path translated to its host folder, and `gpupart top --json` over that
folder must show one ledger holding both claims' partitions with their limits and
floors, each refusing an allocation past its limit. Bad flags and hostile values must be
refused with exit 2 (bad usage) or 1 (a file or folder that is not right), printing no spec.
The layer files named are the build tree's (--layer-dir, --library, --vulkan-manifest).
Usage: test_cdi.py GPUPART DEPLOY_JOB BUILD_DIR [--require-schema]
  --require-schema: fail, not skip, when jsonschema cannot be imported (tests/deploy/run,
  whose virtual environment installs it)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

GPUPART, JOB, BUILD = (os.path.abspath(a) for a in sys.argv[1:4])
HERE = os.path.dirname(os.path.abspath(__file__))
MIB, GIB = 1 << 20, 1 << 30
SIM_TOTAL = 16 * GIB
failures = []
children = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(f"{what}\n{detail}")
    return cond


def clean_env(extra):
    keep = {k: v for k, v in os.environ.items()
            if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith(("GPUPART_", "CUDA_DEVICE_MEMORY_LIMIT", "HIP_DEVICE_MEMORY_LIMIT", "SLURM_",
                                 "CUDA_MPS_", "GPU_PORTION", "CUDA_VISIBLE_DEVICES", "OPENCL_LAYERS",
                                 "ENABLE_GPUPART_LAYER", "LD_PRELOAD"))}
    return {**keep, **extra}


def cdi(*args, env=None):
    p = subprocess.run([GPUPART, "cdi", *args], env=clean_env(env or {}), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def build_files():
    """The build tree's layers, what of them was built."""
    interpose = os.path.join(BUILD, "interpose")
    manifest = os.path.join(interpose, "share", "vulkan", "implicit_layer.d", "VkLayer_gpupart_partition.json")
    layers = [name for name, f in (("vulkan", "libVkLayer_gpupart_partition.so"), ("opencl", "libgpupart_cl_layer.so"),
                                   ("cuda", "libgpupart_preload.so")) if os.path.isfile(os.path.join(interpose, f))]
    return ["--layer-dir", interpose, "--library", os.path.join(BUILD, "libgpupart.so.0"),
            "--vulkan-manifest", manifest], layers


# ---- the schema -------------------------------------------------------------------------

def validator(require):
    """A function that returns the schema's errors for (document, definition or None)."""
    try:
        import jsonschema
        import referencing
        from referencing.jsonschema import DRAFT7
    except ImportError as e:
        if require:
            check(False, f"jsonschema cannot be imported: {e}")
        print(f"test_cdi: jsonschema is not installed ({e}): schema validation SKIPPED here "
              "(tests/deploy/run validates in its virtual environment)")
        return None
    docs = {}
    for name in ("schema.json", "defs.json"):
        with open(os.path.join(HERE, "cdi-schema", name)) as f:
            docs[name] = json.load(f)
    registry = referencing.Registry().with_resource(
        "defs.json", referencing.Resource.from_contents(docs["defs.json"], default_specification=DRAFT7))

    def errors(document, definition=None):
        schema = docs["schema.json"] if definition is None else {"$ref": f"defs.json#/definitions/{definition}"}
        v = jsonschema.Draft7Validator(schema, registry=registry)
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(document)]
    from importlib.metadata import version
    print(f"test_cdi: validating against the CDI schema with jsonschema {version('jsonschema')}")
    return errors


def test_the_validator_refuses_broken_specs(errors):
    """So that a validator that passes everything is caught."""
    good = {"cdiVersion": "0.3.0", "kind": "gpupart.io/partition",
            "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}
    check(errors(good) == [], "the validator refuses a good spec", errors(good))
    broken = [{"kind": "gpupart.io/partition", "devices": []},
              {**good, "devices": [{"name": "a"}]},
              {**good, "devices": [{"name": "a", "containerEdits": {"mounts": [{"hostPath": "/x"}]}}]},
              {**good, "devices": [{"name": "a", "containerEdits": {"env": "A=1"}}]},
              {**good, "devices": [{"name": "a", "containerEdits": {"hooks": [{"path": "/x"}]}}]}]
    for b in broken:
        check(errors(b), "the validator passed a broken spec", json.dumps(b))


# ---- what the schema leaves out ---------------------------------------------------------

NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")


def spec_rules(spec, what):
    vendor, _, cls = spec["kind"].partition("/")
    check(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", vendor) and NAME.fullmatch(cls) and len(cls) <= 63,
          f"{what}: kind {spec['kind']}")
    for d in spec["devices"]:
        check(NAME.fullmatch(d["name"]), f"{what}: device name {d['name']}")
        edits_rules(d["containerEdits"], what)
    needs = "0.6.0" if any("annotations" in d for d in spec["devices"]) else "0.3.0"
    check(spec["cdiVersion"] == needs, f"{what}: cdiVersion {spec['cdiVersion']}, the oldest with every field used is {needs}")


def edits_rules(edits, what):
    for e in edits.get("env", []):
        check(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", e), f"{what}: env entry {e!r} is not NAME=VALUE")
    for m in edits.get("mounts", []):
        check(os.path.isabs(m["hostPath"]) and os.path.isabs(m["containerPath"]), f"{what}: mount {m}")
        check(os.path.exists(m["hostPath"]), f"{what}: the mount's host path {m['hostPath']} does not exist")
        check("bind" in m["options"] and ("ro" in m["options"]) != ("rw" in m["options"]), f"{what}: options {m}")


def test_layers(spec, layers, files):
    edits = spec["devices"][0]["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    interpose = files[1]
    if "vulkan" in layers:
        check(env.get("ENABLE_GPUPART_LAYER") == "1", "vulkan: ENABLE_GPUPART_LAYER", env)
        manifest = mounts.get("/etc/vulkan/implicit_layer.d/VkLayer_gpupart_partition.json")
        if check(manifest and manifest["options"][1] == "ro", "vulkan: the manifest's mount", edits["mounts"]):
            with open(manifest["hostPath"]) as f:
                library = json.load(f)["layer"]["library_path"]
            check(library in mounts and mounts[library]["hostPath"] == library,
                  "vulkan: the library the manifest names is mounted where it names it", edits["mounts"])
    if "opencl" in layers:
        path = os.path.join(interpose, "libgpupart_cl_layer.so")
        check(env.get("OPENCL_LAYERS") == path and path in mounts, "opencl: OPENCL_LAYERS and its mount", env)
    if "cuda" in layers:
        path = os.path.join(interpose, "libgpupart_preload.so")
        check(env.get("LD_PRELOAD") == path and path in mounts, "cuda: LD_PRELOAD and its mount", env)
    library = os.path.join(BUILD, "libgpupart.so.0")
    check(not layers or library in mounts, "the layers' libgpupart.so.0 is mounted", edits["mounts"])


# ---- applied ----------------------------------------------------------------------------

def container_env(edits):
    """The environment the spec gives a container, its ledger mount's container path
    translated to the host folder (as a container would see the host's), on sim."""
    env = dict(e.split("=", 1) for e in edits["env"])
    for m in edits.get("mounts", []):
        if env.get("GPUPART_LEDGER_DIR") == m["containerPath"]:
            env["GPUPART_LEDGER_DIR"] = m["hostPath"]
    for k in ("OPENCL_LAYERS", "ENABLE_GPUPART_LAYER", "LD_PRELOAD"):
        env.pop(k, None)  # the program here is a gpupart program, not an unmodified one
    env.update({"GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": str(SIM_TOTAL)})
    return env


def start(env, release):
    p = subprocess.Popen([JOB, "64", release], env=clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children.append(p)
    line = p.stdout.readline()
    if not line.startswith("{"):
        p.kill()
        check(False, "deploy_job did not start", line + p.stderr.read())
        return p, None
    return p, json.loads(line)


def test_two_claims_meet_in_one_ledger(root, errors):
    ledger = os.path.join(root, "node-ledger")
    os.mkdir(ledger, 0o700)
    claims = [("train", "6GiB", "4GiB", "GPU-7ce23cd8-5c91-34a1-9a1b-d0c6b1cd1ec8"),
              ("eval", "4GiB", "2GiB", "0000:3b:00.0")]
    release = os.path.join(root, "release")
    jobs = []
    for name, memory, guarantee, device in claims:
        rc, out, err = cdi("--partition", name, "--memory", memory, "--guarantee", guarantee, "--device", device,
                           "--ledger-dir", ledger)
        if not check(rc == 0, f"cdi {name}: exit {rc}", err):
            return
        spec = json.loads(out)
        if errors:
            check(errors(spec) == [], f"cdi {name}: not a valid CDI spec", "\n".join(errors(spec)) + out)
        spec_rules(spec, f"cdi {name}")
        dev = spec["devices"][0]
        check(dev["annotations"] == {"gpupart.io/device": device}, f"cdi {name}: annotations", out)
        jobs.append((name, memory, guarantee, *start(container_env(dev["containerEdits"]), release)))
    want = {}
    for name, memory, guarantee, _, report in jobs:
        limit, floor = int(memory[:-3]) * GIB, int(guarantee[:-3]) * GIB
        want[name] = (limit, floor)
        if report:
            check(report["partitions"][0] == {"name": name, "limit": limit, "guarantee": floor},
                  f"{name}: the container's partition (its first)", json.dumps(report))
            check(report["refused"] == "GPUPART_ELIMIT", f"{name}: one granule past the limit was not refused", json.dumps(report))
    p = subprocess.run([GPUPART, "top", "--json", "--ledger-dir", ledger], env=clean_env({}), capture_output=True, text=True)
    devices = json.loads(p.stdout)["devices"] if p.returncode == 0 else []
    if check(len(devices) == 1, f"top: {len(devices)} ledgers, wanted 1", p.stdout + p.stderr):
        d = devices[0]
        got = {q["name"]: (q["limit"], q["guarantee"]) for q in d["partitions"]}
        check(got == want and len(d["members"]) == 2, f"top: partitions {got} members {len(d['members'])}", json.dumps(d))
    open(release, "w").close()
    for name, _, _, proc, _ in jobs:
        check(proc.wait(timeout=60) == 0, f"{name}: deploy_job exit", proc.stderr.read())


def test_spec_and_edits(root, errors):
    files, layers = build_files()
    ledger = os.path.join(root, "ledger-for-layers")
    os.mkdir(ledger, 0o700)
    rc, out, err = cdi("--partition", "infer", "--memory", "50%", "--ledger-dir", ledger, "--ledger-mount", "/gpupart",
                       "--layers", ",".join(layers) or "none", *files)
    if not check(rc == 0, f"cdi with layers {layers}: exit {rc}", err):
        return
    spec = json.loads(out)
    if errors:
        check(errors(spec) == [], "cdi with layers: not a valid CDI spec", "\n".join(errors(spec)) + out)
    spec_rules(spec, "cdi with layers")
    edits = spec["devices"][0]["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    check(env["GPUPART_PARTITIONS"] == "infer:50%" and env["GPUPART_PARTITION"] == "infer" and
          env["GPUPART_SHARED"] == "1" and env["GPUPART_LEDGER_DIR"] == "/gpupart", "the partition's variables", env)
    check({"hostPath": ledger, "containerPath": "/gpupart", "options": ["bind", "rw", "nosuid", "nodev", "noexec"]}
          in edits["mounts"], "the ledger mount", edits["mounts"])
    test_layers(spec, layers, files)
    print(f"test_cdi: layers found in the build tree and checked: {', '.join(layers) or 'none'}")
    rc, out, err = cdi("--partition", "infer", "--memory", "1GiB", "--no-ledger", "--edits")
    if check(rc == 0, f"cdi --edits: exit {rc}", err):
        edits = json.loads(out)
        if errors:
            check(errors(edits, "containerEdits") == [], "--edits: not valid containerEdits", out)
        check(edits == {"env": ["GPUPART_PARTITIONS=infer:1GiB", "GPUPART_PARTITION=infer"]}, "--edits --no-ledger", out)
    rc, out, err = cdi("--partition", "9to5", "--memory", "1GiB", "--no-ledger", "--kind", "example.com/gpu.share")
    if check(rc == 0, f"cdi --kind: exit {rc}", err):
        spec = json.loads(out)
        check(spec["kind"] == "example.com/gpu.share" and spec["cdiVersion"] == "0.6.0", "a dot in the class needs 0.6.0", out)


def test_bad_usage_prints_no_spec(root):
    ledger = os.path.join(root, "ledger-bad")
    os.mkdir(ledger, 0o700)
    base = ["--partition", "p", "--memory", "1GiB", "--ledger-dir", ledger]
    usage = [["--memory", "1GiB"], ["--partition", "p"], base + ["--guarantee", "2GiB"],
             ["--partition", "p", "--memory", "8 GiB", "--no-ledger"], ["--partition", "p", "--memory", "1GiB:2", "--no-ledger"],
             ["--partition", "p", "--memory", "lots", "--no-ledger"], ["--partition", "a\nb", "--memory", "1GiB"],
             ["--partition", "x" * 64, "--memory", "1GiB"], ["--partition", "_p", "--memory", "1GiB", "--no-ledger"],
             base + ["--device", "GPU-1234"], base + ["--device", "0000:3b:00.0\n"], base + ["--kind", "partition"],
             base + ["--kind", "a.b/c/d"], base + ["--ledger-mount", "run/gpupart"], base + ["--ledger-mount", "/run/../etc"],
             base + ["--ledger-mount", "/run/gp\x1bupart"], base + ["--layers", "metal"], base + ["--frobnicate"],
             base + ["--name", "-x"], base + ["--layer-dir"]]
    for args in usage:
        rc, out, err = cdi(*args)
        check(rc == 2 and out == "", f"cdi {args!r}: exit {rc}, wanted 2 and no spec", out + err)
    checked = [["--partition", "p", "--memory", "1GiB", "--ledger-dir", "/dev/shm"],
               ["--partition", "p", "--memory", "1GiB", "--ledger-dir", os.path.join(root, "missing")],
               base + ["--layers", "opencl", "--layer-dir", os.path.join(root, "missing"),
                       "--library", os.path.join(BUILD, "libgpupart.so.0")],
               base + ["--layers", "cuda", "--library", os.path.join(root, "missing.so")]]
    for args in checked:
        rc, out, err = cdi(*args)
        check(rc == 1 and out == "" and err.startswith("gpupart cdi: "), f"cdi {args!r}: exit {rc}, wanted 1", out + err)
    rc, out, err = cdi("--partition", "p", "--memory", "1GiB", env={"GPUPART_LEDGER_DIR": ledger})
    check(rc == 0 and {"hostPath": ledger, "containerPath": "/run/gpupart",
                       "options": ["bind", "rw", "nosuid", "nodev", "noexec"]}
          in json.loads(out)["devices"][0]["containerEdits"]["mounts"],
          "the ledger folder defaults to the one programs use (GPUPART_LEDGER_DIR)", out + err)


def main():
    errors = validator("--require-schema" in sys.argv)
    root = tempfile.mkdtemp(prefix="gpupart-cdi-")
    try:
        if errors:
            test_the_validator_refuses_broken_specs(errors)
        test_spec_and_edits(root, errors)
        test_two_claims_meet_in_one_ledger(root, errors)
        test_bad_usage_prints_no_spec(root)
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"test_cdi: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
