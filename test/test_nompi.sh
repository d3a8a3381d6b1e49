#!/usr/bin/env bash
# test_nompi.sh: the trainer built without MPI (-DLLM_NO_MPI), as `make train_gpt` builds it on a
# one-GPU machine that has no MPI or no NCCL. Here it is the emulated CUDA build
# (build/train_gpt_emu_nompi, FP32), compiled without MPI's include path or libraries, which runs
# the same llm/comm/comm.h code as such a CUDA build: a one-process mesh.
#
# Checked, one line each: the binary links no libmpi; it trains 3 steps and its checkpoint and
# resumable state are the same bytes as the MPI build's one-process run (build/train_gpt_emu); its
# --report-json (rank 0's text gathered by comm_gather_bytes) is one rank's report; more than one
# process is refused with one line and a non-zero exit, both when a layout asks for it (--dp 2) and
# when mpirun starts it twice; a bad --zero ends through comm_exit with one line.
# Ends with "test_nompi: N passed, M failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
NOMPI=${NOMPI:-./build/train_gpt_emu_nompi}
EMU=${EMU:-./build/train_gpt_emu}
LOG=build/nompi
rm -rf "$LOG"; mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # the counters, ok, bad

# one_line NAME EXPECTED_REGEX CMD...: non-zero exit, exactly one line of output, matching
one_line() {
    local name=$1 want=$2; shift 2
    local out rc lines
    out=$(timeout 60 "$@" 2>&1); rc=$?
    echo "$out" > "$LOG/$name.log"
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -qE "$want"; then
        ok "$name: exit $rc, one line: $out"
    else
        bad "$name: exit $rc, $lines lines (expected non-zero and one line matching '$want'): $(printf '%s' "$out" | head -3)"
    fi
}

if ldd "$NOMPI" | grep -q libmpi; then bad "no libmpi: $NOMPI links $(ldd "$NOMPI" | grep libmpi)"
else ok "no libmpi: $NOMPI links no MPI library"; fi

python3 dev/data/addition.py --train 600 --val 100 --test 10 --out "$tmp/data" > /dev/null
D="$tmp/data"
args=(--model d2,C=24,NH=4,maxT=64,V=257 --train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin"
      --tokenizer "$D/addition_tokenizer.bin" -b 4 -t 32 --steps 3 --lr 1e-3 --val-every 0 --sample-every 0
      --checkpoint-every 3)
timeout 120 "$NOMPI" "${args[@]}" --output-dir "$tmp/nompi" --report-json "$tmp/nompi.json" > "$LOG/train_nompi.log" 2>&1
rc1=$?
timeout 120 "$EMU" "${args[@]}" --output-dir "$tmp/mpi" > "$LOG/train_mpi.log" 2>&1
rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s "$tmp/nompi/model_00000003.bin" "$tmp/mpi/model_00000003.bin" &&
   cmp -s "$tmp/nompi/state_00000003.bin" "$tmp/mpi/state_00000003.bin"; then
    ok "train: 3 steps without MPI give the same model and state bytes as the MPI build on one process"
else
    bad "train: exit $rc1 (no MPI) / $rc2 (MPI), or the checkpoints differ (see $LOG/train_*.log)"
fi
if python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["world"]==1 and len(r["ranks"])==1 and r["ranks"][0]["rank"]==0 else 1)' "$tmp/nompi.json" 2>"$LOG/report.log"; then
    ok "report: --report-json holds one rank's report (comm_gather_bytes without MPI)"
else
    bad "report: $tmp/nompi.json is not one rank's report ($(head -c 200 "$LOG/report.log"))"
fi

one_line refuse_dp2 'error: invalid layout: --dp 2 .*built without MPI' "$NOMPI" "${args[@]}" --dp 2 --output-dir "$tmp/dp2"
one_line refuse_bad_zero 'error: --zero: expected an integer in \[0, 3\], found .5.' "$NOMPI" "${args[@]}" --zero 5 --output-dir "$tmp/z5"
MPIRUN=(mpirun -q --oversubscribe)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)
if command -v mpirun > /dev/null; then
    one_line refuse_mpirun_np2 'error: this program was built without MPI.*started 2' "${MPIRUN[@]}" -np 2 "$NOMPI" "${args[@]}" --output-dir "$tmp/np2"
else
    echo "skip refuse_mpirun_np2: no mpirun"
fi
for d in dp2 z5 np2; do [ -e "$tmp/$d" ] && bad "refused run $d left an output directory"; done

echo "test_nompi: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
