"""A private one-node Slurm cluster for the batch script of deploy/slurm/: slurmctld and
slurmd of Debian's slurm-wlm, started in the foreground by this test, as root, with their
configuration, state and spool in a temporary folder and ports the kernel picks, and
stopped at the end. No munge: auth/none and cred/none, which Slurm 22.05 still has, are
enough for a cluster that only this machine's root can reach. The node declares one GPU
(gres gpu, File=/dev/null: no device is opened, task/none constrains nothing) split into
4 shards, so `--gres=shard:2` gives a job half of it, and Slurm itself sets the job's
SLURM_SHARDS_ON_NODE and CUDA_VISIBLE_DEVICES. The steps' programs run on sim.
test_deploy.py --slurm-cluster calls run(); tests/deploy/run starts that."""
import os
import shutil
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The site's Prolog and Epilog as slurmd runs them (as root, with the job's SLURM_JOB_ID and
# SLURM_JOB_USER and little else): deploy/slurm's scripts with the test's folder, operator
# file and gpupart, and only for the jobs after the marker file exists.
SITE_SCRIPT = """#!/bin/bash
[ -e {d}/operator-on ] || exit 0
export LEDGER_BASE={jobs} OPERATOR_INI={d}/operator.ini GPUPART={gpupart} GPUPART_BACKEND=sim GPUPART_SIM_TOTAL={total}
exec bash {script}
"""


def write_site_scripts(d, t):
    with open(os.path.join(d, "operator.ini"), "w") as f:
        f.write(t.OPERATOR_INI)
    for name in ("prolog", "epilog"):
        path = os.path.join(d, f"{name}.sh")
        with open(path, "w") as f:
            f.write(SITE_SCRIPT.format(d=d, jobs=os.path.join(os.path.dirname(d), "jobs"), gpupart=t.GPUPART,
                                       total=t.SIM_TOTAL, script=os.path.join(t.DEPLOY, "slurm", f"gpupart-{name}.sh")))
        os.chmod(path, 0o755)


def write_conf(d, host):
    conf = os.path.join(d, "slurm.conf")
    ports = free_port(), free_port()
    with open(conf, "w") as f:
        f.write(f"""ClusterName=gpupart-test
SlurmctldHost={host}(127.0.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
ReturnToService=2
MpiDefault=none
Prolog={d}/prolog.sh
Epilog={d}/epilog.sh
PrologFlags=Alloc
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={os.cpu_count()} RealMemory=1000 Gres=gpu:1,shard:4 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    with open(os.path.join(d, "gres.conf"), "w") as f:
        f.write(f"NodeName={host} Name=gpu File=/dev/null\nNodeName={host} Name=shard Count=4 File=/dev/null\n")
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(d, sub))
    return conf


def wait_idle(env, t, deadline=30):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        p = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
        if p.stdout.strip() == "idle":
            return True
        time.sleep(0.2)
    t.check(False, "slurm cluster: the node did not become idle", p.stdout + p.stderr)
    return False


def operator_job(t, d, jobs, base, script):
    """The batch script again with the site's Prolog making the job's operator's ledger
    (a quarter of the GPU, whatever the job's shards say) and its Epilog ending it."""
    open(os.path.join(d, "operator-on"), "w").close()
    log = os.path.join(jobs, "job-operator.out")
    reports, out = t.run_batch(base, jobs, ["sbatch", "--wait", f"--output={log}", script], log, operator=True)
    if len(reports) == 2:
        t.check(all(r["budget"] == t.SIM_TOTAL // 4 for r in reports),
                f"slurm cluster prolog: the steps' budgets {[r['budget'] for r in reports]}, wanted the ledger's", out)
    end = time.monotonic() + 30
    while time.monotonic() < end and any(n.startswith("gpupart-job-") for n in os.listdir(jobs)):
        time.sleep(0.2)
    left = [n for n in os.listdir(jobs) if n.startswith("gpupart-job-")]
    t.check(not left, f"slurm cluster epilog: the job's ledger folder was not removed: {left}")
    os.unlink(os.path.join(d, "operator-on"))
    print("test_deploy: with the site's prolog (the operator's ledger), the job's steps:")
    print("\n".join(l for l in out.splitlines() if l.startswith(("step", "{", "gpupart: warning: device_open"))))


def run(root, t):
    """Runs the batch script under sbatch in the private cluster; t is test_deploy."""
    missing = [p for p in ("slurmctld", "slurmd", "sbatch", "sinfo") if not shutil.which(p)]
    if missing or os.geteuid() != 0:
        print(f"test_deploy: Slurm cluster skipped: {'missing ' + ' '.join(missing) if missing else 'not root'}")
        return
    d = os.path.join(root, "slurm-cluster")
    os.makedirs(d)
    host = socket.gethostname().split(".")[0]
    conf = write_conf(d, host)
    write_site_scripts(d, t)
    env = {**os.environ, "SLURM_CONF": conf}
    logs = [open(os.path.join(d, n), "w") for n in ("slurmctld.log", "slurmd.log")]
    daemons = [subprocess.Popen(["slurmctld", "-D", "-i", "-f", conf], env=env, stdout=logs[0], stderr=subprocess.STDOUT)]
    t.children.extend(daemons)
    time.sleep(1)
    daemons.append(subprocess.Popen(["slurmd", "-D", "-f", conf], env=env, stdout=logs[1], stderr=subprocess.STDOUT))
    t.children.extend(daemons[1:])
    try:
        if not wait_idle(env, t):
            return
        jobs = os.path.join(root, "jobs")
        os.makedirs(jobs)
        os.chmod(root, 0o755)
        script = os.path.join(t.DEPLOY, "slurm", "gpupart-share.sbatch")
        base = t.slurm_env(jobs, {"SLURM_CONF": conf})
        for k in [k for k in base if k.startswith(("SLURM_", "SLURMD_")) and k != "SLURM_CONF"] + \
                 ["CUDA_VISIBLE_DEVICES", "SHIM_DIR"]:
            del base[k]  # Slurm sets these itself
        # Slurm's own srun and scontrol, never the shim's: the steps are Slurm's.
        base["PATH"] = os.pathsep.join(p for p in base["PATH"].split(os.pathsep) if os.path.basename(p) != "shim")
        log = os.path.join(jobs, "job.out")
        reports, out = t.run_batch(base, jobs, ["sbatch", "--wait", f"--output={log}", script], log)
        if len(reports) == 2:
            t.check(all(r["budget"] == t.SIM_TOTAL // 2 for r in reports),
                    f"slurm cluster: --gres=shard:2 of 4: budgets {[r['budget'] for r in reports]}", out)
            t.check("GPUs 0" in out, "slurm cluster: CUDA_VISIBLE_DEVICES was not 0", out)
        operator_job(t, d, jobs, base, script)
        version = subprocess.run(["sbatch", "--version"], env=env, capture_output=True, text=True)
        print(f"test_deploy: the batch script ran under sbatch in a one-node Slurm cluster "
              f"({(version.stdout + version.stderr).strip()}); the job's output:")
        print("\n".join(l for l in out.splitlines() if l.startswith(("step", "{"))))
    finally:
        for p in reversed(daemons):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()
        if t.failures:
            for n in ("slurmctld.log", "slurmd.log"):
                with open(os.path.join(d, n)) as f:
                    print(f"--- {n}\n" + f.read()[-3000:])
