#!/usr/bin/env bash
# test_mfu.sh: the model FLOPs utilisation on the step line and in log.jsonl (llm/train/mfu.h), against the
# PaLM paper's formula written out here (appendix B: 6 N per token for the matmuls, N = the blocks'
# parameters plus the LM head's Vp C; attention's QK^T and AV 12 L T C per token, of which a causal model
# computes half, the convention this project states: 6 L T C), from the log's own tokens/s:
#   - with --peak-tflops, one process: every step's "mfu" = flops_per_token * tok_per_s / peak, and the
#     console's "MFU x%" is the same number in percent;
#   - with --peak-tflops under mpirun -np 2 (dp 2): the peak is per process, the run has two;
#   - without the flag: the header names a measured peak > 0 and its source, and the log's MFU divides by it;
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
