"""A private one-node Slurm cluster for the batch script of deploy/slurm/: slurmctld and
slurmd of Debian's slurm-wlm, started in the foreground by this test, as root, with their
configuration, state and spool in a temporary folder and ports the kernel picks, and
stopped at the end. No munge: auth/none and cred/none, which Slurm 22.05 still has, are
enough for a cluster that only this machine's root can reach. The node declares one GPU
(gres gpu, File=/dev/null: no device is opened, task/none constrains nothing) split into
4 shards, so `--gres=shard:2` gives a job half of it, and Slurm itself sets the job's
SLURM_SHARDS_ON_NODE and CUDA_VISIBLE_DEVICES. The steps' programs run on sim.
Then jobs of two users: two system users and their group are made for the test (where
missing; removed at the end), the site's prolog gets LEDGER_GROUP, and a job of each,
submitted as its user, must meet the other's in the group folder's one ledger.
test_deploy.py --slurm-cluster calls run(); tests/deploy/run starts that."""
import grp
import json
import os
import pwd
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
# With the marker group-on, the site's LEDGER_GROUP: jobs of that group's users share the
# node's group folder's ledger, made with group.ini.
SITE_SCRIPT = """#!/bin/bash
[ -e {d}/operator-on ] || [ -e {d}/group-on ] || exit 0
export LEDGER_BASE={jobs} OPERATOR_INI={d}/operator.ini GPUPART={gpupart} GPUPART_BACKEND=sim GPUPART_SIM_TOTAL={total}
[ -e {d}/group-on ] && export LEDGER_GROUP={group} OPERATOR_INI={d}/group.ini
exec bash {script}
"""


# Two throwaway system users and their group, for jobs of two users in one ledger.
USERS = ("gpupart-ta", "gpupart-tb")
GROUP = "gpupart-share"
# The group folder's operator's ledger: a quarter of the GPU, each user's partition 75% of it,
# so the two partitions' limits add up to more than the budget, which binds across them.
GROUP_INI = """[gpupart]
memory_fraction = 25%
shared = true

[partition ta]
size = 75%

[partition tb]
size = 75%
"""


def write_site_scripts(d, t):
    with open(os.path.join(d, "operator.ini"), "w") as f:
        f.write(t.OPERATOR_INI)
    for name in ("prolog", "epilog"):
        path = os.path.join(d, f"{name}.sh")
        with open(path, "w") as f:
            f.write(SITE_SCRIPT.format(d=d, jobs=os.path.join(os.path.dirname(d), "jobs"), gpupart=t.GPUPART,
                                       total=t.SIM_TOTAL, group=GROUP, script=os.path.join(t.DEPLOY, "slurm", f"gpupart-{name}.sh")))
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


def make_accounts():
    """GROUP and USERS (system users, no home, no login shell, members of GROUP), each made
    only where it is missing (a user that exists is made a member of GROUP where it is
    not); returns what was made, for remove_accounts, and why it could not, if it could not."""
    if os.geteuid() != 0:
        return [], "not root"
    missing = [c for c in ("groupadd", "useradd", "usermod", "gpasswd", "userdel", "groupdel", "runuser")
               if not shutil.which(c)]
    if missing:
        return [], "missing " + " ".join(missing)
    made = []
    try:
        try:
            grp.getgrnam(GROUP)
        except KeyError:
            subprocess.run(["groupadd", "--system", GROUP], check=True, capture_output=True)
            made.append(("group", GROUP))
        for user in USERS:
            try:
                pwd.getpwnam(user)
            except KeyError:
                subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
                                "/usr/sbin/nologin", "--groups", GROUP, user], check=True, capture_output=True)
                made.append(("user", user))
                continue
            if user not in grp.getgrnam(GROUP).gr_mem:
                subprocess.run(["usermod", "--append", "--groups", GROUP, user], check=True, capture_output=True)
                made.append(("member", user))
    except subprocess.CalledProcessError as e:
        remove_accounts(made)
        return [], f"{' '.join(e.cmd)}: {e.stderr.decode(errors='replace').strip()}"
    return made, None


