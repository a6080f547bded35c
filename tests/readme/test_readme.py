#!/usr/bin/env python3
"""The README's first steps, run as a new user would: its C program is extracted from
README.md, compiled against this build through the uninstalled pkg-config file (as the
README says), and run on the sim backend, alone and under the README's own
GPUPART_PARTITIONS example (which declares the "train" the program creates); the
`gpupart` command lines it shows are run from the build, and its shared example is run as
written: the program holding its memory in the background while `gpupart top --once` and
the exporter show it (in a scratch ledger folder).
Usage: test_readme.py README.md BUILD_DIR GPUPART_EXE SANITIZE CC [CC ARGS...]"""
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import socket
import tempfile
import time
import urllib.request

failures = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(f"{what}\n{detail}")


def blocks(text, lang):
    return re.findall(r"^```" + lang + r"\n(.*?)^```", text, re.S | re.M)


def flags(build):
    """The compile and link flags the README tells a user to get from pkg-config."""
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(build, "meson-uninstalled"))
    pc = shutil.which("pkg-config")
    if pc:
        p = subprocess.run([pc, "--cflags", "--libs", "gpupart"], env=env, capture_output=True, text=True)
        check(p.returncode == 0, "pkg-config --cflags --libs gpupart with the uninstalled .pc", p.stderr)
        if p.returncode == 0:
            return shlex.split(p.stdout)
    return ["-I" + os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "include"), "-L" + build, "-lgpupart"]


