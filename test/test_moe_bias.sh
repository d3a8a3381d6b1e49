#!/usr/bin/env bash
# test_moe_bias.sh: DeepSeek-V3's auxiliary-loss-free load balancing through the trainer (--expert-bias-rate R,
# llm/train/moe_balance.h, docs/moe.md "The bias method"), on test_moe_train.sh's tiny moe model (d2, C=32, NH=4,
# maxT=64, V=257, E=4, K=2, every layer a moe layer, capacity factor 1) and the addition data.
#
#   bash test/test_moe_bias.sh          (needs ./train_gpt_cpu and build/train_gpt_emu)
#
# Checked, one line each:
#  1. The formula: log.jsonl's "moe_bias" after every step equals, bit for bit, the bias recomputed here from the
#     log's own routed counts, b += float32(R) * sign(mean - load) per moe layer (numpy float32, the same additions);
#     the bias moved (some value nonzero after step 1).
#  2. The bias reaches the router: step 1 (bias still zero) is the R = 0 run's (loss and counts identical); a later
#     step's routed counts differ from the R = 0 run's. R = 0 is today's run: no "moe_bias" in log.jsonl, no bias in
#     the state file (header[41] = 0), its size the formula's without one.
#  3. Layouts against one process with gradient accumulation over the same micro-batches: dp 2 (ZeRO-1), pp 2
#     (1f1b), ep 2 (the experts split over the 2 dp ranks: each routes its own tokens before the dispatch), tp 2,
#     and the emulated CUDA build (its router kernel reads the device bias): losses, grad norms and
#     final parameters within test_moe_train.sh's bounds (4e-6 relative, 1e-5 absolute; emulated 1e-5), and every
#     step's routed counts and bias equal to one process's (the counts are integers summed over dp and pp: a layout
#     that skipped the sum, or summed twice, moves the bias another way).
#  4. Checkpoints: one process resumed from its step-2 state = the uninterrupted run, model and state bytes (the
#     state holds the bias: a resume that lost it routes steps 3-4 otherwise); the dp 2 run's gathered state and its
#     sharded checkpoint (rank 0's shard carries the bias) resumed in one process match the dp 2 run, bias too.
#  5. Bad values: --expert-bias-rate -0.1, nan, 2e6, and > 0 on a dense model: one line each naming the flag.
# Logs: build/moe_bias/. Ends with "test_moe_bias: N passed, M failed"; exit 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/moe_bias
rm -rf "$LOG"; mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badflag, train
R=0.01  # the bias's step: probabilities here are ~1/E = 0.25 apart by ~0.01-0.1, so a few steps of it re-route tokens

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
base=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        --model d2,C=32,NH=4,maxT=64,V=257
        -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1 --lr-final 0.1 --weight-decay 0.1 --grad-clip 0
        --val-every 2 --val-steps 1 --sample-every 0 --checkpoint-every 2 --capacity-factor 1)
