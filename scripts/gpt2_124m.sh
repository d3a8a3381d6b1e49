#!/usr/bin/env bash
# gpt2_124m.sh: GPT-2 124M (12 layers, C 768, 12 heads) trained from scratch on FineWeb-Edu 10B with the
# hyperparameters of llm.c's GPT-2 (124M) reproduction. Launch options and checks: scripts/launch.sh;
# the data, every launch mode and the overrides: docs/recipes.md.
#
#   scripts/gpt2_124m.sh --dry-run                          one GPU: check and print the command
#   scripts/gpt2_124m.sh --gpus 8                           8 GPUs of this machine (mpirun -np 8)
#   scripts/gpt2_124m.sh --hostfile hosts --gpus 8          every host of an Open MPI hostfile, 8 each
#   scripts/gpt2_124m.sh --slurm --nodes 2 --gpus 8         in a Slurm allocation (srun --mpi=pmix)
#   TP=2 scripts/gpt2_124m.sh --gpus 8 -- --recompute selective   another layout; more trainer flags
#
# Where the numbers come from: karpathy/llm.c scripts/run_gpt2_124M.sh (commit 039904e, the same on its
# master; the run is written up in llm.c's Discussion #481): -e d12, -b 64 -t 1024 (micro-batch
# 64 x 1024 tokens), -d 524288 (2^19 tokens, ~0.5M, per optimizer step), -l 0.0006 (peak lr), -u 700
# (linear warm-up steps), -q 0.0 (cosine decay to 0), -c 0.1 (weight decay), -z 1 (ZeRO-1), -r 0 (no
# recompute), -v 250 (val loss every 250 steps; 20 val batches, llm.c's default -m), -s 20000 -g 144
# (samples of 144 tokens), -n 5000 (checkpoint every 5000 steps), -y 1 (resume), no -x (one epoch of the
# 10B-token data: 18,865 steps for llm.c's FineWeb 10B shards, per the script's comment; the data here
# is FineWeb-Edu's 10B sample, dev/data/fineweb.py); gradient clipping at 1.0 and AdamW's
# betas (0.9, 0.95) are fixed in llm.c's train_gpt2.cu, as they are this trainer's defaults. llm.c's
# -h 1 (HellaSwag's acc_norm at every val loss) is --hellaswag data/hellaswag/hellaswag_val.bin (python
# dev/data/hellaswag.py makes it; without it the run goes on without HellaSwag, as llm.c's; HELLASWAG='' turns it off).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
L_DATA_HINT="python dev/data/fineweb.py -v 10B"
launch_parse gpt2_124m "$@"
D=${DATA_DIR:-data/edu_fineweb10B}
OUT=${OUT_DIR:-out/gpt2_124m}
flags=(
    --model "${MODEL:-d12,C=768,NH=12}"
    --train-data "${TRAIN_DATA:-$D/edu_fineweb_train_*.bin}"
    --val-data "${VAL_DATA:-$D/edu_fineweb_val_000000.bin}"
    --tokenizer "${TOKENIZER:-$D/gpt2_tokenizer.bin}"
    --output-dir "$OUT"
    --batch "${B:-$(launch_micro_batch 64 "${T:-1024}" "${TOTAL_BATCH:-524288}")}"  # 64, less past 8 dp ranks
    --seq-len "${T:-1024}"
    --total-batch "${TOTAL_BATCH:-524288}"
    --steps "${STEPS:--1}"
    --lr 0.0006
    --warmup 700
    --lr-final 0.0
    --weight-decay 0.1
    --grad-clip 1.0
    --val-every 250
    --val-steps 20
    --sample-every 20000
    --sample-len 144
    --checkpoint-every 5000
    --resume "${RESUME:-$(launch_resume "$OUT")}"
    --recompute none
    --dp "$DP"
    --tp "$TP"
    --pp "$PP"
    --zero "${ZERO:-1}"
)
launch_hellaswag  # llm.c's -h 1: HellaSwag at every val loss, if its file is there
launch_run "${flags[@]}" "${L_HELLASWAG[@]}"
