#!/usr/bin/env bash
# test_cp.sh: context parallelism (llm/sharded/context_parallel.h): ring attention (Liu et al. 2023) with the
# zigzag and the contiguous split, and DeepSpeed-Ulysses (Jacobs et al. 2023), under mpirun, against one process
# and the papers' counts.
#
#   bash test/test_cp.sh   (needs ./train_gpt_cpu, build/train_gpt_emu{,_bf16})
#
# Checked, one line each:
#  1. cp 2 and cp 4, each of ring zigzag, ring contiguous and Ulysses; tp 2 x cp 2 (ring, Ulysses, and ring with
#     sequence parallelism); pp 2 x cp 2 under every schedule (interleaved on a 4-layer model); dp 2 x cp 2 with ZeRO-1, 2 and 3 (2 micro-steps
#     per rank): from the same seed checkpoint and data as one process on the same global batch, the train and
#     val losses and the grad norms of 4 steps, and every parameter of the final model, match the one-process
#     run; the samples and the exact-match answers are the same text.
#     Not bit-identical to one process, nor ring to Ulysses: ring attention merges the blocks of a row with the
#     online softmax (FP32 rescaling per block, llm/ops/attention_blocks.h), while Ulysses runs the one-process
#     attention on whole sequences; only the order of sums differs, so the tolerances are test_tp.sh's.
#     FP8 (delayed and current scaling) at cp 2 against one process in FP8: the amaxes are reduced over cp, so the
#     first step's loss matches within 1e-5, and 4 steps within test_fp8_train.sh's layout bounds. (The block and MX
#     recipes scale blocks along the token dimension too, which cp regroups: not compared.)
#  1b. --recompute selective and full under ring and Ulysses: the same bytes as without (the same block
#     pieces and all-to-alls rerun on the same inputs).
#  2. The cp group's traffic of one step on every rank against the papers' counts (test/cp_check.py ledger:
#     ring (N-1) K/V blocks forward, (N-1) K/V + (N-1) dK/dV backward; Ulysses 4 slices each way), with and
#     without recompute.
#  3. Activations per layer and micro-batch per rank: measured (tagged allocator) == formula, and 1/N of one
#     process's (test/cp_check.py acts). A long context one process cannot hold in the same memory: T = 16384 at
#     cp 4 within --max-memory 0.045 GiB per rank (memory per rank printed), and one process refused by the same
#     budget with one line.
#  4. Which chunks each rank holds, exactly, from the run's own report (--report-json's cp_chunks): zigzag rank r
#     holds chunks r and 2N-1-r of the 2N, contiguous 2r and 2r+1 (ring at cp 4, T = 256). The balance that zigzag
#     buys is measured in the same runs and printed as a report line (the per-rank attention compute, process CPU
#     time; of the 2N = 8 chunks under the causal mask, counting a diagonal pair as half, the contiguous ranks
#     compute 2, 6, 10 and 14 pairs, every zigzag rank 8; measured here: contiguous 6.3 to 7.2, zigzag 1.02 to 1.48).
#  5. Checkpoints are layout-independent: a cp 2 state resumes in one process and a one-process state at
#     cp 2 (Ulysses); a sharded checkpoint of dp 2 x cp 2 ZeRO-1 (4 optimizer shards over dp x cp) resumes in
#     one process and at cp 2 Ulysses ZeRO-3; each against the uninterrupted run.
#  6. The emulated CUDA build (its kernels, comm.h's NCCL code and all-to-all against dev/emu/nccl_emu.h):
#     cp 2 Ulysses and ring against the CPU build's one process (FP32: 1e-5, the kernels' order of sums); in
#     BF16 against its own one process with test_ddp_zero.sh's BF16 bounds (losses 2e-3, the update 0.08 in
#     relative L2); the CPU BF16 build likewise (the ring's CPU pieces on 16-bit storage), and the CPU FP16 build
#     with a fixed loss scale (see there why not the dynamic one).
#  7. A hung cp rank (--inject hang): the job ends within --comm-timeout, rank 0's watchdog line naming the cp
#     group and the missing rank.
#  8. Bad layouts, each refused with one line, nothing written: T not splitting into 2 x cp chunks, Ulysses
#     with heads that do not split over tp x cp, a world size cp does not divide; --cp-impl and
#     --cp-balance outside their choices.
#
# Tolerances: test_tp.sh's (losses and norms 4e-6 relative over 4 steps, parameters 1e-5 absolute at lr 1e-3,
# where a step moves a parameter by up to ~1e-3; AdamW's eps 1e-6, see `common` below): a wrong position embedding, a missed causal block, a
# dK/dV not returned to its owner or a loss not averaged over cp moves them by far more (test/README.md).
# Logs of each run: build/cp/.
# Ends with "test_cp: N passed, M failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
EMU16=${EMU16:-./build/train_gpt_emu_bf16}
CPU16=${CPU16:-./build/train_gpt_cpu_bf16}
CPU16H=${CPU16H:-./build/train_gpt_cpu_fp16}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/cp
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badlayout, badflag, train, same_samples
cpcheck() { if python3 test/cp_check.py "$@"; then pass=$((pass+1)); else fail=$((fail+1)); fi; }

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
# C = 32, NH = 4: cp 4 cuts T = 32 into 8 chunks of 4 tokens; Ulysses at cp 4 (or tp 2 x cp 2) gives each
# rank one head. AdamW's eps 1e-6, not 1e-8: at step 1 AdamW's update is lr g / (|g| + eps), so an element whose
# gradient is a cancelling sum near eps moves by lr times its rounding: the 4-layer model's fc weight [31772] has
# g = 5.06e-9 in one process and 4.74e-9 at pp 2 x cp 2 (6% apart, the sums' order), its step-1 updates 1.4e-5 apart,
# past the 1e-5 bound with OpenBLAS's AVX-512 kernels (4.4e-6 with its SSE3 ones: the same element). With eps 1e-6
# that element's update is lr g / 1e-6 ~ 5e-6 lr, and every update a smooth function of its gradient again.
common=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1 --lr-final 0.1 --weight-decay 0.1 --eps 1e-6
        --val-every 2 --val-steps 1 --sample-every 2 --sample-len 6 --checkpoint-every 2
        --eval-file "$D/addition_test.bin")

