#!/usr/bin/env bash
# ptxas_report.sh: registers, static shared memory and spills of every kernel in train_gpt.cu, from
# nvcc -Xptxas -v (no GPU needed), as a markdown table: bash scripts/ptxas_report.sh [sm_90] [BF16|FP32]
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${1:-sm_90}
PREC=${2:-BF16}
flags=""; [ "$PREC" = FP32 ] && flags="-DENABLE_FP32"
MPI_CFLAGS=$(mpicxx --showme:compile 2>/dev/null || true)
nvcc -O3 -std=c++17 --use_fast_math -arch="$ARCH" $flags -Xcompiler -fopenmp $MPI_CFLAGS -x cu -c train_gpt.cu \
     -o /dev/null -Xptxas -v 2>&1 | python3 -c '
import re, subprocess, sys
lines = sys.stdin.read().splitlines()
print("| kernel (%s, %s) | registers | static smem (B) | spill stores / loads (B) |" % (sys.argv[1], sys.argv[2]))
print("|---|---|---|---|")
name = None
for l in lines:
    m = re.search(r"Compiling entry function \x27([^\x27]+)\x27", l)
    if m: name = subprocess.run(["c++filt", m.group(1)], capture_output=True, text=True).stdout.strip().replace("__nv_bfloat16", "bf16"); spill = "?"; continue
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", l)
    if m: spill = "%s / %s" % m.groups(); continue
    m = re.search(r"Used (\d+) registers", l)
    if m and name:
        smem = re.search(r"(\d+) bytes smem", l)
        print("| `%s` | %s | %s | %s |" % (name.split("(")[0], m.group(1), smem.group(1) if smem else "0", spill))
        name = None
' "$ARCH" "$PREC"
