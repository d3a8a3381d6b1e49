#!/usr/bin/env python3
"""fsync_check.py TRACE DIR [--no-manifest]: the order of the fsync and rename calls (test/fsync_trace.c's lines) that saving the
checkpoints in DIR made, against what a crash at any moment needs (llm/core/atomic_file.h):
  1. every file renamed into DIR (or a ckpt_* directory in it) was fsynced, under its temporary name, by the
     process that renamed it, before the rename: else a crash right after the rename can leave the name on a
     file whose bytes never reached the disk;
  2. every such rename is followed by an fsync of its directory by the same process: else the rename itself
     may be lost;
  3. a sharded checkpoint's manifest is renamed into place only after every shard's rename into that directory
     was made durable (its directory fsynced after it): else a crash can leave a manifest that names shards the
     disk never got;
  4. each checkpoint's entry in DIR/good_checkpoints.txt (appended when its save starts) was fsynced, by the
     process that completes the save, after the previous checkpoint and before this one's manifest (sharded)
     or model file (gathered) is renamed into place: else a crash can leave a checkpoint that the list, which
     --resume latest trusts, does not name. (The list itself came into DIR by a rename: checks 1 and 2.)
Prints one line per check ("ok ..." or "FAIL ...") with counts; exit 1 on a failure."""
import os, sys

trace, root = sys.argv[1], os.path.realpath(sys.argv[2])
want_manifest = "--no-manifest" not in sys.argv[3:]  # (a gathered save has none)
calls = []
for line in open(trace):
    parts = line.split()
    if len(parts) >= 4:
        calls.append((float(parts[0]), int(parts[1]), parts[2], [os.path.realpath(p) for p in parts[3:]]))
calls.sort()
renames = [(t, pid, a[0], a[1]) for t, pid, k, a in calls if k == "rename" and len(a) == 2 and a[1].startswith(root + "/")]
fsyncs = [(t, pid, a[0]) for t, pid, k, a in calls if k == "fsync"]
bad1, bad2, bad3, nman = [], [], [], 0
for t, pid, src, dst in renames:
    if not any(p == pid and f == src and ft < t for ft, p, f in fsyncs):
        bad1.append("%s (no fsync of %s before)" % (dst[len(root) + 1:], os.path.basename(src)))
    d = os.path.dirname(dst)
    if not any(p == pid and f == d and ft > t for ft, p, f in fsyncs):
        bad2.append("%s (its directory not fsynced after)" % dst[len(root) + 1:])
    if os.path.basename(dst) == "manifest.txt":
        nman += 1
        for t2, pid2, src2, dst2 in renames:
            if os.path.dirname(dst2) != d or t2 > t or dst2 == dst:
                continue
            if not any(p == pid2 and f == d and t2 < ft < t for ft, p, f in fsyncs):
                bad3.append("%s: %s renamed at %.6f, no fsync of the directory before the manifest at %.6f" %
                            (os.path.basename(d), os.path.basename(dst2), t2, t))
# 4. the good list's entry of each checkpoint made durable before the checkpoint completes
good = os.path.join(root, "good_checkpoints.txt")
def completes_save(dst):  # the rename that completes a checkpoint: its manifest (sharded), its model file (gathered)
    if want_manifest:
        return os.path.basename(dst) == "manifest.txt"
    return os.path.dirname(dst) == root and os.path.basename(dst).startswith("model_") and dst.endswith(".bin")
saves = [(t, pid, dst) for t, pid, src, dst in renames if completes_save(dst)]
bad4, prev = [], 0.0
for t, pid, dst in sorted(saves):
    if not any(p == pid and f == good and prev < ft < t for ft, p, f in fsyncs):
        bad4.append("%s: no fsync of good_checkpoints.txt since the previous save" % dst[len(root) + 1:])
    prev = t
n = len(renames)
ok = True
for bad, what in ((bad1, "fsynced before its rename"), (bad2, "its directory fsynced after the rename"),
                  (bad3, "every shard's rename durable before the manifest's (%d manifests)" % nman),
                  (bad4, "checkpoint's good-list entry fsynced before it completes (%d checkpoints)" % len(saves))):
    if bad:
        ok = False
        print("FAIL %d renames into %s: not %s: %s" % (n, root, what, "; ".join(bad[:4])))
    else:
        print("ok   %d renames into %s: each %s" % (n, os.path.basename(root), what))
if n == 0 or (want_manifest and nman == 0) or not saves:
    ok = False
    print("FAIL the trace holds %d renames and %d manifests: nothing was checked" % (n, nman))
sys.exit(0 if ok else 1)
