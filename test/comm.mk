# test/comm.mk: the tests of llm/comm/comm.h (process mesh, collectives, byte ledger).
# Included by the top Makefile (CXX, CPU_FLAGS, CPU_LIBS, EMU_FLAGS, EMU_LIBS, NVCC, NVCC_TEST_FLAGS, NVCC_LIBS).
#
#   make test-comm              build both programs and run test/test_comm.sh (every layout, ~30 s)
#   build/test_comm_cpu         CPU build (floatX = float); run under mpirun, see test/test_comm.cu
#   build/test_comm_emu         emulated CUDA build (floatX = bf16): comm.h's NCCL code over dev/emu/nccl_emu.h
#   build/test_comm_cuda        CUDA build over NCCL (compiles anywhere; needs one GPU per process)
#   build/emu/test_nccl_emu     the emulated NCCL itself (dev/emu/emu.mk)
#   make bench-comm             all-reduce bandwidth of 2 processes, 1 MB .. 64 MB
#
# Until test/test.mk includes this file: make -f Makefile -f test/comm.mk test-comm

ifndef COMM_MK_INCLUDED
COMM_MK_INCLUDED := 1

COMM_TEST_DEPS := test/test_comm.cu $(wildcard llm/comm/*.h) llm/core/half_cpu.h llm/core/common.h llm/core/device.h

build/test_comm_cpu: $(COMM_TEST_DEPS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

build/test_comm_emu: $(COMM_TEST_DEPS) $(wildcard dev/emu/*.h)
	@mkdir -p build
	$(CXX) $(EMU_FLAGS) $< -o $@ $(EMU_LIBS)

build/test_comm_cuda: $(COMM_TEST_DEPS)
	@mkdir -p build
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu $< -o $@ $(NVCC_LIBS)

.PHONY: test-comm bench-comm
test-comm: build/test_comm_cpu build/test_comm_emu
	bash test/test_comm.sh

bench-comm: build/test_comm_cpu
	OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	    mpirun -q --oversubscribe -np 2 build/test_comm_cpu --bench

endif  # COMM_MK_INCLUDED
