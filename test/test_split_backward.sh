#!/usr/bin/env bash
# test_split_backward.sh: the split backward of zero-bubble schedules (B = stage_backward_input, W =
# stage_backward_weight, llm/model/stage.h) under tensor parallelism, with and without sequence parallelism
# (test/test_split_backward.cu: on every rank, B then W against the rank's unsplit backward, bit for
# bit; the tp traffic of B + W against the unsplit backward's), under mpirun:
#   cpu_tp2        the CPU build, tp 2 (2 heads and 16 channels per rank)
#   cpu_tp4        the CPU build, tp 4 (1 head and 8 channels per rank, 2 tokens per rank under SP)
#   emu_tp2        the emulated CUDA build, FP32 (its kernels, comm.h's NCCL code on dev/emu/nccl_emu.h)
#   emu_bf16_tp2   the emulated CUDA build, BF16
# Prints each run's check lines prefixed by its name, ends with "test_split_backward: N passed, M failed";
# exit status 1 on any failure or a run that did not finish. Logs: build/split_backward/.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
LOG=build/split_backward
mkdir -p "$LOG"
source test/mpi_lib.sh  # MPIRUN, ok, bad, pass, fail, tp_program

tp_program cpu_tp2 2 ./build/test_split_backward_cpu test_split_backward 300
tp_program cpu_tp4 4 ./build/test_split_backward_cpu test_split_backward 300
tp_program emu_tp2 2 ./build/test_split_backward_emu test_split_backward 300
tp_program emu_bf16_tp2 2 ./build/test_split_backward_emu_bf16 test_split_backward 300

echo "test_split_backward: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
