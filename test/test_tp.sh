#!/usr/bin/env bash
# test_tp.sh: Megatron tensor parallelism (llm/sharded/tensor_parallel.h; Shoeybi et al. 2019, sec. 3) under
# mpirun, against one process and the paper's counts.
#
#   bash test/test_tp.sh   (needs ./train_gpt_cpu, build/train_gpt_emu{,_bf16}, build/test_tp_ops_{cpu,emu})
#
# Checked, one line each:
#  0. Megatron's operators exactly (test/test_tp_ops.cu, tp 2 and 4, CPU and emulated): f and g forward
#     and backward on integer-valued inputs, every sum exact, against the unsplit layer.
#  1. tp 2 and tp 4 (one dp rank), and dp 2 x tp 2 with every --zero 0-3 and gradient accumulation,
#     each without and with sequence parallelism (--sequence-parallel 1, Korthikanti et al. sec. 4.2.2)
#     (2 micro-steps per rank): from the same seed checkpoint and data as one process on the same global
#     batch, the train and val losses and the grad norms of 4 steps, and every parameter of the final
#     model, match the one-process run. The grad norm checks that the global norm counts each tp
#     shard once and each replicated tensor (LayerNorms, wpe, row-parallel biases) once, not tp times;
#     a run with clipping (--grad-clip 0.5 < the norms, ~2) checks it through the update too.
#  1b. tp 2 with --recompute selective and full: the same bytes as without (the same kernels and
#     collectives rerun on the same inputs).
#  2. The samples printed during training and the greedy answers of the exact-match evaluation
#     (--eval-file) are the same text as one process's (the gathered logits of the KV-cache sampler,
#     llm/model/sampler.h).
#  3. Memory: each rank's parameters + gradients + optimizer state (the tagged allocator) against the
#     ZeRO paper's Table 1 with Psi = the parameters of one tp rank's shards; the activations per
#     layer against Korthikanti et al. 2022 sec. 4.2.1 adapted (llm/train/report.h), measured == formula.
#  4. Traffic: the tp group's all-reduces and all-gathers of one step against Megatron's count
#     (4 all-reduces of (B,T,C) per layer and micro-batch, sec. 3), and the dp group's against ZeRO's.
#  5. Checkpoints are layout-independent: resume tp 2 -> 1 and 1 -> tp 4 and dp 2 x tp 2 ZeRO-1 ->
#     dp 4 ZeRO-3, each against the uninterrupted run.
#  6. The emulated CUDA build (FP32: its kernels, including the vocabulary-parallel classifier's, and
#     comm.h's NCCL code against dev/emu/nccl_emu.h) at tp 2 against the CPU build's one process;
#     the BF16 emulated build at tp 2 against its one process, with the BF16 bounds of test_ddp_zero.sh.
#  7. Bad layouts, each refused with one line, nothing written: --tp 3 (the 4 heads do not split over
#     3), --sequence-parallel 1 with T = 30 over tp 4, --sequence-parallel 2.
#
# Tolerances: those of test/test_ddp_zero.sh, for the same reason (only the order of the sums
# differs): losses and norms 4e-6 relative over 4 steps, parameters 1e-5 absolute at lr 1e-3 (a step
# moves a parameter by up to ~1e-3; a missing f or g all-reduce, a bias added twice, or replicated
# tensors counted twice in the norm move the losses by far more: see test/README.md). The
# emulated build sums in its kernels' orders: 1e-5. Logs of each run: build/tp/.
# Ends with "test_tp: N passed, M failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
EMU16=${EMU16:-./build/train_gpt_emu_bf16}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/tp
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badlayout, train, same_samples, tp_program

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
# C = 32, NH = 4: tp 2 and tp 4 split the heads (2 or 1 per rank), C/tp = 16 or 8 channels (the kernel
# builds need multiples of 8), and the padded vocabulary Vp = 384 into 192 or 96 rows
common=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1 --lr-final 0.1 --weight-decay 0.1
        --val-every 2 --val-steps 1 --sample-every 2 --sample-len 6 --checkpoint-every 2
        --eval-file "$D/addition_test.bin")

