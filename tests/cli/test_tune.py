#!/usr/bin/env python3
"""gpupart tune tested as users run it: on the bundled traces, on a trace recorded with
GPUPART_TRACE from a small program (the recorder), and on two processes' traces together.
What it must show: the recommendation never holds more at peak than the default; the
GPUPART_* lines it prints, applied to gpupart-bench --trace --policy configured, reproduce
the peak reserved, fragmentation and driver calls it printed (and so does its INI, through
GPUPART_CONFIG); gpupart check-config accepts the INI; each objective ranks as documented;
--budget answers "fits" or "does not fit" (exit 3); bad traces and flags fail with exit 1
and 2 and a message. No test judges time (the run's seconds are printed, not asserted).
Usage: test_tune.py PATH/TO/gpupart PATH/TO/recorder PATH/TO/gpupart-bench|'' TRACE_DIR SANITIZE"""
import json
import os
import re
import subprocess
import sys
import tempfile

MIB = 1 << 20
failures = []
TMP = tempfile.mkdtemp(prefix="gpupart-tune-test-")


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith(("GPUPART_", "CUDA_DEVICE_MEMORY_LIMIT", "SLURM_SHARD_MEM_PER_GPU"))}
    env.update(extra or {})
    return env


def run(args, env=None, timeout=600):
    p = subprocess.run(args, env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(cond, what, detail=""):
    if not cond:
        failures.append(f"{what}\n{detail}")
    return cond


def tune(*args, rc=0, env=None):
    code, out, err = run([GPUPART, "tune", *args], env=env)
    check(code == rc, f"tune {' '.join(args)}: exit {code}, wanted {rc}", f"stdout:\n{out}\nstderr:\n{err}")
    return out, err


def tune_json(*args, rc=0):
    out, err = tune("--json", *args, rc=rc)
    try:
        return json.loads(out)
    except ValueError as e:
        failures.append(f"tune --json {' '.join(args)}: not JSON ({e})\n{out}\n{err}")
        return None


def env_of(candidate):
    return dict(line.split("=", 1) for line in candidate["env"])


def bench_row(traces, env):
    """gpupart-bench's configured row for the traces (together when several) under env."""
    out = os.path.join(TMP, "bench.json")
    args = [BENCH, "--backend", "sim", "--policy", "configured", "--repeat", "1", "--json", out]
    for t in traces:
        args += ["--trace", t]
    if len(traces) > 1:
        args.append("--together")
    code, stdout, err = run(args, env=env)
    if not check(code == 0, f"gpupart-bench {' '.join(args)} under {env}: exit {code}", stdout + err):
        return None
    with open(out) as f:
        rows = json.load(f)
    return rows[0] if check(len(rows) == 1, "one configured row", rows) else None


def same_figures(c, row, what):
    for key in ("peak_reserved", "driver_allocs", "driver_frees", "failed", "peak_in_use"):
        check(row[key] == c[key], f"{what}: {key} {row[key]} replayed, tune printed {c[key]}", (c, row))
    check(f"{row['fragmentation']:.6f}" == f"{c['fragmentation']:.6f}",
          f"{what}: fragmentation {row['fragmentation']} replayed, tune printed {c['fragmentation']}")


def reproduce(traces, c, what):
    """c's GPUPART_* lines, and its INI as GPUPART_CONFIG, replayed by gpupart-bench."""
    if not BENCH:
        return
    row = bench_row(traces, env_of(c))
    if row:
        same_figures(c, row, f"{what} ({c['description']}) through its GPUPART_* lines")
    ini = os.path.join(TMP, "reproduce.ini")
    with open(ini, "w") as f:
        f.write(c["ini"])
    row = bench_row(traces, {"GPUPART_CONFIG": ini})
    if row:
        same_figures(c, row, f"{what} ({c['description']}) through its INI")


def check_config_accepts(c, what):
    path = os.path.join(TMP, "check.ini")
    with open(path, "w") as f:
        f.write(c["ini"])
    code, out, err = run([GPUPART, "check-config", path])
    check(code == 0 and "ok" in out, f"{what}: check-config refuses the INI it printed", c["ini"] + out + err)


def check_search(d, what):
    """The JSON's promises: ranked best first, the default among the candidates, the
    recommendation eligible and never above the default's peak reserved."""
    cands, default, rec = d["candidates"], d["default"], d["recommended"]
    check(rec is not None, f"{what}: a recommendation")
    check(any(c["default"] for c in cands), f"{what}: the default is a candidate")
    check([c["rank"] for c in cands] == list(range(1, len(cands) + 1)), f"{what}: ranks 1..n")
    check(cands[0]["description"] == rec["description"], f"{what}: the recommendation ranks first", cands[0])
    if rec and default["failed"] == 0:
        check(rec["peak_reserved"] <= default["peak_reserved"],
              f"{what}: recommended peak reserved {rec['peak_reserved']} above the default's "
              f"{default['peak_reserved']}")
    for c in cands:
        if c["eligible"]:
            check(c["failed"] == 0 and c["error"] is None, f"{what}: an eligible candidate refused", c)
            check(c["peak_reserved"] <= default["peak_reserved"], f"{what}: eligible above the default", c)
            check(abs(c["fragmentation"] - (1 - c["peak_in_use"] / c["peak_reserved"])) < 1e-5,
                  f"{what}: fragmentation = 1 - in use / reserved", c)
            calls = c["driver_allocs"] * 0.080 + c["driver_frees"] * 0.450
            check(abs(c["modeled_driver_ms"] - calls) < 0.01, f"{what}: driver ms at 80/450 us per call", c)
    return rec


# ---- recorded traces ----

def record(name, rounds, seed):
    """Runs the recorder with GPUPART_TRACE=TMP/name; returns that path."""
    path = os.path.join(TMP, name)
    code, out, err = run([RECORDER, str(rounds), str(seed)], env={"GPUPART_TRACE": path})
    check(code == 0, f"recorder {rounds} {seed}: exit {code}", out + err)
    return path


PAIR = []


def recorded_pair():
    """Two processes of one run, recorded with %p as the docs say (once per test run)."""
    if not PAIR:
        os.makedirs(os.path.join(TMP, "pair"), exist_ok=True)
        record("pair/app.%p.ops", 30, 1)
        record("pair/app.%p.ops", 12, 2)
        d = os.path.join(TMP, "pair")
        PAIR.extend(sorted(os.path.join(d, f) for f in os.listdir(d)))
        check(len(PAIR) == 2, "two trace files, one per process", PAIR)
    return PAIR


# ---- tests ----

def test_help_lists_every_option():
    out, _ = tune("--help")
    check(out.startswith("usage: gpupart tune"), "tune --help", out)
    for word in ("--objective", "--budget", "--json", "--top", "--progress", "exit status", "GPUPART_TRACE",
                 "gpupart-bench"):
        check(word in out, f"tune --help mentions {word}", out)
    code, out, _ = run([GPUPART, "--help"])
    check("tune" in out, "gpupart --help lists tune", out)


def test_bad_flags_are_exit_2():
    kineto = os.path.join(TRACES, "kineto_resnet50_v100.ops.gz")
    for args, words in ((["--objective", "fast", kineto], "memory, calls or balanced"),
                        (["--budget", "-3", kineto], "--budget"), (["--budget", "lots", kineto], "--budget"),
                        (["--budget", "0", kineto], "--budget"), (["--budget", "1e9", kineto], "--budget"),
                        (["--top", "0", kineto], "--top"), (["--frobnicate", kineto], "unknown option"),
                        ([], "at least one TRACE"), (["--budget"], "needs a value")):
        _, err = tune(*args, rc=2)
        check(words in err, f"tune {args}: message names the problem", err)


def test_bad_traces_are_exit_1():
    def write(name, data):
        path = os.path.join(TMP, name)
        with open(path, "wb") as f:
            f.write(data)
        return path
    cases = [(os.path.join(TMP, "missing.ops"), "cannot read"), (TMP, "cannot read"),
             (write("empty.ops", b""), "holds no operations"),
             (write("garbage.ops", b"a 1 100 p\nhello \x1b[31mworld\n"), "garbage.ops:2: not a valid operation"),
             (write("unknown_free.ops", b"a 1 100\nf 2\n"), "unknown_free.ops:2"),
             (write("twice.ops", b"a 1 100\na 1 100\n"), "twice.ops:2"),
             (write("huge.ops", b"a 1 %d\n" % (1 << 60)), "huge.ops:1"),
             (write("exabytes.ops", b"".join(b"a %d %d\n" % (i, 1 << 56) for i in range(300))), "more than 1 PiB"),
             (write("notgzip.ops.gz", b"not gzip at all\n"), "gzip -dc")]
    for path, words in cases:
        _, err = tune(path, rc=1)
        check(words in err, f"tune {os.path.basename(path)}: '{words}' in the message", err)
        check("\x1b" not in err, f"tune {os.path.basename(path)}: a trace's escape sequence reaches the terminal", err)


def test_bundled_traces():
    """Every bundled trace: a recommendation no bigger than the default, reproduced by the
    benchmark, its INI accepted. The android trace is large (788,823 operations): under the
    sanitizers it is left to the regular build."""
    names = ["kineto_resnet50_v100"] + ([] if SANITIZE not in ("", "none") else ["android_systemui"])
    for name in names:
        trace = os.path.join(TRACES, name + ".ops.gz")
        d = tune_json(trace)
        if not d:
            continue
        print(f"  {name}: {d['configurations']} configurations, {d['replays']} replays in {d['seconds']:.1f} s")
        rec = check_search(d, name)
        check(d["partitions"] == ["p0"], f"{name}: unnamed allocations are partition p0", d["partitions"])
        if rec:
            reproduce([trace], rec, name)
            reproduce([trace], d["default"], name + " default")
            check_config_accepts(rec, name)


def test_table_shows_the_default_and_paste_ready_settings():
    trace = os.path.join(TRACES, "kineto_resnet50_v100.ops.gz")
    out, err = tune("--top", "1", trace)
    check(err == "", "no progress line when standard error is not a terminal", err)
    rows = [l for l in out.splitlines() if "MiB" in l and l[:5].strip().isdigit()]
    check(len(rows) == 2, "--top 1: one row and the default's", out)
    check("(default)" in out, "the default's row is shown", out)
    check("GPUPART_PARTITIONS=p0:" in out and "[partition p0]" in out, "GPUPART_* lines and INI printed", out)
    d = tune_json(trace)
    if d:
        env_lines = [l for l in out.splitlines() if re.match(r"GPUPART_[A-Z_]+=", l)]
        check(env_lines == d["recommended"]["env"], "text and JSON print the same lines",
              (env_lines, d["recommended"]))
        check(d["recommended"]["ini"] in out, "text and JSON print the same INI", out)


def test_recorded_trace():
    trace = record("app.ops", 40, 7)
    with open(trace) as f:
        head = f.readline()
    check(head.startswith("# gpupart-trace 1"), "the recorder wrote a gpupart trace", head)
    d = tune_json(trace)
    if not d:
        return
    check(d["partitions"] == ["weights", "activations", "scratch"], "the trace's partition names", d["partitions"])
    rec = check_search(d, "recorded")
    check(d["prealloc_searched"], "one process: preallocation searched", d)
    if rec:
        reproduce([trace], rec, "recorded")
        check_config_accepts(rec, "recorded")
    for c in d["candidates"][:4]:  # the runners-up reproduce as well
        reproduce([trace], c, "recorded runner-up")


def test_several_processes_under_a_budget_replay_the_same_every_time():
    """Several processes replayed in one share a ledger; give-back between them happens at
    the replay's own growth (no responder thread), so two runs agree figure for figure."""
    files = recorded_pair()
    if len(files) != 2:
        return
    runs = [tune_json("--budget", "0.8", *files, rc=3) for _ in range(2)]
    if None in runs:
        return
    figures = [[(c.get("failed"), c.get("peak_reserved"), c.get("driver_allocs")) for c in d.get("candidates", [])]
               for d in runs]
    check(figures[0] and figures[0] == figures[1], "two runs of tune --budget give the same figures",
          [f[:5] for f in figures])


def test_two_processes_share_their_partitions():
    files = recorded_pair()
    if len(files) != 2:
        return
    d = tune_json(*files)
    if not d:
        return
    check(d["processes"] == 2 and not d["prealloc_searched"], "two processes, no preallocation searched", d)
    rec = check_search(d, "two processes")
    if rec:
        check("GPUPART_SHARED=1" in rec["env"], "shared partitions need GPUPART_SHARED=1", rec["env"])
        check("shared = true" in rec["ini"], "and shared = true in the INI", rec["ini"])
        reproduce(files, rec, "two processes")
        check_config_accepts(rec, "two processes")


def test_objectives_rank_as_documented():
    files = recorded_pair()
    if len(files) != 2:
        return
    for objective in ("memory", "calls", "balanced"):
        d = tune_json("--objective", objective, *files)
        if not d or not d["recommended"]:
            continue
        check(d["objective"] == objective, "the objective is reported", d["objective"])
        eligible = [c for c in d["candidates"] if c["eligible"]]
        rec, default = d["recommended"], d["default"]
        if objective == "memory":
            check(rec["peak_reserved"] == min(c["peak_reserved"] for c in eligible), "memory: least peak", rec)
        elif objective == "calls":
            check(rec["modeled_driver_ms"] == min(c["modeled_driver_ms"] for c in eligible), "calls: least time", rec)
        else:
            def score(c):
                return (c["peak_reserved"] / default["peak_reserved"]
                        + (c["modeled_driver_ms"] + 1) / (default["modeled_driver_ms"] + 1))
            check(score(rec) <= min(score(c) for c in eligible) + 1e-9, "balanced: least score", rec)
        check(rec["peak_reserved"] <= default["peak_reserved"], f"{objective}: never above the default", rec)


def test_budget():
    trace = os.path.join(TRACES, "kineto_resnet50_v100.ops.gz")
    out, _ = tune("--budget", "4", trace)
    check("Fits in 4096.0 MiB" in out and "GPUPART_MEMORY_LIMIT=4GiB" in out, "--budget 4: fits, with the limit", out)
    d = tune_json("--budget", "2700MiB", trace)
    if d:
        check(d["fits"] is True and d["budget"] == 2700 * MIB, "2700MiB: fits", d)
        rec = d["recommended"]
        if rec:
            check(rec["peak_reserved"] <= 2700 * MIB, "the answer holds within the budget", rec)
            check("GPUPART_MEMORY_LIMIT=2700MiB" in rec["env"], "the budget is one of the settings", rec["env"])
            reproduce([trace], rec, "budget 2700MiB")
            check_config_accepts(rec, "budget 2700MiB")
    out, _ = tune("--budget", "2", trace, rc=3)
    check("Does not fit" in out and "Without a budget, the least peak reserved found is" in out,
          "--budget 2: does not fit, and what it needs", out)
    d = tune_json("--budget", "2", trace, rc=3)
    if d:
        check(d["fits"] is False and d["recommended"] is None and d["unbudgeted"], "JSON: fits false", d)
    tune("--budget", "1MiB", trace, rc=3)  # below one granule: holds nothing


def synthetic(name, names, rounds=40):
    """A trace of a few allocations per named partition, freed in waves; sizes vary."""
    lines, ident = [], 0
    for r in range(rounds):
        live = []
        for k, part in enumerate(names):
            for j in range(3):
                ident += 1
                lines.append(f"a {ident} {((r * 7 + k * 13 + j * 5) % 23 + 1) * 300007} {part}")
                live.append(ident)
        lines += [f"f {i}" for i in live[::-1]]
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_names_configuration_cannot_declare():
    """A name outside [A-Za-z0-9_.-] (the recorder escapes it, a space here) is replayed but
    never declared: no limit for it, no preallocation searched; the rest still is."""
    trace = synthetic("odd.ops", ["odd%20name", "plain"])
    d = tune_json(trace)
    if not d:
        return
    check(d["partitions"] == ["odd name", "plain"], "names decoded", d["partitions"])
    check(not d["prealloc_searched"], "no preallocation with an undeclarable name", d)
    rec = check_search(d, "odd names")
    for c in d["candidates"]:
        check("odd name" not in c["settings"]["partitions"], "an undeclarable name is never declared", c)
    if rec:
        reproduce([trace], rec, "odd names")
        check_config_accepts(rec, "odd names")


def test_more_partitions_than_configuration_declares():
    trace = synthetic("many.ops", [f"p{i}" for i in range(70)], rounds=3)
    d = tune_json(trace)
    if not d:
        return
    check(len(d["partitions"]) == 70 and not d["prealloc_searched"], "70 names: no preallocation searched", d)
    check_search(d, "70 partitions")
    for c in d["candidates"]:
        check(len(c["settings"]["partitions"]) <= 64, "at most 64 partitions declared", c["description"])
    if d["recommended"]:
        check_config_accepts(d["recommended"], "70 partitions")


def test_expandable_wins_where_blocks_fragment():
    """Rounds of 3-9 MiB buffers (and a few hundred bytes over), held together and then
    freed: growth blocks leave each block's tail unused, an expandable partition maps what
    each request lacks in place. The name (a space) cannot be declared, so neither
    preallocation nor limits compete: expandable must rank first, with the least
    fragmentation and peak of all, and its GPUPART_EXPANDABLE line must reproduce it."""
    lines, ident = [], 0
    for _ in range(4):
        live = []
        for k in range(60):
            ident += 1
            lines.append(f"a {ident} {(k % 7 + 3) * MIB + 12345} odd%20name")
            live.append(ident)
        lines += [f"f {i}" for i in live]
    trace = os.path.join(TMP, "expandable.ops")
    with open(trace, "w") as f:
        f.write("\n".join(lines) + "\n")
    d = tune_json(trace)
    if not d:
        return
    check(d["expandable_searched"] is True, "the simulated device offers virtual memory: expandable searched", d)
    rec = check_search(d, "expandable")
    if not rec:
        return
    check(rec["settings"]["expandable"] is True and rec["description"] == "expandable",
          "expandable recommended", rec["description"])
    check("GPUPART_EXPANDABLE=true" in rec["env"] and "expandable = true" in rec["ini"],
          "GPUPART_EXPANDABLE in the lines and the INI", rec)
    blocks = [c for c in d["candidates"] if c["eligible"] and not c["settings"]["expandable"]]
    check(blocks and all(rec["peak_reserved"] < c["peak_reserved"] and rec["fragmentation"] < c["fragmentation"]
                         for c in blocks), "expandable: less peak and fragmentation than every block configuration",
          (rec, blocks[:1]))
    out, _ = tune(trace)
    check("Recommended: expandable" in out, "the recommendation line names expandable", out)
    for c in d["candidates"]:
        if c["settings"]["expandable"] and c["settings"]["allow_growth"]:
            s = c["settings"]
            check((s["initial_block"], s["max_block"], s["growth_factor"], s["release_threshold"])
                  == (2 * MIB, 1 << 30, 2, None), "block settings left at their defaults when expandable", c)
    reproduce([trace], rec, "expandable")
    check_config_accepts(rec, "expandable")


def test_progress_when_asked():
    trace = os.path.join(TRACES, "kineto_resnet50_v100.ops.gz")
    _, err = tune("--progress", trace)
    lines = err.splitlines()
    check(lines and lines[0].startswith("gpupart tune: reading 1 trace"), "--progress: a first line", err)
    check(lines and lines[-1].startswith("gpupart tune: done:"), "--progress: a last line", err)


def main():
    global GPUPART, RECORDER, BENCH, TRACES, SANITIZE
    GPUPART, RECORDER = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    BENCH = os.path.abspath(sys.argv[3]) if sys.argv[3] else ""
    TRACES, SANITIZE = sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else ""
    if not BENCH:
        print("gpupart-bench is not built (-Dbench=disabled): the reproductions are skipped")
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    for t in tests:
        before = len(failures)
        try:
            t()
        except Exception as e:  # a crash of one test must not hide the others
            failures.append(f"{t.__name__} raised {e!r}")
        print(f"{'ok  ' if len(failures) == before else 'FAIL'} {t.__name__}")
    subprocess.run(["rm", "-rf", TMP])
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print(f"{len(tests)} tests, {len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
