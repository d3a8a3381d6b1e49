# dev/cuda/cuda.mk: the kernel-development programs of dev/cuda/ (included by the top Makefile, which
# defines NVCC, CXX, EMU_FLAGS, EMU_LIBS and PREC_FLAGS).
#
#   make dev-cuda                  every dev/cuda/*.cu with nvcc into build/cuda/<name> (builds without
#                                  a GPU; run them on one: ./build/cuda/layernorm, ...)
#   make dev-cuda CUDA_ARCH=sm_80  for another GPU (default sm_90: H100)
#   make dev-cuda PRECISION=FP32   FP32 activations instead of BF16 (PRECISION=FP16: FP16)
#   make dev-cuda-emu              the same sources with g++ and dev/emu into build/cuda_emu/<name>:
#                                  they run on the CPU, at small default sizes
#
# Each program checks its kernel versions against the CPU reference and times them (see the top of
# each file); dev/cuda/common.h holds the plumbing they share.

CUDA_ARCH ?= sm_90
DEV_CUDA_SRCS := $(wildcard dev/cuda/*.cu)
DEV_CUDA_BINS := $(patsubst dev/cuda/%.cu,build/cuda/%,$(DEV_CUDA_SRCS))
DEV_CUDA_EMU_BINS := $(patsubst dev/cuda/%.cu,build/cuda_emu/%,$(DEV_CUDA_SRCS))
DEV_CUDA_DEPS := $(wildcard dev/cuda/*.h dev/cuda/*.cuh llm/*/*.h llm/*/*.cuh)
DEV_CUDA_NVCC_FLAGS = -O3 --use_fast_math -std=c++17 -arch=$(CUDA_ARCH) -Xcompiler -fopenmp $(PREC_FLAGS)
DEV_CUDA_NVCC_LIBS := -lcublasLt -lcublas

.PHONY: dev-cuda dev-cuda-emu dev-cuda-flags

dev-cuda: $(DEV_CUDA_BINS)

dev-cuda-emu: $(DEV_CUDA_EMU_BINS)

# the flags of each build in a hidden file, rewritten only when they change, so that another
# CUDA_ARCH or PRECISION rebuilds the programs
build/cuda/.flags: dev-cuda-flags
	@mkdir -p $(@D)
	@echo '$(NVCC) $(DEV_CUDA_NVCC_FLAGS)' | cmp -s - $@ || echo '$(NVCC) $(DEV_CUDA_NVCC_FLAGS)' > $@
build/cuda_emu/.flags: dev-cuda-flags
	@mkdir -p $(@D)
	@echo '$(CXX) $(EMU_FLAGS)' | cmp -s - $@ || echo '$(CXX) $(EMU_FLAGS)' > $@

build/cuda/%: dev/cuda/%.cu $(DEV_CUDA_DEPS) build/cuda/.flags
	$(NVCC) $(DEV_CUDA_NVCC_FLAGS) $< -o $@ $(DEV_CUDA_NVCC_LIBS)

build/cuda_emu/%: dev/cuda/%.cu $(DEV_CUDA_DEPS) $(wildcard dev/emu/*.h) build/cuda_emu/.flags
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)