timeout 60 "$CPU" --model d2,C=32,NH=4,maxT=64,V=257 "${common[@]}" --steps 1 --lr 0 --checkpoint-every 1 \
    --val-every 0 --sample-every 0 --output-dir "$tmp/seed" > "$LOG/seed.log" 2>&1 || bad "seed checkpoint: see $LOG/seed.log"
common+=(--model "$tmp/seed/model_00000001.bin")

# 0. Megatron's f and g, exactly (test/test_tp_ops.cu: integer-valued inputs, so every sum is exact)
tp_program ops_cpu_tp2 2 ./build/test_tp_ops_cpu test_tp_ops 120
tp_program ops_cpu_tp4 4 ./build/test_tp_ops_cpu test_tp_ops 120
tp_program ops_emu_tp2 2 ./build/test_tp_ops_emu test_tp_ops 120

# 1-4. the layouts against one process
train one_128 0 "$CPU" --total-batch 128 --grad-clip 0
train one_512 0 "$CPU" --total-batch 512 --grad-clip 0
train one_128_clip 0 "$CPU" --total-batch 128 --grad-clip 0.5
for t in 2 4; do
    for sp in 0 1; do
        n=tp$t; [ $sp = 1 ] && n=tp${t}sp
        train $n $t "$CPU" --tp $t --sequence-parallel $sp --total-batch 128 --grad-clip 0 &&
            check compare "tp $t sp $sp vs 1 process" "$tmp/$n" "$tmp/one_128" 4e-6 1e-5 &&
            same_samples "tp $t sp $sp sampling" $n one_128
        check memory "tp $t sp $sp memory" "$tmp/$n.json"
        check tp_ledger "tp $t sp $sp traffic" "$tmp/$n.json"
    done
done
for r in selective full; do  # recomputation reruns the same kernels and collectives: the same bytes
    for sp in 0 1; do
        n=tp2; [ $sp = 1 ] && n=tp2sp
        train ${n}_$r 2 "$CPU" --tp 2 --sequence-parallel $sp --total-batch 128 --grad-clip 0 --recompute $r &&
            check same "tp 2 sp $sp --recompute $r vs without" "$tmp/${n}_$r" "$tmp/$n"
    done
done
for sp in 0 1; do
    train tp2_clip_sp$sp 2 "$CPU" --tp 2 --sequence-parallel $sp --total-batch 128 --grad-clip 0.5 &&
        check compare "tp 2 sp $sp with clipping vs 1 process" "$tmp/tp2_clip_sp$sp" "$tmp/one_128_clip" 4e-6 1e-5
done
for z in 0 1 2 3; do
    for sp in 0 1; do
        n=d2t2z$z; [ $sp = 1 ] && n=d2t2z${z}sp
        train $n 4 "$CPU" --tp 2 --sequence-parallel $sp --zero $z --total-batch 512 --grad-clip 0 &&
            check compare "dp 2 x tp 2 sp $sp ZeRO-$z, 2 micro-steps vs 1 process" "$tmp/$n" "$tmp/one_512" 4e-6 1e-5
        check memory "dp 2 x tp 2 sp $sp ZeRO-$z memory" "$tmp/$n.json"
        check ledger "dp 2 x tp 2 sp $sp ZeRO-$z dp traffic" "$tmp/$n.json"
        check tp_ledger "dp 2 x tp 2 sp $sp ZeRO-$z tp traffic" "$tmp/$n.json"
    done
done
# activations per layer: measured (the tagged allocator) == formula (llm/train/report.h), every rank, and
# less than one process's, with sequence parallelism less again (everything / t)
for n in tp2 tp4 tp2sp tp4sp tp2_selective tp2sp_selective tp2_full tp2sp_full; do
    python3 - "$tmp" "$n" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import json, sys
