# test/test.mk: the test programs of the CPU build and `make test` (test/run_tests.sh runs them all).
# Included by the top Makefile, which defines CXX, CPU_FLAGS, CPU_LIBS.

-include test/data.mk
-include test/matmul.mk
-include test/comm.mk

build/%_cpu: test/%.cu $(LLM_HEADERS) test/test_common.h test/world_check.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)
build/test_gpt_cpu build/test_split_backward_cpu: test/split_backward_check.h
build/test_gpt_cpu: test/moe_model_check.h

# the pipeline simulator: run a schedule with op costs, print it, write a Chrome/Perfetto trace
build/pipeline_sim: dev/pipeline_sim.cu llm/parallel/schedule.h llm/parallel/schedule_list.h llm/parallel/schedule_v.h llm/core/common.h llm/core/usage.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

build/bench_cpu: dev/bench_train.cu dev/bench_common.h dev/bench_breakdown.h $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

# the CPU build with 16-bit storage (llm/core/half_cpu.h): the trainer and the model test in BF16 and FP16
build/train_gpt_cpu_bf16: train_gpt.cu $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) $(CPU_PREC_BF16) $< -o $@ $(CPU_LIBS)
build/train_gpt_cpu_fp16: train_gpt.cu $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) -DENABLE_FP16 $< -o $@ $(CPU_LIBS)
build/test_gpt_cpu_bf16: test/test_gpt.cu test/split_backward_check.h test/moe_model_check.h $(LLM_HEADERS) test/test_common.h test/world_check.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) $(CPU_PREC_BF16) $< -o $@ $(CPU_LIBS)
build/test_matmul_cpu_bf16: test/test_matmul.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) $(CPU_PREC_BF16) $< -o $@ $(CPU_LIBS)
# the mixture-of-experts MLP (llm/ops/moe_router.cuh, llm/model/moe.h) in the CPU BF16 build (build/test_moe_cpu: FP32)
build/test_moe_cpu_bf16: test/test_moe.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) $(CPU_PREC_BF16) $< -o $@ $(CPU_LIBS)
# BF16 storage's cost on the linear layers, and a BF16 GEMM's gain (cblas_sbgemm where OpenBLAS has it, dev/sbgemm_cpu.h) (not a test)
build/bench_matmul_cpu_bf16: dev/bench_matmul_cpu_bf16.cu dev/sbgemm_cpu.h $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) $(CPU_PREC_BF16) $< -o $@ $(CPU_LIBS)
.PHONY: bench-matmul-bf16
bench-matmul-bf16: build/bench_matmul_cpu_bf16
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./build/bench_matmul_cpu_bf16 1024 5
# the training step of the BF16 CPU build in each FP8 recipe against BF16's, interleaved in one process
# (dev/bench_fp8_cpu.cu; not a test): the test model of test_precision.sh, then GPT-2 124M's linear shapes
# (C=768, 12 heads) on 2 layers and a small vocabulary, so that the LM head does not hide the linears
build/bench_fp8_cpu_bf16: dev/bench_fp8_cpu.cu dev/bench_common.h $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS_FP32) $(CPU_PREC_BF16) $< -o $@ $(CPU_LIBS)
.PHONY: bench-fp8
bench-fp8: build/bench_fp8_cpu_bf16
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./build/bench_fp8_cpu_bf16 "d2,C=128,NH=4,maxT=64,V=257" 8 64 20
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./build/bench_fp8_cpu_bf16 "d2,C=768,NH=12,maxT=256,V=257" 4 256 3
# llm/core/half_cpu.h's conversions against the CUDA toolkit's (host code of cuda_bf16.h / cuda_fp16.h)
build/test_half_cpu: test/test_half_cpu.cpp llm/core/half_cpu.h llm/core/usage.h
	@mkdir -p build
	$(CXX) -std=c++17 -O2 -march=native -fopenmp -I$(CUDA_HOME)/include $< -o $@
HALF_CPU_BINS := build/train_gpt_cpu_bf16 build/train_gpt_cpu_fp16 build/test_gpt_cpu_bf16 build/test_half_cpu \
                 build/test_matmul_cpu_bf16 build/test_moe_cpu_bf16

