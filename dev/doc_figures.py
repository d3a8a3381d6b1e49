#!/usr/bin/env python3
# doc_figures.py: the deterministic figures the docs quote, produced by running the programs, and checked
# against the docs' text, so that a change that moves a figure fails until the docs follow.
#
#   python3 dev/doc_figures.py            print every figure of the fast groups and check it (test/test_docs.sh)
#   python3 dev/doc_figures.py --slow     also the GPT-2 124M (d12) groups: minutes on 2 cores, gigabytes of memory
#   python3 dev/doc_figures.py --only G   just group G (data, schedule, tiny; slow: zero_d12, act_d12, train_addition)
#
# A figure is the text the docs must hold, built from what a program printed (a token count, bytes as the
# allocator counted them, a bubble fraction of the simulator), and the place that must hold it: a file and the
# start of a line (a table row's first cell, or the opening words of a paragraph's line). The check is that a
# line of that file starts with that prefix and contains that text; it prints "ok   figure ..." or
# "FAIL figure ...: <file> has no line starting with ... that contains ..." and the line the docs hold now.
# Nothing here copies a figure from the docs: each is computed from a program's output; a program that prints
# nothing parsable is a failure, never a pass.
#
# Only deterministic figures are here: bytes (a function of the model, the layout and the code), token counts,
# zero-latency bubble fractions. Timings (step times, speed-ups, a real run's bubble) depend on the machine and
# its load: the docs say where and when they were measured, and this script leaves them alone. Losses of
# fixed-seed runs are bit-identical on one machine at one thread count, but OpenBLAS picks its kernels by CPU:
# only `make train`'s final val loss (3 decimals) and accuracy are checked, in the slow group train_addition;
# the precision tables' losses (4 decimals, seven runs) are left to dev/precision_numerics.sh.
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU = os.path.join(ROOT, "train_gpt_cpu")
CPU_BF16 = os.path.join(ROOT, "build", "train_gpt_cpu_bf16")
CPU_FP16 = os.path.join(ROOT, "build", "train_gpt_cpu_fp16")
EMU_BF16 = os.path.join(ROOT, "build", "train_gpt_emu_bf16")
SCHEDULE = os.path.join(ROOT, "build", "test_schedule_cpu")
MPIRUN = ["mpirun", "--oversubscribe", "-np"]
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


class Fig:
    def __init__(self, name, doc, prefix, text):
        self.name, self.doc, self.prefix, self.text = name, doc, prefix, text


def run(cmd, stop_after=None, timeout=600, env=None):
    """cmd's output. stop_after: a regex; once that many lines matched (count, regex), the process group is
    ended: the start-of-run report needs no training step."""
    e = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    if env:
        e.update(env)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=e,
                         start_new_session=True)
    out, seen, t0 = [], 0, time.time()
    for line in p.stdout:
        out.append(line)
        if stop_after and re.search(stop_after[1], line):
            seen += 1
            if seen >= stop_after[0]:
                os.killpg(p.pid, signal.SIGKILL)
                break
        if time.time() - t0 > timeout:
            os.killpg(p.pid, signal.SIGKILL)
            raise RuntimeError("timed out after %d s: %s" % (timeout, " ".join(cmd)))
    p.wait()
    text = "".join(out)
    if not stop_after and p.returncode != 0:
        raise RuntimeError("exit %d: %s\n%s" % (p.returncode, " ".join(cmd), text[-2000:]))
    return text


def grab(pattern, text, what):
    m = re.findall(pattern, text)
    if not m:
        raise RuntimeError("no %s in the output (pattern %r):\n%s" % (what, pattern, text[-1500:]))
    return m


def mb(b):
    return "%.1f MB" % (int(b) / 1e6)


def commas(n):
    return "{:,}".format(int(n))


def addition_data(tmp):
    """dev/data/addition.py's default data set in tmp (made once): the trainer's runs read its train shard."""
    d = os.path.join(tmp, "addition")
    if not os.path.exists(os.path.join(d, "addition_train.bin")):
        return run([sys.executable, "dev/data/addition.py", "--out", d])
    return ""


def trainer(binary, model, B, T, extra, outdir, np_=1):
    data = os.path.join(os.path.dirname(outdir), "addition", "addition_train.bin")
    cmd = [binary, "--model", model, "-b", str(B), "-t", str(T), "--steps", "1", "--output-dir", outdir,
           "--train-data", data, "--val-data", "", "--val-every", "0", "--sample-every", "0",
           "--save-on-signal", "0"] + extra
    if np_ > 1:
        cmd = MPIRUN + [str(np_), "-x", "OMP_NUM_THREADS"] + cmd
    return cmd


# ----------------------------------------------------------------------------------------------------------------
# the groups: each runs its programs and returns its figures


