# Makefile: the three builds of train_gpt.cu (CUDA, CPU, emulated CUDA), the tests, the default run.
#
#   make train_gpt_cpu        CPU build (g++, OpenMP, OpenBLAS, MPI)
#   make train_gpt            CUDA build (nvcc, cuBLASLt, NCCL, MPI); PRECISION=BF16 (default) or FP32
#   make train                the embedded default run: synthetic addition data, train, evaluate
#   make test                 every test (see test/run_tests.sh)
#   make bench-cpu            CPU step-time benchmark

SHELL := /bin/bash
CXX ?= g++
NVCC ?= nvcc
PRECISION ?= BF16
CUDA_HOME ?= /usr/local/cuda
PYTHON ?= python3

# --- MPI and OpenBLAS (Debian: libopenmpi-dev, libopenblas-openmp-dev) ---
MPI_CFLAGS := $(shell pkg-config --cflags ompi 2>/dev/null || mpicxx --showme:compile 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi 2>/dev/null || mpicxx --showme:link 2>/dev/null)
OPENBLAS_DIR := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp))
ifneq ($(OPENBLAS_DIR),)
BLAS_LIBS := -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas
else
BLAS_LIBS := -lopenblas
endif
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)

# --- CPU build ---
CPU_FLAGS := -std=c++17 -O3 -march=native -fno-math-errno -fopenmp -Wall -Wno-unknown-pragmas -Wno-unused-function \
             -x c++ $(MPI_CFLAGS) $(BLAS_CFLAGS)
CPU_LIBS := $(BLAS_LIBS) $(MPI_LIBS) -lm

# --- emulated CUDA build (tests): the kernels compiled by g++, run by dev/emu ---
ifeq ($(PRECISION),FP32)
PREC_FLAGS := -DENABLE_FP32
else
PREC_FLAGS :=
endif
EMU_FLAGS := -std=c++17 -O2 -g -x c++ -DLLM_EMU -fno-strict-aliasing -Wno-unknown-pragmas \
             -fopenmp -I$(CUDA_HOME)/include $(MPI_CFLAGS) $(BLAS_CFLAGS) $(PREC_FLAGS)
EMU_LIBS := $(BLAS_LIBS) $(MPI_LIBS) -lm -lpthread

# --- CUDA build ---
NVCC_FLAGS := -O3 -std=c++17 --use_fast_math -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=sm_90 -Xcompiler -fopenmp $(MPI_CFLAGS) $(PREC_FLAGS)
NVCC_LIBS := -lcublasLt -lcublas -lnccl $(MPI_LIBS)

LLM_HEADERS := $(wildcard llm/*.h llm/*.cuh)

.PHONY: all train test bench-cpu clean fixtures

all: train_gpt_cpu

train_gpt_cpu: train_gpt.cu $(LLM_HEADERS)
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

train_gpt: train_gpt.cu $(LLM_HEADERS)
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
$(TRAIN_DATA)/addition_train.bin: dev/data/addition.py
	$(PYTHON) dev/data/addition.py --digits 3 --out $(TRAIN_DATA)

train: train_gpt_cpu $(TRAIN_DATA)/addition_train.bin
	@echo "training a 2-layer GPT on 3-digit addition; log: $(TRAIN_OUT)/log.jsonl"
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./train_gpt_cpu \
	    --model d2,C=64,NH=4,maxT=64,V=257 --train-data $(TRAIN_DATA)/addition_train.bin \
	    --val-data $(TRAIN_DATA)/addition_val.bin --tokenizer $(TRAIN_DATA)/addition_tokenizer.bin \
	    -b 32 -t 56 --steps 1000 --lr 3e-3 --warmup 100 --lr-final 0.05 --weight-decay 0.1 \
	    --val-every 100 --val-steps 5 --sample-every 250 --sample-len 56 --checkpoint-every 1000 \
	    --output-dir $(TRAIN_OUT) --eval-file $(TRAIN_DATA)/addition_test.bin

# regenerate the committed PyTorch fixture of test/test_gpt.cu (needs torch: dev/reference/requirements.txt)
fixtures:
	$(PYTHON) dev/reference/gpt2_reference.py --out test/fixtures
