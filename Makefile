# Entry points: `make demo` runs the main job, `make test` runs every suite; both set up a fresh machine first.
PYTHON ?= /usr/bin/python3
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE=$(PYTHON) -DPYTHON_EXECUTABLE=$(PYTHON)
DEMO_DIR ?= $(BUILD)/demo

.PHONY: setup build test test-cpp test-python demo bench lint format clean

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-python: build
	$(PYTHON) -m pytest tests/python

test: test-cpp test-python

demo: build
	rm -rf $(DEMO_DIR)
	$(PYTHON) examples/quickstart.py $(DEMO_DIR)

# The overhead benchmark runs twice: compute on every core, then with one core left for the IO
# thread (as on a multi-core trainer); docs/benchmarks.md explains both.
IO_CORE_ENV = OPENBLAS_NUM_THREADS=$(shell n=$$(nproc); echo $$((n > 1 ? n - 1 : 1))) \
              OMP_NUM_THREADS=$(shell n=$$(nproc); echo $$((n > 1 ? n - 1 : 1)))

bench: build
	$(PYTHON) bench/overhead.py $(BENCH_FLAGS)
	$(IO_CORE_ENV) $(PYTHON) bench/overhead.py $(BENCH_FLAGS)
	$(PYTHON) bench/read.py $(READ_BENCH_FLAGS)

lint: setup
	clang-format --dry-run --Werror $$(git ls-files '*.h' '*.cc' '*.c')
	@if git ls-files '*.py' | grep -q .; then black --check --quiet $$(git ls-files '*.py'); fi

format: setup
	clang-format -i $$(git ls-files '*.h' '*.cc' '*.c')
	@if git ls-files '*.py' | grep -q .; then black --quiet $$(git ls-files '*.py'); fi

clean:
	rm -rf $(BUILD)
