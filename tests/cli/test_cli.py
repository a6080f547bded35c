#!/usr/bin/env python3
"""The gpupart command tested as users run it: real processes, real environment variables
and files, exit codes, JSON parsed (duplicate keys rejected), and error messages that name
the file and line. gpupart top, metrics and exporter are run against real processes that hold memory in a
shared simulated device (the holder program) with a temporary ledger folder.
Usage: test_cli.py PATH/TO/gpupart PATH/TO/holder"""
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat as stat_mod
import struct
import subprocess
import sys
import tempfile
import time
import types

GIB = 1 << 30
MIB = 1 << 20
failures = []


def run(*args, env=None):
    base = {k: v for k, v in os.environ.items()
            if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith(("GPUPART_", "CUDA_DEVICE_MEMORY_LIMIT", "SLURM_SHARD_MEM_PER_GPU",
                                 "HIP_DEVICE_MEMORY_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPU_PORTION"))}
    base.update(env or {})
    p = subprocess.run([GPUPART, *args], env=base, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ValueError(f"duplicate JSON keys {sorted(dup)}")
    return dict(pairs)


def parse_json(text):
    return json.loads(text, object_pairs_hook=no_duplicates)


def check(cond, what, detail=""):
    if not cond:
        failures.append(f"{what}\n{detail}")


def expect_rc(args, rc_wanted, env=None, what=None):
    rc, out, err = run(*args, env=env)
    check(rc == rc_wanted, f"{what or ' '.join(args)}: exit {rc}, wanted {rc_wanted}", f"stdout:\n{out}\nstderr:\n{err}")
    return out, err


def write_file(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False)
    f.write(text)
    f.close()
    return f.name


def test_version_and_help():
    out, _ = expect_rc(["--version"], 0)
    check(re.match(r"gpupart \d+\.\d+\.\d+ \(library \d+\.\d+\.\d+\)", out), "--version format", out)
    check("sim" in out, "--version lists the backends built", out)
    out, _ = expect_rc(["--help"], 0)
    for word in ("devices", "config", "check-config", "exit status", "GPUPART_CONFIG"):
        check(word in out, f"--help mentions {word}", out)
    for cmd in ("devices", "config", "check-config", "top", "metrics", "exporter", "tune"):
        out, _ = expect_rc([cmd, "--help"], 0)
        check(out.startswith(f"usage: gpupart {cmd}"), f"{cmd} --help", out)


def test_bad_usage_is_exit_2():
    expect_rc([], 2, what="no command")
    _, err = expect_rc(["frobnicate"], 2)
    check("unknown command 'frobnicate'" in err, "unknown command message", err)
    expect_rc(["devices", "--bogus"], 2)
    _, err = expect_rc(["devices", "--backend", "nosuch"], 2)
    check("unknown backend 'nosuch'" in err, "unknown backend message", err)
    expect_rc(["devices", "--backend"], 2, what="devices --backend without a value")
    expect_rc(["config", "--device", "gpu:0"], 2)
    expect_rc(["config", "extra"], 2)
    expect_rc(["check-config"], 2)
    expect_rc(["check-config", "a.ini", "b.ini"], 2)
    expect_rc(["check-config", "--strict"], 2)


def test_devices():
    out, _ = expect_rc(["devices", "--backend", "sim", "--json"], 0)
    devices = parse_json(out)["devices"]
    check(len(devices) == 1, "one sim device", out)
    d = devices[0]
    for key in ("backend", "index", "name", "vendor", "total", "free", "max_block", "block_granularity", "uuid",
                "pci_bus_id"):
        check(key in d, f"devices --json has {key}", out)
    check(d["backend"] == "sim" and d["index"] == 0 and d["total"] == 16 * GIB, "sim device fields", out)
    check(re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", d["uuid"] or ""), "the sim device's UUID", out)
    check(d["pci_bus_id"] is None, "sim has no PCI address", out)
    out, _ = expect_rc(["devices", "--backend=sim"], 0)
    check(out.splitlines()[0].split()[:3] == ["BACKEND", "INDEX", "NAME"], "devices table header", out)
    check(out.splitlines()[0].split()[-2:] == ["UUID", "PCI"], "the identity columns", out)
    check(re.search(r"^sim\s+0\s+gpupart simulated device", out, re.M), "devices table row", out)
    check(re.search(r"00000000-0000-0000-0000-00000000005a -$", out, re.M), "the sim row's UUID and PCI", out)


def test_devices_of_every_backend_present():
    rc, out, err = run("devices", "--json")
    devices = parse_json(out)["devices"]
    check(rc == (0 if devices else 1), f"devices exits {rc} with {len(devices)} devices", err)
    check(all(d["backend"] != "sim" for d in devices), "sim is listed only when named", out)
    if not devices:
        check("no device found" in err, "devices says none were found", err)


def test_devices_of_every_backend_leave_nothing_for_leak_sanitizer():
    """In a sanitizer build, LeakSanitizer runs at exit: with no suppression file, as a user
    runs the command, it must find nothing. A driver that a loader unloaded (lavapipe, with
    the last Vulkan instance) used to leave an allocation of an "unknown module" and, on
    some machines, a dangling dynamic-TLS entry that killed LeakSanitizer's tracer; gpupart
    keeps what its backends load loaded (core/base/pin.c). In other builds this is one more run."""
    for extra in ({}, {"LSAN_OPTIONS": "use_tls=0"}):
        env = dict(extra) if extra else {"LSAN_OPTIONS": ""}
        rc, out, err = run("devices", env=env)
        check(rc in (0, 1) and "LeakSanitizer" not in err and "Sanitizer" not in err,
              f"gpupart devices with LSAN_OPTIONS={env['LSAN_OPTIONS']!r}: exit {rc}", err[-3000:])


def test_config_json_from_the_environment():
    env = {"GPUPART_MEMORY_FRACTION": "50%", "GPUPART_PARTITIONS": "train:60%:40%,eval:30%,scratch:256MiB"}
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
    c = parse_json(out)
    budget = 8 * GIB
    check(c["backend"] == "sim" and c["index"] == 0 and c["budget"] == budget, "config backend/index/budget", out)
    check(c["memory_fraction"] == 0.5 and c["granularity"] == 2 * MIB and c["allow_growth"] is True,
          "config options", out)
    check(c["memory_limit"] is None and c["release_threshold"] is None, "none is null", out)
    src = c["sources"]
    check(src["memory_fraction"] == "GPUPART_MEMORY_FRACTION" and src["granularity"] == "default", "sources", out)
    check(src["backend"] == "descriptor" and src["index"] == "descriptor", "--device is the descriptor", out)
    parts = c["partitions"]
    check([p["name"] for p in parts] == ["train", "eval", "scratch"], "partition order", out)
    share = lambda f: int(budget * f) & ~(2 * MIB - 1)
    check(parts[0]["limit"] == share(0.6) and parts[0]["guarantee"] == share(0.4), "train limit/guarantee", out)
    check(parts[1]["limit"] == share(0.3) and parts[1]["guarantee"] == 0, "eval", out)
    check(parts[2]["limit"] == 256 * MIB, "scratch", out)
    check(all(p["source"] == "GPUPART_PARTITIONS" for p in parts), "partition sources", out)


def test_config_says_whether_expandable_partitions_can_be_had():
    env = {"GPUPART_EXPANDABLE": "sim:0=1"}
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
    c = parse_json(out)
    check(c["expandable"] is True and c["sources"]["expandable"] == "GPUPART_EXPANDABLE", "expandable per device", out)
    vm = c["virtual_memory"]
    check(vm["supported"] is True and vm["granule"] == 2 * MIB and vm["why"] == "", "sim emulates it", out)
    out, _ = expect_rc(["config", "--device", "sim:0"], 0, env=env)
    check("virtual memory: yes, granule 2097152 bytes" in out, "the text says so", out)
    rc, out, err = run("config", "--device", "opencl:0")
    if rc == 0:
        check("virtual memory: no" in out and "expandable partitions keep growth blocks" in out,
              "OpenCL has none, and config says so", out)


def test_config_shows_the_block_options_with_their_sources():
    env = {"GPUPART_PREALLOC_BLOCK": "64MiB", "GPUPART_INITIAL_BLOCK": "4MiB", "GPUPART_GROWTH_FACTOR": "1.5",
           "GPUPART_MAX_BLOCK": "sim:0=256MiB,sim:1=8MiB"}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.ini")
        with open(path, "w") as f:
            f.write("[gpupart]\nmax_block = 512MiB\n[device sim:0]\n\ngrowth_factor = 3\n")
        env["GPUPART_CONFIG"] = path
        out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
        c = parse_json(out)
        want = {"prealloc_block": (64 * MIB, "GPUPART_PREALLOC_BLOCK"), "initial_block": (4 * MIB, "GPUPART_INITIAL_BLOCK"),
                "max_block": (256 * MIB, "GPUPART_MAX_BLOCK"), "growth_factor": (1.5, "GPUPART_GROWTH_FACTOR")}
        for key, (value, source) in want.items():
            check(c.get(key) == value and c["sources"].get(key) == source, f"config --json shows {key}", out)
        out, _ = expect_rc(["config", "--device", "sim:0"], 0, env=env)
        for key, (value, source) in want.items():
            shown = value if isinstance(value, int) else f"{value:g}"
            check(re.search(rf"^{key}\s+{shown}\s+{source}$", out, re.M), f"config shows {key}", out)
        del env["GPUPART_GROWTH_FACTOR"], env["GPUPART_PREALLOC_BLOCK"]
        out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
        c = parse_json(out)
        check(c["growth_factor"] == 3 and c["sources"]["growth_factor"] == f"{path}:5", "the file's [device]", out)
        check(c["prealloc_block"] is None and c["sources"]["prealloc_block"] == "default", "none is null", out)
        out, _ = expect_rc(["config", "--device", "sim:2", "--json"], 0, env=env)
        check(parse_json(out)["max_block"] == 512 * MIB, "the file's [gpupart] for a device the variable leaves out",
              out)
    _, err = expect_rc(["config", "--device", "sim:0"], 1, env={"GPUPART_GROWTH_FACTOR": "0.5"})
    check("GPUPART_GROWTH_FACTOR: '0.5' is below 1" in err, "a bad growth factor is named", err)


def test_config_shows_every_option_of_the_table():
    out, _ = expect_rc(["config", "--device", "sim:0"], 0)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "configuration.md")) as f:
        keys = re.findall(r"^\| `GPUPART_[A-Z_]+` \| `([a-z_]+)` \|", f.read(), re.M)
    check(len(keys) > 15, "configuration.md's table of variables and keys", keys)
    for key in keys:
        check(re.search(rf"^{key}\s", out, re.M), f"gpupart config shows {key}", out)


def test_the_migration_rows_that_preallocate_work_as_printed():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "configuration.md")) as f:
        doc = f.read()
    table = doc.split("## Migrating from TensorFlow, PyTorch and JAX", 1)[1].split("\n\n", 2)[1]
    rows = [r for r in table.splitlines() if "GPUPART_ALLOW_GROWTH=false" in r and "GPUPART_PARTITIONS" in r]
    check(any(r.startswith("| TensorFlow's default") for r in rows), "the TensorFlow default row preallocates", table)
    for row in rows:
        code = re.search(r"\| `(GPUPART_[^`]*)`", row).group(1)
        env = dict(a.split("=", 1) for a in shlex.split(code))
        budget = 1 * GIB if "GPUPART_MEMORY_FRACTION" not in env else None
        out, err = expect_rc(["config", "--json"], 0, env={**env, "GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": "1GiB"},
                             what=f"gpupart config under {code}")
        c = parse_json(out)
        parts = c["partitions"]
        check(len(parts) == 1 and parts[0]["allow_growth"] is False, f"{code}: one preallocated partition", out)
        check(parts and parts[0]["limit"] == c["budget"] == parts[0]["reserved"] and
              (budget is None or c["budget"] == budget), f"{code}: the whole budget is taken at open", out)
    out, err = expect_rc(["config"], 0, env={"GPUPART_ALLOW_GROWTH": "false", "GPUPART_BACKEND": "sim"})
    check("partitions: none configured (allow_growth = false: each partition the program creates takes its limit "
          "then; nothing is taken before)" in out, "allow_growth = false alone is explained", out)


