#!/usr/bin/env python3
"""The deployment recipes of deploy/ executed: each Kubernetes manifest is parsed, and each
container's environment (and the ConfigMap's INI file, where a container mounts it) is
given to real gpupart processes on the sim backend: `gpupart check-config` and `gpupart
config --json` for what each container is configured with, then the workload (deploy_job)
in every container of a ledger at once, `gpupart top --json` and the exporter of the
DaemonSet over the folder that stands for the emptyDir or hostPath volume. The Slurm batch
script is run with its srun lines through a shim that runs each step as Slurm would, with
the environment Slurm sets (no Slurm here: tests/deploy/run runs it in a real one-node
Slurm cluster where Slurm is installed).

Only what cannot be on this machine is changed, and each change is named: the backend
(GPUPART_BACKEND=sim, the manifests name real GPUs' backends), the sim device's size, each
volume's mount path (a temporary folder per volume: one per pod for an emptyDir, one per
node path for a hostPath) and the program each container runs (deploy_job).
Usage: test_deploy.py PATH/TO/gpupart PATH/TO/deploy_job DEPLOY_DIR [--slurm-cluster]"""
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    print("test_deploy: python3-yaml is missing (scripts/deps test installs it): skipped")
    sys.exit(77)

GPUPART, JOB, DEPLOY = (os.path.abspath(a) for a in sys.argv[1:4])
MIB, GIB = 1 << 20, 1 << 30
SIM_TOTAL = 16 * GIB
failures = []
children = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(f"{what}\n{detail}")
    return cond


def clean_env(extra):
    """This process's environment without any configuration gpupart reads, plus extra."""
    keep = {k: v for k, v in os.environ.items()
            if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith(("GPUPART_", "CUDA_DEVICE_MEMORY_LIMIT", "SLURM_", "CUDA_VISIBLE_DEVICES",
                                 "HIP_DEVICE_MEMORY_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPU_PORTION"))}
    return {**keep, **extra}


def run(args, env, timeout=60):
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def manifests():
    docs = {}
    for name in sorted(os.listdir(os.path.join(DEPLOY, "kubernetes"))):
        if name.endswith(".yaml"):
            with open(os.path.join(DEPLOY, "kubernetes", name)) as f:
                docs[name] = [d for d in yaml.safe_load_all(f) if d]
    return docs


def pod_spec(doc):
    return doc["spec"]["template"]["spec"] if doc["kind"] in ("DaemonSet", "Deployment") else doc["spec"]


def run_as_user(spec, container):
    return (container.get("securityContext") or {}).get("runAsUser", (spec.get("securityContext") or {}).get("runAsUser"))


class Volumes:
    """A temporary folder for each volume: per pod for an emptyDir, per node path for a
    hostPath (all pods here are on one node), the INI file for the ConfigMap."""

    def __init__(self, root, configmaps):
        self.root, self.configmaps, self.host = root, configmaps, {}

    def folder(self, pod, vol):
        if "hostPath" in vol:
            path = vol["hostPath"]["path"]
            if path not in self.host:
                self.host[path] = tempfile.mkdtemp(prefix="hostpath-", dir=self.root)
            return self.host[path]
        if "emptyDir" in vol:
            return os.path.join(self.root, f"emptydir-{pod}-{vol['name']}")
        if "configMap" in vol:
            d = os.path.join(self.root, f"configmap-{pod}-{vol['name']}")
            os.makedirs(d, exist_ok=True)
            for key, text in self.configmaps[vol["configMap"]["name"]].items():
                with open(os.path.join(d, key), "w") as f:
                    f.write(text)
            return d
        raise AssertionError(f"volume {vol['name']}: no stand-in for this kind")

    def mounts(self, doc, container):
        """{mountPath: local folder} of the container's volume mounts."""
        spec, pod = pod_spec(doc), doc["metadata"]["name"]
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        out = {}
        for m in container.get("volumeMounts", []):
            out[m["mountPath"]] = self.folder(pod, vols[m["name"]])
            os.makedirs(out[m["mountPath"]], mode=0o700, exist_ok=True)
        return out


def translate(value, mounts):
    """A path under a mount path, as this machine sees it."""
    for path, local in mounts.items():
        if value == path or value.startswith(path.rstrip("/") + "/"):
            return local + value[len(path.rstrip("/")):]
    return value


def container_env(doc, container, vols, extra=None):
    """The container's environment from the manifest, paths translated, on sim."""
    mounts = vols.mounts(doc, container)
    env = {}
    for e in container.get("env", []):
        check("value" in e, f"{container['name']}: env {e['name']} has no plain value")
        env[e["name"]] = translate(str(e.get("value", "")), mounts)
    cfg = env.get("GPUPART_CONFIG")
    if cfg:  # the file's own paths are the container's: the ledger folder is rewritten too
        with open(cfg) as f:
            text = f.read()
        text = re.sub(r"(?m)^(\s*ledger_dir\s*=\s*)(\S+)", lambda m: m.group(1) + translate(m.group(2), mounts), text)
        local = cfg + ".local"
        with open(local, "w") as f:
            f.write(text)
        env["GPUPART_CONFIG"] = local
    env.update({"GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": str(SIM_TOTAL)}, **(extra or {}))
    return env, mounts