common=("${base[@]}" --experts 4 --top-k 2)
# reads the test's python lines "ok   ..." / "FAIL ..." from a file
relay() { while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$1"; }

# 1, 2: one process with and without the bias, 4 micro-batches a step (one_512 is the layouts' reference too)
train one_512 0 "$CPU" --total-batch 512 --expert-bias-rate $R
train zero_512 0 "$CPU" --total-batch 512
python3 - "$tmp/one_512" "$tmp/zero_512" "$R" > "$tmp/formula.out" <<'EOF'
import json, os, struct, sys
import numpy as np
run, zero, R = sys.argv[1], sys.argv[2], np.float32(sys.argv[3])
def steps(d): return [json.loads(l) for l in open(os.path.join(d, "log.jsonl")) if '"train_loss"' in l]
a, z = steps(run), steps(zero)
# 1. the bias recomputed from the log's routed counts: sign(mean - load) on integers (E * load against the total)
b = None
worst, moved, n = 0, False, 0
for o in a:
    load = np.array(o["moe_routed"], dtype=np.int64)           # (moe layers, E)
    L, E = load.shape
    if b is None: b = np.zeros((L, E), dtype=np.float32)
    sign = np.sign(load.sum(axis=1, keepdims=True) - E * load).astype(np.float32)
    b = (b + R * sign).astype(np.float32)
    got = np.array(o.get("moe_bias", np.full((L, E), np.nan)), dtype=np.float32)
    worst += int(np.sum(got.view(np.uint32) != b.view(np.uint32)))
    moved |= bool(np.any(got != 0))
    n += got.size
print("%s formula: log.jsonl's moe_bias over %d steps = the recomputation b += %g * sign(mean - load) from its moe_routed "
      "counts: %d of %d values differ in their bits; last %s" % ("ok  " if worst == 0 and moved and len(a) == 4 else "FAIL",
      len(a), R, worst, n, a[-1].get("moe_bias")))
# 2. step 1 (zero bias) is the R = 0 run's; later routing differs; R = 0 logs no bias
same1 = a[0]["train_loss"] == z[0]["train_loss"] and a[0]["moe_routed"] == z[0]["moe_routed"]
later = [o["step"] for o, p in zip(a[1:], z[1:]) if o["moe_routed"] != p["moe_routed"]]
print("%s the bias reaches the router: step 1 loss %.7f and counts = the R = 0 run's: %s; steps whose routed counts differ "
      "from R = 0's: %s" % ("ok  " if same1 and later else "FAIL", a[0]["train_loss"], same1, later))
nobias = all("moe_bias" not in o for o in z)
st = sorted(f for f in os.listdir(zero) if f.startswith("state_"))[-1]
raw = open(os.path.join(zero, st), "rb").read()
h = struct.unpack("<256i", raw[:1024])
psi = h[10] | (h[11] << 32)
size = 1024 + 3 * 4 * psi + 8 * h[31]  # header, params m v, the health windows (FP32 build: no 16-bit copy, no FP8)
print("%s R = 0: no moe_bias in log.jsonl: %s; %s header[1] version %d, header[41] = %d, %d bytes (without a bias: %d)" % (
      "ok  " if nobias and h[41] == 0 and len(raw) == size and h[1] == 4 else "FAIL", nobias, st, h[1], h[41], len(raw), size))
EOF
relay "$tmp/formula.out"

# 3. layouts against one process (B*T = 128 tokens a micro-batch; one_512: 4 of them, one_256: 2)
train one_256 0 "$CPU" --total-batch 256 --expert-bias-rate $R
train dp2 2 "$CPU" --total-batch 256 --zero 1 --expert-bias-rate $R --checkpoint-format both &&
    check compare "dp 2 ZeRO-1 with the bias vs 1 process, 2 micro-batches" "$tmp/dp2" "$tmp/one_256" 4e-6 1e-5
train pp2 2 "$CPU" --pp 2 --schedule 1f1b --total-batch 512 --expert-bias-rate $R &&
    check compare "pp 2 1f1b with the bias vs 1 process, 4 micro-batches" "$tmp/pp2" "$tmp/one_512" 4e-6 1e-5
train ep2 2 "$CPU" --ep 2 --total-batch 256 --expert-bias-rate $R &&
    check compare "ep 2 (over dp 2) with the bias vs 1 process, 2 micro-batches" "$tmp/ep2" "$tmp/one_256" 4e-6 1e-5
train tp2 2 "$CPU" --tp 2 --total-batch 256 --expert-bias-rate $R &&
    check compare "tp 2 with the bias vs 1 process, 2 micro-batches" "$tmp/tp2" "$tmp/one_256" 4e-6 1e-5
if [ -x "$EMU" ]; then
    train emu 0 "$EMU" --total-batch 256 --expert-bias-rate $R &&
        check compare "emulated CUDA (FP32) with the bias vs CPU, 1 process" "$tmp/emu" "$tmp/one_256" 1e-5 1e-5
else
    bad "the emulated CUDA build: $EMU not built (make build/train_gpt_emu)"
fi

# 4. checkpoints
train res_one 0 "$CPU" --total-batch 512 --expert-bias-rate $R --resume "$tmp/one_512/state_00000002.bin" &&
    check same "resume: 1 process from its step-2 state (with the bias) vs uninterrupted" "$tmp/res_one" "$tmp/one_512"
train res_dp2 0 "$CPU" --total-batch 256 --expert-bias-rate $R --resume "$tmp/dp2/state_00000002.bin" &&
    check compare "resume: 1 process from the dp 2 state vs dp 2" "$tmp/res_dp2" "$tmp/dp2" 4e-6 1e-5
train res_shard 0 "$CPU" --total-batch 256 --expert-bias-rate $R --resume "$tmp/dp2/ckpt_00000002" &&
    check compare "resume: 1 process from the dp 2 sharded checkpoint vs dp 2" "$tmp/res_shard" "$tmp/dp2" 4e-6 1e-5

# every step's routed counts and bias: a layout's = one process's; a resumed run's steps 3, 4 = its reference's
python3 - "$tmp" > "$tmp/layouts.out" <<'EOF'
import json, os, sys
tmp = sys.argv[1]
def steps(run):
    out = {}
    for l in open(os.path.join(tmp, run, "log.jsonl")):
        o = json.loads(l)
        if "train_loss" in o: out[o["step"]] = o
    return out
for run, ref in (("dp2", "one_256"), ("pp2", "one_512"), ("ep2", "one_256"), ("tp2", "one_256"), ("emu", "one_256"), ("res_one", "one_512"),
                 ("res_dp2", "dp2"), ("res_shard", "dp2")):
    if not os.path.exists(os.path.join(tmp, run, "log.jsonl")):
        print("FAIL %s: no log.jsonl" % run); continue
    a, b = steps(run), steps(ref)
    want = [3, 4] if run.startswith("res_") else [1, 2, 3, 4]
    diff = [s for s in want if s not in a or a[s].get("moe_bias") is None or
            (a[s]["moe_routed"], a[s]["moe_bias"]) != (b[s]["moe_routed"], b[s]["moe_bias"])]
    print("%s %s: steps %s routed counts and bias = %s's (steps that differ: %s); step 4's bias %s" % (
          "ok  " if not diff else "FAIL", run, want, ref, diff, a.get(4, {}).get("moe_bias")))
EOF
relay "$tmp/layouts.out"

# 5. bad values
badflag "--expert-bias-rate" --expert-bias-rate -0.1
badflag "--expert-bias-rate" --expert-bias-rate nan
badflag "--expert-bias-rate" --expert-bias-rate 2e6
common=("${base[@]}")  # a dense model
badflag "--expert-bias-rate" --expert-bias-rate 0.01

echo "test_moe_bias: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