# what checking a checkpoint costs: a GPT-2 124M save and load with and without the checksums (not a test)
build/bench_checkpoint: dev/bench_checkpoint.cu $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)
.PHONY: bench-checkpoint
bench-checkpoint: build/bench_checkpoint
	./build/bench_checkpoint --model d12 --dir $${BENCH_DIR:-/tmp} --reps 3

# the fsync and rename calls of a process, traced (test_checkpoint.sh: the order a crash needs)
build/fsync_trace.so: test/fsync_trace.c
	@mkdir -p build
	$(CC) -O2 -shared -fPIC $< -o $@ -ldl

# the OpenBLAS kernels the CPU build runs on (llm/ops/blas_cpu.h): the choice, and this machine's
build/test_blas_cpu: test/test_blas_cpu.cpp $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

# the ops' own timers (llm/core/op_profile.h), which dev/bench_train.cu's breakdown prints
build/test_op_profile_cpu: test/test_op_profile.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)
TEST_CPU_BINS := $(HALF_CPU_BINS) build/test_blas_cpu build/test_op_profile_cpu build/test_gpt_cpu build/test_ops_grad_cpu build/test_moe_cpu build/test_attention_blocks_cpu build/test_attention_ring_cpu build/test_formats_cpu build/test_data build/test_sampler_cpu \
                 build/test_tp_ops_cpu build/test_schedule_cpu build/pipeline_sim build/test_split_backward_cpu \
                 build/test_fp8_cpu build/test_fp8_gemm_cpu build/test_fp8_linear_cpu build/test_fatal_cpu build/fsync_trace.so \
                 build/test_sbgemm_cpu build/test_sbgemm_portable_cpu

