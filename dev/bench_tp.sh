#!/usr/bin/env bash
# bench_tp.sh: the step time of tensor parallelism against one process, in one run (make bench-tp).
# GPT-2 124M (d12) on the CPU build: tp 1 (one process, all cores) and tp 2 (mpirun -np 2, the cores
# shared out), each the median of STEPS steps after a warm-up (dev/bench_train.cu), and for tp 2 the
# time inside the tp group's collectives (blocking all-reduces and all-gathers: their whole duration
# in the CPU build, waiting for the other rank included). Prints both lines and the ratio.
#   bash dev/bench_tp.sh [MODEL B T STEPS]      (default d12 4 256 3)
set -u
cd "$(dirname "$0")/.."
MODEL=${1:-d12} B=${2:-4} T=${3:-256} STEPS=${4:-3}
BIN=./build/bench_cpu
NP=$(nproc)
MPIRUN=(mpirun -q --oversubscribe -x OMP_NUM_THREADS)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)
log=build/bench_tp
mkdir -p "$log"
echo "bench-tp: $MODEL B=$B T=$T, $STEPS steps each; logs in $log/"
OMP_NUM_THREADS=$NP "$BIN" "$MODEL" "$B" "$T" "$STEPS" 0 none 1 > "$log/tp1.log" 2>&1 || { echo "tp 1 failed: $log/tp1.log"; exit 1; }
t1=$(grep -m1 'median step' "$log/tp1.log" | sed -E 's/.*median step ([0-9.]+) ms.*/\1/')
echo "tp 1 (1 process x $NP threads):   median step $t1 ms"
TH=$(( NP / 2 > 0 ? NP / 2 : 1 ))
OMP_NUM_THREADS=$TH "${MPIRUN[@]}" -np 2 "$BIN" "$MODEL" "$B" "$T" "$STEPS" 0 none 2 > "$log/tp2.log" 2>&1 || { echo "tp 2 failed: $log/tp2.log"; exit 1; }
line=$(grep -m1 'median step' "$log/tp2.log")
t2=$(echo "$line" | sed -E 's/.*median step ([0-9.]+) ms.*/\1/')
share=$(echo "$line" | sed -nE 's/.*tp collectives ([0-9.]+) ms \(([0-9.]+)%\).*/\1 ms, \2%/p')
echo "tp 2 (2 processes x $TH threads): median step $t2 ms, of which in tp collectives $share"
awk -v a="$t2" -v b="$t1" 'BEGIN { printf "tp 2 / tp 1 step time: %.3f\n", a / b }'
