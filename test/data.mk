# test/data.mk: the data-side tests (dataloader, tokenizer, logger, dev/data/addition.py).
# Included by the top Makefile, which defines CXX, CPU_FLAGS, PYTHON.
#
#   make test-data       build build/test_data and run it from the repository root

DATA_TEST_DEPS := test/test_data.cpp llm/core/common.h llm/train/dataloader.h llm/train/tokenizer.h llm/train/logger.h llm/core/usage.h

build/test_data: $(DATA_TEST_DEPS)
	@mkdir -p build
	$(CXX) $(CPU_FLAGS) test/test_data.cpp -o $@ -lm

.PHONY: test-data
test-data: build/test_data
	./build/test_data