# the emulated CUDA build: the CUDA kernels compiled by g++ and run on the CPU by dev/emu/
EMU_DEPS := $(LLM_HEADERS) $(wildcard dev/emu/*.h) test/test_common.h test/world_check.h test/kernel_check.h $(wildcard test/kernels/*.h)
build/train_gpt_emu: train_gpt.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
build/train_gpt_emu_bf16: train_gpt.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
build/test_kernels_emu: test/test_kernels.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
build/test_kernels_emu_fp32: test/test_kernels.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
# FP16 (PRECISION=FP16, -DENABLE_FP16): the kernels, the model against PyTorch and the trainer
build/test_kernels_emu_fp16: test/test_kernels.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP16 $< -o $@ $(EMU_LIBS)
build/test_gpt_emu_fp16: test/test_gpt.cu test/split_backward_check.h test/moe_model_check.h $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP16 $< -o $@ $(EMU_LIBS)
build/train_gpt_emu_fp16: train_gpt.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP16 $< -o $@ $(EMU_LIBS)
build/test_kernels_asan: test/test_kernels.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $(EMU_SAN_FLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined $< -o $@ $(EMU_LIBS)
# the same without MPI (no MPI include path or library, -DLLM_NO_MPI): the one-process comm.h that a
# CUDA build without MPI or NCCL compiles (test/test_nompi.sh)
build/train_gpt_emu_nompi: train_gpt.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(filter-out $(MPI_CFLAGS),$(EMU_FLAGS)) -DLLM_NO_MPI -DENABLE_FP32 $< -o $@ $(filter-out $(MPI_LIBS),$(EMU_LIBS))
# racecheck (dev/emu/emu_racecheck.h): compiled with ThreadSanitizer's instrumentation, linked without
# its runtime; every shared-memory race between a block's threads stops the program with a report
build/test_kernels_racecheck: test/test_kernels.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $(EMU_RACECHECK_FLAGS) -c $< -o $@.o
	$(CXX) $(EMU_RACECHECK_LINK) $@.o -o $@ $(EMU_LIBS)
build/test_matmul_racecheck: test/test_matmul.cu $(MATMUL_EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $(EMU_RACECHECK_FLAGS) -c $< -o $@.o
	$(CXX) $(EMU_RACECHECK_LINK) $@.o -o $@ $(EMU_LIBS)
build/test_gpt_emu: test/test_gpt.cu test/split_backward_check.h test/moe_model_check.h $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
build/test_gpt_emu_bf16: test/test_gpt.cu test/split_backward_check.h test/moe_model_check.h $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
build/test_tp_ops_emu: test/test_tp_ops.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
# the split backward (B, W) under tensor parallelism: test/test_split_backward.sh
build/test_split_backward_emu: test/test_split_backward.cu test/split_backward_check.h $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
build/test_split_backward_emu_bf16: test/test_split_backward.cu test/split_backward_check.h $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
build/test_sampler_emu: test/test_sampler.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
# FP8 formats and quantizers (llm/precision/fp8.cuh) against ml_dtypes, the kernels emulated
build/test_fp8_emu: test/test_fp8.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
# the FP8 GEMM (llm/precision/matmul_fp8.cuh) of every recipe against FP64, the emulated cuBLASLt's scale modes
build/test_fp8_gemm_emu: test/test_fp8_gemm.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
# the FP8 linear layer (llm/precision/fp8_linear.h): each GEMM operand's format, scale and amax entry, in BF16
build/test_fp8_linear_emu: test/test_fp8_linear.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
# ring attention's block-pair ops (llm/ops/attention_ring.cuh): the kernels, emulated, in FP32 and (op by op, the tensor-core
# pair kernels) BF16 and FP16 (test/test_attention_ring.cu)
build/test_attention_ring_emu: test/test_attention_ring.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
build/test_attention_ring_emu_bf16: test/test_attention_ring.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
build/test_attention_ring_emu_fp16: test/test_attention_ring.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP16 $< -o $@ $(EMU_LIBS)
# the mixture-of-experts MLP: its kernels against the CPU reference and the layer against the PyTorch fixture, FP32 and BF16
build/test_moe_emu: test/test_moe.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)
build/test_moe_emu_bf16: test/test_moe.cu $(EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
TEST_EMU_BINS := build/test_moe_emu build/test_moe_emu_bf16 build/test_attention_ring_emu build/test_attention_ring_emu_bf16 build/test_attention_ring_emu_fp16 build/train_gpt_emu build/train_gpt_emu_nompi build/train_gpt_emu_bf16 build/test_kernels_emu build/test_kernels_emu_fp32 \
                 build/test_kernels_emu_fp16 build/test_gpt_emu_fp16 build/train_gpt_emu_fp16 \
                 build/test_kernels_asan build/test_kernels_racecheck build/test_matmul_racecheck \
                 build/test_gpt_emu build/test_gpt_emu_bf16 build/test_sampler_emu build/test_tp_ops_emu $(MATMUL_TESTS) \
                 build/test_fp8_emu build/test_fp8_gemm_emu build/test_fp8_linear_emu \
                 build/test_split_backward_emu build/test_split_backward_emu_bf16 \
                 $(EMU_BUILD)/test_emu $(EMU_BUILD)/test_emu_asan $(EMU_BUILD)/test_emu_tsan \
                 $(EMU_BUILD)/test_emu_racecheck $(EMU_BUILD)/test_wmma $(EMU_BUILD)/test_wmma_asan $(EMU_BUILD)/test_wmma_tsan $(EMU_BUILD)/test_wmma_racecheck \
                 build/test_comm_cpu build/test_comm_emu $(EMU_BUILD)/test_nccl_emu

# the CUDA build, compiled (not run: CI has no GPU) — scripts/gpu_check.sh runs these on a GPU
# the BF16 GEMM experiment (dev/sbgemm_cpu.h): with the CPU's own instructions, and without
# AVX512-BF16 (the portable kernel)
build/test_sbgemm_cpu: test/test_sbgemm.cu dev/sbgemm_cpu.h $(LLM_HEADERS) test/test_common.h
	@mkdir -p $(@D)
	$(CXX) $(CPU_FLAGS_FP32) $< -o $@ $(CPU_LIBS)
build/test_sbgemm_portable_cpu: test/test_sbgemm.cu dev/sbgemm_cpu.h $(LLM_HEADERS) test/test_common.h
	@mkdir -p $(@D)
	$(CXX) $(CPU_FLAGS_FP32) -mno-avx512bf16 -DSBGEMM_FORCE_PORTABLE $< -o $@ $(CPU_LIBS)

build/test_kernels_gpu: test/test_kernels.cu $(LLM_HEADERS) test/test_common.h test/kernel_check.h $(wildcard test/kernels/*.h)
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)
build/test_fp8_gpu: test/test_fp8.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)
build/test_fp8_gemm_gpu: test/test_fp8_gemm.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)
build/test_moe_gpu: test/test_moe.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)
build/test_fp8_linear_gpu: test/test_fp8_linear.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)
build/bench_gpu: dev/bench_train.cu dev/bench_common.h dev/bench_breakdown.h $(LLM_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)
# the fused attention kernels in FP16 (the default build is BF16), device code only, for scripts/kernel_report.py
build/attention_fp16.fatbin: test/attention_sass.cu $(LLM_HEADERS)
	@mkdir -p build
	$(NVCC) -O3 -std=c++17 --use_fast_math -DENABLE_FP16 -fatbin -gencode arch=compute_80,code=sm_80 \
	    -gencode arch=compute_90,code=sm_90 -Xcompiler -fopenmp $(CUDA_COMM_FLAGS) -x cu $< -o $@
# docs/kernels.md from the CUDA trainer's machine code (scripts/kernel_report.py; test_kernel_report.sh checks it)
.PHONY: kernel-report
kernel-report: train_gpt build/attention_fp16.fatbin
	$(PYTHON) scripts/kernel_report.py --binary train_gpt --fp16-attention build/attention_fp16.fatbin --write docs/kernels.md
TEST_NVCC_BINS := train_gpt build/attention_fp16.fatbin build/test_kernels_gpu build/test_moe_gpu build/test_fp8_gpu build/test_fp8_gemm_gpu build/test_fp8_linear_gpu build/test_comm_cuda

# HellaSwag (test/test_hellaswag.sh, `run hellaswag` in run_tests.sh): the trainers it runs, then the test alone
.PHONY: test-hellaswag
test-hellaswag: train_gpt_cpu build/train_gpt_cpu_bf16 build/train_gpt_cpu_fp16 build/train_gpt_emu build/train_gpt_emu_bf16 \
                build/train_gpt_emu_nompi
	ONLY=hellaswag bash test/run_tests.sh

.PHONY: test test-build
# the longest compiles first (make -j starts prerequisites in this order): the CUDA trainer for its five targets is
# the longest single job (74 CPU-seconds on this project's 2-core Xeon); listed last, it ran alone at the build's end
test-build: $(TEST_NVCC_BINS) $(TEST_EMU_BINS) train_gpt_cpu $(TEST_CPU_BINS) dev-cuda

# the programs are built in parallel (one job per core), then run one after the other
# (build/deps/test.ok first: the packages the tests need, see the top Makefile); the build's output also goes
# to build/test_build.log, where test/test_warnings.sh looks for compiler warnings
test: build/deps/test.ok
	set -o pipefail; $(MAKE) -j$$(nproc) test-build 2>&1 | tee build/test_build.log
	bash test/run_tests.sh

# median step times of the CPU build on the two configs of llm.c's CPU comparison (docs/builds.md)
bench-cpu: build/bench_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./build/bench_cpu "d4,C=256,NH=4,maxT=256,V=50257" 4 64 10
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./build/bench_cpu d12 4 64 5

# activation recompute (--recompute): step time of none, selective and full in one process, as
# ratios to none, beside the expected cost from the FLOPs recomputed (dev/bench_train.cu). GPT-2 124M
# at B=4, T=256 on the CPU (a few minutes on 2 cores); scripts/gpu_check.sh runs it on a GPU at T=1024.
.PHONY: bench-recompute
bench-recompute: build/bench_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./build/bench_cpu d12 4 256 3 0 none,selective,full

# tensor parallelism (--tp): GPT-2 124M at B=4, T=256, tp 2 against tp 1 on the CPU in one run, with
# the share of tp 2's step spent in the tp collectives (dev/bench_tp.sh)
.PHONY: bench-tp
bench-tp: build/bench_cpu
	bash dev/bench_tp.sh

# data parallelism on the CPU build: 2 processes x 1 thread against 1 process x 1 thread on the same
# global batch, the speed-up and the comm wait per step (test/bench_ddp.sh)
.PHONY: bench-ddp
bench-ddp: train_gpt_cpu
	bash test/bench_ddp.sh