r = json.load(open(sys.argv[1] + "/" + sys.argv[2] + ".json")); one = json.load(open(sys.argv[1] + "/one_128.json"))
ok = all(rk["activations_per_layer_bytes"] == r["paper_activations_per_layer_bytes"] for rk in r["ranks"])
less = r["paper_activations_per_layer_bytes"] < one["paper_activations_per_layer_bytes"] or r["recompute"] != "none"
print(("ok   " if ok and less else "FAIL ") + "%s (tp %d, sp %d, recompute %s) activations per layer: %d B measured on every rank, "
      "%d B predicted (one process, no recompute: %d B)" % (sys.argv[2], r["tp"], r["sequence_parallel"], r["recompute"],
      r["ranks"][0]["activations_per_layer_bytes"], r["paper_activations_per_layer_bytes"], one["ranks"][0]["activations_per_layer_bytes"]))
sys.exit(0 if ok and less else 1)
PY
done

# 5. resume across layouts
train res_t2to1 0 "$CPU" --total-batch 128 --grad-clip 0 --resume "$tmp/tp2/state_00000002.bin" &&
    check compare "resume: 1 process from a tp 2 state vs tp 2" "$tmp/res_t2to1" "$tmp/tp2" 4e-6 1e-5
train res_1tot4 4 "$CPU" --tp 4 --total-batch 128 --grad-clip 0 --resume "$tmp/one_128/state_00000002.bin" &&
    check compare "resume: tp 4 from a 1-process state vs 1 process" "$tmp/res_1tot4" "$tmp/one_128" 4e-6 1e-5
train res_t2spto4 4 "$CPU" --tp 4 --total-batch 128 --grad-clip 0 --resume "$tmp/tp2sp/state_00000002.bin" &&
    check compare "resume: tp 4 from a tp 2 sequence-parallel state vs tp 2 sp" "$tmp/res_t2spto4" "$tmp/tp2sp" 4e-6 1e-5
train res_d2t2z1tod4z3 4 "$CPU" --zero 3 --total-batch 512 --grad-clip 0 --resume "$tmp/d2t2z1/state_00000002.bin" &&
    check compare "resume: dp 4 ZeRO-3 from a dp 2 x tp 2 ZeRO-1 state vs dp 2 x tp 2 ZeRO-1" "$tmp/res_d2t2z1tod4z3" "$tmp/d2t2z1" 4e-6 1e-5

# 6. the emulated CUDA build
if [ -x "$EMU" ]; then
    for sp in 0 1; do
        train emu_tp2_sp$sp 2 "$EMU" --tp 2 --sequence-parallel $sp --total-batch 128 --grad-clip 0 &&
            check compare "emulated CUDA FP32 tp 2 sp $sp vs CPU 1 process" "$tmp/emu_tp2_sp$sp" "$tmp/one_128" 1e-5 1e-5
    done
else bad "no $EMU (make build/train_gpt_emu)"; fi
if [ -x "$EMU16" ]; then
    train emu16_one 0 "$EMU16" --total-batch 128 --grad-clip 0 &&
    for sp in 0 1; do
        train emu16_tp2_sp$sp 2 "$EMU16" --tp 2 --sequence-parallel $sp --total-batch 128 --grad-clip 0 &&
            check update "emulated CUDA BF16 tp 2 sp $sp vs its 1 process" "$tmp/emu16_tp2_sp$sp" "$tmp/emu16_one" "$tmp/seed/model_00000001.bin" 2e-3 0.08
    done
else bad "no $EMU16 (make build/train_gpt_emu_bf16)"; fi

# 7. bad layouts: one line (from rank 0), non-zero exit, nothing written (badlayout: test/mpi_lib.sh)
badlayout tp3_heads 3 "--tp 3" --tp 3
badlayout sp_seq 4 "--sequence-parallel" --tp 4 --sequence-parallel 1 -t 30
badlayout sp_flag 1 "--sequence-parallel" --sequence-parallel 2  # a flag error: every rank parses the flags and would say it

echo "test_tp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
