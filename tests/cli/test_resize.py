#!/usr/bin/env python3
"""`gpupart resize` tested as an operator runs it: real processes holding memory in a
shared simulated device (the holder program) and the command changing their ledger from
outside, read back with `gpupart top --json`; exit codes and messages; and the example
controller of deploy/controller/ run against them. Shares test_cli.py's helpers.
Usage: test_resize.py PATH/TO/gpupart PATH/TO/holder"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as t  # noqa: E402

MIB, GIB = t.MIB, t.GIB
CONTROLLER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "controller",
                          "gpupart-grow.py")


def device(h):
    snap = t.top_json(h)
    t.check(len(snap["devices"]) == 1, "one shared device", snap)
    return snap["devices"][0]


def part(h, name):
    return {p["name"]: p for p in device(h)["partitions"]}.get(name, {})


def test_resize_changes_a_partition_without_joining():
    with t.Holders(["train:512:64:100"]) as h:
        members = len(device(h)["members"])
        out, _ = t.expect_rc(["resize", "train", "--limit", "256MiB", "--guarantee", "32MiB"], 0, env=h.env())
        t.check("limit 268435456" in out, "says what it did", out)
        p = part(h, "train")
        t.check(p.get("limit") == 256 * MIB and p.get("guarantee") == 32 * MIB, "the ledger's new figures", p)
        t.check(len(device(h)["members"]) == members, "no member joined")
        t.expect_rc(["resize", "train", "--limit", "50%", "--ledger-dir", h.dir], 0)
        t.check(part(h, "train").get("limit") == 512 * MIB, "a share of the budget")


def test_resize_refuses_a_shrink_below_live_bytes_naming_the_holder():
    with t.Holders(["train:512:0:200"]) as h:
        _, err = t.expect_rc(["resize", "train", "--limit", "100MiB", "--wait", "100"], 3, env=h.env())
        pid = h.procs[0].pid
        t.check(f"pid {pid} (cli_holder)" in err and "nothing was changed" in err, "names the holder", err)
        t.check(part(h, "train").get("limit") == 512 * MIB, "unchanged")


def test_resize_budget():
    with t.Holders(["train:512:128:100"]) as h:
        out, _ = t.expect_rc(["resize", "--budget", "2GiB"], 0, env=h.env())
        t.check(device(h)["budget"] == 2 * GIB, "the new budget")
        t.check("budget 2147483648 bytes" in out and "partition 'train' limit 536870912 bytes, guarantee 134217728 "
                "bytes\n" in out, "says the partitions in bytes keep them", out)
        t.check(part(h, "train").get("limit") == 512 * MIB, "kept")
        _, err = t.expect_rc(["resize", "--budget", "256MiB"], 1, env=h.env())
        t.check("'train' has the limit" in err, "names the partition in the way", err)
        _, err = t.expect_rc(["resize", "--budget", "64MiB"], 1, env=h.env())
        t.check("guarantees would sum to" in err and "'train' 134217728" in err, "the guarantees, named", err)


def test_resize_budget_rescales_the_partitions_given_as_a_share():
    with t.Holders(["half:50%:25%:100", "bytes:64:0:10"]) as h:
        t.check(part(h, "half").get("limit") == 512 * MIB, "50% of 1 GiB")
        out, _ = t.expect_rc(["resize", "--budget", "2GiB"], 0, env=h.env())
        t.check("partition 'half' limit 1073741824 bytes (50% of the budget, follows it), guarantee 536870912 bytes "
                "(25% of the budget, follows it)" in out, "says what each became", out)
        t.check("partition 'bytes' limit 67108864 bytes, guarantee 0 bytes\n" in out, "bytes stay", out)
        p = part(h, "half")
        t.check(p.get("limit") == GIB and p.get("guarantee") == 512 * MIB, "the ledger's figures", p)
        t.check(part(h, "bytes").get("limit") == 64 * MIB, "bytes stay bytes")
        _, err = t.expect_rc(["resize", "--budget", "150MiB", "--wait", "100"], 3, env=h.env())
        pid = h.procs[0].pid
        t.check(f"pid {pid} (cli_holder)" in err and "partition 'half'" in err, "names the holder", err)
        out, _ = t.expect_rc(["resize", "bytes", "--limit", "10%"], 0, env=h.env())
        t.check("partition 'bytes' limit" in out and "(10% of the budget, follows it)" in out,
                "a share given to resize is kept", out)
        t.expect_rc(["resize", "--budget", "1GiB"], 0, env=h.env())
        t.check(part(h, "bytes").get("limit") < 110 * MIB, "and followed", part(h, "bytes"))


def test_the_operator_s_shares_follow_the_budget():
    d = tempfile.mkdtemp(prefix="gpupart-op-")
    try:
        env = t.operator_env(d)  # critical:50%:40%, be:80%:0 of a 1 GiB sim device
        t.expect_rc(["ledger", "create"], 0, env=env)
        out, _ = t.expect_rc(["resize", "--budget", "2GiB"], 0, env=env)
        parts = {p["name"]: p for p in t.top_json(Dir(d))["devices"][0]["partitions"]}
        crit, be = parts["critical"], parts["be"]
        t.check(crit["limit"] == GIB and 800 * MIB < crit["guarantee"] <= 0.4 * 2 * GIB, "50% and 40% of 2 GiB", crit)
        t.check(1600 * MIB < be["limit"] <= 0.8 * 2 * GIB, "80% of 2 GiB", be)
        t.check("partition 'critical' limit 1073741824 bytes (50% of the budget, follows it)" in out, "said", out)
        t.expect_rc(["ledger", "remove"], 0, env=env)
    finally:
        subprocess.run(["rm", "-rf", d])


class Dir:
    """A ledger folder for top_json."""

    def __init__(self, d):
        self.dir = d

    def env(self):
        return {"GPUPART_LEDGER_DIR": self.dir}


def test_a_job_with_the_original_figures_joins_after_a_resize():
    with t.Holders(["train:512:0:100"]) as h:
        t.expect_rc(["resize", "train", "--limit", "300MiB"], 0, env=h.env())
        later = subprocess.Popen([t.HOLDER, h.dir, "1024", "train:512:0:50"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = later.stdout.readline()
        later.stdin.close()
        rc = later.wait(timeout=60)
        t.check(line == "ready\n" and rc == 0, "the later job joined (no EEXIST)", later.stderr.read())


def test_resize_says_hostile_names_without_their_control_bytes():
    esc, nl = "e\x1b[31mred", "nl\nx"
    with t.Holders([f"{esc}:512:0:100", f"{nl}:256:0:1"]) as h:
        out, err = t.expect_rc(["resize", "--budget", "2GiB"], 0, env=h.env())
        t.check("\x1b" not in out + err and "'nl\nx'" not in out, "what it did, without the names' controls", out + err)
        t.check("partition 'e?[31mred' limit 536870912" in out, "the name shown, its escape as '?'", out)
        _, err = t.expect_rc(["resize", "--budget", "128MiB"], 1, env=h.env())
        t.check("\x1b" not in err and "has the limit" in err, "a refusal, without the name's escape", err)
        _, err = t.expect_rc(["resize", esc, "--limit", "1MiB", "--wait", "50"], 3, env=h.env())
        t.check("\x1b" not in err and "nothing was changed" in err, "a shrink refused, without the escape", err)


def test_resize_picks_the_device_and_rejects_bad_usage():
    with t.Holders(["train:512:0:10"]) as h:
        dev = device(h)
        for d in ("0", "sim:0", dev["file"], dev["identity"]):
            t.expect_rc(["resize", "--device", d, "train", "--limit", "400MiB"], 0, env=h.env(), what=f"--device {d}")
        _, err = t.expect_rc(["resize", "--device", "7", "train", "--limit", "1MiB"], 1, env=h.env())
        t.check("no ledgers" in err, "no such device", err)
        _, err = t.expect_rc(["resize", "nope", "--limit", "1MiB"], 1, env=h.env())
        t.check("no partition 'nope'" in err, "no such partition", err)
        _, err = t.expect_rc(["resize", "train", "--limit", "4GiB"], 1, env=h.env())
        t.check("exceeds the device budget" in err, "past the budget", err)
        for bad in (["train"], ["--limit", "1MiB"], ["train", "--limit", "x"], ["train", "--limit", "0"],
                    ["--budget", "1GiB", "train", "--limit", "1MiB"], ["train", "--limit", "1MiB", "--wait", "-1"],
                    ["a", "b", "--limit", "1MiB"], ["--budget", "50%"], ["--device", "", "train", "--limit", "1MiB"]):
            t.expect_rc(["resize", *bad], 2, env=h.env())
    empty = t.Holders()
    with empty:
        _, err = t.expect_rc(["resize", "train", "--limit", "1MiB"], 1, env=empty.env())
        t.check("no shared ledger" in err, "an empty folder", err)


def controller(h, *args):
    return subprocess.run([sys.executable, CONTROLLER, "--gpupart", t.GPUPART, "--ledger-dir", h.dir, "--once", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_example_controller_grows_a_busy_share():
    with t.Holders(["train:256:0:240", "eval:256:0:10"]) as h:
        r = controller(h, "--partition", "train", "--step", "128MiB", "--max", "448MiB")
        t.check(r.returncode == 0 and "grown from 268435456 to 402653184" in r.stdout, "grew train", r.stdout + r.stderr)
        t.check(part(h, "train").get("limit") == 384 * MIB, "train's new limit")
        r = controller(h, "--partition", "train", "--step", "128MiB", "--max", "448MiB")
        t.check(r.returncode == 0 and part(h, "train").get("limit") == 384 * MIB, "not grown: use is low now", r.stdout)
        r = controller(h, "--partition", "eval", "--step", "128MiB", "--shrink", "--min", "64MiB")
        t.check(part(h, "eval").get("limit") == 128 * MIB, "shrunk an idle share", r.stdout + r.stderr)


def main():
    t.GPUPART = os.path.abspath(sys.argv[1])
    t.HOLDER = os.path.abspath(sys.argv[2])
    return t.run_tests(globals())


if __name__ == "__main__":
    sys.exit(main())
