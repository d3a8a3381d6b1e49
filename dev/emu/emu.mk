# dev/emu/emu.mk: the CUDA emulator's part of the Makefile (included by the top-level Makefile,
# which defines CXX, NVCC, EMU_FLAGS, NVCC_TEST_FLAGS and CUDA_HOME).
#
#   make test-emu        build dev/emu/test_emu.cu four ways into build/emu/ (plain, ASan+UBSan,
#                        TSan, racecheck) and run dev/emu/test_emu.sh
#   make test-emu-nvcc   check that the same test source also compiles with nvcc (no GPU needed)
#   build/emu/test_nccl_emu   the tests of nccl_emu.h (NCCL over MPI), run by test/test_comm.sh
#
# The emulator is header-only (dev/emu/emu.h, included by llm/core/common.h when -DLLM_EMU): a program
# built with $(EMU_FLAGS) needs no extra objects. EMU_OBJS stays empty for targets that link it;
# EMU_LINK is what the emulator itself needs at link time.

EMU_HEADERS := $(wildcard dev/emu/*.h) llm/core/common.h llm/core/usage.h
EMU_OBJS :=
EMU_LINK := -lpthread -ldl
EMU_BUILD := build/emu
EMU_SAN_FLAGS := -O1 -g -fno-omit-frame-pointer
# racecheck (emu_racecheck.h): compile with -g (addr2line names a race's source lines; the other emulated builds go
# without, which saves their compile an eighth) and ThreadSanitizer's instrumentation, whose calls the emulator
# defines, and link WITHOUT -fsanitize=thread (so without libtsan): two steps, the object beside the
# program. EMU_RACECHECK_LINK is the link step's flags (-fopenmp: the emulated build's OpenMP).
EMU_RACECHECK_FLAGS := -g -DEMU_RACECHECK -fsanitize=thread --param tsan-instrument-func-entry-exit=0
EMU_RACECHECK_LINK := -fopenmp

.PHONY: test-emu test-emu-nvcc test-wmma-nvcc

$(EMU_BUILD)/test_emu: dev/emu/test_emu.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) -Wall -Wextra $< -o $@ $(EMU_LINK)

$(EMU_BUILD)/test_emu_asan: dev/emu/test_emu.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) $(EMU_SAN_FLAGS) -fsanitize=address,undefined -Wall $< -o $@ $(EMU_LINK)

$(EMU_BUILD)/test_emu_tsan: dev/emu/test_emu.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) $(EMU_SAN_FLAGS) -fsanitize=thread -DEMU_TSAN -Wall $< -o $@ $(EMU_LINK)

$(EMU_BUILD)/test_emu_racecheck: dev/emu/test_emu.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) $(EMU_RACECHECK_FLAGS) -Wall -Wextra -c $< -o $@.o
	$(CXX) $(EMU_RACECHECK_LINK) $@.o -o $@ $(EMU_LINK)

test-emu: $(EMU_BUILD)/test_emu $(EMU_BUILD)/test_emu_asan $(EMU_BUILD)/test_emu_tsan $(EMU_BUILD)/test_emu_racecheck
	bash dev/emu/test_emu.sh $(EMU_BUILD)

test-emu-nvcc: dev/emu/test_emu.cu $(EMU_HEADERS)
	@mkdir -p $(EMU_BUILD)
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu -c $< -o $(EMU_BUILD)/test_emu_nvcc.o

# the emulated NCCL (nccl_emu.h) tested on its own, under mpirun (run by test/test_comm.sh)
$(EMU_BUILD)/test_nccl_emu: dev/emu/test_nccl_emu.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) -Wall -Wextra $< -o $@ $(EMU_LIBS) $(EMU_LINK)

# the emulated WMMA subset (dev/emu/mma.h): dev/emu/test_wmma.cu built plain, with ASan+UBSan, TSan and racecheck, run by
# dev/emu/test_wmma.sh (test/run_tests.sh: wmma); test-wmma-nvcc checks that it compiles with nvcc
$(EMU_BUILD)/test_wmma: dev/emu/test_wmma.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) -Wall -Wextra $< -o $@ $(EMU_LINK)

$(EMU_BUILD)/test_wmma_asan: dev/emu/test_wmma.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) $(EMU_SAN_FLAGS) -fsanitize=address,undefined -Wall $< -o $@ $(EMU_LINK)

$(EMU_BUILD)/test_wmma_tsan: dev/emu/test_wmma.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) $(EMU_SAN_FLAGS) -fsanitize=thread -DEMU_TSAN -Wall $< -o $@ $(EMU_LINK)

$(EMU_BUILD)/test_wmma_racecheck: dev/emu/test_wmma.cu $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(EMU_FLAGS) $(EMU_RACECHECK_FLAGS) -Wall -Wextra -c $< -o $@.o
	$(CXX) $(EMU_RACECHECK_LINK) $@.o -o $@ $(EMU_LINK)

test-wmma-nvcc: dev/emu/test_wmma.cu $(EMU_HEADERS)
	@mkdir -p $(EMU_BUILD)
	$(NVCC) $(NVCC_TEST_FLAGS) -x cu -c $< -o $(EMU_BUILD)/test_wmma_nvcc.o