def test_the_command_shows_the_trace_option_but_never_records_one_of_its_own():
    folder = tempfile.mkdtemp(prefix="gpupart-cli-trace-")
    trace = os.path.join(folder, "app.ops")
    env = {"GPUPART_TRACE": trace}
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
    c = parse_json(out)
    check(c["trace"] == trace and c["sources"]["trace"] == "GPUPART_TRACE", "config shows the trace option", out)
    expect_rc(["devices", "--backend=sim"], 0, env=env)
    check(os.listdir(folder) == [], f"the command wrote no trace: {os.listdir(folder)}")
    shutil.rmtree(folder)


def test_config_names_file_lines():
    path = write_file("[gpupart]\nbackend = sim\nmemory_fraction = 25%\n\n"
                      "[partition train]\nsize = 50%\nguarantee = 1GiB\n")
    try:
        out, _ = expect_rc(["config", "--json"], 0, env={"GPUPART_CONFIG": path})
        c = parse_json(out)
        check(c["budget"] == 4 * GIB, "budget from the file", out)
        check(c["sources"]["memory_fraction"] == f"{path}:3", "value source is FILE:LINE", out)
        check(c["sources"]["backend"] == f"{path}:2", "backend source", out)
        check(c["sources"]["config"] == "GPUPART_CONFIG", "config source", out)
        check(c["partitions"] == [{"name": "train", "limit": 2 * GIB, "guarantee": GIB, "allow_growth": True,
                                   "reserved": 0, "source": f"{path}:5"}], "partition from the file", out)
        out, _ = expect_rc(["config"], 0, env={"GPUPART_CONFIG": path})
        check(re.search(r"^memory_fraction\s+0.25\s+" + re.escape(f"{path}:3") + "$", out, re.M), "text output", out)
        check(re.search(r"^budget\s+4294967296 bytes \(4 GiB\)", out, re.M), "text budget", out)
        check(re.search(r"^train\s+2147483648\s+1073741824\s+on\s+" + re.escape(f"{path}:5"), out, re.M),
              "text partition row", out)
    finally:
        os.unlink(path)


def test_config_errors_are_exit_1_naming_file_and_line():
    path = write_file("[gpupart]\nbackend = sim\nmemroy_fraction = 50%\n")
    try:
        _, err = expect_rc(["config"], 1, env={"GPUPART_CONFIG": path})
        check(f"{path}:3: unknown key 'memroy_fraction'" in err, "config names FILE:LINE and key", err)
        _, err = expect_rc(["devices", "--backend", "sim"], 1, env={"GPUPART_CONFIG": path})
        check(f"{path}:3:" in err, "devices also refuses a bad configuration", err)
    finally:
        os.unlink(path)
    _, err = expect_rc(["config", "--device", "sim:0"], 1, env={"GPUPART_MEMORY_FRACTION": "150%"})
    check("GPUPART_MEMORY_FRACTION: '150%' is above 100%" in err, "variable errors name the variable", err)
    _, err = expect_rc(["config", "--device", "sim:0"], 1,
                       env={"GPUPART_SHARED": "1", "GPUPART_LEDGER_DIR": "/nonexistent-gpupart-dir"})
    check("/nonexistent-gpupart-dir" in err, "a shared ledger that cannot be opened names its folder", err)
    _, err = expect_rc(["config", "--device", "sim:0"], 1,
                       env={"GPUPART_PARTITIONS": "a:60%:60%,b:60%:60%"})
    check("GPUPART_PARTITIONS: partition 'b'" in err and "GPUPART_ECONFIG" in err, "partition error", err)


def test_config_device_selection():
    env = {"GPUPART_BACKEND": "sim", "GPUPART_DEVICE": "2"}
    out, _ = expect_rc(["config", "--json"], 0, env=env)
    c = parse_json(out)
    check(c["index"] == 2 and c["sources"]["index"] == "GPUPART_DEVICE", "GPUPART_DEVICE picks the index", out)
    check(c["sources"]["backend"] == "GPUPART_BACKEND", "GPUPART_BACKEND is the source", out)
    out, _ = expect_rc(["config", "--json", "--device", "sim:0"], 0, env=env)
    check(parse_json(out)["index"] == 0, "--device sim:0 means index 0 even with GPUPART_DEVICE", out)
    rc, _, _ = run("devices", "--backend", "cuda")
    if rc != 0:
        expect_rc(["config", "--device", "cuda:0"], 1, what="config on a missing backend")


def test_check_config():
    good = write_file("[gpupart]\nbackend = cuda, vulkan, opencl\nmemory_fraction = 90%\n\n"
                      "[device cuda:0]\nmemory_fraction = 50%\nallow_growth = false\n\n"
                      "[partition train]\ndevice = cuda:0 ; comment\nsize = 60%\nguarantee = 40%\n")
    bad = write_file("[gpupart]\nmemroy_fraction = 50%\ngranularity = 3MiB\n[partiton x]\nsize = 1\n"
                     "[partition y]\nguarantee = 10%\n")
    try:
        out, _ = expect_rc(["check-config", good], 0)
        check(re.fullmatch(re.escape(good) + r": ok( \(\d warnings? about this machine\))?", out.strip()),
              "check-config ok line", out)
        _, err = expect_rc(["check-config", bad], 1)
        lines = [l for l in err.splitlines() if re.match(re.escape(bad) + r":\d+: ", l)]
        check(len(lines) == 4, f"check-config reports 4 FILE:LINE lines, got {len(lines)}", err)
        for n, text in ((2, "unknown key 'memroy_fraction'"), (3, "not a power of two"),
                        (4, "unknown section [partiton x]"), (6, "[partition y] has no size")):
            check(any(l.startswith(f"{bad}:{n}: ") and text in l for l in lines), f"line {n}: {text}", err)
        check(f"{bad}: 4 errors" in err, "error count", err)
    finally:
        os.unlink(good)
        os.unlink(bad)
    _, err = expect_rc(["check-config", "/nonexistent/gpupart.ini"], 1)
    check("/nonexistent/gpupart.ini" in err and "No such file" in err, "unreadable file", err)


def cuda_device_0():
    """Whether this machine has cuda:0 (the CUDA backend built and a device found)."""
    rc, out, _ = run("devices", "--backend", "cuda", "--json")
    return rc == 0 and any(d["index"] == 0 for d in parse_json(out)["devices"])


def test_check_config_and_config_warn_of_devices_this_machine_lacks():
    text = ("[gpupart]\nbackend = cuda, sim\ncuda_library = /nonexistent/libcuda.so.1\n\n"
            "[device cuda:0]\nheadroom = 1MiB\n\n[device sim:5]\nheadroom = 2MiB\n\n[device 40]\nheadroom = 3MiB\n\n"
            "[partition train]\ndevice = cuda:1\nsize = 50%\n\n[partition here]\ndevice = sim:0\nsize = 10%\n")
    path = write_file(text)
    try:
        out, err = expect_rc(["check-config", path], 0)
        check(out.strip() == f"{path}: ok (2 warnings about this machine)", "the file is still ok", out)
        check(re.search(re.escape(path) + r":6: warning: \[device cuda:0\] can never apply on this machine: cuda: ", err),
              "the [device cuda:0] section, at its first value's line", err)
        check(re.search(re.escape(path) + r":14: warning: partition 'train' on cuda:1 can never apply", err),
              "the partition on cuda:1, at its section's line", err)
        check("sim:5" not in err and "[device 40]" not in err and "'here'" not in err,
              "sim opens any index it is named with (the list names sim)", err)
        out, err = expect_rc(["config", "--device", "sim:0", "--json"], 0, env={"GPUPART_CONFIG": path})
        never = parse_json(out)["never_applies"]
        check([(n["source"], n["device"], n["what"]) for n in never] ==
              [(f"{path}:6", "cuda:0", "[device cuda:0]"), (f"{path}:14", "cuda:1", "partition 'train' on cuda:1")],
              "config --json lists what never applies", out)
        check(all(n["why"].startswith("cuda: ") for n in never), "and why", out)
        check(err.count("can never apply on this machine") == 2 and
              f"gpupart: warning: [device cuda:0] ({path}:6) can never apply on this machine: cuda: " in err,
              "config warns on stderr, once for each", err)
    finally:
        os.unlink(path)
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0,
                       env={"GPUPART_HEADROOM": "1MiB,40=2MiB", "GPUPART_BACKEND": "sim"})
    check(parse_json(out)["never_applies"] == [], "an index alone: sim named in the list opens any index", out)
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env={"GPUPART_HEADROOM": "1MiB,40=2MiB"})
    never = parse_json(out)["never_applies"]
    check(len(never) == 1 and never[0]["what"] == "GPUPART_HEADROOM's entry 40" and
          never[0]["source"] == "GPUPART_HEADROOM" and never[0]["why"].startswith("no backend has a device 40 (") and
          "sim: 1 device" in never[0]["why"], "an index alone that no backend the open would try has", out)


def test_configuration_md_ini_examples_say_when_cuda_0_is_missing():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "configuration.md")) as f:
        examples = re.findall(r"^```ini\n(.*?)^```", f.read(), re.S | re.M)
    check(len(examples) == 2, "configuration.md has two INI examples", examples)
    missing = not cuda_device_0()
    for text in examples:
        path = write_file(text)
        try:
            out, err = expect_rc(["check-config", path], 0)
            lines = text.splitlines()
            cuda_lines = [i + 1 for i, l in enumerate(lines) if "cuda:0" in l]
            warned = re.findall(re.escape(path) + r":(\d+): warning: (.*) can never apply on this machine: cuda: ", err)
            check(bool(warned) == missing, f"check-config warns about cuda:0 exactly when it is missing here", err)
            check(all(int(n) > min(cuda_lines) for n, _ in warned), "at the lines of the cuda:0 sections", err)
        finally:
            os.unlink(path)


def test_check_config_sums_guarantees_per_device():
    over = write_file("[partition a]\nsize = 60%\nguarantee = 60%\n\n[partition b]\nsize = 60%\nguarantee = 60%\n")
    full = write_file("[partition a]\nsize = 100%\nguarantee = 100%\n[partition b]\nsize = 5GiB\nguarantee = 1GiB\n")
    fits = write_file("[partition a]\nsize = 60%\nguarantee = 40%\n[partition b]\nsize = 60%\nguarantee = 60%\n"
                      "[partition c]\ndevice = opencl:1\nsize = 90%\nguarantee = 90%\n")
    try:
        _, err = expect_rc(["check-config", over], 1)
        check(f"{over}:5: partition 'b'" in err and "add up to more than the budget" in err, "60% + 60%", err)
        _, err = expect_rc(["check-config", full], 1)
        check(f"{full}:4: partition 'b'" in err, "100% plus bytes", err)
        expect_rc(["check-config", fits], 0)
    finally:
        for f in (over, full, fits):
            os.unlink(f)


def test_check_config_judges_the_file_as_a_whole():
    never = write_file("[gpupart]\nbackend = vulkan, opencl\n\n[device cuda:0]\nmemory_fraction = 50%\n")
    written_three_ways = write_file("[partition a]\nsize = 50%\nguarantee = 40%\n[partition b]\ndevice = 0\n"
                                    "size = 50%\nguarantee = 40%\n[partition c]\ndevice = sim:0\nsize = 50%\n"
                                    "guarantee = 40%\n")
    prealloc = write_file("[gpupart]\nallow_growth = false\n[partition a]\nsize = 70%\n[partition b]\nsize = 70%\n")
    tail = write_file("[gpupart] headroom = 1GiB\n")
    cr_only = write_file("[gpupart]\rmemroy_fraction = 50%\r")
    try:
        _, err = expect_rc(["check-config", never], 1)
        check(f"{never}:5:" in err and "can never apply" in err, "a section for an excluded backend", err)
        _, err = expect_rc(["check-config", written_three_ways], 1)
        check(f"{written_three_ways}:8: partition 'c'" in err, "one device written three ways", err)
        _, err = expect_rc(["check-config", prealloc], 1)
        check("preallocated" in err, "preallocated sizes past 100%", err)
        _, err = expect_rc(["check-config", tail], 1)
        check(f"{tail}:1: text after ']'" in err, "text after ]", err)
        _, err = expect_rc(["check-config", cr_only], 1)
        check(f"{cr_only}:2: unknown key 'memroy_fraction'" in err, "CR-only line endings", err)
    finally:
        for f in (never, written_three_ways, prealloc, tail, cr_only):
            os.unlink(f)


def test_a_fifo_is_refused_not_waited_on():
    d = tempfile.mkdtemp()
    fifo = os.path.join(d, "gpupart.ini")
    os.mkfifo(fifo)
    try:
        _, err = expect_rc(["check-config", fifo], 1)
        check("FIFO, not a regular file" in err, "check-config on a FIFO", err)
        _, err = expect_rc(["config", "--device", "sim:0"], 1, env={"GPUPART_CONFIG": fifo})
        check("GPUPART_CONFIG: cannot read" in err and "FIFO" in err, "GPUPART_CONFIG on a FIFO", err)
    finally:
        os.unlink(fifo)
        os.rmdir(d)