def run_program(exe, build, extra_env):
    env = {k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")}
    env.update({"GPUPART_BACKEND": "sim", "LD_LIBRARY_PATH": build}, **extra_env)
    return subprocess.run([exe], env=env, capture_output=True, text=True, timeout=120)


def compile_program(readme, build, sanitize, cc, d):
    """The README's C program compiled as it says, into d: its path, or None."""
    programs = [b for b in blocks(readme, "c") if "int main" in b]
    check(len(programs) >= 1, "README has a complete C program (with main)")
    if not programs:
        return None
    src, exe = os.path.join(d, "readme.c"), os.path.join(d, "readme")
    with open(src, "w") as f:
        f.write(programs[0])
    san = [f"-fsanitize={sanitize}"] if sanitize not in ("", "none") else []
    cmd = cc + ["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", *san, src, "-o", exe, *flags(build)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    check(p.returncode == 0, f"the README's program compiles: {' '.join(cmd)}", p.stderr)
    return exe if p.returncode == 0 else None


def test_program(readme, build, exe):
    p = run_program(exe, build, {})
    check(p.returncode == 0 and "256 MiB allocated in partition 'train'" in p.stdout,
          "the README's program runs on sim", p.stdout + p.stderr)
    parts = re.search(r'GPUPART_PARTITIONS="([^"]+)"', readme)
    check(parts is not None, "README shows a GPUPART_PARTITIONS example")
    if parts:
        p = run_program(exe, build, {"GPUPART_PARTITIONS": parts.group(1)})
        check(p.returncode == 0 and "partition 'train'" in p.stdout,
              f"the README's program under GPUPART_PARTITIONS={parts.group(1)}", p.stdout + p.stderr)


def wait_line(p, what, seconds=60):
    """The first line p prints, waited for at most seconds (a hung program fails, not hangs)."""
    ready, _, _ = select.select([p.stdout], [], [], seconds)
    line = p.stdout.readline() if ready else ""
    check(line, f"{what} printed nothing within {seconds} s", "")
    return line


def test_shared_example(readme, build, gpupart, exe):
    """The shared example as written: the program started in the background with the
    line's variables and argument holds its memory, `gpupart top --once` shows it, the
    exporter serves it; all in a scratch ledger folder, not /dev/shm."""
    block = next((b for b in blocks(readme, "sh") if "GPUPART_SHARED=1" in b), None)
    check(block is not None, "README shows a GPUPART_SHARED=1 example")
    if block is None:
        return
    first, *rest = [l for l in block.splitlines() if l.strip()]
    words = shlex.split(first.split("#")[0])
    check(words[-1] == "&" and "./my_app" in words, f"the example starts ./my_app in the background: {first}")
    at = words.index("./my_app")
    assigned = dict(w.split("=", 1) for w in words[:at])
    with tempfile.TemporaryDirectory(prefix="gpupart-readme-") as ledgers:
        env = {k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")}
        env.update(assigned, GPUPART_BACKEND="sim", GPUPART_LEDGER_DIR=ledgers, LD_LIBRARY_PATH=build)
        p = subprocess.Popen([exe, *words[at + 1:-1]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        try:
            line = wait_line(p, first)
            check("256 MiB allocated in partition 'train'" in line, f"{first}: its first line", line)
            tools = {k: v for k, v in env.items() if k not in assigned}
            for cmd in rest:
                args = shlex.split(cmd.split("#")[0])[1:]
                if args[:2] == ["top", "--once"]:
                    t = subprocess.run([gpupart, *args], env=tools, capture_output=True, text=True, timeout=120)
                    check(t.returncode == 0 and re.search(r"^\s+train\s.*\b256 MiB\b", t.stdout, re.M) and
                          re.search(rf"^\s+{p.pid}\s", t.stdout, re.M), f"{cmd}: train's 256 MiB and the process",
                          t.stdout + t.stderr)
                elif args[:1] == ["exporter"]:
                    body = check_server(gpupart, args, tools, cmd)
                    check(re.search(r'^gpupart_partition_in_use_bytes\{.*partition="train".*\} 268435456$', body, re.M),
                          f"{cmd}: /metrics shows train's 256 MiB in use", body)
            check(p.poll() is None, "the program still holds its memory after the commands", p.stderr.read() if
                  p.poll() is not None else "")
        finally:
            p.terminate()
            p.wait(timeout=60)


def test_commands(readme, gpupart):
    lines = [l for b in blocks(readme, "sh") for l in b.splitlines() if l.startswith("./build/tools/gpupart ")]
    check(lines, "README runs the gpupart command as ./build/tools/gpupart")
    for line in lines:
        args = shlex.split(line.split("#")[0])[1:]
        env = {k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")}
        env["GPUPART_BACKEND"] = "sim"
        env["GPUPART_LEDGER_DIR"] = tempfile.mkdtemp(prefix="gpupart-readme-")  # not /dev/shm
        if args and args[0] == "exporter":
            check_server(gpupart, args, env, line)
            continue
        p = subprocess.run([gpupart, *args], env=env, capture_output=True, text=True, timeout=120)
        # devices exits 1 on a machine with no GPU driver: that is its documented answer
        check(p.returncode in (0, 1) and "usage" not in p.stderr, f"README line: {line}", p.stdout + p.stderr)
        os.rmdir(env["GPUPART_LEDGER_DIR"])


def check_server(gpupart, args, env, line):
    """A README line that starts the exporter: it must answer /metrics (on the port the
    line names, or the next free one if a neighbour holds it) and then be stopped."""
    listen = args[args.index("--listen") + 1] if "--listen" in args else "127.0.0.1:9464"
    host, port = listen.rsplit(":", 1)
    s = socket.socket()
    s.bind((host, 0))
    free = s.getsockname()[1]
    s.close()
    args = [a if a != listen else f"{host}:{free}" for a in args]
    p = subprocess.Popen([gpupart, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    body, deadline = "", time.monotonic() + 20
    try:
        while not body and time.monotonic() < deadline and p.poll() is None:
            try:
                with urllib.request.urlopen(f"http://{host}:{free}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(0.2)
    finally:
        p.terminate()
        out, err = p.communicate(timeout=20)
    check("# TYPE gpupart_" in body, f"README line: {line} (served /metrics on port {free})", out + err + body)
    return body


def main():
    readme_path, build, gpupart, sanitize, cc = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    with open(readme_path) as f:
        readme = f.read()
    check(readme.startswith("# gpupart\n\n```sh\n./scripts/run ") and "\n./scripts/test " in readme[:200],
          "the README opens with ./scripts/run and ./scripts/test")
    with tempfile.TemporaryDirectory() as d:
        exe = compile_program(readme, build, sanitize, cc, d)
        if exe:
            test_program(readme, build, exe)
            test_shared_example(readme, build, os.path.abspath(gpupart), exe)
    test_commands(readme, os.path.abspath(gpupart))
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
