#!/usr/bin/env python3
"""precision_check.py: the checks of test/test_precision.sh on the runs of dev/precision_numerics.sh.

  python3 test/precision_check.py OUT BOUND

OUT holds one directory per run (fp32, bf16, fp16, delayed, current, block, mx), each with the
trainer's log.jsonl and stdout.txt. Prints one "ok"/"FAIL" line per check:
  - every run finished with finite losses;
  - its final val loss and final train loss (mean of the last 10% of steps) within BOUND of FP32's;
  - the FP16 run logged its loss scale every step;
  - memory, from the tagged allocator's report: model-state bytes per parameter as the ZeRO paper's
    formula says for the run's storage type (FP32 4+4+8, BF16/FP16 2+2+12: 2-byte parameters and
    gradients, FP32 master weights and moments), the 2-byte runs' parameters exactly half of FP32's,
    and activation bytes as predicted.
"""
import json
import math
import os
import re
import sys

out, bound = sys.argv[1], float(sys.argv[2])
npass = nfail = 0


def check(ok, what):
    global npass, nfail
    print(("ok   " if ok else "FAIL ") + what)
    npass += ok
    nfail += not ok


def final(run):
    steps, train, val, scales = [], [], [], 0
    with open(os.path.join(out, run, "log.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if "train_loss" in o:
                steps.append(o["step"]); train.append(o["train_loss"])
                scales += "loss_scale" in o
            if o.get("val_loss") is not None:
                val.append(o["val_loss"])
    k = max(1, len(train) // 10)
    return sum(train[-k:]) / k, (val[-1] if val else float("nan")), len(steps), scales


def memory(run):
    text = open(os.path.join(out, run, "stdout.txt")).read()
    m = re.search(r"measured \(allocated now \| peak\): parameters (\d+) \|", text)
    b = re.search(r"= ([0-9.]+) B/parameter measured \| ZeRO paper \(Table 1\) predicts ([0-9+]+) = ([0-9.]+) B/param", text)
    a = re.search(r"activations per layer per micro-batch[^:]*: (\d+) B measured \| (\d+) B predicted", text)
    p = re.search(r"Psi = (\d+) parameters", text)
    return (int(m.group(1)) if m else None, b.groups() if b else None, a.groups() if a else None,
            int(p.group(1)) if p else None)


runs = [r for r in ("fp32", "bf16", "fp16", "delayed", "current", "block", "mx") if os.path.isdir(os.path.join(out, r))]
if "fp32" not in runs:
    sys.exit("error: %s: expected the fp32 run, found %s" % (out, runs))
ref_train, ref_val, ref_n, _ = final("fp32")
for r in runs:
    t, v, n, scales = final(r)
    check(n == ref_n and math.isfinite(t) and math.isfinite(v), "%s: %d steps, final losses finite (train %.4f, val %.4f)" % (r, n, t, v))
    if r != "fp32":
        check(abs(v - ref_val) <= bound, "%s: final val loss %.4f, %+.4f from FP32's %.4f (bound %g)" % (r, v, v - ref_val, ref_val, bound))
        check(abs(t - ref_train) <= bound, "%s: final train loss %.4f, %+.4f from FP32's %.4f (bound %g)" % (r, t, t - ref_train, ref_train, bound))
    if r == "fp16":
        check(scales == n, "fp16: loss scale logged at %d of %d steps" % (scales, n))

p32 = memory("fp32")
for r in runs:
    params, bpp, act, psi = memory(r)
    if params is None or bpp is None or act is None or psi is None:
        check(False, "%s: the memory report (parameters, B/parameter, activations) in stdout.txt" % r); continue
    half = "bf16" if r == "bf16" else "fp16" if r == "fp16" else None
    if r in ("delayed", "current", "block", "mx"):
        half = None if "4+4+8" in bpp[1] else "fp8 base"
    formula = "4+4+8" if half is None else "2+2+12"
    check(bpp[1] == formula and abs(float(bpp[0]) - 16.0) < 0.01 and bpp[0] == bpp[2],
          "%s: model states %s B/parameter measured, the ZeRO paper's %s = %s" % (r, bpp[0], bpp[1], bpp[2]))
    esize = 4 if half is None else 2
    check(params == psi * esize, "%s: parameters %d B = Psi %d x %d B" % (r, params, psi, esize))
    check(act[0] == act[1], "%s: activations per layer %s B measured, %s B predicted" % (r, act[0], act[1]))

print("precision_check: %d passed, %d failed" % (npass, nfail))
sys.exit(1 if nfail else 0)
