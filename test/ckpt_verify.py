#!/usr/bin/env python3
"""ckpt_verify.py DIR: checks every ckpt_* directory of DIR that has a manifest against it, independently
of the trainer (llm/ckpt_shard.h's format): the first line, the "complete" line, and each listed shard's
size and FNV-1a 64 checksum, recomputed here. Prints "ok" or what is wrong, then the complete
directories. Used by test/test_checkpoint.sh and test/test_faults_precision.sh."""
import os, sys
root = sys.argv[1]
bad, complete = [], []
for d in sorted(x for x in os.listdir(root) if x.startswith("ckpt_")):
    m = os.path.join(root, d, "manifest.txt")
    if not os.path.exists(m): continue
    lines = open(m).read().split("\n")
    if lines[0] != "llm-ckpt manifest 1" or "complete" not in lines: bad.append(d + ": manifest incomplete"); continue
    for l in lines:
        if not l.startswith("shard "): continue
        _, r, name, size, h = l.split()
        data = open(os.path.join(root, d, name), "rb").read()
        x = 14695981039346656037
        for b in data: x = ((x ^ b) * 1099511628211) & 0xffffffffffffffff
        if len(data) != int(size) or x != int(h, 16): bad.append("%s/%s: %d bytes %016x, manifest %s %s" % (d, name, len(data), x, size, h))
    complete.append(d)
print("ok" if not bad else "; ".join(bad), " ".join(complete))
