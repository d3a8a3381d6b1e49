# test/test.mk: the test programs of the CPU build and `make test` (test/run_tests.sh runs them all).
# Included by the top Makefile, which defines CXX, CPU_FLAGS, CPU_LIBS.

-include test/data.mk
-include test/matmul.mk

build/%_cpu: test/%.cu $(LLM_HEADERS) test/test_common.h
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

build/bench_cpu: dev/bench_train.cu $(LLM_HEADERS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) $< -o $@ $(CPU_LIBS)

TEST_CPU_BINS := build/test_gpt_cpu build/test_ops_grad_cpu build/test_formats_cpu build/test_data

.PHONY: test test-build
test-build: train_gpt_cpu $(TEST_CPU_BINS)

test: test-build
	bash test/run_tests.sh

# median step times of the CPU build on the two configs of llm.c's CPU comparison (see README)
bench-cpu: build/bench_cpu
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./build/bench_cpu "d4,C=256,NH=4,maxT=256,V=50257" 4 64 10
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} ./build/bench_cpu d12 4 64 5
