#!/usr/bin/env python3
"""Checks the floors of core/ (docs/design.md, "Rooms") so that what was untangled stays so:

  cycles    no group of the library's files (core/ and backends/) uses each other's
            non-static names in a circle: the names each object file defines and uses are
            read with nm from the built library's objects, and every strongly connected
            component of more than one file is reported with the names that tie it;
  rooms     each room uses the names (objects) and includes the headers (sources) only of
            the rooms it may see (and so do its tests, tests/core/ROOM/), and code outside
            core/ includes only the headers it is allowed; a quoted include never names a
            path (so no -I can be bypassed);
  meson     each room's sources are compiled with exactly its rooms' include directories
            (from compile_commands.json), so a wrong include fails to compile;
  sizes     no .c file over 800 lines in core/, backends/, tools/, bench/, interpose/,
            python/ or tests/; at most 20 .c files at core/'s top; at least 3 sub-rooms;
  rules     one place for each: the "/dev/shm" default is written once, and no code bounds
            a loop or a range check by a named backend (use the registry's X-macro).

usage: check-layout.py SOURCE_ROOT BUILD_ROOT
       check-layout.py --self-test   (the checks catch what they are for, on made-up input)
Exit status 0 when every check passes, 1 with one line per violation otherwise."""
import json
import os
import re
import subprocess
import sys

# Which rooms each room (or consumer outside core/) may see; core/meson.build's room_sees
# is the same table. "public" is include/.
SEES = {
    "base": {"base"},
    "config": {"base", "config"},
    "ledger": {"base", "ledger"},
    "suballoc": {"base", "suballoc"},
    "vm": {"base", "vm"},
    "door": {"base", "config", "door"},
    "top": {"base", "config", "ledger", "suballoc", "vm", "door", "top"},
    "backends": {"base", "door"},
    "tools": {"base", "config", "ledger", "door"},
    "bench": {"base"},
    "interpose": set(),
    "python": set(),
    "examples": set(),
}
# Outside core/, only these headers of a room they may see.
HEADERS = {
    "backends": {"door": {"interop.h"}},
    "tools": {"ledger": {"snapshot.h", "resize.h"}, "door": {"introspect.h", "reach.h"}},
    "bench": {"base": {"backend.h", "registry.h"}},
}
ROOM_DIRS = {"base": "core/base", "config": "core/config", "ledger": "core/ledger", "suballoc": "core/suballoc",
             "vm": "core/vm", "door": "core/door", "top": "core"}
OUTSIDE = ("backends", "tools", "bench", "interpose", "python", "examples")
MAX_LINES = 800
MAX_TOP_FILES = 20
SIZED = ("core", "backends", "tools", "bench", "interpose", "python", "tests")


def room_of(path):
    """The room of a path relative to the source root, or None. A room's tests
    (tests/core/ROOM/) see what the room sees; the top's (tests/core/) every room."""
    parts = path.split("/")
    if parts[:2] == ["tests", "core"] and len(parts) > 2:
        parts = parts[1:]
    if parts[0] == "core":
        if len(parts) == 2:
            return "top"
        return parts[1] if parts[1] in ROOM_DIRS else None
    return parts[0] if parts[0] in OUTSIDE else None


# ---- the graph of files --------------------------------------------------------------

def components(graph):
    """Strongly connected components (Tarjan, iterative) of {node: set(nodes)}."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def symbol_graph(defs, uses):
    """defs: {file: set(names)}, uses: {file: set(names)} -> ({file: {file: names}})."""
    owner = {}
    for f, names in defs.items():
        for n in names:
            owner.setdefault(n, f)
    edges = {}
    for f, names in uses.items():
        for n in names:
            g = owner.get(n)
            if g and g != f:
                edges.setdefault(f, {}).setdefault(g, set()).add(n)
    return edges


def check_cycles(edges, errors):
    graph = {f: set(t) for f, t in edges.items()}
    for comp in components(graph):
        if len(comp) < 2 or not any(f.startswith("core/") for f in comp):
            continue
        ties = []
        for f in comp:
            for g, names in sorted(edges.get(f, {}).items()):
                if g in comp:
                    ties.append(f"{f} -> {g} ({', '.join(sorted(names)[:3])})")
        errors.append(f"cycles: {len(comp)} files use each other's names in a circle: " + "; ".join(ties))


def symbol_room(path, door_files):
    return "door" if path in door_files else room_of(path)


def check_symbol_rooms(edges, door_files, errors):
    """Internal names (gpupart__*, and any other) by room; the public API (gpupart_*) is
    everyone's, as include/ is."""
    for f, targets in sorted(edges.items()):
        r = symbol_room(f, door_files)
        for g, all_names in sorted(targets.items()):
            names = {n for n in all_names if not (n.startswith("gpupart_") and not n.startswith("gpupart__"))}
            s = symbol_room(g, door_files)
            if not names:
                continue
            if r is None or s is None or s == r or r == "top" or r == "door":
                continue
            if r == "backends" and s == "backends":
                continue
            if s not in SEES.get(r, set()):
                errors.append(f"rooms: {f} ({r}) uses {', '.join(sorted(names)[:3])} of {g} ({s}), "
                              f"a room it may not use")


