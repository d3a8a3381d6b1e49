#!/usr/bin/env bash
# bench_ddp.sh (make bench-ddp): the speed-up of data parallelism on the CPU build. The same global
# batch (2 x B x T tokens per step) trained by 1 process with 1 OpenMP thread and by 2 processes
# (mpirun, DDP) with 1 thread each; prints the average step times, their ratio (the target on 2
# cores is >= 1.7x) and the time per step each rank waited on the gradient all-reduce.
#
# The config keeps compute dominant: the all-reduce over this machine's MPI moves ~0.4-1 GB/s, so the
# model is small (d4, C=128, ~0.85M parameters, 3.4 MB of gradients: a few ms) and the batch large
# (B=8, T=128 per rank: ~10 GFLOP per step). Usage: bash test/bench_ddp.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
CPU=${CPU:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPIRUN=(mpirun -q --oversubscribe --mca orte_abort_on_non_zero_status 1 --mca orte_allowed_exit_without_sync 0 -x OMP_NUM_THREADS)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)
export OMP_NUM_THREADS=1

python3 dev/data/addition.py --train 20000 --val 100 --test 10 --out "$tmp/data" > /dev/null
args=(--model d4,C=128,NH=4,maxT=128,V=257 --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer ""
      -b 8 -t 128 --total-batch 2048 --steps "$STEPS" --lr 1e-3 --val-every 0 --sample-every 0)

"$CPU" "${args[@]}" --output-dir "$tmp/one" > "$tmp/one.out"
"${MPIRUN[@]}" -np 2 "$CPU" "${args[@]}" --output-dir "$tmp/two" > "$tmp/two.out"
grep -E '^(model|batch|processes)' "$tmp/two.out"
t1=$(sed -nE 's/^average step time ([0-9.]+) ms.*/\1/p' "$tmp/one.out")
t2=$(sed -nE 's/^average step time ([0-9.]+) ms.*/\1/p' "$tmp/two.out")
w2=$(sed -nE 's/.*comm wait ([0-9.]+) ms per step.*/\1/p' "$tmp/two.out")
python3 - "$t1" "$t2" "$w2" <<'PY'
import sys
t1, t2, w2 = map(float, sys.argv[1:])
r = t1 / t2
print("1 process x 1 thread : %8.1f ms per step" % t1)
print("2 processes x 1 thread: %8.1f ms per step, of which %.1f ms waiting on the gradient all-reduce (rank 0)" % (t2, w2))
print("speed-up %.2fx (target >= 1.7x): %s" % (r, "met" if r >= 1.7 else "NOT met (is the machine busy?)"))
PY