timeout 60 "$CPU" --model d2,C=32,NH=4,maxT=64,V=257 "${common[@]}" --steps 1 --lr 0 --checkpoint-every 1 \
    --val-every 0 --sample-every 0 --output-dir "$tmp/seed" > "$LOG/seed.log" 2>&1 || bad "seed checkpoint: see $LOG/seed.log"
common+=(--model "$tmp/seed/model_00000001.bin")

# 1. the layouts against one process
train one_128 0 "$CPU" --total-batch 128 --grad-clip 0
train one_256 0 "$CPU" --total-batch 256 --grad-clip 0
train one_512 0 "$CPU" --total-batch 512 --grad-clip 0
vs() {  # NAME NP REF DESCRIPTION ARGS...: a run against one process
    local n=$1 np=$2 ref=$3 what=$4; shift 4
    train "$n" "$np" "$CPU" --grad-clip 0 "$@" &&
        check compare "$what vs 1 process" "$tmp/$n" "$tmp/$ref" 4e-6 1e-5 &&
        same_samples "$what sampling" "$n" "$ref"
}
for N in 2 4; do
    vs cp${N}_zig $N one_128 "cp $N ring zigzag" --cp $N --total-batch 128
    vs cp${N}_con $N one_128 "cp $N ring contiguous" --cp $N --cp-balance contiguous --total-batch 128
    vs cp${N}_uly $N one_128 "cp $N Ulysses" --cp $N --cp-impl ulysses --total-batch 128
done
vs t2c2_ring 4 one_128 "tp 2 x cp 2 ring" --tp 2 --cp 2 --total-batch 128
vs t2c2_uly 4 one_128 "tp 2 x cp 2 Ulysses" --tp 2 --cp 2 --cp-impl ulysses --total-batch 128
vs t2c2_sp 4 one_128 "tp 2 (sequence-parallel) x cp 2 ring" --tp 2 --sequence-parallel 1 --cp 2 --total-batch 128
for s in gpipe 1f1b zb-h1; do
    vs p2c2_$s 4 one_256 "pp 2 ($s) x cp 2 ring, 2 micro-batches" --pp 2 --schedule $s --cp 2 --total-batch 256
