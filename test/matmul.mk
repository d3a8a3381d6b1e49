# test/matmul.mk: the tests of llm/ops/matmul.cuh and of the emulated cuBLASLt (dev/emu/cublaslt_emu.h).
# Included by the top Makefile (CXX, CPU_FLAGS, CPU_LIBS, EMU_FLAGS, EMU_LIBS).
#
#   make test-matmul                  build and run all four programs
#   build/test_cublaslt [seed]        emulated cuBLASLt vs a naive loop (needs no fibers)
#   build/test_matmul_cpu [seed]      CPU build: sgemm path vs the plain loops
#   build/test_matmul_emu [seed]      emulated CUDA build, floatX per PRECISION (BF16 by default)
#   build/test_matmul_emu_fp32 [seed] emulated CUDA build, FP32

# matmul.cuh and its parts (matmul_cpu.h, matmul_kernels.cuh, matmul_cublaslt.cuh), and every header they
# include, so that a change in any of them rebuilds the tests
MATMUL_TEST_DEPS := llm/ops/matmul.cuh llm/ops/matmul_cpu.h llm/ops/matmul_kernels.cuh llm/ops/matmul_cublaslt.cuh \
                    llm/core/common.h llm/core/context.h llm/ops/gelu.cuh llm/core/cuda_utils.cuh llm/core/half_cpu.h llm/core/device.h \
                    test/test_common.h llm/core/usage.h
MATMUL_EMU_DEPS := $(MATMUL_TEST_DEPS) $(wildcard dev/emu/*.h)

build/test_cublaslt: test/test_cublaslt.cu dev/emu/cublaslt_emu.h llm/core/usage.h
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -Wall $< -o $@ $(EMU_LIBS)

build/test_matmul_cpu: test/test_matmul.cu $(MATMUL_TEST_DEPS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

build/test_matmul_emu: test/test_matmul.cu $(MATMUL_EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)

build/test_matmul_emu_fp32: test/test_matmul.cu $(MATMUL_EMU_DEPS)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) -DENABLE_FP32 $< -o $@ $(EMU_LIBS)

MATMUL_TESTS := build/test_cublaslt build/test_matmul_cpu build/test_matmul_emu build/test_matmul_emu_fp32

.PHONY: test-matmul
test-matmul: $(MATMUL_TESTS)
	@fail=0; for t in $(MATMUL_TESTS); do \
	    OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./$$t || fail=1; \
	done; exit $$fail

# the same test on a real GPU (not part of test-matmul: CI has none). Run it where a GPU is at hand.
build/test_matmul_gpu: test/test_matmul.cu $(MATMUL_TEST_DEPS)
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ -lcublasLt