def test_config_json_escapes_bytes_that_are_not_utf8():
    d = tempfile.mkdtemp()
    path = os.path.join(os.fsencode(d), b"caf\xe9.ini")
    with open(path, "w") as f:
        f.write("[gpupart]\nbackend = sim\n")
    env = {k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")}
    env = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    env[b"GPUPART_CONFIG"] = path
    try:
        p = subprocess.run([GPUPART, "config", "--json"], env=env, capture_output=True, timeout=120)
        check(p.returncode == 0, "config with a Latin-1 path", p.stderr)
        try:
            c = parse_json(p.stdout.decode("utf-8"))  # strict: raises on a bad byte
            check(c["sources"]["backend"].endswith("caf\ufffd.ini:2"), "the bad byte is U+FFFD", p.stdout)
        except (UnicodeDecodeError, ValueError) as e:
            check(False, f"config --json is strict UTF-8 JSON: {e}", repr(p.stdout))
    finally:
        os.unlink(path)
        os.rmdir(d)


def test_config_reports_other_frameworks_variables():
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
    seen = {f["name"]: f for f in parse_json(out)["other_frameworks"]}
    check(seen.get("TF_FORCE_GPU_ALLOW_GROWTH", {}).get("equivalent") == "GPUPART_ALLOW_GROWTH=true", "TF", out)
    check(seen.get("XLA_PYTHON_CLIENT_PREALLOCATE", {}).get("equivalent") == "GPUPART_ALLOW_GROWTH=true", "JAX", out)
    check("PYTORCH_CUDA_ALLOC_CONF" in seen and not any(f["applied"] for f in seen.values()), "PyTorch", out)
    out, _ = expect_rc(["config", "--device", "sim:0"], 0, env=env)
    check("TF_FORCE_GPU_ALLOW_GROWTH=true  ->  GPUPART_ALLOW_GROWTH=true" in out, "text output", out)
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0)
    check(parse_json(out)["other_frameworks"] == [], "none seen", out)


def test_config_shows_ceilings_and_orchestrator_shares():
    env = {"GPUPART_MEMORY_FRACTION": "0.9", "GPUPART_MEMORY_FRACTION_MAX": "50%",
           "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m", "CUDA_DEVICE_MEMORY_LIMIT": "lots",
           "SLURM_SHARD_MEM_PER_GPU": "0000:3b:00.0=2048M"}
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
    c = parse_json(out)
    check(c["budget"] == 4 << 30 and c["sources"]["memory_limit"] == "CUDA_DEVICE_MEMORY_LIMIT_0", "HAMi applied", out)
    check(c["clipped"] == {"memory_fraction": {"asked": 0.9, "source": "GPUPART_MEMORY_FRACTION"}}, "clipped", out)
    shares = c["orchestrator"]["shares"]
    check([(s["source"], s["applied"]) for s in shares] ==
          [("CUDA_DEVICE_MEMORY_LIMIT_0", True), ("SLURM_SHARD_MEM_PER_GPU", False)], "shares", out)
    check(len(c["orchestrator"]["ignored"]) == 1 and "'lots' is not an amount" in c["orchestrator"]["ignored"][0],
          "garbage is reported, not applied", out)
    out, _ = expect_rc(["config", "--device", "sim:0"], 0, env=env)
    check("GPUPART_MEMORY_FRACTION_MAX (clipped by the ceiling: GPUPART_MEMORY_FRACTION asked 0.9)" in out, "text", out)
    check("CUDA_DEVICE_MEMORY_LIMIT_0" in out and "applied" in out, "text shares", out)
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0)
    check(parse_json(out)["clipped"] == {} and parse_json(out)["orchestrator"]["shares"] == [], "none", out)