done
vs p2c2_uly 4 one_256 "pp 2 (1f1b) x cp 2 Ulysses, 2 micro-batches" --pp 2 --cp 2 --cp-impl ulysses --total-batch 256
# the interleaved schedule needs a layer per virtual stage: a 4-layer model of its own (the later --model wins)
timeout 60 "$CPU" "${common[@]}" --model d4,C=32,NH=4,maxT=64,V=257 --steps 1 --lr 0 --checkpoint-every 1 --val-every 0 \
    --sample-every 0 --output-dir "$tmp/seed4" > "$LOG/seed4.log" 2>&1 || bad "4-layer seed checkpoint: see $LOG/seed4.log"
train one_256_d4 0 "$CPU" --model "$tmp/seed4/model_00000001.bin" --total-batch 256 --grad-clip 0
vs p2c2_il 4 one_256_d4 "pp 2 (interleaved, vpp 2) x cp 2 ring, 2 micro-batches" --model "$tmp/seed4/model_00000001.bin" --pp 2 \
    --schedule interleaved --vpp 2 --cp 2 --total-batch 256
for z in 1 2 3; do
    vs d2c2z$z 4 one_512 "dp 2 x cp 2 ring ZeRO-$z, 2 micro-steps" --cp 2 --zero $z --total-batch 512
    check memory "dp 2 x cp 2 ZeRO-$z memory (sharded over dp x cp = 4)" "$tmp/d2c2z$z.json"
    check ledger "dp 2 x cp 2 ZeRO-$z dp x cp traffic" "$tmp/d2c2z$z.json"
done
# FP8 with the per-tensor recipes: the amaxes of x and dy are reduced over cp (each rank holds part of a
# micro-batch), so the first step's scales are one process's and its loss matches to FP32's bound (1e-5, test_fp8_train.sh's
# FIRST_TOL); after it, ring attention's last-bit differences from one process move an amax by an ulp and FP8 turns that
# into whole FP8 steps near rounding boundaries: test_fp8_train.sh's layout bounds (losses 5e-3, parameters 1e-2)
for f in delayed current; do
    train one_fp8_$f 0 "$CPU" --fp8 $f --total-batch 128 --grad-clip 0
    train cp2_fp8_$f 2 "$CPU" --fp8 $f --cp 2 --total-batch 128 --grad-clip 0 &&
        check first "cp 2 ring FP8 $f vs 1 process FP8 $f" "$tmp/cp2_fp8_$f" "$tmp/one_fp8_$f" 1e-5 &&
        check compare "cp 2 ring FP8 $f vs 1 process FP8 $f" "$tmp/cp2_fp8_$f" "$tmp/one_fp8_$f" 5e-3 1e-2
done
# 1b. recompute: the same bytes
for r in selective full; do
    for n in cp2_zig cp2_uly; do
        args=(--cp 2 --total-batch 128); [ $n = cp2_uly ] && args+=(--cp-impl ulysses)
        train ${n}_$r 2 "$CPU" --grad-clip 0 "${args[@]}" --recompute $r &&
            check same "$n --recompute $r vs without" "$tmp/${n}_$r" "$tmp/$n"
    done
done

# 2. traffic against the papers
for n in cp2_zig cp4_zig cp4_con cp2_uly cp4_uly t2c2_ring t2c2_uly cp2_zig_selective cp2_uly_full; do
    cpcheck ledger "$n cp traffic" "$tmp/$n.json"
done

# 3. activations per rank: 1/N
for n in cp2_zig cp4_zig cp4_con cp2_uly cp4_uly; do
    cpcheck acts "$n activations" "$tmp/$n.json" "$tmp/one_128.json"
done
# a long context one process cannot hold in the same memory: T = 16384 (one layer, C = 32, B = 1) with a budget of
# 0.045 GiB per rank (--max-memory: the tagged allocator stops past it, as a device that size would): cp 4 fits
# (~43 MB per rank: 1/4 of the activations), one process is refused with one line before it trains
long=(--train-data "$D/addition_train.bin" --val-data "$D/addition_train.bin" --tokenizer "$D/addition_tokenizer.bin" -b 1
      -t 16384 --steps 1 --val-every 0 --sample-every 0 --checkpoint-every 0 --model d1,C=32,NH=4,maxT=16384,V=257 --max-memory 0.045)