def gpupart_config(env, what):
    rc, out, err = run([GPUPART, "config", "--json"], clean_env(env))
    if not check(rc == 0, f"{what}: gpupart config exit {rc}", err):
        return None
    return json.loads(out)


class Job:
    """deploy_job as a container's program: started, its report read, held until release."""

    def __init__(self, env, hold_mib, release):
        self.p = subprocess.Popen([JOB, str(hold_mib), release], env=clean_env(env), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        children.append(self.p)
        line = self.p.stdout.readline()
        self.report = json.loads(line) if line.startswith("{") else None
        if self.report is None:
            self.p.kill()
            raise AssertionError(f"deploy_job did not start: {line!r} {self.p.stderr.read()}")

    def finish(self):
        rc = self.p.wait(timeout=60)
        check(rc == 0, f"deploy_job exit {rc}", self.p.stderr.read())


def top(ledger_dir):
    rc, out, err = run([GPUPART, "top", "--json", "--ledger-dir", ledger_dir], clean_env({}))
    check(rc == 0, f"gpupart top exit {rc}", err)
    return json.loads(out) if rc == 0 else {"devices": []}


def expect_partition(report, name, limit, guarantee, what):
    got = {p["name"]: (p["limit"], p["guarantee"]) for p in report["partitions"]}
    check(got.get(name) == (limit, guarantee), f"{what}: partition {name} is {got.get(name)}, wanted {(limit, guarantee)}",
          json.dumps(report))


def expect_one_ledger(ledger_dir, wanted, budget, what, operator=False):
    """The ledger folder holds one device whose members own exactly the partitions wanted
    ({name: (limit, guarantee)}), all alive, with the device's budget (and, operator, the
    operator's member of gpupart ledger create besides)."""
    devices = top(ledger_dir)["devices"]
    if not check(len(devices) == 1, f"{what}: {len(devices)} ledgers in the folder, wanted 1", json.dumps(devices)):
        return
    d = devices[0]
    got = {p["name"]: (p["limit"], p["guarantee"]) for p in d["partitions"]}
    check(d["status"] == "ok" and d["consistent"], f"{what}: ledger {d['status']}", json.dumps(d))
    check(got == wanted, f"{what}: ledger partitions {got}, wanted {wanted}", json.dumps(d))
    check(len(d["members"]) == len(wanted) + operator and all(m["alive"] for m in d["members"]),
          f"{what}: members {d['members']}")
    check(d["budget"] == budget and d["guarantees"] == sum(g for _, g in wanted.values()),
          f"{what}: budget {d['budget']} guarantees {d['guarantees']}", json.dumps(d))


def grain(x):
    return x // (2 * MIB) * (2 * MIB)


def start_jobs(envs, root, hold_mib=64):
    release = os.path.join(root, f"release-{len(children)}")
    return [Job(e, hold_mib, release) for e in envs], release


def release_jobs(jobs, release):
    open(release, "w").close()
    for j in jobs:
        j.finish()


# ---- Kubernetes ----

def test_structure(docs):
    """What the ledger needs, as the manifests say it: a memory-backed emptyDir or a
    DirectoryOrCreate hostPath, mounted where GPUPART_LEDGER_DIR (or the file's
    ledger_dir) points, one runAsUser for all that share it."""
    pod = docs["pod-shared.yaml"][0]
    spec = pod_spec(pod)
    vol = {v["name"]: v for v in spec["volumes"]}["gpupart-ledger"]
    check(vol.get("emptyDir", {}).get("medium") == "Memory", "pod-shared: the ledger volume is not a memory emptyDir")
    users = set()
    for c in spec["containers"]:
        env = {e["name"]: e.get("value") for e in c["env"]}
        mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["gpupart-ledger"]
        check(env.get("GPUPART_SHARED") == "1" and env.get("GPUPART_LEDGER_DIR") == mount,
              f"pod-shared {c['name']}: GPUPART_SHARED/GPUPART_LEDGER_DIR do not point at the volume", env)
        users.add(run_as_user(spec, c))
    check(len(users) == 1 and None not in users, f"pod-shared: containers run as {users}")
    users = set()
    for doc in docs["node-shared.yaml"] + docs["exporter-daemonset.yaml"]:
        spec = pod_spec(doc)
        hp = {v["name"]: v for v in spec["volumes"]}["gpupart-ledger"]["hostPath"]
        check(hp == {"path": "/run/gpupart", "type": "DirectoryOrCreate"}, f"{doc['metadata']['name']}: hostPath {hp}")
        users |= {run_as_user(spec, c) for c in spec["containers"]}
    check(users == {1000}, f"node-shared and exporter: containers run as {users}, wanted one user")


def test_configmap_file(docs, root):
    ini = docs["configmap.yaml"][0]["data"]["gpupart.ini"]
    path = os.path.join(root, "gpupart.ini")
    with open(path, "w") as f:
        f.write(ini)
    rc, out, err = run([GPUPART, "check-config", path], clean_env({}))
    check(rc == 0 and out.strip() == f"{path}: ok", f"gpupart check-config of the ConfigMap's file: exit {rc}", out + err)


def test_pod_shared(docs, vols, root):
    """(a) Two containers of one pod: 60%/40% and 40%/20% of one budget in one ledger."""
    pod = docs["pod-shared.yaml"][0]
    envs = []
    for c in pod_spec(pod)["containers"]:
        env, mounts = container_env(pod, c, vols)
        cfg = gpupart_config(env, f"pod-shared {c['name']}")
        if cfg:
            check(cfg["shared"] is True and cfg["ledger_dir"] == mounts["/run/gpupart"] and cfg["budget"] == SIM_TOTAL,
                  f"pod-shared {c['name']}: shared {cfg['shared']} ledger_dir {cfg['ledger_dir']} budget {cfg['budget']}")
        envs.append(env)
    jobs, release = start_jobs(envs, root)
    b = SIM_TOTAL
    expect_partition(jobs[0].report, "train", grain(b * 6 // 10), grain(b * 4 // 10), "pod-shared train")
    expect_partition(jobs[1].report, "eval", grain(b * 4 // 10), grain(b * 2 // 10), "pod-shared eval")
    for j in jobs:
        check(j.report["refused"] == "GPUPART_ELIMIT", f"pod-shared: past the limit: {j.report['refused']}")
    ledger = vols.mounts(pod, pod_spec(pod)["containers"][0])["/run/gpupart"]
    expect_one_ledger(ledger, {"train": (grain(b * 6 // 10), grain(b * 4 // 10)),
                               "eval": (grain(b * 4 // 10), grain(b * 2 // 10))}, b, "pod-shared")
    release_jobs(jobs, release)


def from_file(source, path, key):
    """source is path:LINE, and that line of the file sets key."""
    m = re.fullmatch(re.escape(path) + r":(\d+)", source)
    with open(path) as f:
        lines = f.read().splitlines()
    return bool(m) and lines[int(m.group(1)) - 1].split("=")[0].strip() == key


def node_envs(docs, vols):
    out = []
    for pod in docs["node-shared.yaml"]:
        c = pod_spec(pod)["containers"][0]
        env, mounts = container_env(pod, c, vols)
        cfg = gpupart_config(env, f"node-shared {pod['metadata']['name']}")
        if cfg:
            check(cfg["shared"] is True and cfg["ledger_dir"] == mounts["/run/gpupart"]
                  and cfg["budget"] == grain(SIM_TOTAL * 9 // 10),
                  f"node-shared {pod['metadata']['name']}: the ConfigMap's file did not apply", json.dumps(cfg))
            for key in ("shared", "ledger_dir", "memory_fraction", "release_threshold"):
                check(from_file(cfg["sources"][key], env["GPUPART_CONFIG"], key),
                      f"node-shared {pod['metadata']['name']}: {key} came from {cfg['sources'][key]}")
        out.append(env)
    return out


class Exporter:
    """The DaemonSet's container, its --listen moved to 127.0.0.1:0 (a port the kernel picks)."""

    def __init__(self, doc, vols):
        c = pod_spec(doc)["containers"][0]
        mounts = vols.mounts(doc, c)
        args = [translate(a, mounts) for a in c["args"]]
        i = args.index("--listen")
        self.manifest_port = int(args[i + 1].rsplit(":", 1)[1])
        args[i + 1] = "127.0.0.1:0"
        self.p = subprocess.Popen([GPUPART] + args, env=clean_env({}), stdout=subprocess.PIPE, text=True)
        children.append(self.p)
        m = re.fullmatch(r"gpupart exporter: listening on http://127\.0\.0\.1:(\d+)/\n", self.p.stdout.readline())
        self.port = int(m.group(1)) if m else None

    def get(self, path):
        with socket.create_connection(("127.0.0.1", self.port), timeout=20) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        return head.split(b" ")[1], body.decode()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        check(self.p.wait(timeout=30) == 0, "exporter: exit on SIGTERM")


def test_exporter_manifest(doc):
    """(c) Annotations, port, probes and limits agree with the exporter's arguments."""
    tpl = doc["spec"]["template"]
    ann, c = tpl["metadata"]["annotations"], tpl["spec"]["containers"][0]
    listen = c["args"][c["args"].index("--listen") + 1]
    port = int(listen.rsplit(":", 1)[1])
    check(c["command"] == ["gpupart"] and c["args"][0] == "exporter" and listen.startswith("0.0.0.0:"),
          f"exporter: command {c['command']} {c['args']}")
    check(ann == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"},
          f"exporter: annotations {ann}")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"metrics": port}, f"exporter: ports {ports}")
    for probe in ("readinessProbe", "livenessProbe"):
        check(c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, f"exporter: {probe} {c[probe]}")
    check(set(c["resources"]["limits"]) == {"cpu", "memory"}, f"exporter: limits {c['resources']}")


def test_podmonitor(docs):
    """(e) The PodMonitor scrapes what the annotations name: the DaemonSet's pods, by their
    label, on the container's port named metrics, at the annotations' path."""
    pm = docs["exporter-podmonitor.yaml"][0]
    ds = docs["exporter-daemonset.yaml"][0]
    tpl = ds["spec"]["template"]
    labels, ann = tpl["metadata"]["labels"], tpl["metadata"]["annotations"]
    want = pm["spec"]["selector"]["matchLabels"]
    check(pm["kind"] == "PodMonitor" and want and all(labels.get(k) == v for k, v in want.items()),
          f"podmonitor: selector {want} does not select the DaemonSet's pods {labels}")
    check(set(pm["spec"]) == {"selector", "podMetricsEndpoints"}, f"podmonitor: spec {pm['spec']}")
    ports = {p["name"]: p["containerPort"] for c in tpl["spec"]["containers"] for p in c.get("ports", [])}
    for ep in pm["spec"]["podMetricsEndpoints"]:
        check(ep.get("port") in ports and ports[ep["port"]] == int(ann["prometheus.io/port"]),
              f"podmonitor: port {ep.get('port')} is not the annotated one", f"{ports} {ann}")
        check(ep.get("path") == ann["prometheus.io/path"], f"podmonitor: path {ep.get('path')}")
    check(pm["metadata"].get("namespace") == ds["metadata"].get("namespace"),
          "podmonitor: not in the exporter's namespace")


def test_node_shared_and_exporter(docs, vols, root):
    """(b) Two pods of a node in one hostPath ledger, with the ConfigMap's file; (c) the
    exporter DaemonSet's container serving them."""
    envs = node_envs(docs, vols)
    jobs, release = start_jobs(envs, root)
    b = grain(SIM_TOTAL * 9 // 10)
    expect_partition(jobs[0].report, "train", grain(b * 6 // 10), grain(b * 4 // 10), "node-shared train")
    expect_partition(jobs[1].report, "eval", grain(b * 4 // 10), grain(b * 2 // 10), "node-shared eval")
    ledger = vols.host["/run/gpupart"]
    expect_one_ledger(ledger, {"train": (grain(b * 6 // 10), grain(b * 4 // 10)),
                               "eval": (grain(b * 4 // 10), grain(b * 2 // 10))}, b, "node-shared")
    doc = docs["exporter-daemonset.yaml"][0]
    test_exporter_manifest(doc)
    test_podmonitor(docs)
    e = Exporter(doc, vols)
    if check(e.port, "exporter: did not start"):
        for path in ("/metrics", "/top.json"):
            status, body = e.get(path)
            check(status == b"200", f"exporter {path}: {status}")
            if path == "/metrics":
                m = re.search(r"(?m)^gpupart_device_members\{[^}]*\} (\d+)$", body)
                check(m and m.group(1) == "2", "exporter: gpupart_device_members is not 2", body[:2000])
                for name in ("train", "eval"):
                    check(f'partition="{name}"' in body, f"exporter: no sample of partition {name}")
        e.stop()
    release_jobs(jobs, release)


def test_operator_ledger(docs, vols, root):
    """(e) The operator's ledger DaemonSet: its init container's `gpupart ledger create`,
    run as the manifest says on sim, makes the node's ledger in the hostPath folder that
    node-shared.yaml's pods use; jobs started there afterwards get its budget and
    partitions whatever their own configuration asks, and the critical floor is held
    before its job starts."""
    ds = next(d for d in docs["operator-ledger.yaml"] if d["kind"] == "DaemonSet")
    spec = pod_spec(ds)
    inits = {c["name"]: c for c in spec["initContainers"]}
    check(list(inits) == ["ledger-folder", "ledger-create"], f"operator-ledger: init containers {list(inits)}")
    create = inits["ledger-create"]
    check(run_as_user(spec, create) == 1000, "operator-ledger: ledger create does not run as the jobs' user (1000)")
    hp = {v["name"]: v for v in spec["volumes"]}["gpupart-ledger"]["hostPath"]
    check(hp == {"path": "/run/gpupart", "type": "DirectoryOrCreate"}, f"operator-ledger: hostPath {hp}")
    env, mounts = container_env(ds, create, vols)
    argv = [GPUPART if a == "gpupart" else translate(a, mounts) for a in create["command"]]
    check(create["command"][:3] == ["gpupart", "ledger", "create"], f"operator-ledger: command {create['command']}")
    rc, out, err = run(argv, clean_env(env))
    if not check(rc == 0, f"operator-ledger: gpupart ledger create exit {rc}", out + err):
        return
    ledger = mounts["/run/gpupart"]
    devices = top(ledger)["devices"]
    b = grain(SIM_TOTAL * 9 // 10)
    wanted = {"critical": (grain(b * 5 // 10), grain(b * 4 // 10)), "besteffort": (grain(b * 6 // 10), 0)}
    if check(len(devices) == 1, f"operator-ledger: {len(devices)} ledgers"):
        d = devices[0]
        got = {p["name"]: (p["limit"], p["guarantee"]) for p in d["partitions"]}
        check(got == wanted and d["budget"] == b and d["guarantees"] == wanted["critical"][1],
              f"operator-ledger: ledger {got} budget {d['budget']}, wanted {wanted} {b}", json.dumps(d))
    # node-shared.yaml's pods, each naming one of the operator's partitions with other figures
    envs = []
    for pod, name in zip(docs["node-shared.yaml"], ("critical", "besteffort")):
        e, _ = container_env(pod, pod_spec(pod)["containers"][0], vols,
                             {"GPUPART_PARTITIONS": f"{name}:10%:5%", "GPUPART_MEMORY_FRACTION": "50%"})
        envs.append(e)
    jobs, release = start_jobs(envs, root)
    for j, name in zip(jobs, ("critical", "besteffort")):
        check(j.report["budget"] == b, f"operator-ledger {name}: budget {j.report['budget']}, wanted the ledger's {b}")
        expect_partition(j.report, name, *wanted[name], f"operator-ledger {name}")
    release_jobs(jobs, release)
    rc, out, err = run([GPUPART, "ledger", "remove", "--ledger-dir", ledger], clean_env(env))
    check(rc == 0 and not os.listdir(ledger), f"operator-ledger: gpupart ledger remove exit {rc}", out + err)


def test_hami(docs, vols, root):
    """HAMi's injected CUDA_DEVICE_MEMORY_LIMIT_0 (gpumem MiB, as `4096m`) is the budget
    the container's partitions split; CUDA_DEVICE_MEMORY_LIMIT for every device likewise."""
    pod = docs["hami.yaml"][0]
    c = pod_spec(pod)["containers"][0]
    gpumem = int(c["resources"]["limits"]["nvidia.com/gpumem"])
    share = gpumem * MIB
    for var in ("CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT"):
        env, _ = container_env(pod, c, vols, {var: f"{gpumem}m"})
        cfg = gpupart_config(env, f"hami {var}")
        if cfg:
            check(cfg["memory_limit"] == share and cfg["sources"]["memory_limit"] == var and cfg["budget"] == share,
                  f"hami {var}: memory_limit {cfg['memory_limit']} ({cfg['sources']['memory_limit']}), budget {cfg['budget']}")
            parts = {p["name"]: (p["limit"], p["guarantee"]) for p in cfg["partitions"]}
            check(parts == {"model": (grain(share * 6 // 10), grain(share * 6 // 10)), "kv_cache": (grain(share * 4 // 10), 0)},
                  f"hami {var}: partitions {parts}")
    # The operator's ceiling in the manifest (4GiB) holds against a larger share.
    env, _ = container_env(pod, c, vols, {"CUDA_DEVICE_MEMORY_LIMIT_0": "8g"})
    cfg = gpupart_config(env, "hami 8g")
    if cfg:
        check(cfg["budget"] == 4 * GIB, f"hami: the ceiling GPUPART_MEMORY_LIMIT_MAX did not hold: {cfg['budget']}")
    env, _ = container_env(pod, c, vols, {"CUDA_DEVICE_MEMORY_LIMIT_0": f"{gpumem}m"})
    jobs, release = start_jobs([env], root)
    check(jobs[0].report["budget"] == share and jobs[0].report["refused"] == "GPUPART_ELIMIT",
          f"hami: the program's budget {jobs[0].report['budget']}", json.dumps(jobs[0].report))
    release_jobs(jobs, release)


# ---- Slurm ----

SRUN_SHIM = r"""#!/bin/bash
# srun as a job step sees it: the step's own SLURM_STEP_ID, --export=ALL,K=V applied,
# then the command. Only the options the batch script uses are understood. With
# SHIM_SERIAL set, steps run one after the other, as Slurm runs steps that ask for the
# same resources.
set -euo pipefail
id=$(flock "$SHIM_DIR/steps" bash -c 'n=$(cat "$SHIM_DIR/steps"); n=${n:-0}; echo $((n + 1)) > "$SHIM_DIR/steps"; echo $n')
exports=()
while [ $# -gt 0 ]; do
  case $1 in
    --export=ALL,*) IFS=, read -ra kv <<< "${1#--export=ALL,}"; exports+=("${kv[@]}") ;;
    --gres=shard:[1-9]*) echo "$1" >> "$SHIM_DIR/gres" ;;
    --ntasks=*|--exact|--overlap) ;;
    -*) echo "srun shim: option $1 not understood" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
if [ -n "${SHIM_SERIAL:-}" ]; then
  exec flock "$SHIM_DIR/serial" env SLURM_STEP_ID="$id" SLURM_PROCID=0 "${exports[@]}" "$@"
fi
exec env SLURM_STEP_ID="$id" SLURM_PROCID=0 "${exports[@]}" "$@"
"""

# scontrol show node -o NODE, as Slurm prints the node of tests/deploy/slurm_cluster.py.
SCONTROL_SHIM = r"""#!/bin/bash
[ "$*" = "show node -o node1" ] || { echo "scontrol shim: '$*' not understood" >&2; exit 2; }
echo "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUTot=2 Gres=${SHIM_GRES:-gpu:1,shard:4} State=ALLOCATED"
"""


def slurm_env(root, extra):
    """What Slurm sets in a batch job of `--gres=shard:2` on one GPU (values as a real
    Slurm 22.05 sets them: tests/deploy/run), the shim's srun and scontrol first on PATH,
    gpupart and deploy_job as the steps' programs, on sim."""
    shim = os.path.join(root, "shim")
    os.makedirs(shim, exist_ok=True)
    for name, text in (("srun", SRUN_SHIM), ("scontrol", SCONTROL_SHIM)):
        with open(os.path.join(shim, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(shim, name), 0o755)
    path = os.pathsep.join([shim, os.path.dirname(GPUPART), os.environ.get("PATH", "/usr/bin:/bin")])
    return {"PATH": path, "SHIM_DIR": shim, "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_NTASKS": "2",
            "SLURM_GPUS_ON_NODE": "1", "CUDA_VISIBLE_DEVICES": "0", "SLURM_SHARDS_ON_NODE": "2",
            "SLURMD_NODENAME": "node1", "SLURM_SUBMIT_DIR": root, "LEDGER_BASE": root, "GPUPART_BACKEND": "sim",
            "GPUPART_SIM_TOTAL": str(SIM_TOTAL), **extra}


def run_batch(env, root, submit, log_path, operator=False):
    """Runs the batch script (submit: a command line that runs it, writing the job's output
    to log_path), waits for its two steps' reports, checks the job's ledger, releases the
    steps; returns the reports and the job's output."""
    release = os.path.join(root, f"release-{len(children)}")
    if "SHIM_DIR" in env:
        for name in ("steps", "gres"):
            open(os.path.join(env["SHIM_DIR"], name), "w").close()
    env = {**env, "TRAIN": f"{JOB} 64 {release}", "EVAL": f"{JOB} 64 {release}"}
    out = open(log_path + ".submit", "w+")
    p = subprocess.Popen(submit, env=clean_env(env), stdout=out, stderr=subprocess.STDOUT, text=True)
    children.append(p)

    def log():
        out.flush()
        try:
            with open(log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""
    reports, deadline = [], time.monotonic() + 60
    while len(reports) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
        reports = [json.loads(l) for l in log().splitlines() if l.startswith('{"budget"')]
    if check(len(reports) == 2, "slurm: the two steps did not both report", log()):
        ledgers = [os.path.join(root, d) for d in os.listdir(root) if d.startswith("gpupart-job-")]
        b = reports[0]["budget"]
        if check(len(ledgers) == 1, f"slurm: ledger folders {ledgers}"):
            expect_one_ledger(ledgers[0], {"train": (grain(b * 6 // 10), grain(b * 4 // 10)),
                                           "eval": (grain(b * 4 // 10), grain(b * 2 // 10))}, b, "slurm", operator)
    open(release, "w").close()
    rc = p.wait(timeout=120)
    out.seek(0)
    check(rc == 0, f"slurm: the batch script exit {rc}", out.read() + log())
    check("did not run at the same time" not in log() and "step creation temporarily disabled" not in log(),
          "slurm: the steps ran one after the other", log())
    left = [d for d in os.listdir(root) if d.startswith("gpupart-job-")]
    check(len(left) <= operator, f"slurm: the job's ledger folders left: {left}")
    return reports, log()


def batch_in_shim(script, root):
    log = os.path.join(root, f"batch-{len(children)}.out")
    return ["bash", "-c", 'exec bash "$0" > "$1" 2>&1', script, log], log


def run_failing_batch(env, root, want):
    """The batch script under the shim with quick programs: it must fail saying want."""
    script = os.path.join(DEPLOY, "slurm", "gpupart-share.sbatch")
    submit, log_path = batch_in_shim(script, root)
    open(os.path.join(env["SHIM_DIR"], "steps"), "w").close()
    p = subprocess.run(submit, env=clean_env({"TRAIN": "sleep 0.3", "EVAL": "sleep 0.3", **env}), timeout=120)
    with open(log_path) as f:
        log = f.read()
    check(p.returncode == 1 and want in log, f"slurm: the batch script exit {p.returncode}, wanted 1 and {want!r}", log)
    left = [d for d in os.listdir(root) if d.startswith("gpupart-job-")]
    check(not left, f"slurm: the job's ledger folder was not removed after a failure: {left}")


def test_slurm_shim(root):
    script = os.path.join(DEPLOY, "slurm", "gpupart-share.sbatch")
    # --gres=shard:2 of a GPU of 4 shards: half of the GPU, one shard for each step.
    reports, log = run_batch(slurm_env(root, {}), root, *batch_in_shim(script, root))
    if len(reports) == 2:
        check(all(r["budget"] == SIM_TOTAL // 2 for r in reports), f"slurm shards: budgets {[r['budget'] for r in reports]}")
        check("step 0 of job 4242" in log and "step 1 of job 4242" in log, "slurm: steps' ids", log)
        check(re.search(r"(?m)^memory_fraction +0\.5 +GPUPART_MEMORY_FRACTION$", log), "slurm: gpupart config's report", log)
        with open(os.path.join(root, "shim", "gres")) as f:
            check(f.read() == "--gres=shard:1\n" * 2, "slurm: each step asks for its own shard")
    # The shards of one GPU are the node's (scontrol), not a constant: 8 per GPU here.
    reports, _ = run_batch(slurm_env(root, {"SHIM_GRES": "gpu:a100:1(S:0),shard:a100:8(S:0)"}), root,
                           *batch_in_shim(script, root))
    if len(reports) == 2:
        check(all(r["budget"] == SIM_TOTAL // 4 for r in reports), f"slurm 2 of 8 shards: budgets {[r['budget'] for r in reports]}")
    # SLURM_SHARD_MEM_PER_GPU where set: gpupart's memory_limit, the script adds nothing.
    reports, log = run_batch(slurm_env(root, {"SLURM_SHARD_MEM_PER_GPU": "3072M"}), root, *batch_in_shim(script, root))
    if len(reports) == 2:
        check(all(r["budget"] == 3 * GIB for r in reports), f"slurm SLURM_SHARD_MEM_PER_GPU: budgets {[r['budget'] for r in reports]}")
        check("SLURM_SHARD_MEM_PER_GPU" in log, "slurm: gpupart config does not name SLURM_SHARD_MEM_PER_GPU", log)
    # Whole GPUs (--gpus): the script's GPUPART_MEMORY_FRACTION, the steps overlapping.
    env = slurm_env(root, {"GPUPART_MEMORY_FRACTION": "25%"})
    del env["SLURM_SHARDS_ON_NODE"]
    reports, _ = run_batch(env, root, *batch_in_shim(script, root))
    if len(reports) == 2:
        check(all(r["budget"] == SIM_TOTAL // 4 for r in reports), f"slurm --gpus: budgets {[r['budget'] for r in reports]}")
    # Steps that Slurm runs one after the other, a job with one shard, a node whose shards
    # cannot be read: each fails the job, saying why.
    run_failing_batch(slurm_env(root, {"SHIM_SERIAL": "1"}), root, "the steps did not run at the same time")
    run_failing_batch(slurm_env(root, {"SLURM_SHARDS_ON_NODE": "1"}), root, "each of its 2 steps needs one")
    run_failing_batch(slurm_env(root, {"SHIM_GRES": "gpu:1"}), root, "cannot read the shards of one GPU")


OPERATOR_INI = """[gpupart]
memory_fraction = 25%
shared = true

[partition train]
size = 60%
guarantee = 40%

[partition eval]
size = 40%
guarantee = 20%
"""


def test_slurm_prolog(root):
    """gpupart-prolog.sh makes the job's operator's ledger before its steps (a quarter of
    the GPU, whatever the job's shards say); the batch script's steps join it with its
    figures; gpupart-epilog.sh ends it and removes the folder."""
    ini = os.path.join(root, "operator.ini")
    with open(ini, "w") as f:
        f.write(OPERATOR_INI)
    env = slurm_env(root, {"OPERATOR_INI": ini, "SLURM_JOB_USER": pwd.getpwuid(os.geteuid()).pw_name})
    rc, out, err = run(["bash", os.path.join(DEPLOY, "slurm", "gpupart-prolog.sh")], clean_env(env))
    folder = os.path.join(root, "gpupart-job-4242")
    if not check(rc == 0 and os.path.isdir(folder), f"slurm prolog: exit {rc}", out + err):
        return
    script = os.path.join(DEPLOY, "slurm", "gpupart-share.sbatch")
    reports, log = run_batch(env, root, *batch_in_shim(script, root), operator=True)
    if reports:
        check(all(r["budget"] == SIM_TOTAL // 4 for r in reports), f"slurm prolog: budgets {[r['budget'] for r in reports]}")
        check("the operator's ledger" in log and "budget mismatch" in log, "slurm prolog: the steps' warning", log)
    rc, out, err = run(["bash", os.path.join(DEPLOY, "slurm", "gpupart-epilog.sh")], clean_env(env))
    check(rc == 0 and not os.path.exists(folder), f"slurm epilog: exit {rc}, folder left: {os.path.exists(folder)}",
          out + err)


def test_systemd_unit(root):
    """deploy/systemd/gpupart-ledger.service: a oneshot that stays active, its ledger
    folder made for its user, ExecStart creating the operator's ledger with the unit's
    GPUPART_CONFIG and ExecStop ending it, both run here on sim as the unit says."""
    unit = {}
    with open(os.path.join(DEPLOY, "systemd", "gpupart-ledger.service")) as f:
        for line in f:
            if "=" in line and not line.startswith(("#", "[")):
                key, value = line.rstrip("\n").split("=", 1)
                unit.setdefault(key, []).append(value)
    check(unit.get("Type") == ["oneshot"] and unit.get("RemainAfterExit") == ["yes"], f"systemd: {unit}")
    check(unit.get("RuntimeDirectory") == ["gpupart"] and unit.get("RuntimeDirectoryMode") == ["2770"]
          and "User" in unit and "Group" in unit, f"systemd: the ledger folder is not a group folder: {unit}")
    env = dict(e.split("=", 1) for e in unit.get("Environment", []))
    folder = os.path.join(root, "run-gpupart")
    os.makedirs(folder)
    os.chmod(folder, 0o2770)  # as RuntimeDirectoryMode makes it: a group folder of this process's group
    ini = os.path.join(root, "gpupart.ini")
    with open(ini, "w") as f:
        f.write(OPERATOR_INI.replace("shared = true\n", f"shared = true\nledger_dir = {folder}\n"))
    check(env.get("GPUPART_CONFIG") == "/etc/gpupart/gpupart.ini", f"systemd: GPUPART_CONFIG {env}")
    env = {"GPUPART_CONFIG": ini, "GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": str(SIM_TOTAL)}

    def command(key):
        argv = unit[key][0].split()
        check(argv[0] == "/usr/bin/gpupart", f"systemd: {key} runs {argv[0]}")
        return [GPUPART] + [folder if a == "/run/gpupart" else a for a in argv[1:]]
    rc, out, err = run(command("ExecStart"), clean_env(env))
    check(rc == 0 and "budget" in out, f"systemd: ExecStart exit {rc}", out + err)
    names = os.listdir(folder)
    check(len(names) == 1 and re.fullmatch(r"gpupart-[^0-9].*\.ledger", names[0])
          and os.stat(os.path.join(folder, names[0])).st_mode & 0o777 == 0o660,
          f"systemd: the group's ledger (no uid in its name, 0660): {names}")
    b = grain(SIM_TOTAL // 4)
    devices = top(folder)["devices"]
    if check(len(devices) == 1, f"systemd: {len(devices)} ledgers"):
        d = devices[0]
        got = {p["name"]: (p["limit"], p["guarantee"]) for p in d["partitions"]}
        check(got == {"train": (grain(b * 6 // 10), grain(b * 4 // 10)), "eval": (grain(b * 4 // 10), grain(b * 2 // 10))}
              and d["budget"] == b and [m["command"] for m in d["members"]] == ["operator"],
              f"systemd: the operator's ledger {got}, budget {d['budget']}", json.dumps(d))
    rc, out, err = run(command("ExecStop"), clean_env(env))
    check(rc == 0 and not os.listdir(folder), f"systemd: ExecStop exit {rc}", out + err)


def test_dockerfile_backends():
    """The image's build enables every backend, the layers and the CUDA preload library
    (an `auto` feature whose header is missing is silently left out), and has cuda.h."""
    text = open(os.path.join(DEPLOY, "docker", "Dockerfile")).read().replace("\\\n", " ")
    setup = next((line for line in text.splitlines() if "meson setup" in line), "")
    for feature in ("cuda", "opencl", "vulkan", "interpose"):
        check(f"-D{feature}=enabled" in setup.split(), f"Dockerfile: meson setup without -D{feature}=enabled", setup)
    check("cuda.h" in text, "Dockerfile: no cuda.h for the CUDA backend in the build stage")


def main():
    root = tempfile.mkdtemp(prefix="gpupart-deploy-")
    try:
        docs = manifests()
        configmaps = {d["metadata"]["name"]: d["data"] for ds in docs.values() for d in ds if d["kind"] == "ConfigMap"}
        if "--slurm-cluster" in sys.argv:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import slurm_cluster  # tests/deploy/slurm_cluster.py
            slurm_cluster.run(root, sys.modules[__name__])
        else:
            vols = Volumes(root, configmaps)
            test_structure(docs)
            test_dockerfile_backends()
            test_configmap_file(docs, root)
            test_pod_shared(docs, vols, root)
            test_node_shared_and_exporter(docs, vols, root)
            test_operator_ledger(docs, vols, root)
            test_hami(docs, vols, root)
            os.makedirs(os.path.join(root, "slurm"))
            test_slurm_shim(os.path.join(root, "slurm"))
            os.makedirs(os.path.join(root, "slurm-prolog"))
            test_slurm_prolog(os.path.join(root, "slurm-prolog"))
            test_systemd_unit(root)
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"test_deploy: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