def test_config_shows_the_engines_shares_with_their_bytes():
    """MPS's entry by UUID prefix names sim:0 (whose UUID begins 00000000) and applies
    before KAI's portion, whose bytes are shown as that part of the device's total."""
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=1G,GPU-0000=2G", "GPU_PORTION": "0.25",
           "HIP_DEVICE_MEMORY_LIMIT_junk": "1g"}
    out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env=env)
    c = parse_json(out)
    check(c["budget"] == 2 << 30 and c["sources"]["memory_limit"] == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "MPS applied", out)
    shares = [(s["source"], s["device"], s["bytes"], s["applied"]) for s in c["orchestrator"]["shares"]]
    check(shares == [("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "index 1", 1 << 30, False),
                     ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPU-0000", 2 << 30, True),
                     ("GPU_PORTION", "every device", 4 << 30, False)], "shares", out)
    check(len(c["orchestrator"]["ignored"]) == 1 and "HIP_DEVICE_MEMORY_LIMIT_junk" in c["orchestrator"]["ignored"][0],
          "the bad HIP name is reported", out)
    out, _ = expect_rc(["config", "--device", "sim:0"], 0, env={"GPU_PORTION": "0.25"})
    check(re.search(r"(?m)^GPU_PORTION +every device +4294967296  applied$", out), "text: KAI's bytes", out)


def test_config_shows_a_dra_claim_by_uuid():
    """A DRA device metadata file (KEP-5304) naming sim:0 by its UUID: its
    gpupart.io/memory is the budget, and --json names the claim, its generation and floor."""
    with tempfile.TemporaryDirectory() as root:
        d = os.path.join(root, "resourceclaims", "gpu-claim", "gpu")
        os.makedirs(d)
        meta = {"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "DeviceMetadata",
                "metadata": {"name": "gpu-claim", "namespace": "team-a", "uid": "u", "generation": 3},
                "requests": [{"name": "gpu", "devices": [{"driver": "gpu.example.com", "pool": "p", "name": "g",
                              "attributes": {"uuid": {"string": "GPU-00000000-0000-0000-0000-00000000005a"},
                                             "gpupart.io/memory": {"string": "3Gi"},
                                             "gpupart.io/guarantee": {"int": GIB}}}]}]}
        with open(os.path.join(d, "gpu.example.com-metadata.json"), "w") as f:
            f.write(json.dumps(dict(meta, apiVersion="metadata.resource.k8s.io/v1")) + "\n" + json.dumps(meta) + "\n")
        out, _ = expect_rc(["config", "--device", "sim:0", "--json"], 0, env={"GPUPART_DRA_METADATA_DIR": root})
        c = parse_json(out)
        check(c["budget"] == 3 * GIB and c["sources"]["memory_limit"] == "DRA claim team-a/gpu-claim request gpu",
              "the claim's memory is the budget", out)
        s = c["orchestrator"]["shares"][0]
        check(s["applied"] and s["claim"]["generation"] == 3 and s["claim"]["guarantee"] == GIB
              and s["claim"]["namespace"] == "team-a", "the claim", out)
        out, _ = expect_rc(["config", "--device", "sim:1", "--json"], 0, env={"GPUPART_DRA_METADATA_DIR": root})
        check(parse_json(out)["budget"] == 16 * GIB, "sim:1 is not the claim's device", out)


def test_devices_says_why_a_backend_was_skipped():
    rc, out, err = run("devices", env={"GPUPART_VULKAN_LIBRARY": "/nonexistent/libvulkan.so.1"})
    check("skipped vulkan: GPUPART_VULKAN_LIBRARY=/nonexistent/libvulkan.so.1: " in err or
          "vulkan" not in run("--version")[1], "the Vulkan override's failure is explained", err)


def skipped_lines(err):
    return [l for l in err.splitlines() if l.startswith("gpupart: skipped ")]


def test_devices_names_a_skipped_backend_once_and_only_when_asked():
    rc, _, err = run("devices")
    if rc == 0:  # devices found: a backend nobody asked for is not reported
        check(skipped_lines(err) == [], "devices is quiet about backends nobody named", err)
    _, _, err = run("devices", env={"GPUPART_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"})
    lines = skipped_lines(err)
    check(len(lines) == 1 and lines[0].startswith("gpupart: skipped cuda: ") and lines[0].count("cuda: ") == 1,
          "a backend the configuration names is reported, in one line naming it once", err)
    _, _, verbose = run("devices", "-v")
    for name in ("cuda", "vulkan", "opencl"):
        missing = run("devices", "--backend", name)[0] != 0
        said = [l for l in skipped_lines(verbose) if l.startswith(f"gpupart: skipped {name}: ")]
        check(len(said) == (1 if missing else 0), f"-v reports {name} exactly when it has no device here", verbose)
        check(all(l.count(f"{name}: ") == 1 and f"'{name}'" not in l for l in said), f"{name} named once", verbose)
    _, _, err = run("devices", "--verbose", env={"GPUPART_BACKEND": "sim"})
    check(skipped_lines(err) == skipped_lines(verbose), "--verbose is -v", err)


def test_config_visible_devices():
    env = {"GPUPART_BACKEND": "sim", "GPUPART_DEVICE": "3,1"}
    out, _ = expect_rc(["config", "--json"], 0, env=env)
    check(parse_json(out)["index"] == 3, "program index 0 is the first visible device", out)


# ---- gpupart top, metrics, exporter: against real processes sharing a sim device ----

class Holders:
    """Processes holding memory in shared sim device 0 (TOTAL MiB) of a temporary ledger
    folder; each spec is NAME:LIMIT:GUARANTEE:ALLOC in MiB. Released on exit."""

    def __init__(self, *processes, total=1024):
        self.dir = tempfile.mkdtemp(prefix="gpupart-top-")
        self.procs = []
        for specs in processes:
            p = subprocess.Popen([HOLDER, self.dir, str(total), *specs], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append(p)
            line = p.stdout.readline()
            if line != "ready\n":
                raise RuntimeError(f"holder {specs}: {line!r} {p.stderr.read()}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
        subprocess.run(["rm", "-rf", self.dir])

    def env(self):
        return {"GPUPART_LEDGER_DIR": self.dir}


def top_json(h, *extra):
    out, err = expect_rc(["top", "--json", *extra], 0, env=h.env())
    return parse_json(out)


def test_top_json_shows_every_process_and_partition():
    with Holders(["train:512:128:200:3", "eval:0:0:64"], ["other:256:0:100:2"]) as h:
        snap = top_json(h)
        check(snap["ledger_dir"] == h.dir and len(snap["devices"]) == 1, "one shared device", snap)
        d = snap["devices"][0]
        check(d["status"] == "ok" and d["consistent"] and d["error"] is None, "device read whole", d)
        check(d["identity"] == "sim:0:1073741824" and d["backend"] == "sim" and d["index"] == 0, "labels", d)
        check(d["budget"] == GIB and d["guarantees"] == 128 * MIB, "budget and guarantees", d)
        parts = {p["name"]: p for p in d["partitions"]}
        check(sorted(parts) == ["eval", "other", "train"], "every partition of both processes", d)
        pids = [p.pid for p in h.procs]
        check(parts["train"]["limit"] == 512 * MIB and parts["train"]["guarantee"] == 128 * MIB, "train figures", d)
        check(parts["eval"]["limit"] == GIB and parts["other"]["limit"] == 256 * MIB, "limits", d)
        for name, mib in (("train", 200), ("eval", 64), ("other", 100)):
            check(parts[name]["reserved"] >= mib * MIB and parts[name]["peak_reserved"] >= parts[name]["reserved"],
                  f"{name} reserved", d)
            check(parts[name]["in_use"] == mib * MIB, f"{name} in use, exactly", d)
        check(parts["train"]["pid"] == pids[0] and parts["other"]["pid"] == pids[1], "owners' pids", d)
        check(d["reserved"] == sum(p["reserved"] for p in d["partitions"]), "sums", d)
        members = {m["pid"]: m for m in d["members"]}
        check(sorted(members) == sorted(pids), "both processes are members", d)
        check(all(m["alive"] and m["command"] == "cli_holder" for m in members.values()), "alive, named", d)
        check(members[pids[0]]["partitions"] == 2 and members[pids[1]]["reserved"] == parts["other"]["reserved"],
              "member figures", d)
        check(members[pids[0]]["in_use"] == 264 * MIB and members[pids[1]]["in_use"] == 100 * MIB, "members in use", d)
        check(members[pids[0]]["allocation_failures"] == 3 and members[pids[1]]["allocation_failures"] == 2,
              "members' refused allocations", d)
        check(all(m["driver_allocations"] >= m["partitions"] and m["driver_frees"] == 0 for m in members.values()),
              "members' driver calls", d)
        shares = {(x["partition"], x["pid"]): x for x in d["shares"]}
        check(sorted(shares) == sorted([("train", pids[0]), ("eval", pids[0]), ("other", pids[1])]), "one share each", d)
        for (name, pid), fails in ((("train", pids[0]), 3), (("eval", pids[0]), 0), (("other", pids[1]), 2)):
            x = shares.get((name, pid), {})
            check(x.get("in_use") == parts[name]["in_use"] and x.get("reserved") == parts[name]["reserved"] and
                  x.get("allocation_failures") == fails and x.get("driver_allocations", 0) >= 1, f"share {name}", x)


GROUP, MEMBERS, OUTSIDER = 61000, (61001, 61002), 61003  # numeric ids: no passwd entry needed


def as_uid(uid, member):
    """Popen's arguments that run a process as uid (its own gid), in GROUP when member."""
    return {"user": uid, "group": uid, "extra_groups": [GROUP] if member else []}


def test_top_reads_every_ledger_of_a_group_folder():
    """A group folder (2770, set-group-ID): holders of two uids in its group share one
    ledger, named without a uid, 0660, of the folder's group; top (as root) shows both;
    top run by a uid outside the group is refused, saying so. Needs root (skipped else)."""
    if os.geteuid() != 0:
        print("skip test_top_reads_every_ledger_of_a_group_folder: needs root to run other uids")
        return
    d = tempfile.mkdtemp(prefix="gpupart-group-")
    os.chown(d, 0, GROUP)
    os.chmod(d, 0o2770)
    procs = []
    try:
        for uid, spec in zip(MEMBERS, ("train:0:0:200", "eval:0:0:100")):
            try:
                p = subprocess.Popen([HOLDER, d, "1024", spec], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, **as_uid(uid, True))
            except PermissionError:
                print("skip test_top_reads_every_ledger_of_a_group_folder: other uids cannot run the build's programs")
                return
            procs.append(p)
            line = p.stdout.readline()
            if line != "ready\n":
                check(False, f"the holder of uid {uid} is ready", line + p.stderr.read())
                return
        names = os.listdir(d)
        check(names == ["gpupart-sim_0_1073741824.ledger"], "one ledger, no uid in its name", names)
        st = os.stat(os.path.join(d, names[0]))
        check(stat_mod.S_IMODE(st.st_mode) == 0o660 and st.st_gid == GROUP, "0660, the folder's group", oct(st.st_mode))
        out, _ = expect_rc(["top", "--json", "--ledger-dir", d], 0)
        devices = parse_json(out)["devices"]
        check(len(devices) == 1 and devices[0]["status"] == "ok", "one ledger, read", devices)
        dev = devices[0] if devices else {"members": [], "partitions": []}
        check(sorted(m["pid"] for m in dev["members"]) == sorted(p.pid for p in procs), "both uids' members", dev)
        check(sorted(x["name"] for x in dev["partitions"]) == ["eval", "train"], "both uids' partitions", dev)
        check(dev.get("reserved") == 300 * MIB, "one budget's bytes: 200 + 100 MiB", dev)
        r = subprocess.run([GPUPART, "top", "--once", "--ledger-dir", d], capture_output=True, text=True, timeout=120,
                           **as_uid(OUTSIDER, False))
        check(r.returncode == 1 and "not in that group" in r.stderr, "an outsider is refused, told why", r.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
        subprocess.run(["rm", "-rf", d])


def test_top_once_prints_one_frame():
    with Holders(["train:512:128:200"], ["other:256:0:100"]) as h:
        out, _ = expect_rc(["top", "--once", "--ledger-dir", h.dir], 0)
        check(out.count("gpupart top") == 1 and "\033" not in out, "one frame, no escapes", out)
        check(re.search(r"^DEVICE sim:0:1073741824  \(sim 0\)$", out, re.M), "device line", out)
        check(re.search(r"budget 1 GiB  guaranteed 128 MiB", out), "budget line", out)
        check(re.search(rf"^  train\s+512 MiB\s+128 MiB\s+200 MiB\s+200 MiB\s+200 MiB\s+{h.procs[0].pid}$", out, re.M),
              "train row", out)
        check(re.search(rf"^  {h.procs[1].pid}\s+cli_holder\s+yes\s+1\s+100 MiB\s+100 MiB\s+0\s+1$", out, re.M),
              "member row", out)


def test_top_shows_a_killed_member_as_dead():
    with Holders(["train:512:0:200"], ["victim:512:0:300"]) as h:
        victim = h.procs[1]
        victim.kill()
        victim.wait(timeout=30)
        d = top_json(h)["devices"][0]
        check(d["status"] == "ok" and d["consistent"], "read whole after the kill", d)
        dead = [m for m in d["members"] if m["pid"] == victim.pid]
        name = os.path.basename(HOLDER)[:15]
        check(dead and not dead[0]["alive"], "the killed member is dead", d)
        check(dead and dead[0]["command"] == name, "and keeps the name it wrote into the ledger", d)
        alive = [m for m in d["members"] if m["pid"] == h.procs[0].pid]
        check(alive and alive[0]["alive"] and alive[0]["command"] == name, "the other stays alive", d)


def start_requester(h, need_mib, priority):
    """A process that posts a give-back request of need_mib MiB at priority in h's one ledger
    and keeps it (60 s at most) until its stdin closes."""
    files = [f for f in os.listdir(h.dir) if f.endswith(".ledger")]
    p = subprocess.Popen([REQUESTER, os.path.join(h.dir, files[0]), str(need_mib), str(priority)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line != "ready\n":
        raise RuntimeError(f"requester: {line!r} {p.stderr.read()}")
    return p


def test_a_scribbled_request_slot_is_shown_escaped_and_bounded():
    """A request slot's command (any 16 bytes, no NUL), need and priority scribbled while
    its poster waits: top --json stays valid JSON, top --once shows no control byte, the
    metrics pass promtool with the needs summed saturating."""
    with Holders(["be:0:0:300"]) as h:
        holder = h.procs[0]
        os.kill(holder.pid, signal.SIGSTOP)
        req = None
        try:
            req = start_requester(h, 512, 2)
            path = os.path.join(h.dir, [f for f in os.listdir(h.dir) if f.endswith(".ledger")][0])
            with open(path, "r+b") as f:
                data = f.read()
                at = data.rfind(b"cli_requester\0\0\0")  # the request slot's command: the slots come last
                check(at >= 40, "the request's command is in the file", at)
                f.seek(at - 40 + 8)  # its need, then expiry, pid, priority, attachment, command
                f.write(struct.pack("<Q", 2**64 - 1))
                f.seek(at - 40 + 32)
                f.write(struct.pack("<I", 2**32 - 1))
                f.seek(at)
                f.write(b'e\x1b[31m"\\\n\xff\xc3\x01ab\x7fc')
            d = top_json(h)["devices"][0]
            reqs = d.get("requests", [])
            check(len(reqs) == 1 and reqs[0]["need"] == 2**64 - 1 and reqs[0]["priority"] == 2**32 - 1,
                  "the scribbled figures, as read", reqs)
            check(reqs and reqs[0]["command"].startswith('e\x1b[31m"\\\n\ufffd'), "the command, escaped", reqs)
            out, _ = expect_rc(["top", "--once", "--ledger-dir", h.dir], 0)
            check("\x1b" not in out and "\x01" not in out and "\x7f" not in out, "no control byte in the text", out)
            out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
            promtool_check(out, "metrics of a scribbled request")
            check(re.search(rf"^gpupart_device_give_back_requested_bytes\{{[^}}]*\}} {2**64 - 1}$", out, re.M),
                  "the needs, saturated", out)
        finally:
            if req:
                req.kill()
                req.wait(timeout=30)
            os.kill(holder.pid, signal.SIGCONT)


def test_top_and_metrics_show_the_pending_give_back_requests():
    """A requester waits for bytes a stopped holder keeps (it cannot answer): top --json,
    top --once and the metrics show its request (pid, command, bytes, priority, time
    left), served first over a growth's; killed, it is gone from all three."""
    with Holders(["be:0:0:300"]) as h:
        holder = h.procs[0]
        os.kill(holder.pid, signal.SIGSTOP)
        floor = growth = None
        try:
            floor, growth = start_requester(h, 512, 2), start_requester(h, 64, 1)
            d = top_json(h)["devices"][0]
            reqs = d.get("requests", [])
            check([(r["pid"], r["need"], r["priority"]) for r in reqs] == [(floor.pid, 512 * MIB, 2),
                                                                           (growth.pid, 64 * MIB, 1)],
                  "both requests, the floor's first", d)
            check(all(r["command"] == "cli_requester" and 0 < r["ms_left"] <= 60000 for r in reqs),
                  "command and time left", reqs)
            out, _ = expect_rc(["top", "--once", "--ledger-dir", h.dir], 0)
            check(re.search(r"^  PID\s+REQUEST BY\s+ASKED\s+PRIORITY\s+TIME LEFT$", out, re.M), "request header", out)
            check(re.search(rf"^  {floor.pid}\s+cli_requester\s+512 MiB\s+2\s+\d+\.\d s$", out, re.M), "floor row", out)
            out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
            check(re.search(r"^gpupart_device_give_back_requests\{[^}]*\} 2$", out, re.M), "requests gauge", out)
            check(re.search(rf"^gpupart_device_give_back_requested_bytes\{{[^}}]*\}} {576 * MIB}$", out, re.M),
                  "requested bytes", out)
            floor.kill()
            floor.wait(timeout=30)
            reqs = top_json(h)["devices"][0].get("requests")
            check([r["pid"] for r in reqs or []] == [growth.pid], "a killed requester's request is gone", reqs)
            growth.stdin.close()
            check(growth.wait(timeout=30) == 0, "the growth's requester withdraws and ends")
            out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
            check(re.search(r"^gpupart_device_give_back_requests\{[^}]*\} 0$", out, re.M), "none pending", out)
            out, _ = expect_rc(["top", "--once", "--ledger-dir", h.dir], 0)
            check("REQUEST BY" not in out, "no request rows", out)
        finally:
            for p in (floor, growth):
                if p and p.poll() is None:
                    p.kill()
                    p.wait(timeout=30)
            os.kill(holder.pid, signal.SIGCONT)


def test_top_refuses_hostile_ledger_files_and_goes_on():
    with Holders(["train:512:0:2"]) as h:
        uid = os.geteuid()
        junk = os.path.join(h.dir, f"gpupart-{uid}-junk.ledger")
        with open(junk, "wb") as f:
            f.write(b"\x5a" * 4096)
        os.chmod(junk, 0o600)
        loose = os.path.join(h.dir, f"gpupart-{uid}-loose.ledger")
        with open(loose, "wb") as f:
            f.write(b"")
        os.chmod(loose, 0o644)
        with open(os.path.join(h.dir, "gpupart-99999-other.ledger"), "wb") as f:
            f.write(b"x")
        devices = {d["file"]: d for d in top_json(h)["devices"]}
        check(len(devices) == 3, "this user's three files, not the other user's", devices)
        bad = devices.get(os.path.basename(junk), {})
        check(bad.get("status") == "refused" and "bytes" in (bad.get("error") or ""), "junk refused", bad)
        check(bad.get("budget", 0) is None and bad.get("partitions") == [], "no figures from junk", bad)
        mode = devices.get(os.path.basename(loose), {})
        check(mode.get("status") == "refused" and "0600" in (mode.get("error") or ""), "mode refused", mode)
        good = [d for d in devices.values() if d["status"] == "ok"]
        check(len(good) == 1 and good[0]["partitions"][0]["name"] == "train", "the good one still shown", devices)
        out, _ = expect_rc(["top", "--once"], 0, env=h.env())
        check(re.search(r"^DEVICE gpupart-\d+-junk.ledger  refused: ledger .* bytes", out, re.M), "text refusal", out)


HOSTILE_NAMES = ["x" * 40, "e\x1b[31mred", "nl\nx", "a\udcff", "<script>alert(1)</script>"]


def test_top_shows_any_name_safely_in_aligned_columns():
    with Holders([f"{n}:512:0:1" for n in HOSTILE_NAMES]) as h:
        p = subprocess.run([GPUPART, "top", "--once", "--ledger-dir", h.dir], capture_output=True, timeout=60)
        check(p.returncode == 0, "top --once", p.stderr)
        out = p.stdout
        check(b"\x1b" not in out, "no escape sequence reaches the terminal", out)
        try:
            text = out.decode("utf-8")
        except UnicodeDecodeError as e:
            check(False, "valid UTF-8", f"{e}: {out!r}")
            return
        rows = [l for l in text.splitlines() if re.search(r"512 MiB\s+0 B\s+\d+ MiB", l)]
        check(len(rows) == len(HOSTILE_NAMES), "one row per partition (a newline in a name splits none)", text)
        head = [l for l in text.splitlines() if l.lstrip().startswith("PARTITION")]
        ends = {l.index("LIMIT") + len("LIMIT") for l in head} | {l.index("512 MiB") + 7 for l in rows}
        check(len(ends) == 1, "the LIMIT column ends at one place on every line", text)
        check("e?[31mred" in text and "nl?x" in text and "a?" in text, "what cannot be shown is a '?'", text)


def test_status_page_is_valid_html_with_any_name():
    with Holders([f"{n}:512:0:1" for n in HOSTILE_NAMES]) as h, Exporter(h) as e:
        status, _, body = e.get("/")
        check(status == 200, "/", body)
        try:
            page = body.decode("utf-8")
        except UnicodeDecodeError as err:
            check(False, "the page is valid UTF-8", f"{err}: {body!r}")
            return
        check(not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", page), "no control character in the page", repr(page))
        check("<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page, "names escaped", page)
        check(f"<td class=\"n\">a\ufffd</td>" in page and "nl\nx" in page, "a byte that is not UTF-8 is U+FFFD", page)


def test_top_redraws_until_interrupted():
    with Holders(["train:512:0:2"]) as h:
        p = subprocess.Popen([GPUPART, "top", "--interval", "0.1", "--ledger-dir", h.dir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        frames = 0
        for line in p.stdout:
            frames += line.startswith("gpupart top")
            if frames == 3:
                break
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=30)
        check(frames == 3 and rc == 0, f"live top: {frames} frames, exit {rc}", p.stderr.read())


def test_top_reads_the_ledger_dir_programs_use():
    with Holders(["train:512:0:2"]) as h:
        path = write_file(f"[gpupart]\nledger_dir = {h.dir}\n")
        try:
            for cmd in (["top", "--json"], ["metrics"]):
                out, _ = expect_rc(cmd, 0, env={"GPUPART_CONFIG": path})
                check(f"ledger_dir\": \"{h.dir}\"" in out or 'partition="train"' in out,
                      f"{cmd[0]} reads the configuration's ledger_dir", out)
            out, _ = expect_rc(["top", "--json"], 0, env={"GPUPART_CONFIG": path, "GPUPART_LEDGER_DIR": "/tmp"})
            check(parse_json(out)["ledger_dir"] == "/tmp", "the variable wins over the file", out)
        finally:
            os.unlink(path)


def test_top_bad_usage_and_missing_folder():
    for args in (["--interval", "0"], ["--interval", "x"], ["--interval"], ["--bogus"], ["--once", "extra"]):
        expect_rc(["top", *args], 2)
    _, err = expect_rc(["top", "--once", "--ledger-dir", "/nonexistent/gpupart"], 1)
    check("/nonexistent/gpupart" in err, "the folder is named", err)
    d = tempfile.mkdtemp()
    try:
        out, _ = expect_rc(["top", "--json", "--ledger-dir", d], 0)
        check(parse_json(out)["devices"] == [], "an empty folder has no devices", out)
    finally:
        os.rmdir(d)


def promtool_check(text, what):
    """promtool check metrics (Prometheus' own parser and linter) on text."""
    promtool = shutil.which("promtool")
    if not promtool:
        print(f"SKIP promtool check of {what}: promtool is not installed (Debian package prometheus)")
        return
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), f"promtool accepts {what}",
          p.stdout + p.stderr + text)


def parse_metrics(text):
    """The families as prometheus_client's parser (independent of promtool) reads them:
    {name: (type, help, [(labels, value)])}, or None when it is not installed."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:  # a python3 not Debian's (pyenv, venv) can still use Debian's pure-Python package
        sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("SKIP prometheus_client parse: python3-prometheus-client is not installed")
        return None
    return {f.name: (f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(text)}


def samples_of(families, name, **labels):
    """The values of name's samples with those labels (a counter's family is named without
    its _total by prometheus_client)."""
    fam = families.get(name) or families.get(name[:-6] if name.endswith("_total") else name)
    return [v for n, ls, v in fam[2] if n == name and all(ls.get(k) == w for k, w in labels.items())]


def test_metrics_pass_promtool_and_an_independent_parser():
    odd = 'we"ird\\na\u00e9me'
    with Holders([f"{odd}:512:128:200", "eval:0:0:64"], ["other:256:0:100"]) as h:
        out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
        promtool_check(out, "gpupart metrics")
        names = re.findall(r"^# TYPE (\S+) (\S+)$", out, re.M)
        check(len(names) >= 15 and all(n.startswith("gpupart_") for n, _ in names), "gpupart_ names", out)
        check(all(re.search(rf"^# HELP {n} \S", out, re.M) for n, _ in names), "every family has HELP", out)
        fam = parse_metrics(out)
        if fam is None:
            return
        dev = {"device": "sim:0:1073741824", "backend": "sim", "index": "0"}
        check(samples_of(fam, "gpupart_device_budget_bytes", **dev) == [GIB], "budget", out)
        check(samples_of(fam, "gpupart_device_guarantee_bytes", **dev) == [128 * MIB], "guarantees", out)
        pids = [str(p.pid) for p in h.procs]
        for part, limit, guarantee, mib in ((odd, 512, 128, 200), ("eval", 1024, 0, 64), ("other", 256, 0, 100)):
            sel = dict(dev, partition=part)
            check(samples_of(fam, "gpupart_partition_limit_bytes", **sel) == [limit * MIB], f"{part} limit", out)
            check(samples_of(fam, "gpupart_partition_guarantee_bytes", **sel) == [guarantee * MIB],
                  f"{part} guarantee", out)
            r = samples_of(fam, "gpupart_partition_reserved_bytes", **sel)
            check(len(r) == 1 and r[0] >= mib * MIB, f"{part} reserved", out)
            pk = samples_of(fam, "gpupart_partition_peak_reserved_bytes", **sel)
            check(len(pk) == 1 and pk[0] >= r[0], f"{part} peak", out)
        m = samples_of(fam, "gpupart_member_reserved_bytes", pid=pids[1], command="cli_holder")
        check(m == samples_of(fam, "gpupart_partition_reserved_bytes", partition="other"), "member reserved", out)
        check(samples_of(fam, "gpupart_member_alive", pid=pids[0]) == [1], "member alive", out)
        total = sum(samples_of(fam, "gpupart_partition_reserved_bytes"))
        check(samples_of(fam, "gpupart_device_reserved_bytes") == [total], "device reserved is the sum", out)
        counters = {n for n, t in names if t == "counter"}
        check(counters == {"gpupart_allocation_failures_total", "gpupart_driver_allocations_total",
                           "gpupart_driver_frees_total"}, "the counters", out)
        check(all(t == ("counter" if n + "_total" in counters else "gauge") for n, (t, _, _) in fam.items()),
              "counters and gauges as the parser reads them", out)


def series_repeated(text):
    """The series (name and label set) that a text exposition writes more than once."""
    seen, repeated = set(), []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series = line.rsplit(" ", 1)[0]
            if series in seen:
                repeated.append(series)
            seen.add(series)
    return repeated


def test_metrics_never_repeat_a_series():
    # two names that differ only in a byte that is not UTF-8: each label value is "a\ufffd"
    with Holders(["a\udcff:512:0:2:1", "a\udcfe:512:0:3"]) as h:
        out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
        promtool_check(out, "metrics of look-alike names")
        check(not series_repeated(out), "each series once", "\n".join(series_repeated(out)) + "\n" + out)
        check(len(re.findall(r'^gpupart_partition_limit_bytes\{.*partition="a\ufffd".*\} 536870912$', out, re.M)) == 1,
              "the first of them shown", out)


def test_a_folder_of_more_ledgers_than_are_read_says_so():
    """300 files named as ledgers (junk: the magic only): top, --json and metrics read 256
    of them and say how many they left unread, instead of hiding them without a word."""
    d = tempfile.mkdtemp(prefix="gpupart-many-")
    try:
        for i in range(300):
            path = os.path.join(d, f"gpupart-{os.geteuid()}-sim:{i}:1.ledger")
            with open(path, "wb") as f:
                f.write(b"gpupart1")
            os.chmod(path, 0o600)
        out, _ = expect_rc(["top", "--once", "--ledger-dir", d], 0)
        check("44 more ledger files are in the folder, not shown" in out, "top says what it left unread", out)
        out, _ = expect_rc(["top", "--json", "--ledger-dir", d], 0)
        snap = parse_json(out)
        check(snap.get("unread_ledgers") == 44 and len(snap["devices"]) == 256, "--json counts them", out[:300])
        out, err = expect_rc(["metrics", "--ledger-dir", d], 0)
        check("44 ledger files more than the 256 read at once" in err, "metrics warns on stderr", err)
        promtool_check(out, "metrics of a crowded folder")
        check(re.search(r"^gpupart_unread_ledgers 44$", out, re.M), "metrics counts them", out[:600])
        with Exporter(types.SimpleNamespace(dir=d)) as e:
            # a generous bound: 300 files take ~40 s a scrape under ASan's slow unwinding
            status, _, body = e.raw(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=300)
            text = body.decode()
            check(status == 200 and re.search(r"^gpupart_unread_ledgers 44$", text, re.M), "the exporter too",
                  text[:600])
            promtool_check(text, "the exporter's metrics of a crowded folder")
    finally:
        subprocess.run(["rm", "-rf", d])


def test_metrics_show_refused_ledgers_as_down():
    with Holders(["train:512:0:2"]) as h:
        junk = os.path.join(h.dir, f"gpupart-{os.geteuid()}-junk.ledger")
        with open(junk, "wb") as f:
            f.write(b"\x00" * 100)
        os.chmod(junk, 0o600)
        out, _ = expect_rc(["metrics"], 0, env=h.env())
        promtool_check(out, "metrics with a refused ledger")
        check(re.search(r'^gpupart_ledger_up\{file="gpupart-\d+-junk.ledger",device=""\} 0$', out, re.M), "down", out)
        check(re.search(r'^gpupart_ledger_up\{file="gpupart-\d+-sim_0_1073741824.ledger",.*\} 1$', out, re.M), "up", out)
        check(re.search(r"^gpupart_ledgers 2$", out, re.M), "two files", out)
        check(out.count("gpupart_partition_limit_bytes{") == 1, "only the good ledger's partition", out)
        # a refused file has no other sample: not gpupart_ledger_consistent 0 either, which
        # the dashboard's "inconsistent ledgers" panel would count
        junk_lines = [l for l in out.splitlines() if "junk.ledger" in l and not l.startswith("#")]
        check(len(junk_lines) == 1 and junk_lines[0].startswith("gpupart_ledger_up{"), "refused: only ledger_up", out)


def test_metrics_output_replaces_the_file_whole():
    with Holders(["train:512:0:2"]) as h:
        target = os.path.join(h.dir, "gpupart.prom")
        with open(target, "w") as f:
            f.write("old\n")
        os.chmod(target, 0o600)
        out, err = expect_rc(["metrics", "--output", target], 0, env=h.env())
        check(out == "" and err == "", "nothing printed", out + err)
        text = open(target).read()
        check(text.startswith("# HELP gpupart_") and "gpupart_partition_limit_bytes{" in text, "file written", text)
        promtool_check(text, "the --output file")
        left = [n for n in os.listdir(h.dir) if n.startswith("gpupart.prom.")]
        check(not left, "no temporary file left", left)
        mode = os.stat(target).st_mode & 0o777
        umask = os.umask(0)
        os.umask(umask)
        check(mode == 0o666 & ~umask, f"mode {mode:o} follows the umask {umask:o}", "")
        _, err = expect_rc(["metrics", "--output", "/nonexistent/dir/x.prom"], 1, env=h.env())
        check("/nonexistent/dir/x.prom" in err, "the file is named", err)
        expect_rc(["metrics", "--output"], 2)
        expect_rc(["metrics", "--output="], 2)
        expect_rc(["metrics", "--bogus"], 2)


def test_metrics_output_writes_regular_files_only():
    """--output renames a temporary file over FILE: over a symbolic link, a FIFO or a device
    node that would replace the link or the node with a regular file (as root: /dev/null
    itself). Each is refused, untouched, and no temporary file is left."""
    with Holders(["train:512:0:2"]) as h:
        d = tempfile.mkdtemp(prefix="gpupart-out-")
        try:
            target = os.path.join(d, "real.prom")
            with open(target, "w") as f:
                f.write("kept\n")
            cases = {"link.prom": ("a symbolic link", lambda p: os.symlink(target, p)),
                     "fifo.prom": ("a FIFO", os.mkfifo),
                     "dir.prom": ("a directory", os.mkdir),
                     "dangling.prom": ("a symbolic link", lambda p: os.symlink(os.path.join(d, "nowhere"), p))}
            try:  # a character device like /dev/null (1, 3): root only, and not in every container
                os.mknod(os.path.join(d, "null.prom"), 0o600 | stat_mod.S_IFCHR, os.makedev(1, 3))
                cases["null.prom"] = ("a device node", None)
            except (PermissionError, OSError):
                print("SKIP --output over a device node: mknod is not allowed here (a FIFO and a link are)")
            for name, (kind, make) in cases.items():
                path = os.path.join(d, name)
                if make:
                    make(path)
                before = os.lstat(path)
                _, err = expect_rc(["metrics", "--output", path], 1, env=h.env(), what=f"--output {name}")
                check(f"{path} is {kind}" in err and "regular files only" in err, f"{name}: refused, saying why", err)
                after = os.lstat(path)
                check((after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev),
                      f"{name}: left as it was", (before, after))
            check(open(target).read() == "kept\n", "the link's target untouched", "")
            left = sorted(n for n in os.listdir(d) if "." in n and n.split(".")[-1] not in ("prom",))
            check(not left, "no temporary file left", left)
            expect_rc(["metrics", "--output", os.path.join(d, "new.prom")], 0, env=h.env())
            check(stat_mod.S_ISREG(os.lstat(os.path.join(d, "new.prom")).st_mode), "a new file is written", "")
        finally:
            shutil.rmtree(d)


class Exporter:
    """gpupart exporter on 127.0.0.1, a port the kernel picks, over h's ledger folder."""

    def __init__(self, h):
        self.p = subprocess.Popen([GPUPART, "exporter", "--listen", "127.0.0.1:0", "--ledger-dir", h.dir],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.fullmatch(r"gpupart exporter: listening on http://127\.0\.0\.1:(\d+)/\n", line)
        if not m:
            self.p.kill()
            raise RuntimeError(f"exporter did not start: {line!r} {self.p.stderr.read()}")
        self.port = int(m.group(1))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        self.rc = self.p.wait(timeout=30)

    def raw(self, data, timeout=20):
        """Sends data, returns (status, headers, body) of the reply; status None when none came."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as c:
            c.sendall(data)
            reply = b""
            try:
                while chunk := c.recv(65536):
                    reply += chunk
            except ConnectionResetError:
                pass
        head, _, body = reply.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        m = re.fullmatch(r"HTTP/1\.1 (\d{3}) .+", lines[0])
        headers = dict(l.split(": ", 1) for l in lines[1:] if ": " in l)
        return (int(m.group(1)) if m else None), headers, body

    def get(self, path, method="GET"):
        return self.raw(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())


def test_exporter_serves_metrics_page_and_json():
    with Holders(["train:512:128:200", "eval:0:0:64"], ["other:256:0:100"]) as h, Exporter(h) as e:
        status, headers, body = e.get("/metrics")
        check(status == 200 and headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
              "/metrics", headers)
        check(int(headers.get("Content-Length", -1)) == len(body), "Content-Length", headers)
        text = body.decode()
        promtool_check(text, "/metrics")
        fam = parse_metrics(text)
        if fam is not None:
            r = samples_of(fam, "gpupart_partition_reserved_bytes", partition="train")
            check(len(r) == 1 and r[0] >= 200 * MIB, "train reserved over HTTP", text)
        status, headers, page = e.get("/")
        page = page.decode()
        check(status == 200 and headers.get("Content-Type") == "text/html; charset=utf-8", "/", headers)
        check('<meta http-equiv="refresh"' in page, "the page reloads itself", page)
        check(not re.search(r"https?://|<script|<link|src=|@import|url\(", page), "no external assets", page)
        check("default-src 'none'" in headers.get("Content-Security-Policy", ""), "CSP forbids fetching", headers)
        snap = parse_json(e.get("/top.json")[2])
        parts = {p["name"]: p for p in snap["devices"][0]["partitions"]}
        budget = snap["devices"][0]["budget"]
        for name in ("train", "eval", "other"):
            p = parts[name]
            row = re.search(rf'<tr><td class="n">{name}</td>(.*?)</tr>', page)
            check(row, f"a row for {name}", page)
            if not row:
                continue
            limit_w = re.search(r'class="limit" style="width:([\d.]+)%"', row.group(1))
            res_w = re.search(r'class="reserved" style="width:([\d.]+)%"', row.group(1))
            check(limit_w and abs(float(limit_w.group(1)) - 100 * p["limit"] / budget) < 0.01, f"{name} limit bar",
                  row.group(1))
            check(res_w and abs(float(res_w.group(1)) - 100 * p["reserved"] / budget) < 0.01, f"{name} reserved bar",
                  row.group(1))
            g = re.search(r'class="guarantee" style="left:([\d.]+)%"', row.group(1))
            check((g is not None) == (p["guarantee"] > 0), f"{name} guarantee mark", row.group(1))
        status, headers, body = e.get("/", method="HEAD")
        check(status == 200 and body == b"" and int(headers["Content-Length"]) == len(page.encode()), "HEAD", headers)
        check(e.get("/metrics?x=1")[0] == 200, "a query is ignored", "")
    check(e.rc == 0, f"SIGTERM exits 0, not {e.rc}", "")


def expect_counters(where, parts, members, pids):
    """parts: {name: in use}, members: {pid: (in use, failures)} as every view must show."""
    for name, in_use in parts.items():
        check(where["part"](name) == [in_use], f"{where['what']}: partition {name} in use {where['part'](name)}", "")
    for pid, (in_use, fails) in members.items():
        check(where["member"](pid) == [in_use], f"{where['what']}: member {pid} in use {where['member'](pid)}", "")
        check(where["fails"](pid) == fails, f"{where['what']}: member {pid} failures {where['fails'](pid)}", "")


def json_view(snap, what):
    d = snap["devices"][0]
    return {"what": what,
            "part": lambda n: [p["in_use"] for p in d["partitions"] if p["name"] == n],
            "member": lambda pid: [m["in_use"] for m in d["members"] if m["pid"] == pid],
            "fails": lambda pid: sum(m["allocation_failures"] for m in d["members"] if m["pid"] == pid)}


def metrics_view(fam, what):
    return {"what": what,
            "part": lambda n: samples_of(fam, "gpupart_partition_in_use_bytes", partition=n),
            "member": lambda pid: samples_of(fam, "gpupart_member_in_use_bytes", pid=str(pid)),
            "fails": lambda pid: sum(samples_of(fam, "gpupart_allocation_failures_total", pid=str(pid)))}


def test_top_metrics_and_exporter_show_exactly_what_two_processes_hold_and_failed():
    # the second process joins "shared" (made by the first) and holds 24 MiB of it
    with Holders(["shared:512:0:40:4", "solo:128:0:16:1"]) as h:
        second = subprocess.Popen([HOLDER, h.dir, "1024", "shared:512:0:24:7"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        h.procs.append(second)
        check(second.stdout.readline() == "ready\n", "the second process joins the shared partition", "")
        pids = [p.pid for p in h.procs]
        parts = {"shared": 64 * MIB, "solo": 16 * MIB}
        members = {pids[0]: (56 * MIB, 5), pids[1]: (24 * MIB, 7)}
        snap = top_json(h)
        expect_counters(json_view(snap, "top --json"), parts, members, pids)
        d = snap["devices"][0]
        shared = [x for x in d["shares"] if x["partition"] == "shared"]
        check(sorted((x["pid"], x["in_use"], x["allocation_failures"]) for x in shared) ==
              sorted([(pids[0], 40 * MIB, 4), (pids[1], 24 * MIB, 7)]), "the shared partition's two members", d)
        out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
        promtool_check(out, "metrics of two processes with counters")
        check(re.search(r"^# TYPE gpupart_allocation_failures_total counter$", out, re.M), "failures are a counter", out)
        fam = parse_metrics(out)
        if fam is not None:
            expect_counters(metrics_view(fam, "gpupart metrics"), parts, members, pids)
            check(samples_of(fam, "gpupart_allocation_failures_total", partition="shared", pid=str(pids[1])) == [7],
                  "failures per member and partition", out)
            check(all(v >= 1 for v in samples_of(fam, "gpupart_driver_allocations_total")), "driver allocations", out)
        with Exporter(h) as e:
            expect_counters(json_view(parse_json(e.get("/top.json")[2]), "/top.json"), parts, members, pids)
            text = e.get("/metrics")[2].decode()
            promtool_check(text, "/metrics with counters")
            page = e.get("/")[2].decode()
            row = re.search(r'<tr><td class="n">shared</td>(.*?)</tr>', page)
            w = row and re.search(r'class="in_use" style="width:([\d.]+)%"', row.group(1))
            check(w and abs(float(w.group(1)) - 100 * 64 * MIB / GIB) < 0.01, "the page's in-use bar", page)


def test_a_member_killed_while_top_reads_never_shows_nonsense():
    with Holders(["train:512:0:200:1"], ["victim:512:0:300:2"]) as h:
        victim = h.procs[1]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            reads = [pool.submit(run, "top", "--json", env=h.env()) for _ in range(12)]
            time.sleep(0.05)
            victim.kill()
            victim.wait(timeout=30)
            reads += [pool.submit(run, "top", "--json", env=h.env()) for _ in range(4)]
            for f in reads:
                rc, out, err = f.result()
                check(rc == 0, "top --json while a member dies", err)
                if rc:
                    continue
                d = parse_json(out)["devices"][0]
                check(d["status"] == "ok" and d["consistent"], "read whole", d)
                parts = {p["name"]: p for p in d["partitions"]}
                check(parts["train"]["in_use"] == 200 * MIB, "the survivor's in use", d)
                v = parts.get("victim")
                check(v is None or v["in_use"] in (0, 300 * MIB), "the victim's whole or gone", d)
                for m in d["members"]:  # a dead member's figures are left out, whole
                    want = (200 * MIB, 1) if m["pid"] != victim.pid else (300 * MIB, 2) if m["alive"] else (0, 0)
                    check((m["in_use"], m["allocation_failures"]) == want, "a member's counters whole", m)
        d = top_json(h)["devices"][0]
        dead = [m for m in d["members"] if m["pid"] == victim.pid]
        check(not dead or not dead[0]["alive"], "the killed member is dead", d)


def test_readers_leave_out_members_all_killed_and_partition_series_outlive_their_maker():
    # "shared" is made by the first process and joined by the second; "gone" is the first's alone
    with Holders(["shared:512:0:40", "gone:256:0:30"]) as h:
        second = subprocess.Popen([HOLDER, h.dir, "1024", "shared:512:0:24"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        h.procs.append(second)
        check(second.stdout.readline() == "ready\n", "the second process joins the shared partition", "")
        out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
        before = re.findall(r'^gpupart_partition_limit_bytes(\{[^}]*partition="shared"[^}]*\}) ', out, re.M)
        check(not re.search(r'^gpupart_partition_\w+\{[^}]*pid=', out, re.M), "no partition series has a pid", out)
        h.procs[0].kill()
        h.procs[0].wait(timeout=30)
        out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
        promtool_check(out, "metrics after the maker died")
        after = re.findall(r'^gpupart_partition_limit_bytes(\{[^}]*partition="shared"[^}]*\}) ', out, re.M)
        check(before and after == before, "the shared partition is the same series", out)
        check('partition="gone"' not in out, "a partition whose members all died is gone", out)
        check(re.search(r'^gpupart_device_reserved_bytes\{[^}]*\} (\d+)$', out, re.M).group(1) ==
              re.search(r'^gpupart_partition_reserved_bytes\{[^}]*partition="shared"[^}]*\} (\d+)$', out, re.M)
              .group(1), "only the survivor's bytes", out)
        second.kill()
        second.wait(timeout=30)
        for reading in ("top", "metrics", "exporter"):
            if reading == "top":
                d = top_json(h)["devices"][0]
                figures = (d["reserved"], d["guarantees"], len(d["partitions"]), d["dead_members"])
            else:
                if reading == "metrics":
                    out, _ = expect_rc(["metrics", "--ledger-dir", h.dir], 0)
                else:
                    with Exporter(h) as e:
                        out = e.get("/metrics")[2].decode()
                value = lambda fam: int(re.search(rf'^{fam}\{{[^}}]*\}} (\d+)$', out, re.M).group(1))
                figures = (value("gpupart_device_reserved_bytes"), value("gpupart_device_guarantee_bytes"),
                           out.count("gpupart_partition_reserved_bytes{"), value("gpupart_device_dead_members"))
            check(figures == (0, 0, 0, 2), f"{reading}: every member killed, nothing counted: {figures}", out)


def test_a_ledger_of_another_version_is_refused_clearly():
    d = tempfile.mkdtemp(prefix="gpupart-v2-")
    try:
        path = os.path.join(d, f"gpupart-{os.geteuid()}-sim_0_1073741824.ledger")
        with open(path, "wb") as f:  # a version 2 header (magic "gpupart1", version 2), then its tables
            f.write(struct.pack("<QI", 0x3174726170757067, 2) + b"\0" * 70000)
        os.chmod(path, 0o600)
        out, _ = expect_rc(["top", "--json", "--ledger-dir", d], 0)
        dev = parse_json(out)["devices"][0]
        check(dev["status"] == "refused" and "version 2 ledger" in (dev["error"] or "") and
              "stop the processes" in dev["error"], "top says which version and what to do", dev)
        check(dev["partitions"] == [] and dev["budget"] is None, "no figures from it", dev)
        out, _ = expect_rc(["metrics", "--ledger-dir", d], 0)
        check(re.search(r'^gpupart_ledger_up\{[^}]*\} 0$', out, re.M), "metrics: the ledger is down", out)
        check("gpupart_partition_in_use_bytes{" not in out, "metrics: no figures from it", out)
        p = subprocess.run([HOLDER, d, "1024", "x:0:0:1"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 1 and "version 2 ledger" in p.stderr and "GPUPART_ECONFIG" in p.stderr,
              "a program is refused with ECONFIG, naming the version", p.stderr)
    finally:
        shutil.rmtree(d)


def test_exporter_answers_malformed_requests_and_survives():
    with Holders(["train:512:0:2"]) as h, Exporter(h) as e:
        cases = [
            (b"garbage\r\n\r\n", 400), (b"GET / HTTP/2.0\r\n\r\n", 400), (b"GET nopath HTTP/1.1\r\n\r\n", 400),
            (b"GET  / HTTP/1.1\r\n\r\n", 400), (b"GET / HTTP/1.1 extra\r\n\r\n", 400),
            (b"GET /\x00 HTTP/1.1\r\n\r\n", 400), (b"\xff\xfe\x00\x01\r\n\r\n", 400),
            (b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\n\r\n", 400),
            (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 405), (b"DELETE / HTTP/1.1\r\n\r\n", 405),
            (b"GET /nope HTTP/1.1\r\n\r\n", 404), (b"GET /metrics/../x HTTP/1.1\r\n\r\n", 404),
            (b"GET / HTTP/1.1\r\nX: " + b"y" * 9000 + b"\r\n\r\n", 431),
            (b"GET / HTTP/1.0\n\n", 200),
        ]
        for data, want in cases:
            status, headers, _ = e.raw(data)
            check(status == want, f"{data[:40]!r}: {status}, wanted {want}", headers)
            if want == 405:
                check(headers.get("Allow") == "GET, HEAD", "405 names the methods", headers)
        with socket.create_connection(("127.0.0.1", e.port)) as c:  # a client that goes away at once
            pass
        c = socket.create_connection(("127.0.0.1", e.port))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.sendall(b"GET / HT")
        c.close()  # a reset in the middle of a request
        check(e.get("/metrics")[0] == 200, "still serving after the abuse", "")
        check(e.p.poll() is None, "the exporter is alive", "")


def test_exporter_bounds_connections_and_slow_clients():
    with Holders(["train:512:0:2"]) as h, Exporter(h) as e:
        idle = [socket.create_connection(("127.0.0.1", e.port), timeout=20) for _ in range(32)]
        for c in idle:
            c.sendall(b"GET / HTTP/1.1\r\n")  # never finished
        status, _, _ = e.get("/metrics")
        check(status == 200, f"32 unfinished requests never keep a scrape out, not {status}", "")
        reply = idle[-1].recv(4096)  # the exporter's header deadline closes a request that never ends
        check(reply.startswith(b"HTTP/1.1 408 "), "a slow request gets 408", reply)
        for c in idle:
            c.close()
        # Concurrent clients, fewer than the 32 slots: with more, a Python thread that waits
        # for the interpreter lock between its connect and its send on a loaded machine is
        # an idle connection by the exporter's rules (closed to make room after a second).
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: e.get("/metrics" if i % 2 else "/")[0], range(200)))
        check(set(statuses) == {200}, f"concurrent: {sorted(set(statuses))}", statuses)
        check(e.p.poll() is None, "the exporter is alive", "")


def test_exporter_never_evicts_a_client_that_has_just_connected():
    """A client that connects and sends its request a moment later is served, even when more
    connections than the exporter has slots arrive in between: only connections that have
    sat idle for the eviction grace (1 s) are closed to make room."""
    with Holders(["train:512:0:2"]) as h, Exporter(h) as e:
        first = socket.create_connection(("127.0.0.1", e.port), timeout=20)
        others = [socket.create_connection(("127.0.0.1", e.port), timeout=20) for _ in range(40)]
        time.sleep(0.25)  # the exporter takes them all meanwhile; well within the grace
        first.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        reply = b""
        try:
            while chunk := first.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
        first.close()
        for c in others:
            c.close()
        check(reply.startswith(b"HTTP/1.1 200 "), "the first client is served, not evicted", reply[:80])
        check(e.get("/metrics")[0] == 200 and e.p.poll() is None, "still serving, alive", "")


def test_exporter_serves_scrapes_past_many_idle_and_slow_connections():
    """Many more idle connections (sending nothing) and slow ones (a byte now and then) than
    the exporter has slots: every scrape is still served, and each idle or slow connection
    is closed by the header deadline (3 s), not held until the client gives up."""
    with Holders(["train:512:0:2"]) as h, Exporter(h) as e:
        conns = [socket.create_connection(("127.0.0.1", e.port), timeout=30) for _ in range(100)]
        slow = conns[:20]
        for c in slow:
            c.sendall(b"G")
        statuses = []
        for i in range(20):
            for c in slow:  # keep dribbling, as a slowloris client does
                try:
                    c.send(b"E")
                except OSError:
                    pass
            statuses.append(e.get("/metrics")[0])
            conns.append(socket.create_connection(("127.0.0.1", e.port), timeout=30))  # and more idle ones
        check(statuses == [200] * 20, f"every scrape served past 100+ idle and slow connections: {statuses}", "")
        closed = 0
        for c in conns:  # each is closed by the exporter (3 s deadline; the client waits 30), a 408 if it can
            try:
                reply = c.recv(4096)
            except socket.timeout:
                reply = None  # still open: the deadline did not close it
            except OSError:
                reply = b""  # reset: closed
            closed += reply is not None and (reply == b"" or reply.startswith(b"HTTP/1.1 408 "))
            c.close()
        check(closed == len(conns), f"{len(conns) - closed} idle or slow connections left open", "")
        check(e.get("/metrics")[0] == 200 and e.p.poll() is None, "still serving, alive", "")


def openmetrics_families(text):
    """prometheus_client's OpenMetrics parser over text: {family: (type, unit, help, [samples])},
    or None when it is not installed. It refuses what OpenMetrics 1.0 forbids (no # EOF, a
    counter family named _total, a unit that is not the name's suffix, ...)."""
    try:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
        try:
            from prometheus_client.openmetrics.parser import text_string_to_metric_families
        except ImportError:
            print("SKIP the OpenMetrics parse: python3-prometheus-client is not installed")
            return None
    return {f.name: (f.type, f.unit, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(text)}


OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def test_exporter_serves_openmetrics_to_a_scraper_that_asks_for_it():
    accepts = {  # Accept header -> the form served
        None: PROMETHEUS_TYPE,
        "text/plain": PROMETHEUS_TYPE,
        "*/*": PROMETHEUS_TYPE,
        "application/openmetrics-text": OPENMETRICS_TYPE,
        "Application/OpenMetrics-Text; Version=1.0.0": OPENMETRICS_TYPE,
        # Prometheus 2's and 3's own headers
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1": OPENMETRICS_TYPE,
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;"
        "version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,"
        "*/*;q=0.2": OPENMETRICS_TYPE,
        "text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5": PROMETHEUS_TYPE,
        "application/openmetrics-text;q=0": PROMETHEUS_TYPE,
        "application/openmetrics-text;version=2.0.0": PROMETHEUS_TYPE,  # a version not served
        "application/openmetrics-text;q=x": PROMETHEUS_TYPE,
    }
    with Holders(["shared:512:128:40:4", "solo:128:0:16:1"]) as h, Exporter(h) as e:
        for accept, want in accepts.items():
            extra = f"Accept: {accept}\r\n" if accept is not None else ""
            status, headers, body = e.raw(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
            check(status == 200 and headers.get("Content-Type") == want, f"Accept: {accept}", headers)
            check(body.endswith(b"# EOF\n") == (want == OPENMETRICS_TYPE), f"# EOF only in OpenMetrics ({accept})",
                  body[-200:])
        om_req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text\r\n\r\n"
        status, headers, body = e.raw(om_req)
        text = body.decode()
        check(int(headers.get("Content-Length", -1)) == len(body), "Content-Length", headers)
        status, headers, empty = e.raw(om_req.replace(b"GET", b"HEAD"))
        check(status == 200 and empty == b"" and headers.get("Content-Type") == OPENMETRICS_TYPE, "HEAD", headers)
        check(not re.search(r"^# (TYPE|HELP|UNIT) \S+_total ", text, re.M), "no family named _total", text)
        check(re.search(r"^# TYPE gpupart_allocation_failures counter$", text, re.M), "counters' families", text)
        check(re.search(r"^# UNIT gpupart_partition_limit_bytes bytes$", text, re.M), "units", text)
        om = openmetrics_families(text)
        plain = parse_metrics(e.get("/metrics")[2].decode())
        if om is None or plain is None:
            return
        check(sorted(om) == sorted(plain), "the same families in both forms", sorted(om))
        for name, (kind, unit, help_, samples) in om.items():
            check(kind == plain[name][0] and help_ == plain[name][1], f"{name}: type and help", (kind, help_))
            check(unit == ("bytes" if name.endswith("_bytes") else ""), f"{name}: unit {unit!r}", "")
            same = [sorted((n, sorted(ls.items()), float(v)) for n, ls, v in x) for x in (samples, plain[name][2])]
            check(same[0] == same[1], f"{name}: the same samples", same)
        fails = [v for n, ls, v in om["gpupart_allocation_failures"][3] if ls.get("partition") == "shared"]
        check(fails == [4] and all(n.endswith("_total") for n, _, _ in om["gpupart_allocation_failures"][3]),
              "a counter's samples keep _total", om["gpupart_allocation_failures"])


def test_exporter_port_in_use_and_bad_listen():
    with Holders(["train:512:0:2"]) as h, Exporter(h) as e:
        _, err = expect_rc(["exporter", "--listen", f"127.0.0.1:{e.port}"], 1, env=h.env())
        check(f"cannot listen on 127.0.0.1:{e.port}" in err and "in use" in err, "port in use is named", err)
    for bad in ("127.0.0.1:", "127.0.0.1:x", "localhost:9464", "1.2.3.4.5:80", "127.0.0.1:70000", ":"):
        _, err = expect_rc(["exporter", "--listen", bad], 2)
        check("--listen" in err, f"--listen {bad} is explained", err)
    for bad in ("9464x", "-1", "x"):
        _, err = expect_rc(["exporter", "--listen", bad], 2)
        check("want ADDR:PORT" in err and "numeric address" not in err, f"bare port {bad} is named as the port", err)
    expect_rc(["exporter", "--bogus"], 2)


DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs")


def test_grafana_dashboard_and_scrape_config_fit_the_metrics():
    with open(os.path.join(DOCS, "grafana-dashboard.json")) as f:
        dash = parse_json(f.read())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 8 and dash["templating"]["list"][0]["name"] == "device", "dashboard panels", dash)
    check(dash["__inputs"][0]["pluginId"] == "prometheus", "importable: asks for its data source", dash)
    d = tempfile.mkdtemp()
    try:
        out, _ = expect_rc(["metrics", "--ledger-dir", d], 0)
    finally:
        os.rmdir(d)
    exported = set(re.findall(r"^# TYPE (\S+) ", out, re.M))
    used = set(re.findall(r"\bgpupart_[a-z_]+", " ".join(exprs)))
    check(used and used <= exported, f"the dashboard queries only exported families: {sorted(used - exported)}", "")
    check({"gpupart_partition_reserved_bytes", "gpupart_partition_limit_bytes", "gpupart_device_budget_bytes",
           "gpupart_member_reserved_bytes", "gpupart_partition_in_use_bytes", "gpupart_member_in_use_bytes",
           "gpupart_allocation_failures_total", "gpupart_driver_allocations_total"} <= used,
          "the dashboard shows the main families", sorted(used))
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP promtool check of the dashboard and scrape config: promtool is not installed")
        return
    rules = "groups:\n  - name: dashboard\n    rules:\n" + "".join(
        f"      - record: gpupart:dashboard:{i}\n        expr: {json.dumps(e.replace('$device', '.*'))}\n"
        for i, e in enumerate(exprs))
    path = write_file(rules)
    try:
        p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, "promtool parses every dashboard query", p.stdout + p.stderr + rules)
    finally:
        os.unlink(path)
    p = subprocess.run([promtool, "check", "config", os.path.join(DOCS, "prometheus.yml")], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0, "promtool accepts docs/prometheus.yml", p.stdout + p.stderr)


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG, decoded here
    (no imaging library needed)."""
    import zlib
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = ihdr
    assert depth == 8 and color in (2, 6) and not interlace, f"PNG kind {ihdr}"
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            pred = [0, a, b, (a + b) // 2, a + b - c][f]
            if f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
            line[i] = (line[i] + pred) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def test_the_status_page_in_a_headless_browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIP the browser test: chromium is not installed")
        return
    # train is preallocated: its whole limit reserved, 200 MiB of it in use
    with Holders(["+train:512:128:200", "eval:0:0:64"], ["other:256:0:100"]) as h, Exporter(h) as e:
        snap = parse_json(e.get("/top.json")[2])["devices"][0]
        check(snap["partitions"][0]["reserved"] == 512 * MIB and snap["partitions"][0]["in_use"] == 200 * MIB,
              "train: reserved past its use", snap)
        shot = os.path.join(h.dir, "page.png")
        base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--force-device-scale-factor=1", "--window-size=1000,600", f"--user-data-dir={h.dir}/chromium"]
        url = f"http://127.0.0.1:{e.port}/"
        p = subprocess.run(base + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
        check(p.returncode == 0 and os.path.exists(shot), "chromium took a screenshot", p.stderr[-2000:])
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        for name in ("train", "eval", "other"):
            check(f'<td class="n">{name}</td>' in dom, f"the rendered page shows {name}", dom)
        if not os.path.exists(shot):
            return
        w, _, rows = read_png(shot)
        in_use_c, reserved_c, limit_c = (32, 74, 135), (114, 159, 207), (201, 215, 238)
        track_c, mark_c = (238, 238, 238), (204, 0, 0)
        bands, current = [], None
        for y, row in enumerate(rows):  # a bar is a band of rows holding the track's colours
            has = sum(px in (in_use_c, reserved_c, limit_c) for px in row) > 5
            if has and current is None:
                current = [y, y]
            elif has:
                current[1] = y
            elif current is not None:
                bands.append(current)
                current = None
        check(len(bands) == 3, f"three bars drawn, found {len(bands)}", bands)
        for (top, bottom), p in zip(bands, snap["partitions"]):
            row = rows[(top + bottom) // 2]
            in_use = row.count(in_use_c)
            reserved = in_use + row.count(reserved_c)
            marks = row.count(mark_c)
            limit = reserved + marks + row.count(limit_c)
            track = limit + row.count(track_c)
            budget = snap["budget"]
            check(abs(in_use / track - p["in_use"] / budget) < 0.02, f"{p['name']}: in-use bar {in_use}/{track}", p)
            check(abs(reserved / track - p["reserved"] / budget) < 0.02, f"{p['name']}: reserved bar {reserved}/{track}",
                  p)
            check(abs(limit / track - p["limit"] / budget) < 0.02, f"{p['name']}: limit bar {limit}/{track}", p)
            check((marks > 0) == (p["guarantee"] > 0), f"{p['name']}: guarantee mark ({marks} px)", p)


# ---- gpupart ledger: the operator's ledger, made before any job ----

def operator_env(d, **extra):
    return {"GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": "1GiB", "GPUPART_SHARED": "1", "GPUPART_LEDGER_DIR": d,
            "GPUPART_PARTITIONS": "critical:50%:40%,be:80%:0", **extra}


def ledger_file(d):
    names = [n for n in os.listdir(d) if n.endswith(".ledger")]
    return os.path.join(d, names[0]) if len(names) == 1 else None


def start_holder(d, *specs):
    """A job of shared sim device 0 (1 GiB) in folder d; (process, first line)."""
    p = subprocess.Popen([HOLDER, d, "1024", *specs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return p, p.stdout.readline()


def end_holder(p):
    p.stdin.close()
    rc = p.wait(timeout=60)
    return rc, p.stderr.read()


def test_ledger_usage():
    expect_rc(["ledger"], 2)
    expect_rc(["ledger", "frob"], 2)
    expect_rc(["ledger", "create", "--force"], 2)
    expect_rc(["ledger", "create", "--ledger-dir="], 2)
    d = tempfile.mkdtemp(prefix="gpupart-op-")
    try:
        _, err = expect_rc(["ledger", "create", "--ledger-dir", d], 0,
                           env={"GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": "1GiB"})
        check("does not say shared" in err, "create warns when the configuration is not shared", err)
        _, err = expect_rc(["ledger", "create", "--ledger-dir", d, "--device", "sim:0"], 1,
                           env={"GPUPART_BACKEND": "sim", "GPUPART_SIM_TOTAL": "1GiB"})
        check("already the operator's" in err, "--device names the same device", err)
    finally:
        subprocess.run(["rm", "-rf", d])
    out, _ = expect_rc(["ledger", "--help"], 0)
    check("ledger create" in out and "--force" in out, "ledger --help", out)


def test_ledger_create_holds_floors_before_jobs():
    d = tempfile.mkdtemp(prefix="gpupart-op-")
    try:
        out, _ = expect_rc(["ledger", "create", "--ledger-dir", d], 0, env=operator_env("/nonexistent"))
        path = ledger_file(d)
        check(path and f"created {path}: budget 1 GiB, 2 partitions" in out, "ledger create says what it made", out)
        check(path and os.stat(path).st_mode & 0o777 == 0o600, "the operator's ledger is 0600")
        _, err = expect_rc(["ledger", "create"], 1, env=operator_env(d))
        check("already the operator's" in err, "a second create is refused", err)
        text, _ = expect_rc(["top", "--json", "--ledger-dir", d], 0)
        check('"critical"' in text and '"be"' in text and "427819008" in text, "top lists the operator's partitions",
              text)
        # the floor (40% of 1 GiB) is held before its job starts: "be" (limit 80%) cannot take 700 MiB
        p, line = start_holder(d, "be:1000:0:700")
        rc, err = end_holder(p)
        check(line == "" and rc == 1 and "keeps 427819008 more as its guarantee" in err and "operator's ledger" in err,
              f"a job cannot take the operator's floor before its job starts: exit {rc}", line + err)
        # two jobs join: each gets the ledger's figures whatever it asked
        be, line_be = start_holder(d, "be:1000:0:300")
        crit, line_crit = start_holder(d, "critical:10:0:400")
        check(line_be == "ready\n" and line_crit == "ready\n", "two jobs join the operator's ledger", line_be + line_crit)
        text, _ = expect_rc(["top", "--json", "--ledger-dir", d], 0)
        check(str(857735168) in text and str(536870912) in text, "the partitions keep the operator's limits", text)
        _, err = expect_rc(["ledger", "remove", "--ledger-dir", d], 1, env=operator_env("/nonexistent"))
        check(f"pid {be.pid} (cli_holder) 314572800 bytes" in err and f"pid {crit.pid}" in err and "--force" in err,
              "remove is refused while jobs hold bytes, naming them", err)
        rc_be, err_be = end_holder(be)
        rc_crit, err_crit = end_holder(crit)
        check(rc_be == 0 and rc_crit == 0, "the jobs end cleanly", err_be + err_crit)
        check("'critical': the operator's ledger of" in err_crit and "asked for limit 10485760" in err_crit,
              "a job whose figures differ is warned, naming both", err_crit)
        out, _ = expect_rc(["ledger", "remove"], 0, env=operator_env(d))
        check(path and f"removed {path}" in out and not os.path.exists(path), "remove ends it", out)
        _, err = expect_rc(["ledger", "remove"], 1, env=operator_env(d))
        check("No such file" in err, "removing nothing is refused", err)
    finally:
        subprocess.run(["rm", "-rf", d])


def test_ledger_job_takes_the_ledgers_figures():
    d = tempfile.mkdtemp(prefix="gpupart-op-")
    try:
        expect_rc(["ledger", "create"], 0, env=operator_env(d))
        path = ledger_file(d)
        job = operator_env(d, GPUPART_MEMORY_FRACTION="50%", GPUPART_PARTITIONS="critical:10%:5%,mine:10%")
        out, err = expect_rc(["config", "--json"], 0, env=job)
        c = parse_json(out)
        check(c["budget"] == GIB and c.get("budget_source") == f"ledger {path}", "the job's budget is the ledger's", out)
        parts = {p["name"]: p for p in c["partitions"]}
        check(parts["critical"]["limit"] == 512 * MIB and parts["critical"]["source"] == f"ledger {path}",
              "the operator's partition applies, with its source", out)
        check(parts["mine"]["source"] == "GPUPART_PARTITIONS", "the job's own partition keeps its source", out)
        check("budget mismatch" in err and "asked for 536870912" in err and f"operator's ledger {path}" in err,
              "a budget mismatch is a warning by default", err)
        check("the ledger's figures apply" in err, "a partition mismatch is a warning by default", err)
        out, _ = expect_rc(["config"], 0, env=job)
        check(re.search(rf"^budget +1073741824 bytes \(1 GiB\)  source ledger {re.escape(path)}$", out, re.M),
              "gpupart config names the ledger as the budget's source", out)
        # --force ends it under a job holding bytes; the job goes on with a ledger of its own
        p, line = start_holder(d, "be:1000:0:100")
        out, _ = expect_rc(["ledger", "remove", "--force"], 0, env=operator_env(d))
        rc, err = end_holder(p)
        check(line == "ready\n" and rc == 0, f"a job under a forced remove ends cleanly: exit {rc}", err)
    finally:
        subprocess.run(["rm", "-rf", d])


def test_shared_preallocation_has_one_member():
    """allow_growth = false on a shared device: the first process preallocates the
    partition's limit; a second one preallocating the same partition could take nothing,
    so its creation is refused naming the holder and the fix (it used to fail with 'the
    budget cannot grant')."""
    d = tempfile.mkdtemp(prefix="gpupart-prealloc-")
    try:
        first, line = start_holder(d, "+p:512:0:100")
        check(line == "ready\n", "the first process preallocates", line)
        second, line2 = start_holder(d, "+p:512:0:100")
        rc, err = end_holder(second)
        check(line2 == "" and rc == 1 and "GPUPART_ECONFIG" in err and f"pid {first.pid} (cli_holder) 536870912 bytes" in err
              and "allow_growth = true" in err and "partition of its own name" in err,
              f"a second preallocating member is refused clearly: exit {rc}", err)
        other, line3 = start_holder(d, "+q:256:0:100")
        check(line3 == "ready\n", "a partition of its own name preallocates beside it", line3)
        check(end_holder(other)[0] == 0 and end_holder(first)[0] == 0, "the holders end cleanly")
    finally:
        subprocess.run(["rm", "-rf", d])


def run_tests(scope):
    """Runs every test_* function of scope (a module's globals()), each whatever the
    others did, and says which failed: the exit status of the suites of tests/cli."""
    tests = [v for k, v in sorted(scope.items()) if k.startswith("test_") and callable(v)]
    for t in tests:
        before = len(failures)
        try:
            t()
        except Exception as e:  # a crash of one test must not hide the others
            failures.append(f"{t.__name__} raised {e!r}")
        print(f"{'ok  ' if len(failures) == before else 'FAIL'} {t.__name__}")
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print(f"{len(tests)} tests, {len(failures)} failed checks")
    return 1 if failures else 0


def main():
    global GPUPART
    GPUPART = os.path.abspath(sys.argv[1])
    global HOLDER
    HOLDER = os.path.abspath(sys.argv[2])
    global REQUESTER
    REQUESTER = os.path.abspath(sys.argv[3])
    return run_tests(globals())

if __name__ == "__main__":
    sys.exit(main())
