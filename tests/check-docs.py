#!/usr/bin/env python3
"""Fails when a public symbol of gpupart's headers has no comment: every exported function
(GPUPART_API), every typedef'd type and every public macro of include/*.h needs a comment
directly above it (no blank line between) or beside it on its first or last line.
Declarations of one kind (functions, types, macros) that follow one another with no
blank line form a group that shares the comment above the first, and so do a function and
the function-like macro just below it (gpupart_device_open -> gpupart_device_open_sized) (e.g. gpupart_vulkan_instance, _physical_device, _device).
Not checked: struct fields and enumerators (their type's comment covers them), macros
named GPUPART__* (internal), static inline functions (the forwarders a public macro
expands to, named gpupart__*), include guards, and #if/#else/#endif lines, which are
transparent (a comment above an #if documents the definitions inside it).

Names in the baseline file were undocumented when this check was written; they are
reported but do not fail, and the list must only shrink.
  check-docs.py INCLUDE_DIR BASELINE_FILE"""
import glob
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
CONDITIONAL = re.compile(r"#\s*(if|ifdef|ifndef|elif|else|endif)\b")


def split_lines(text):
    """Per line: (code without comments, kind) with kind 'comment' (only a comment, or
    the last line of one), 'trail' (code and a comment), 'code' or 'blank'."""
    out, in_comment = [], False
    for line in text.split("\n"):
        code, has_comment, i = "", in_comment, 0
        while i < len(line):
            if in_comment:
                end = line.find("*/", i)
                if end < 0:
                    i = len(line)
                else:
                    in_comment, i = False, end + 2
            elif line.startswith("/*", i):
                in_comment, has_comment, i = True, True, i + 2
            elif line.startswith("//", i):
                has_comment, i = True, len(line)
            else:
                code += line[i]
                i += 1
        code = code.strip()
        if not code:
            kind = "comment" if has_comment else "blank"
            if has_comment and in_comment:
                kind = "inside"  # a comment that goes on below
        else:
            kind = "trail" if has_comment else "code"
        out.append((code, kind))
    return out


def declarations(lines):
    """(name, first line, last line, kind) of each public declaration, in order."""
    decls, depth, stmt, start, skip_cpp, i = [], 0, "", None, 0, 0
    guard = None
    while i < len(lines):
        code, _ = lines[i]
        if code.startswith("#"):
            first = i
            while lines[i][0].endswith("\\") and i + 1 < len(lines):
                i += 1
            m = re.match(r"#\s*ifndef\s+(" + IDENT + ")", code)
            if m and guard is None:
                guard = m.group(1)
            if re.match(r"#\s*ifdef\s+__cplusplus", code):
                skip_cpp = 1
            elif skip_cpp and re.match(r"#\s*endif", code):
                skip_cpp = 0
            m = re.match(r"#\s*define\s+(" + IDENT + ")", code)
            if m and depth == 0 and not m.group(1).startswith("GPUPART__") and m.group(1) != guard:
                like_function = re.match(r"#\s*define\s+" + IDENT + r"\(", code)
                decls.append((m.group(1), first, i, "fmacro" if like_function else "macro"))
            i += 1
            continue
        if skip_cpp or not code:
            i += 1
            continue
        if start is None:
            start = i
        stmt += " " + code
        depth += code.count("{") - code.count("}")
        if depth == 0 and code.endswith("}") and re.match(r"\s*static\b", stmt):
            stmt, start = "", None  # a static inline forwarder: internal, never exported
        elif depth == 0 and code.endswith(";"):
            name = statement_name(stmt)
            if name:
                decls.append((name, start, i, "function" if "GPUPART_API" in stmt else "type"))
            stmt, start = "", None
        i += 1
    return decls


def statement_name(stmt):
    if "GPUPART_API" in stmt:
        m = re.search(r"(" + IDENT + r")\s*\(", stmt.split("GPUPART_API", 1)[1])
        return m.group(1) if m else None
    if re.match(r"\s*typedef\b", stmt):
        if "}" in stmt:  # typedef struct/enum X { ... } X;
            m = re.search(r"\}\s*(" + IDENT + r")\s*;\s*$", stmt)
            return m.group(1) if m else None
        m = re.search(r"\(\s*\*\s*(" + IDENT + r")\s*\)\s*\(", stmt)  # a function pointer
        if m:
            return m.group(1)
        m = re.search(r"(" + IDENT + r")\s*(\[[^\]]*\])?\s*;\s*$", stmt)
        return m.group(1) if m else None
    return None


def in_group(prev_kind, kind):
    """Whether a declaration of kind shares the comment of a prev_kind one just above: one
    kind, or a function and the function-like macro that calls it (gpupart_x -> _sized)."""
    return prev_kind is not None and (prev_kind == kind or (prev_kind, kind) == ("function", "fmacro"))


def undocumented(path):
    lines = split_lines(open(path, encoding="utf-8").read())
    decls = declarations(lines)
    ends = {last: (first, kind) for _, first, last, kind in decls}
    status, missing = {}, []  # status: "above", "beside" or None, by first line
    for name, first, last, kind in decls:
        above = first - 1
        while above >= 0 and CONDITIONAL.match(lines[above][0]):
            above -= 1
        prev_first, prev_kind = ends.get(above, (None, None))
        if above >= 0 and lines[above][1] == "comment":
            status[first] = "above"
        elif in_group(prev_kind, kind) and status.get(prev_first) == "above":
            status[first] = "above"  # in the group of the declaration just above
        elif "trail" in (lines[first][1], lines[last][1]):
            status[first] = "beside"
        else:
            status[first] = None
            missing.append((name, first + 1))
    documented = {name for name, first, _, _ in decls if status[first]}
    seen = set()
    return [(n, line) for n, line in missing
            if n not in documented and not (n in seen or seen.add(n))]


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    headers = sorted(glob.glob(os.path.join(argv[1], "*.h")))
    baseline = {l.split("#")[0].strip() for l in open(argv[2], encoding="utf-8")} - {""}
    if not headers:
        sys.exit(f"check-docs: no headers in {argv[1]}")
    new, old = [], set()
    for h in headers:
        for name, line in undocumented(h):
            (old.add(name) if name in baseline else new.append(f"{os.path.basename(h)}:{line}: {name}"))
    for name in sorted(baseline - old):
        print(f"check-docs: {name} is documented now (or gone): remove it from {argv[2]}")
    if old:
        print(f"check-docs: {len(old)} symbols still undocumented from the baseline: {' '.join(sorted(old))}")
    if new:
        print("check-docs: public symbols without a comment directly above or beside them:")
        print("\n".join("  " + n for n in new))
        return 1
    print(f"check-docs: every other public symbol of {len(headers)} headers has a comment")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