def remove_accounts(made):
    for kind, name in reversed(made):
        argv = {"user": ["userdel", name], "group": ["groupdel", name], "member": ["gpasswd", "--delete", name, GROUP]}
        p = subprocess.run(argv[kind], capture_output=True, text=True)
        if p.returncode:
            print(f"test_deploy: could not remove the {kind} {name} this test made: {p.stderr.strip()}")


def job_state(env, job):
    """The job's state and exit code as Slurm has them (scontrol show job)."""
    p = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True)
    fields = dict(f.split("=", 1) for f in p.stdout.split() if "=" in f)
    return fields.get("JobState", "gone"), fields.get("ExitCode")


def wait_report(log, env, job, deadline=60):
    """The job's JSON report (and its other lines) once its program printed it."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and job_state(env, job)[0] in ("PENDING", "CONFIGURING", "RUNNING"):
        try:
            with open(log) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        reports = [json.loads(l) for l in lines if l.startswith('{"budget"')]
        if reports:
            return reports[0], lines
        time.sleep(0.05)
    return None, []


def uid_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("Uid:"))
    except (OSError, StopIteration):
        return None


def check_group_ledger(t, folder, reports, lines):
    """One ledger in the group folder, the group's (0660), with the operator and one live
    member of each user; the second user's request past the budget refused naming the
    first user's process."""
    if not t.check(os.path.isdir(folder), f"slurm two users: no group folder {folder}"):
        return
    st = os.stat(folder)
    gid = grp.getgrnam(GROUP).gr_gid
    t.check(st.st_mode & 0o7777 == 0o2770 and st.st_gid == gid and st.st_uid == 0,
            f"slurm two users: the group folder is {oct(st.st_mode)} {st.st_uid}:{st.st_gid}, wanted 2770 root:{GROUP}")
    names = [n for n in os.listdir(folder) if n.endswith(".ledger")]
    if t.check(len(names) == 1, f"slurm two users: ledgers in the group folder: {names}"):
        st = os.stat(os.path.join(folder, names[0]))
        t.check(st.st_mode & 0o777 == 0o660 and st.st_gid == gid, f"slurm two users: the ledger {oct(st.st_mode)} gid {st.st_gid}")
    devices = t.top(folder)["devices"]
    if not t.check(len(devices) == 1, f"slurm two users: {len(devices)} ledgers in gpupart top", json.dumps(devices)):
        return
    dev = devices[0]
    uids = {pwd.getpwnam(u).pw_uid: u for u in USERS}
    live = {uids.get(uid_of(m["pid"])): m["pid"] for m in dev["members"] if m["alive"] and m["pid"] > 0}
    t.check(set(live) == set(USERS) and len(dev["members"]) == 3,
            f"slurm two users: the ledger's members {dev['members']}, wanted the operator and one of each of {USERS}")
    holders = {(sh["partition"], sh["pid"]) for sh in dev.get("shares", []) if sh["reserved"]}
    t.check(holders == {("ta", live.get(USERS[0])), ("tb", live.get(USERS[1]))},
            f"slurm two users: who holds bytes {holders}, wanted ta {USERS[0]}'s and tb {USERS[1]}'s", json.dumps(dev))
    reserved = {p["name"]: p["reserved"] for p in dev["partitions"]}
    t.check(reserved.get("ta", 0) >= 2048 * t.MIB and reserved.get("tb", 0) >= 512 * t.MIB
            and sum(reserved.values()) <= dev["budget"] == t.grain(t.SIM_TOTAL // 4),
            f"slurm two users: partitions hold {reserved} of budget {dev['budget']}", json.dumps(dev))
    ask = [l for l in lines if l.startswith("ask ")]
    first = live.get(USERS[0])
    t.check(len(ask) == 1 and ask[0].startswith("ask GPUPART_ELIMIT: ") and "the device budget" in ask[0]
            and f"pid {first} (deploy_job)" in ask[0],
            f"slurm two users: {USERS[1]}'s request past the shared budget, wanted refused naming {USERS[0]}'s pid {first}",
            "\n".join(lines))
    t.check(all(r["budget"] == dev["budget"] for r in reports), f"slurm two users: budgets {[r['budget'] for r in reports]}")
    print("test_deploy: two users' jobs in the group folder's ledger under Slurm:")
    print("\n".join(f"  {u} pid {live.get(u)}" for u in USERS) + "\n  " + "\n  ".join(ask))


def two_users(t, d, jobs, conf):
    """A job of each of two users, run by Slurm as those users, with the site's prolog in
    group mode (LEDGER_GROUP): both programs meet in the group folder's operator's ledger and
    its budget binds across them."""
    made, why = make_accounts()
    if why:
        print(f"test_deploy: jobs of two users SKIPPED: cannot make the users and group: {why}")
        return
    try:
        two_user_jobs(t, d, jobs, conf)
    finally:
        remove_accounts(made)


def two_user_jobs(t, d, jobs, conf):
    bindir, out = os.path.join(d, "bin"), os.path.join(jobs, "users")
    os.makedirs(bindir)
    os.makedirs(out)
    for path in (d, jobs, bindir, conf, os.path.join(d, "gres.conf")):  # the users read them, whatever the umask
        os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    os.chmod(out, 0o1777)  # the jobs' outputs, written as their users
    # deploy_job and its libgpupart where the users can run them, whatever the build folder's
    # modes (the library found through the job's LD_LIBRARY_PATH before the RUNPATH)
    linked = subprocess.run(["ldd", t.JOB], capture_output=True, text=True).stdout.splitlines()
    for path in [t.JOB] + [l.split("=>")[1].split("(")[0].strip() for l in linked if "libgpupart" in l and "=>" in l]:
        os.chmod(shutil.copy(path, bindir), 0o755)
    job = os.path.join(bindir, os.path.basename(t.JOB))
    with open(os.path.join(d, "group.ini"), "w") as f:
        f.write(GROUP_INI)
    open(os.path.join(d, "group-on"), "w").close()
    folder = os.path.join(jobs, f"gpupart-group-{GROUP}")
    release = os.path.join(out, "release")
    env = t.clean_env({"SLURM_CONF": conf, "GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": str(t.SIM_TOTAL),
                       "GPUPART_SHARED": "1", "GPUPART_LEDGER_DIR": folder, "LD_LIBRARY_PATH": bindir})
    ids, reports, lines = [], [], []
    try:
        for user, part, args in ((USERS[0], "ta", f"2048 {release}"), (USERS[1], "tb", f"512 {release} 2048")):
            log = os.path.join(out, f"{user}.out")
            # Not sbatch --wait, which polls the job every 2 s, then 8 s: scontrol, below.
            p = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", f"--output={log}", f"--chdir={out}",
                                "--ntasks=1", "--gres=shard:2", f"--export=ALL,GPUPART_PARTITIONS={part}:75%",
                                f"--wrap=exec {job} {args}"], env=env, capture_output=True, text=True, timeout=60)
            if not t.check(p.returncode == 0, f"slurm two users: {user}'s sbatch exit {p.returncode}", p.stdout + p.stderr):
                return
            ids.append(p.stdout.strip().split(";")[0])
            report, lines = wait_report(log, env, ids[-1])
            if not t.check(report is not None, f"slurm two users: {user}'s job did not report", "\n".join(lines)):
                return
            reports.append(report)
        check_group_ledger(t, folder, reports, lines)
    finally:
        open(release, "w").close()
        end = time.monotonic() + 60
        for job_id in ids:
            while time.monotonic() < end and job_state(env, job_id)[0] in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                time.sleep(0.1)
            state = job_state(env, job_id)
            t.check(state == ("COMPLETED", "0:0"), f"slurm two users: job {job_id} ended {state}")
        os.unlink(os.path.join(d, "group-on"))


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
        two_users(t, d, jobs, conf)
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