def group_data(tmp):
    """dev/data/README.md: what dev/data/addition.py writes with its defaults."""
    out = addition_data(tmp)
    got = {}
    for split, problems, tokens in grab(r"addition_(\w+)\.bin: (\d+) problems, (\d+) tokens", out, "token counts"):
        got[split] = (int(problems), int(tokens))
    tr, va, te = got["train"], got["val"], got["test"]
    per_doc = tr[1] // tr[0]
    assert per_doc * tr[0] == tr[1], "documents of one width expected with --pad 1"
    return [
        Fig("addition.py token counts", "dev/data/README.md", "With the defaults:",
            "train %d problems / %s tokens, val %d / %s, test %d / %s" % (
                tr[0], commas(tr[1]), va[0], commas(va[1]), te[0], commas(te[1]))),
        Fig("addition.py tokens per document", "dev/data/README.md", "so each digit sits",
            "`--digits 3`: %d tokens per document" % per_doc),
    ]


def group_schedule(tmp):
    """docs/README.md section 5: the zero-latency bubble fractions test_schedule prints."""
    out = run([SCHEDULE])
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 8 and f[0].isdigit() and f[1].isdigit():
            rows[(int(f[0]), int(f[1]))] = f[2:]
    if (4, 8) not in rows:
        raise RuntimeError("no P=4 m=8 row in test_schedule's bubble table:\n" + out[-1500:])
    gpipe, f1b, _, inter, _, zb = rows[(4, 8)]
    r3 = lambda s: "%.3f" % float(s)
    assert gpipe == f1b
    return [Fig("bubble P=4 m=8", "docs/README.md", "(P-1)/(3m+P-1). P = 4, m = 8:",
                "GPipe and 1F1B %s, interleaved V = 2 %s, ZB-H1 %s" % (r3(gpipe), r3(inter), r3(zb)))]


def act_bytes(out):
    return int(grab(r"activations per layer per micro-batch \(--recompute \w+\): (\d+) B measured", out,
                    "activations per layer")[0])


def start_report(binary, model, B, T, extra, tmp, tag, np_=1):
    """The start-of-run memory report (printed before the first step): the run is ended there."""
    return run(trainer(binary, model, B, T, extra, os.path.join(tmp, tag), np_),
               stop_after=(1, r"activations per layer per micro-batch"))


def group_tiny(tmp):
    """docs/model.md: the test model's bytes per layer for each --recompute; docs/precision.md: the precision table's memory
    columns (d2, C=128, T=64, B=8), from the start-of-run report of tiny models."""
    figs = []
    addition_data(tmp)
    test_model = "d2,C=32,NH=4,maxT=64,V=257"
    for r in ("none", "selective", "full"):
        f32 = act_bytes(start_report(CPU, test_model, 4, 8, ["--recompute", r], tmp, "tm32_" + r))
        # the BF16 column is the CUDA code's (emulated): its attention keeps a permuted copy of q, k, v
        b16 = act_bytes(start_report(EMU_BF16, test_model, 4, 8, ["--recompute", r], tmp, "tm16_" + r))
        figs.append(Fig("recompute %s, test model BF16 / FP32" % r, "docs/model.md", "| `%s` |" % r,
                        "| %s / %s B |" % (commas(b16), commas(f32))))
    prec_model = "d2,C=128,NH=4,maxT=64,V=257"
    runs = [("FP32", CPU, []), ("BF16", CPU_BF16, []), ("FP16", CPU_FP16, []), ("FP8 delayed", CPU_BF16, ["--fp8", "delayed"]),
            ("FP8 current", CPU_BF16, ["--fp8", "current"]), ("FP8 block", CPU_BF16, ["--fp8", "block"]),
            ("FP8 mx", CPU_BF16, ["--fp8", "mx"])]
    for name, binary, extra in runs:
        out = start_report(binary, prec_model, 8, 64, extra, tmp, "prec_" + name.replace(" ", "_"))
        bpp = grab(r"model states \d+ B = ([\d.]+) B/parameter measured", out, "bytes per parameter")[0]
        split = "(4+4+8)" if name == "FP32" else "(2+2+12)"
        act = commas(act_bytes(out))
        figs.append(Fig("precision table %s" % name, "docs/precision.md", "| %s |" % name,
                        "| %s %s | %s |" % (bpp, split, act)))
        figs.append(Fig("FP8 section's table %s" % name, "docs/README.md", "| %s |" % name,
                        "| %g %s | %s B |" % (float(bpp), split, act)))
    # Vp of the addition model (dev/data/README.md)
    out = start_report(CPU, test_model, 4, 8, [], tmp, "vp")
    vp = grab(r"V=257 \(Vp (\d+)\)", out, "padded vocabulary")[0]
    figs.append(Fig("padded vocabulary of V=257", "dev/data/README.md", "(the vocabulary is V = 257",
                    "which the model pads to Vp = %s" % vp))
    return figs


