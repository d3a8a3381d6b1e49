#!/usr/bin/env bash
# test_mfu.sh: the model FLOPs utilisation on the step line and in log.jsonl (llm/train/mfu.h), against the
# PaLM paper's formula written out here (appendix B: 6 N per token for the matmuls, N = the blocks'
# parameters plus the LM head's Vp C; attention's QK^T and AV 12 L T C per token, of which a causal model
# computes half, the convention this project states: 6 L T C), from the log's own tokens/s:
#   - with --peak-tflops, one process: every step's "mfu" = flops_per_token * tok_per_s / peak, and the
#     console's "MFU x%" is the same number in percent;
#   - with --peak-tflops under mpirun -np 2 (dp 2): the peak is per process, the run has two;
#   - without the flag: the header names a measured peak > 0 and its source, and the log's MFU divides by it;
#     the source names OpenBLAS's kernels, this CPU's best for its /proc/cpuinfo flags (llm/ops/blas_cpu.h), with
#     one "blas:" line when OpenBLAS's own choice was weaker and had to be forced;
#   - two trainers at once on the machine's cores: no step line above 100%, no log record above 1;
#   - the emulated CUDA build: without the flag no peak (the header says n/a, no MFU on the step lines or in
#     the log); with it the same check as the CPU build's.
# (--peak-tflops' bad values: test_bad_input.sh.) About 6 s.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=${BIN:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu_bf16}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0

python3 dev/data/addition.py --train 2000 --val 100 --test 10 --out "$tmp/data" > /dev/null
D="$tmp/data"
MODEL=d2,C=32,NH=4,maxT=64,V=257
common=(--model "$MODEL" --train-data "$D/addition_train.bin" --val-data "" -b 4 -t 32 --steps 4 --val-every 0 --sample-every 0)

# check_log NAME LOG STDOUT PEAK PROCS: every step's mfu against the paper's formula (PEAK in TFLOP/s per
# process; "header" takes it from the run's "mfu:" line), and the console's MFU the same in percent
check_log() {
    local out
    out=$(python3 - "$@" <<'PY'
import json, re, sys
name, log, stdout, peak, procs = sys.argv[1:6]
procs = int(procs)
L, C, V, T = 2, 32, 257, 32                     # the model (d2,C=32,NH=4,V=257) and -t 32
Vp = (V + 127) // 128 * 128                     # the padded vocabulary the LM head computes (384)
# the parameters the matmuls multiply by, tensor by tensor: per block ln_1 (w, b), c_attn (3C x C, 3C),
# attn.c_proj (C x C, C), ln_2 (w, b), c_fc (4C x C, 4C), mlp.c_proj (C x 4C, C); and the LM head (wte, Vp x C)
block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
N = L * block + Vp * C
# PaLM: 6 N + 12 L T C for attention's two products over all T keys; causal: half of them are computed
flops_per_token = 6 * N + 12 * L * T * C / 2
text = open(stdout).read()
if peak == "header":
    m = re.search(r"^mfu: .*\| peak ([0-9.eE+-]+) TFLOP/s per process \(measured: ([^)]*)\)", text, re.M)
    # plausible for a CPU: this 2-core VM's sgemm peak is ~0.02-0.15 TFLOP/s (less under load); a slip of units
    # (milliseconds for seconds, GFLOP/s for TFLOP/s) moves it 1000x, out of [0.001, 1000]
    if not m or not 0.001 <= float(m.group(1)) <= 1000:
        print("FAIL %s: no measured peak in [0.001, 1000] TFLOP/s in the header: %r" % (name, re.findall(r"^mfu:.*", text, re.M)))
        sys.exit()
    peak, rel = float(m.group(1)), 1e-3  # the header prints 4 significant digits
    print("ok   %s: the header reports a measured peak of %g TFLOP/s per process (%s)" % (name, peak, m.group(2)))
else:
    peak, rel = float(peak), 1e-5  # the log's floats (mfu and tok_per_s) carry ~7 digits
try: steps = [o for o in map(json.loads, open(log)) if "train_loss" in o]
except OSError as e: steps = []
console = [float(x) for x in re.findall(r"^step +\d+/\d+ \|.*\| MFU ([0-9.]+)%", text, re.M)]
bad = []
for o in steps:
    want = flops_per_token * o["tok_per_s"] / (peak * 1e12 * procs)
    if "mfu" not in o or abs(o["mfu"] - want) > rel * want:
        bad.append("step %d: mfu %s, the formula gives %.7g" % (o["step"], o.get("mfu"), want))
if len(steps) != 4 or bad:
    print("FAIL %s: %d step lines; %s" % (name, len(steps), "; ".join(bad)))
else:
    print("ok   %s: the 4 steps' mfu = %g FLOP/token x tok/s / (%d x %g TFLOP/s), e.g. %.6g at %.6g tok/s"
          % (name, flops_per_token, procs, peak, steps[-1]["mfu"], steps[-1]["tok_per_s"]))
# the console prints the percentage with one decimal
if len(console) != len(steps) or any(abs(c - 100 * o.get("mfu", -1)) > 0.05 + 1e-9 for c, o in zip(console, steps)):
    print("FAIL %s: console MFU %s vs the log's %s" % (name, console, [o.get("mfu") for o in steps]))
else:
    print("ok   %s: the console's MFU %% = 100 x the log's mfu on every step line" % name)
PY
)
    echo "$out"
    pass=$((pass + $(grep -c '^ok ' <<< "$out"))); fail=$((fail + $(grep -c '^FAIL' <<< "$out")))
}

