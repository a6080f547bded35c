#!/usr/bin/env python3
"""Doxygen input filter for gpupart's headers, which use plain C comments: it turns them
into Doxygen comments on the fly (the headers stay as they are) and escapes the
characters that Doxygen would read as commands or markup, so that the comment text shows
as written.
  /* text */ on its own line(s)   -> /** text */   (documents what follows)
  code; /* text */                -> code; /**< text */ (documents that code)
  the header's opening comment    -> /** text @file */
  /* ---- section ---- */         unchanged (a banner, not documentation)
Usage (Doxygen's FILTER_PATTERNS calls it): doxygen-filter.py HEADER"""
import re
import sys

ESCAPE = {c: "\\" + c for c in "\\@<>&#%$"}
BANNER = re.compile(r"/\*\s*-{3,}.*-{3,}\s*\*/")


def filter_text(text):
    out, i, n, first, in_str = [], 0, len(text), True, False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
            i += 1
        elif c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            body = text[i + 2:end]
            line_start = text.rfind("\n", 0, i) + 1
            trailing = text[line_start:i].strip() != ""
            if BANNER.match(text[i:end + 2]) or body.startswith("*") or body.startswith("!"):
                out.append(text[i:end + 2])
            else:
                opener = "/**< " if trailing else "/** "
                closer = " @file */" if first and not trailing else "*/"  # @file keeps the line count
                out.append(opener + "".join(ESCAPE.get(ch, ch) for ch in body.lstrip(" ")) + closer)
            first = False
            i = end + 2
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(text[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(filter_text(f.read()))