def zero_run(z, tmp):
    """GPT-2 124M at 4 processes, one step of B=1, T=64, ZeRO stage z: each kind's peak bytes, the largest over the
    ranks (--report-json has every rank's; under ZeRO-2 rank 0 holds fewer communication buffers than the
    others), the model states per parameter and the bytes sent per step (rank 0's ledger)."""
    import json
    rep = os.path.join(tmp, "z%d.json" % z)
    out = run(trainer(CPU, "d12", 1, 64, ["--zero", str(z), "--report-json", rep], os.path.join(tmp, "z%d" % z),
                      np_=4), timeout=900)
    with open(rep) as f:
        ranks = json.load(f)["ranks"]
    kinds = dict((k, max(r[k + "_peak_bytes"] for r in ranks))
                 for k in ("params", "grads", "moments", "comm_buffers", "activations", "workspace"))
    states = grab(r"model states (\d+) B = ([\d.]+) B/parameter measured", out, "model states")[-1]
    sent = int(grab(r"sent per step (\d+) B", out, "bytes sent per step")[-1])
    return kinds, states, sent


def group_zero_d12(tmp):
    """docs/ddp_zero.md's ZeRO memory table and docs/README.md's bytes per parameter and sent per step."""
    names = ["DDP (`--zero 0`)", "ZeRO-1 (P_os)", "ZeRO-2 (P_os+g)", "ZeRO-3 (P_os+g+p)"]
    paper = ["4+4+8 = 16 B", "4+4+8/N = 10 B", "4+12/N = 7 B", "16/N = 4 B"]
    figs, res, comm = [], [], []
    addition_data(tmp)
    for z in range(4):
        kinds, (states, bpp), sent = zero_run(z, tmp)
        res.append((bpp, sent))
        comm.append(kinds["comm_buffers"])
        row = "| %s | %s | %s | %s | %s | %.2f B | %s | %s | %s | %s | %s |" % (
            names[z], mb(kinds["params"]), mb(kinds["grads"]), mb(kinds["moments"]), mb(states), float(bpp),
            paper[z], mb(kinds["comm_buffers"]), mb(kinds["activations"]), mb(kinds["workspace"]), mb(sent))
        figs.append(Fig("ZeRO table, %s" % names[z], "docs/ddp_zero.md", "| %s |" % names[z], row))
    figs.append(Fig("bytes per parameter at N = 4", "docs/README.md", "| `llm/parallel/zero.h` | Rajbhandari",
                    "DDP **%.2f**, ZeRO-1 **%.2f** (4+4+8/N), ZeRO-2 **%.2f** (4+12/N), ZeRO-3 **%.2f** (16/N)"
                    % tuple(float(b) for b, _ in res)))
    figs.append(Fig("communication buffers", "docs/README.md", "DDP ",
                    "DDP %.2f MB, ZeRO-1 %.2f MB (small staging buffers, there before the first step), ZeRO-2 %.1f MB, "
                    "ZeRO-3 %.1f MB." % tuple(c / 1e6 for c in comm)))
    ratio = "%.3f" % (res[3][1] / res[0][1])
    figs.append(Fig("ZeRO-3 / DDP sent", "docs/README.md", "| `llm/parallel/zero.h`, `llm/train/report.h`",
                    "ZeRO-3 / DDP = **%s** (%s vs %s per rank per step" % (ratio, mb(res[3][1]), mb(res[0][1]))))
    figs.append(Fig("ZeRO-3 / DDP sent (docs/ddp_zero.md)", "docs/ddp_zero.md", "",
                    "Measured at 4 processes: DDP %s, ZeRO-3 %s per rank per step, ratio %s."
                    % (mb(res[0][1]), mb(res[3][1]), ratio)))
    return figs