# one process, the peak given (1 GFLOP/s, so the tiny model's MFU has digits to compare)
"$BIN" "${common[@]}" --peak-tflops 0.001 --output-dir "$tmp/a" > "$tmp/a.out" 2>&1 || { echo "FAIL the run failed:"; cat "$tmp/a.out"; fail=$((fail+1)); }
check_log "--peak-tflops, 1 process" "$tmp/a/log.jsonl" "$tmp/a.out" 0.001 1
if grep -q "peak 0.001 TFLOP/s per process (--peak-tflops)" "$tmp/a.out"; then pass=$((pass+1)); echo "ok   the header names the flag's peak"
else fail=$((fail+1)); echo "FAIL the header does not name the flag's peak: $(grep '^mfu:' "$tmp/a.out")"; fi

# two data-parallel processes: twice the peak
mpirun -np 2 --oversubscribe "$BIN" "${common[@]}" --peak-tflops 0.001 --output-dir "$tmp/b" > "$tmp/b.out" 2>&1 || { echo "FAIL the dp 2 run failed:"; cat "$tmp/b.out"; fail=$((fail+1)); }
check_log "--peak-tflops, dp 2" "$tmp/b/log.jsonl" "$tmp/b.out" 0.001 2

# no flag: the peak measured at start-up (sgemm on the CPU)
"$BIN" "${common[@]}" --output-dir "$tmp/c" > "$tmp/c.out" 2>&1 || { echo "FAIL the run failed:"; cat "$tmp/c.out"; fail=$((fail+1)); }
check_log "measured peak, CPU" "$tmp/c/log.jsonl" "$tmp/c.out" header 1

