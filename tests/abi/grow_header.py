#!/usr/bin/env python3
"""Writes a copy of gpupart.h with one field appended to gpupart_device_desc,
gpupart_partition_desc, gpupart_device_info and gpupart_stats: the header of a "future" gpupart, so that a
client built against it can be run against this library (tests/abi/client.c)."""
import sys

src, dst = sys.argv[1], sys.argv[2]
text = open(src).read()
for name in ("gpupart_device_desc", "gpupart_partition_desc", "gpupart_device_info", "gpupart_stats"):
    end = "} %s;" % name
    if text.count(end) != 1:
        sys.exit("grow_header.py: '%s' not found once in %s" % (end, src))
    text = text.replace(end, "  uint64_t future_field; /* appended by tests/abi/grow_header.py */\n" + end)
open(dst, "w").write(text)