def group_act_d12(tmp):
    """Activation bytes one layer keeps, GPT-2 124M at B=4, T=1024, FP32 CPU build: docs/model.md's recompute
    table, docs/tensor_parallel.md's table, docs/README.md's recompute table and its tp sentence."""
    figs, one = [], {}
    addition_data(tmp)
    for r in ("none", "selective", "full"):
        one[r] = act_bytes(start_report(CPU, "d12", 4, 1024, ["--recompute", r], tmp, "a_" + r))
        figs.append(Fig("recompute %s, d12 FP32 (bytes)" % r, "docs/model.md", "| `%s` |" % r,
                        "| %s B |" % commas(one[r])))
    rows = {}
    for t, sp in ((2, 0), (2, 1), (4, 0), (4, 1)):
        for r in ("none", "selective", "full"):
            out = start_report(CPU, "d12", 4, 1024, ["--tp", str(t), "--sequence-parallel", str(sp),
                                                     "--recompute", r], tmp, "t%d%d%s" % (t, sp, r), np_=t)
            rows[(t, sp, r)] = act_bytes(out)
    figs.append(Fig("tp table t=1", "docs/tensor_parallel.md", "| 1 | - |", "| 1 | - | %s | %s | %s |" % (
        mb(one["none"]), mb(one["selective"]), mb(one["full"]))))
    for t, sp in ((2, 0), (2, 1), (4, 0), (4, 1)):
        figs.append(Fig("tp table t=%d sp=%d" % (t, sp), "docs/tensor_parallel.md", "| %d | %d |" % (t, sp),
                        "| %d | %d | %s | %s | %s |" % (t, sp, mb(rows[(t, sp, "none")]),
                                                        mb(rows[(t, sp, "selective")]), mb(rows[(t, sp, "full")]))))
    figs.append(Fig("tp sentence", "docs/README.md", "Activation bytes per layer at t = 2",
                    "FP32 measured): %s, %s with" % (mb(rows[(2, 0, "none")]), mb(rows[(2, 1, "none")]))))
    for r, label in (("none", "| none |"), ("selective", "| selective"), ("full", "| full")):
        figs.append(Fig("docs recompute %s" % r, "docs/README.md", label, "| %s |" % mb(one[r])))
    return figs


def group_train_addition(tmp):
    """`make train`'s run (its flags, 1000 steps): the final val loss and the exact-match accuracy docs/precision.md quotes.
    A fixed-seed loss is bit-identical on one machine at one thread count; OpenBLAS picks its kernels by CPU, so
    on another machine the last digits can move (the docs quote 3 decimals)."""
    addition_data(tmp)
    d = os.path.join(tmp, "addition")
    log = os.path.join(tmp, "train_addition", "log.jsonl")
    run([CPU, "--model", "d2,C=64,NH=4,maxT=64,V=257", "--train-data", d + "/addition_train.bin",
         "--val-data", d + "/addition_val.bin", "--tokenizer", d + "/addition_tokenizer.bin", "-b", "32", "-t", "56",
         "--steps", "1000", "--lr", "3e-3", "--warmup", "100", "--lr-final", "0.05", "--weight-decay", "0.1",
         "--val-every", "100", "--val-steps", "5", "--sample-every", "0", "--checkpoint-every", "0",
         "--save-on-signal", "0", "--output-dir", os.path.dirname(log), "--eval-file", d + "/addition_test.bin"],
        timeout=1800, env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})
    import json
    rows = [json.loads(l) for l in open(log) if l.strip()]
    val = [r["val_loss"] for r in rows if "val_loss" in r and r.get("step") == 1000][-1]
    em = [r["exact_match"] for r in rows if "exact_match" in r][-1]
    return [Fig("make train's final val loss and accuracy", "docs/precision.md", "BF16 and the addition task of `make train`",
                "FP32 ends at val loss %.3f" % val),
            Fig("make train's accuracy", "docs/precision.md", "and ", "and %d%% held-out accuracy, FP16" % round(100 * em))]


GROUPS = [("data", group_data, False), ("schedule", group_schedule, False), ("tiny", group_tiny, False),
          ("zero_d12", group_zero_d12, True), ("act_d12", group_act_d12, True),
          ("train_addition", group_train_addition, True)]


def check(fig):
    path = os.path.join(ROOT, fig.doc)
    with open(path) as f:
        lines = f.read().splitlines()
    starts = [l for l in lines if l.startswith(fig.prefix)]
    if any(fig.text in l for l in starts):
        print("ok   figure %s: %s holds '%s'" % (fig.name, fig.doc, fig.text))
        return True
    now = starts[0][:300] if starts else "(no line starts so)"
    print("FAIL figure %s: %s has no line starting with '%s' that contains '%s' (the program's figure); it holds: %s"
          % (fig.name, fig.doc, fig.prefix, fig.text, now))
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--slow", action="store_true", help="also the GPT-2 124M groups (minutes)")
    ap.add_argument("--only", action="append", help="just these groups")
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="doc_figures_") as tmp:
        for name, fn, slow in GROUPS:
            if a.only and name not in a.only:
                continue
            if slow and not a.slow and not a.only:
                continue
            t0 = time.time()
            try:
                figs = fn(tmp)
            except (RuntimeError, AssertionError, KeyError, IndexError, ValueError, OSError) as e:
                print("FAIL figures of group %s: %s" % (name, e))
                failed += 1
                continue
            for fig in figs:
                if check(fig):
                    passed += 1
                else:
                    failed += 1
            print("   (group %s: %d figures, %.1f s)" % (name, len(figs), time.time() - t0))
    print("doc_figures: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