# the kernels the measured peak ran on (llm/ops/blas_cpu.h): the header names OpenBLAS and its kernels, which
# are the best this CPU's /proc/cpuinfo flags allow, computed here from the flags (Cooperlake: the five AVX-512
# sets and avx512_bf16; SkylakeX: the five; Haswell, or Zen on AMD: avx2 and fma; Sandybridge: avx); the one
# "blas:" line appears when OpenBLAS's own choice (build/test_blas_cpu --library-choice) was weaker, and only then
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x build/test_blas_cpu ]; then
    verdict=$(python3 - "$tmp/c.out" "$(build/test_blas_cpu --library-choice)" <<'PY'
import re, sys
out, library = open(sys.argv[1]).read(), sys.argv[2]
flags, amd = set(), False
for line in open("/proc/cpuinfo"):
    if line.startswith("flags") and not flags: flags = set(line.split(":", 1)[1].split())
    if line.startswith("vendor_id"): amd = "AuthenticAMD" in line
five = {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"} <= flags and {"avx2", "fma"} <= flags
best = ("Cooperlake" if five and "avx512_bf16" in flags else "SkylakeX" if five else
        ("Zen" if amd else "Haswell") if {"avx2", "fma"} <= flags else ("Bulldozer" if amd else "Sandybridge") if "avx" in flags else "Prescott")
level = {"Cooperlake": 4, "SapphireRapids": 4, "SkylakeX": 3, "Haswell": 2, "Zen": 2, "Excavator": 2, "Sandybridge": 1,
         "Bulldozer": 1, "Piledriver": 1, "Steamroller": 1}
m = re.search(r"^mfu: .*\(measured: sgemm \d+\^3 FP32, OpenBLAS \S+ (\w+) kernels(, forced over its (\w+))?\)", out, re.M)
forced_lines = re.findall(r"^blas: OpenBLAS chose its (\w+) kernels for this CPU, which runs (\w+)'s: restarted .*$", out, re.M)
should_force = level.get(library, 0) < level.get(best, 0)
if not m:
    print("FAIL the header names no OpenBLAS kernels: %r" % re.findall(r"^mfu:.*", out, re.M))
elif m.group(1) != best:
    print("FAIL the peak ran on %s kernels, this CPU's best is %s (flags: %s)" % (m.group(1), best, " ".join(sorted(f for f in flags if f.startswith("avx") or f == "fma"))))
elif should_force != bool(forced_lines) or should_force != bool(m.group(2)) or (forced_lines and forced_lines[0] != (library, best)):
    print("FAIL the library chose %s, the best is %s: expected %s, found %d 'blas:' lines %s and a header %r" % (
        library, best, "one forced line" if should_force else "none", len(forced_lines), forced_lines, m.group(0)))
else:
    print("ok   the peak ran on this CPU's best OpenBLAS kernels, %s%s" % (best, " (OpenBLAS chose %s: forced, one line says so)" % library if should_force else " (OpenBLAS's own choice)"))
PY
)
    echo "$verdict"
    pass=$((pass + $(grep -c '^ok ' <<< "$verdict"))); fail=$((fail + $(grep -c '^FAIL' <<< "$verdict")))
elif [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo "ok   OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set: the user's kernels, none forced (the choice: test_blas_cpu)"; pass=$((pass+1))
else
    echo "FAIL build/test_blas_cpu is not built (make build/test_blas_cpu)"; fail=$((fail+1))
fi

# two trainers at once on this machine's cores (each measures its peak while the other computes, and later steps may
# run alone): no step line shows more than 100% and no log record more than 1 (llm/train/mfu.h: a step past the
# measured peak gets the peak measured again or raised to its rate, and a line and a record say so)
two=(--model d2,C=256,NH=4,maxT=64,V=257 --train-data "$D/addition_train.bin" --val-data "" -b 8 -t 64 --steps 60
     --print-every 1 --sample-every 0 --val-every 0)
"$BIN" "${two[@]}" --output-dir "$tmp/two1" > "$tmp/two1.out" 2>&1 & first=$!
sleep 0.5
"$BIN" "${two[@]}" --output-dir "$tmp/two2" > "$tmp/two2.out" 2>&1; rc2=$?
wait $first; rc1=$?
over=$(python3 - "$tmp/two1" "$tmp/two2" <<'PY'
import json, re, sys
bad, lines, top, raised = [], 0, 0.0, 0
for d in sys.argv[1:]:
    out = open(d + ".out").read()
    for m in re.finditer(r"^step +\d+/\d+ .*\| MFU ([0-9.]+)%", out, re.M):
        lines += 1; top = max(top, float(m.group(1)))
        if float(m.group(1)) > 100.0: bad.append(m.group(0)[:60])
    raised += len(re.findall(r"^mfu: step \d+ ran at", out, re.M))
    for l in open(d + "/log.jsonl"):
        o = json.loads(l)
        if o.get("mfu", 0) > 1.0: bad.append("log step %d mfu %g" % (o["step"], o["mfu"]))
print("%d %g %d %s" % (lines, top, raised, "; ".join(bad[:3])))
PY
)
read -r nl top raised rest <<< "$over"
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$nl" -eq 120 ] && [ -z "$rest" ]; then
    echo "ok   two trainers at once: $nl step lines, the highest MFU $top% (<= 100%), $raised peaks raised on the way"; pass=$((pass+1))
else
    echo "FAIL two trainers at once: exit $rc1 and $rc2, $nl step lines, above 100%: ${rest:-none}"; fail=$((fail+1))
fi

# the emulated CUDA build: no peak measured, no MFU shown; with --peak-tflops the same MFU as the CPU build
if [ -x "$EMU" ]; then
    "$EMU" "${common[@]}" --steps 2 --output-dir "$tmp/e" > "$tmp/e.out" 2>&1 || { echo "FAIL the emulated run failed:"; cat "$tmp/e.out"; fail=$((fail+1)); }
    if grep -q '^mfu: .*| peak n/a (emulated CUDA' "$tmp/e.out" && ! grep -q '"mfu"' "$tmp/e/log.jsonl" && \
       [ "$(grep -c '^step .* tok/s | elapsed [^|]*$' "$tmp/e.out")" -eq 2 ] && ! grep -q '^step .*MFU' "$tmp/e.out"; then
        pass=$((pass+1)); echo "ok   emulated CUDA without --peak-tflops: the header says n/a, no MFU on the 2 step lines or in the log"
    else
        fail=$((fail+1)); echo "FAIL emulated CUDA without --peak-tflops: $(grep -E '^(mfu|step)' "$tmp/e.out" | tr '\n' ' ') $(head -c 300 "$tmp/e/log.jsonl")"
    fi
    "$EMU" "${common[@]}" --peak-tflops 0.001 --output-dir "$tmp/f" > "$tmp/f.out" 2>&1 || { echo "FAIL the emulated run failed:"; cat "$tmp/f.out"; fail=$((fail+1)); }
    check_log "--peak-tflops, emulated CUDA" "$tmp/f/log.jsonl" "$tmp/f.out" 0.001 1
else
    echo "FAIL $EMU is not built (make $EMU)"; fail=$((fail+1))
fi

echo "mfu: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