# ---- includes ------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def header_rooms(root):
    """{header name: room} for the headers of core/'s rooms, and 'public' for include/."""
    where = {}
    for room, d in ROOM_DIRS.items():
        full = os.path.join(root, d)
        for name in sorted(os.listdir(full)):
            if name.endswith(".h") and os.path.isfile(os.path.join(full, name)):
                where.setdefault(name, set()).add(room)
    for name in os.listdir(os.path.join(root, "include")):
        if name.endswith(".h"):
            where.setdefault(name, set()).add("public")
    return where


def check_includes(path, text, where, errors):
    """path: relative to the source root; text: its contents."""
    room = room_of(path)
    if room is None:
        return
    here = os.path.dirname(path)
    for name in INCLUDE.findall(text):
        if "/" in name:
            errors.append(f"rooms: {path} includes \"{name}\": a quoted include names a file, never a path")
            continue
        rooms = where.get(name)
        if not rooms or "public" in rooms:
            continue  # its own folder's, include/'s, a generated or a vendor header
        if len(rooms) > 1:
            errors.append(f"rooms: header {name} is in more than one room ({', '.join(sorted(rooms))})")
            continue
        (hroom,) = rooms
        if here == ROOM_DIRS.get(hroom):
            continue
        if hroom not in SEES[room]:
            errors.append(f"rooms: {path} ({room}) includes {name} of {hroom}, a room it may not see")
        elif room in HEADERS and hroom in HEADERS[room] and name not in HEADERS[room][hroom]:
            errors.append(f"rooms: {path} ({room}) includes {name} of {hroom}: of {hroom} it may include only "
                          + ", ".join(sorted(HEADERS[room][hroom])))


# ---- compile commands ----------------------------------------------------------------

def include_rooms(args, directory, root):
    """The rooms (and the source root or core/ itself) that a compile's -I flags name."""
    out = set()
    for i, a in enumerate(args):
        d = a[2:] if a.startswith("-I") and len(a) > 2 else args[i + 1] if a == "-I" and i + 1 < len(args) else None
        if d is None:
            continue
        full = os.path.normpath(os.path.join(directory, d))
        rel = os.path.relpath(full, root)
        if rel == ".":
            out.add("<source root>")
        for room, rd in ROOM_DIRS.items():
            if rel == rd:
                out.add(room)
    return out


def check_compile(entry, root, errors):
    path = os.path.relpath(os.path.normpath(os.path.join(entry["directory"], entry["file"])), root)
    room = room_of(path)
    if room is None or room in ("interpose", "python", "examples") or entry["output"].startswith("tests/"):
        return  # a test program compiling a source again sees what the tests see
    args = entry.get("arguments") or entry["command"].split()
    seen = include_rooms(args, entry["directory"], root)
    allowed = SEES[room] | ({room} if room in ROOM_DIRS else set())
    extra = seen - allowed
    if extra:
        errors.append(f"meson: {path} ({room}) is compiled seeing {', '.join(sorted(extra))} (-I), "
                      f"which it may not")


# ---- objects -------------------------------------------------------------------------