if timeout 300 "${MPIRUN[@]}" -np 4 "$CPU" "${long[@]}" --cp 4 --output-dir "$tmp/long_cp4" > "$LOG/long_cp4.log" 2>&1 &&
   grep -q "^step    1/1" "$LOG/long_cp4.log" && grep -q "memory per rank" "$LOG/long_cp4.log"; then
    ok "T = 16384 at cp 4 within --max-memory 0.045 GiB per rank: $(grep -o 'activations [0-9]* | [0-9]* B' "$LOG/long_cp4.log" | head -1) (tagged allocator, rank 0)"
else bad "T = 16384 at cp 4 within --max-memory 0.045: see $LOG/long_cp4.log"; fi
out=$(timeout 120 "$CPU" "${long[@]}" --output-dir "$tmp/long_one" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$out" | grep -c '^error: --max-memory')" = 1 ] && [ ! -e "$tmp/long_one" ]; then
    ok "T = 16384 in one process refused within the same 0.045 GiB: ${out##*error: }"
else bad "T = 16384 in one process within --max-memory 0.045: exit $rc: $(printf '%s\n' "$out" | tail -2)"; fi

# 4. which chunks each rank holds, exactly (the run's own report: "cp_chunks" of every rank, --report-json), and the
# balance that makes zigzag worth it, measured and reported: ring at cp 4 on T = 256 (chunks of 32 tokens, so the
# block pairs outweigh the fixed costs), each rank's attention compute (process CPU time: a rank sharing its core is
# not charged for the other's turn)
bal=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin" -b 2 -t 256
     --steps 4 --val-every 0 --sample-every 0 --checkpoint-every 0 --model d1,C=32,NH=4,maxT=256,V=257 --cp 4)
