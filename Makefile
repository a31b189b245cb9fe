# Entry points: `make demo` runs the main job, `make test` runs every suite; both set up a fresh machine first.
# `make sanitize`, `make tsan` and `make fuzz` run the checks of docs/design.md ("Checks").
PYTHON ?= /usr/bin/python3
BUILD ?= build
JOBS ?= $(shell nproc)
CCACHE := $(shell command -v ccache 2>/dev/null)
LAUNCHER := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# pybind11 finds Python through FindPython (Python_EXECUTABLE); PYTHON_EXECUTABLE would be unused.
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE=$(PYTHON) $(LAUNCHER)
DEMO_DIR ?= $(BUILD)/demo

# Sanitizer and fuzzing builds live in their own directories; their _core goes to
# $(ASAN_BUILD)/python so the package's own xdl_trace/_core*.so is left alone.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
# File by file (no unity build): a file that compiles only beside its unit-mates fails here.
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE=$(PYTHON) $(LAUNCHER) \
                  -DXDL_TRACE_UNITY_BUILD=OFF
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS ?= halt_on_error=1:second_deadlock_stack=1

.PHONY: setup build test test-cpp test-python demo bench lint format clean gpu-prepare \
        sanitize sanitize-cpp sanitize-python tsan fuzz how-to-add

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

# The demo needs the core and the extension only (not the tests, examples or plugins).
# Quiet when nothing changed: no make directory lines, no "Built target" lines (what compiles,
# and every error, still shows).
demo: setup $(BUILD)/CMakeCache.txt
	@bash -o pipefail -c 'cmake --build $(BUILD) -j $(JOBS) --target _core -- --no-print-directory \
	  | { grep -v -E "^\[ *[0-9]+%\] Built target " || true; }'
	@rm -rf $(DEMO_DIR)
	$(PYTHON) examples/quickstart.py $(DEMO_DIR)

$(ASAN_BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(ASAN_BUILD) $(SANITIZER_FLAGS) -DXDL_TRACE_SANITIZE=address,undefined \
	  -DXDL_TRACE_PYTHON_OUTPUT_DIR=$(abspath $(ASAN_BUILD))/python

# Left out of sanitizer runs: install:* links an uninstrumented consumer; GPU-only cases (which
# skip without a GPU) start the real libcupti, whose own threads make LeakSanitizer's exit-time
# scan crash after the case has passed or skipped (seen: "LeakSanitizer has encountered a fatal
# error"); a GPU machine runs them in `make test`. The other cases of cupti_tracer_test load the
# real libcupti too: they run under ASan+UBSan with the leak check off, for the same reason.
SANITIZER_CTEST_EXCLUDE = '^install:|GPU:|^cuda_example_gpu'
SANITIZER_LIBCUPTI_TESTS = '^cupti_tracer_test:'

sanitize-cpp: setup $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -E $(SANITIZER_CTEST_EXCLUDE)'|'$(SANITIZER_LIBCUPTI_TESTS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -R $(SANITIZER_LIBCUPTI_TESTS) -E $(SANITIZER_CTEST_EXCLUDE)

# Python is not built with ASan: libasan is preloaded, and pytest runs on a copy of the
# checkout whose package holds the ASan _core (scripts/sanitize_pytest.sh).
sanitize-python: setup $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target _core
	PYTHON=$(PYTHON) bash scripts/sanitize_pytest.sh $(ASAN_BUILD) $(PYTEST_FLAGS)

sanitize: sanitize-cpp sanitize-python

$(TSAN_BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(TSAN_BUILD) $(SANITIZER_FLAGS) -DXDL_TRACE_SANITIZE=thread \
	  -DXDL_TRACE_BUILD_PYTHON=OFF

tsan: setup $(TSAN_BUILD)/CMakeCache.txt
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && ctest --output-on-failure -j $(JOBS) -E $(SANITIZER_CTEST_EXCLUDE)

$(FUZZ_BUILD)/CMakeCache.txt: | setup
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD) $(SANITIZER_FLAGS) \
	  -DXDL_TRACE_SANITIZE=address,undefined -DXDL_TRACE_FUZZ=ON -DXDL_TRACE_BUILD_TESTS=OFF \
	  -DXDL_TRACE_BUILD_EXAMPLES=OFF -DXDL_TRACE_BUILD_PYTHON=OFF -DXDL_TRACE_BUILD_PLUGINS=OFF

# Each fuzzer runs FUZZ_SECONDS on the committed seeds plus what earlier runs found (kept in
# $(FUZZ_BUILD)/corpus); a crash leaves its input in $(FUZZ_BUILD)/crashes and fails the run.
fuzz: setup $(FUZZ_BUILD)/CMakeCache.txt
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target reader_fuzz meta_fuzz
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The overhead benchmark runs twice: compute on every core, then with one core left for the IO
# thread (as on a multi-core trainer); docs/benchmarks.md explains both.
IO_CORE_ENV = OPENBLAS_NUM_THREADS=$(shell n=$$(nproc); echo $$((n > 1 ? n - 1 : 1))) \
              OMP_NUM_THREADS=$(shell n=$$(nproc); echo $$((n > 1 ? n - 1 : 1)))

bench: build
	$(PYTHON) bench/overhead.py $(BENCH_FLAGS)
	$(IO_CORE_ENV) $(PYTHON) bench/overhead.py $(BENCH_FLAGS)
	$(PYTHON) bench/read.py $(READ_BENCH_FLAGS)
	$(PYTHON) bench/header_check.py

# docs/design.md "How to add": a Meta field, a dtype, a device event kind and a config key, each
# added in a scratch copy (build/how-to-add/) by editing only the places listed there, built and
# checked. Not part of `make test` (four builds of the core).
how-to-add: setup
	$(PYTHON) scripts/how_to_add.py

# For a lent GPU machine (no package registry there): .gpu/ holds ../shared/gpu's scripts and a
# prefix of Debian's protobuf, abseil and Catch2; the device call carries .gpu and runs
# `bash bench/gpu_check.sh .gpu $$OUT` (docs/benchmarks.md "GPU training").
gpu-prepare:
	mkdir -p .gpu && cp -r ../shared/gpu/. .gpu/
	test -d .gpu/pfx || bash .gpu/prepare_prefix.sh .gpu/pfx

lint: setup
	clang-format --dry-run --Werror $$(git ls-files '*.h' '*.cc' '*.c')
	@if git ls-files '*.py' | grep -q .; then black --check --quiet $$(git ls-files '*.py'); fi
	$(PYTHON) scripts/check_python_layers.py
	$(PYTHON) scripts/check_field_numbers.py

format: setup
	clang-format -i $$(git ls-files '*.h' '*.cc' '*.c')
	@if git ls-files '*.py' | grep -q .; then black --quiet $$(git ls-files '*.py'); fi

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