def nm_names(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRVWGSC" and kind.isupper():
            defined.add(name)
    return defined, used


def library_objects(commands, root, build):
    """{source path: object path} of the library's files (core/ and backends/)."""
    objs = {}
    for e in commands:
        path = os.path.relpath(os.path.normpath(os.path.join(e["directory"], e["file"])), root)
        if not (path.startswith("core/") or path.startswith("backends/")) or not path.endswith(".c"):
            continue
        out = e["output"]
        if out.startswith("tests/") or "/tests/" in out:
            continue  # a program that compiles the library's sources again (the fuzz target)
        objs.setdefault(path, os.path.join(e["directory"], out))
    return objs


# ---- sizes and rules -----------------------------------------------------------------

def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if out.returncode == 0:
        return sorted({f for f in out.stdout.split("\n") if f})  # once each, even mid-merge
    files = []
    for d, _, names in os.walk(root):
        files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return files


def check_sizes(files, root, errors):
    for f in files:
        if f.endswith(".c") and f.split("/")[0] in SIZED and not f.startswith("tests/abi/"):
            with open(os.path.join(root, f), errors="replace") as fh:
                n = sum(1 for _ in fh)
            if n > MAX_LINES:
                errors.append(f"sizes: {f} has {n} lines (at most {MAX_LINES})")
    top = [f for f in files if re.fullmatch(r"core/[^/]+\.c", f)]
    if len(top) > MAX_TOP_FILES:
        errors.append(f"sizes: core/ has {len(top)} .c files at its top (at most {MAX_TOP_FILES})")
    rooms = {f.split("/")[1] for f in files if re.fullmatch(r"core/[^/]+/[^/]+\.c", f)}
    if len(rooms) < 3:
        errors.append(f"sizes: core/ has {len(rooms)} sub-rooms with sources (at least 3)")


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


NAMED_BOUND = re.compile(r"[<>]=?\s*\(?\s*(?:\(\w+\))?\s*GPUPART_BACKEND_(?:SIM|OPENCL|VULKAN|CUDA)\b")


def check_rules(texts, errors):
    """texts: {path: text} of the C sources and headers of the library, tools and bench."""
    shm = [p for p, t in texts.items() for _ in re.finditer(r'"/dev/shm"', strip_comments(t))]
    if len(shm) != 1:
        errors.append(f"rules: the \"/dev/shm\" default is written {len(shm)} times ({', '.join(sorted(shm))}): once")
    for p, t in sorted(texts.items()):
        for m in NAMED_BOUND.finditer(strip_comments(t)):
            errors.append(f"rules: {p} bounds by a named backend ('{m.group(0).strip()}'): walk the registry's "
                          "GPUPART__BACKENDS or compare with GPUPART__BACKEND_COUNT")


# ---- main ----------------------------------------------------------------------------

def run(root, build):
    errors = []
    files = tracked(root)
    where = header_rooms(root)
    texts = {}
    for f in files:
        if f.endswith((".c", ".h")) and room_of(f) is not None:
            with open(os.path.join(root, f), errors="replace") as fh:
                texts[f] = fh.read()
            check_includes(f, texts[f], where, errors)
    with open(os.path.join(build, "compile_commands.json")) as fh:
        commands = json.load(fh)
    for e in commands:
        check_compile(e, root, errors)
    objs = library_objects(commands, root, build)
    defs, uses = {}, {}
    for path, obj in sorted(objs.items()):
        defs[path], uses[path] = nm_names(obj)
    edges = symbol_graph(defs, uses)
    door = {f"core/{h[:-2]}.c" for h in os.listdir(os.path.join(root, "core/door")) if h.endswith(".h")}
    check_cycles(edges, errors)
    check_symbol_rooms(edges, door, errors)
    check_sizes(files, root, errors)
    check_rules({p: t for p, t in texts.items() if room_of(p) in ("top", "base", "config", "ledger", "suballoc",
                                                                    "door", "backends", "tools", "bench")}, errors)
    for e in errors:
        print(e)
    if not errors:
        print(f"layout: {len(objs)} objects, {sum(len(t) for t in edges.values())} file-to-file uses, no circle; "
              "rooms, include directories, sizes and rules hold")
    return 1 if errors else 0


def self_test():
    """Each check on made-up input: it must find what it is for, and nothing in a clean case."""
    failures = []

    def expect(what, errors, n):
        if len(errors) != n:
            failures.append(f"{what}: expected {n} error(s), got {errors}")

    e = []
    check_cycles(symbol_graph({"core/a.c": {"f"}, "core/b.c": {"g"}, "core/c.c": {"h"}},
                              {"core/a.c": {"g"}, "core/b.c": {"h"}, "core/c.c": {"f"}}), e)
    expect("a circle of three files", e, 1)
    e = []
    check_cycles(symbol_graph({"core/a.c": {"f"}, "core/b.c": {"g"}}, {"core/a.c": {"g"}}), e)
    expect("a one-way use", e, 0)
    e = []
    check_symbol_rooms(symbol_graph({"core/base/x.c": {"f"}, "core/config/y.c": {"g"}},
                                    {"core/base/x.c": {"g"}}), set(), e)
    expect("base using config", e, 1)
    e = []
    check_symbol_rooms(symbol_graph({"backends/sim/s.c": {"f"}, "core/interop.c": {"gpupart__v"},
                                     "core/alloc.c": {"gpupart__a", "gpupart_alloc"}},
                                    {"backends/sim/s.c": {"gpupart__v", "gpupart__a", "gpupart_alloc"}}),
                       {"core/interop.c"}, e)
    expect("a backend using the door, the public API and the top", e, 1)
    where = {"internal.h": {"top"}, "settings.h": {"config"}, "shm_impl.h": {"ledger"}, "snapshot.h": {"ledger"},
             "error.h": {"base"}, "gpupart.h": {"public"}}
    e = []
    check_includes("core/config/x.c", '#include "internal.h"\n#include "error.h"\n#include "gpupart.h"\n', where, e)
    expect("config including internal.h", e, 1)
    e = []
    check_includes("tools/t.c", '#include "shm_impl.h"\n#include "snapshot.h"\n#include "settings.h"\n', where, e)
    expect("a tool including a private ledger header", e, 1)
    e = []
    check_includes("tools/t.c", '#include "../core/internal.h"\n', where, e)
    expect("a path in an include", e, 1)
    e = []
    check_rules({"core/a.c": 'x = "/dev/shm";', "core/b.c": '/* "/dev/shm" */ y = "/dev/shm";',
                 "tools/c.c": "for (b = 0; b <= GPUPART_BACKEND_CUDA; b++) ;"}, e)
    expect("two /dev/shm and a loop to the last backend", e, 2)
    e = []
    check_rules({"core/a.c": 'x = "/dev/shm"; if (b >= GPUPART__BACKEND_COUNT) return;'}, e)
    expect("the clean rules", e, 0)
    for f in failures:
        print(f)
    print("self-test: " + ("failed" if failures else "every check finds what it is for"))
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(run(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