balance() {  # BALANCE: the max/min of the run's line
    timeout 120 "${MPIRUN[@]}" -np 4 "$CPU" "${bal[@]}" --cp-balance "$1" --output-dir "$tmp/bal_$1" \
        --report-json "$tmp/bal_$1.json" > "$LOG/bal_$1.log" 2>&1
    sed -n 's/.*attention compute per step by cp rank:.*max\/min \([0-9.]*\).*/\1/p' "$LOG/bal_$1.log"
}
con=$(balance contiguous); zig=$(balance zigzag)
# the chunks of the 2N = 8 each rank holds (Megatron / Transformer Engine's load balancing: zigzag rank r holds r and
# 2N-1-r; contiguous 2r and 2r+1), written here, not taken from the trainer
for b in zigzag contiguous; do
    chunks=$(python3 -c '
import json, sys
b, N = sys.argv[2], 4
ranks = json.load(open(sys.argv[1]))["ranks"]
got = {r["cp_rank"]: r["cp_chunks"] for r in ranks}
want = {r: ([r, 2 * N - 1 - r] if b == "zigzag" else [2 * r, 2 * r + 1]) for r in range(N)}
print(" ".join(f"{r}:{got.get(r)}" for r in range(N)) if got != want else "")
' "$tmp/bal_$b.json" "$b" 2>&1)
    if [ -z "$chunks" ]; then ok "cp 4 --cp-balance $b: every rank holds exactly its chunks ($(python3 -c 'import json,sys; print(", ".join(str(r["cp_rank"]) + ": " + str(r["cp_chunks"]) for r in json.load(open(sys.argv[1]))["ranks"]))' "$tmp/bal_$b.json"))"
    else bad "cp 4 --cp-balance $b: the ranks hold chunks $chunks (see $LOG/bal_$b.log)"; fi
done
# the balance, a report (a machine's cores differ by up to ~1.5 in the time of equal work: Ulysses measures 1.0-1.5
# here): the pair counts predict max/min 7 for contiguous and 1 for zigzag
echo "report: cp 4 ring attention compute max/min: contiguous ${con:-?}, zigzag ${zig:-?} (block pairs per rank, a diagonal one counting half: contiguous 2, 6, 10, 14; zigzag 8 each)"

# 5. checkpoints across layouts
train res_c2to1 0 "$CPU" --total-batch 128 --grad-clip 0 --resume "$tmp/cp2_zig/state_00000002.bin" &&
    check compare "resume: 1 process from a cp 2 state vs cp 2" "$tmp/res_c2to1" "$tmp/cp2_zig" 4e-6 1e-5
train res_1toc2 2 "$CPU" --cp 2 --cp-impl ulysses --total-batch 128 --grad-clip 0 --resume "$tmp/one_128/state_00000002.bin" &&
    check compare "resume: cp 2 Ulysses from a 1-process state vs 1 process" "$tmp/res_1toc2" "$tmp/one_128" 4e-6 1e-5
# sharded checkpoints (llm/ckpt/ckpt_shard.h; "both": the gathered files too, for the comparison): saved by the 4 ranks of dp 2 x cp 2 ZeRO-1 (the optimizer state in 4
# shards over dp x cp), resumed in one process and at cp 2 Ulysses with ZeRO-3 (2 shards)
train d2c2z1_sh 4 "$CPU" --cp 2 --zero 1 --total-batch 512 --grad-clip 0 --checkpoint-format both &&
for to in "1 0" "cp2_uly_z3 2 --cp 2 --cp-impl ulysses --zero 3"; do
    set -- $to; n=res_sh_$1; np=$2; shift 2
    train $n $np "$CPU" --total-batch 512 --grad-clip 0 --checkpoint-format both --resume "$tmp/d2c2z1_sh/ckpt_00000002" "$@" &&
        check compare "resume: $n from dp 2 x cp 2 ZeRO-1's sharded checkpoint vs the run that saved it" "$tmp/$n" "$tmp/d2c2z1_sh" 4e-6 1e-5
done

# 6. the emulated CUDA build
if [ -x "$EMU" ]; then
    for impl in ulysses ring; do
        train emu_cp2_$impl 2 "$EMU" --cp 2 --cp-impl $impl --total-batch 128 --grad-clip 0 &&
            check compare "emulated CUDA FP32 cp 2 $impl vs CPU 1 process" "$tmp/emu_cp2_$impl" "$tmp/one_128" 1e-5 1e-5
    done
else bad "no $EMU (make build/train_gpt_emu)"; fi
# BF16 (the emulated build's kernels, and the CPU build's BF16 storage, llm/core/half_cpu.h, on which the ring's CPU
# pieces run): against each build's own one process, with the bounds of test_ddp_zero.sh's BF16 runs (the order of BF16
# roundings differs)
# FP16 (more mantissa than BF16: the same bounds hold) with a fixed loss scale: a cp rank's per-token gradients are N times
# one process's (its loss is the mean over its T/N tokens, as Megatron's), so a dynamic scaler may halve where one
# process's does not (measured: cp 2 at 32768 after step 1, one process at 65536), and the runs would differ by a step
for b in "emu16 $EMU16 emulated CUDA BF16" "cpu16 $CPU16 CPU BF16" "cpu16h $CPU16H CPU FP16 --loss-scale 4096"; do
    set -- $b; n=$1; bin=$2; shift 2
    what=""; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do what="$what $1"; shift; done
    what=${what# }
    [ -x "$bin" ] || { bad "no $bin (make $bin)"; continue; }
    train ${n}_one 0 "$bin" --total-batch 128 --grad-clip 0 "$@" &&
    for impl in ulysses ring; do
        train ${n}_cp2_$impl 2 "$bin" --cp 2 --cp-impl $impl --total-batch 128 --grad-clip 0 "$@" &&
            check update "$what cp 2 $impl vs its 1 process" "$tmp/${n}_cp2_$impl" "$tmp/${n}_one" "$tmp/seed/model_00000001.bin" 2e-3 0.08
    done
done

# 7. a hung cp rank: the other's watchdog names it, in the cp group's exchange (llm/comm/watchdog.h)
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$CPU" "${common[@]}" --cp 2 --inject hang@step=3,rank=1 --comm-timeout 3 \
      --output-dir "$tmp/hang" 2>&1); rc=$?
line=$(printf '%s\n' "$out" | grep '^watchdog: rank 0:' | head -1)
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$line" == *"of the cp group"*"missing rank 1"* ]]; then
    ok "cp 2, rank 1 hung at step 3: exit $rc, ${line:0:220}"
else bad "cp 2, rank 1 hung at step 3: exit $rc, watchdog line '$line'"; fi

# 8. bad layouts and flags
badlayout cp3_T32 3 "divide into 2 x cp" --cp 3
badlayout uly_heads 3 "ulysses" --cp 3 --cp-impl ulysses -t 48 --total-batch 192
badlayout cp2_np3 3 "--cp 2" --cp 2
badflag "--cp-impl" --cp-impl fast
badflag "--cp-balance" --cp-balance striped

echo "test_cp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
