#!/usr/bin/env bash
# gpt2_350m.sh: GPT-2 350M (24 layers, C 1024, 16 heads) trained from scratch on FineWeb-Edu with the
# hyperparameters of llm.c's GPT-2 (350M) run. Launch options and checks: scripts/launch.sh; the data,
# every launch mode and the overrides: docs/recipes.md.
#
#   scripts/gpt2_350m.sh --dry-run                          one GPU: check and print the command
#   scripts/gpt2_350m.sh --gpus 8                           8 GPUs of this machine (mpirun -np 8)
#   scripts/gpt2_350m.sh --hostfile hosts --gpus 8          every host of an Open MPI hostfile, 8 each
#   scripts/gpt2_350m.sh --slurm --nodes 2 --gpus 8         in a Slurm allocation (srun --mpi=pmix)
#
# Where the numbers come from: karpathy/llm.c scripts/run_gpt2_350M.sh (its master): -e d24 (llm.c's
# d24 = 24 layers, 1024 channels, 16 heads, spelled out here), -b 64 -t 1024, -d 524288 (2^19 tokens per
# step), -l 0.0003 (peak lr: half of 124M's 0.0006, as in the GPT-3 paper's table for this size), -u 700,
# -q 0.0, -c 0.1, -z 1, -r 0, -v 250 (20 val batches), -s 100000 -g 144, -n 2000 (checkpoint every 2000
# steps), -y 1; grad clip 1.0 and AdamW's betas (0.9, 0.95) fixed in llm.c's train_gpt2.cu. llm.c ran it
# for -x 60000 steps (31.5B tokens) of its FineWeb 100B sample; this recipe's default is one epoch of
# FineWeb-Edu 10B (~10B tokens, about 19,000 steps) -- for llm.c's length:
#   python dev/data/fineweb.py -v 100B && DATA_DIR=data/edu_fineweb100B STEPS=60000 scripts/gpt2_350m.sh ...
# llm.c's -h 1 (HellaSwag's acc_norm at every val loss): --hellaswag data/hellaswag/hellaswag_val.bin, as in gpt2_124m.sh.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
L_DATA_HINT="python dev/data/fineweb.py -v 10B"
launch_parse gpt2_350m "$@"
D=${DATA_DIR:-data/edu_fineweb10B}
OUT=${OUT_DIR:-out/gpt2_350m}
flags=(
    --model "${MODEL:-d24,C=1024,NH=16}"
    --train-data "${TRAIN_DATA:-$D/edu_fineweb_train_*.bin}"
    --val-data "${VAL_DATA:-$D/edu_fineweb_val_000000.bin}"
    --tokenizer "${TOKENIZER:-$D/gpt2_tokenizer.bin}"
    --output-dir "$OUT"
    --batch "${B:-$(launch_micro_batch 64 "${T:-1024}" "${TOTAL_BATCH:-524288}")}"  # 64, less past 8 dp ranks
    --seq-len "${T:-1024}"
    --total-batch "${TOTAL_BATCH:-524288}"
    --steps "${STEPS:--1}"
    --lr 0.0003
    --warmup 700
    --lr-final 0.0
    --weight-decay 0.1
    --grad-clip 1.0
    --val-every 250
    --val-steps 20
    --sample-every 100000
    --sample-len 144
    --checkpoint-every 2000
    --resume "${RESUME:-$(launch_resume "$OUT")}"
    --recompute none
    --dp "$DP"
    --tp "$TP"
    --pp "$PP"
    --zero "${ZERO:-1}"
)
launch_hellaswag  # llm.c's -h 1: HellaSwag at every val loss, if its file is there
launch_run "${flags[@]}" "${L_HELLASWAG[@]}"
