# lmc — front door.
#
#   make            build the library (build/liblmc.a, build/liblmc.so) and the CLI (build/lmc)
#   make test       build everything and run the whole test suite (unit, parity, CLI, tokenizer oracle)
#   make run        generate a continuation of a fixed prompt with the demo model (or MODEL=path)
#   make asan       build into build-asan/ with AddressSanitizer + UBSan and run the suite there
#   make bench      build the benchmarks (bench/) — they are run by hand, never by `make test`
#   make clean      remove build outputs
#
# Dependencies come from Debian packages (scripts/install-deps.sh installs them).

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2 -march=native
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-psabi $(OPT) -g -fPIC -pthread
CPPFLAGS += -Iinclude -Isrc -DLMC_DEMO_DIR='"$(CURDIR)/models/demo"'
LDLIBS  += -lmicrohttpd -lcjson -lpcre2-8 -lutf8proc -lopenblas -lm -lpthread

LIB_SRC   := $(shell find src -name '*.c' -not -path 'src/backend/cuda/*' | sort)
APP_SRC   := $(sort $(wildcard apps/lmc/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
APP_OBJ   := $(APP_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# ---- CUDA backend (src/backend/cuda/, docs/CUDA.md) ---- begin ------------------------------------
#   make CUDA=1 BUILD=build-cuda [NVCC=/usr/local/cuda/bin/nvcc] [CUDA_ARCH="-gencode=..."]
# adds the CUDA backend (kernels *.cu through nvcc for sm_90a plus compute_90 PTX; host side *.c
# through $(CC)) to the library, links cuBLAS and the CUDA runtime, and builds tests/cuda/test_*.c
# into $(BUILD)/tests/ (so `make CUDA=1 test` runs them; without a GPU they print a skip line).
# Use its own BUILD folder: objects compiled with -DLMC_CUDA must not mix with the default build's.
ifeq ($(CUDA),1)
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH  ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC -lineinfo
ifeq ($(CUDA_TRACE),1) # a measurement build: the decode step's timeline (src/backend/cuda/cuda_trace.cuh)
NVCCFLAGS  += -DLMC_CUDA_TRACE
CPPFLAGS   += -DLMC_CUDA_TRACE
endif
CUDA_CU    := $(sort $(wildcard src/backend/cuda/*.cu))
CUDA_C     := $(sort $(wildcard src/backend/cuda/*.c))
LIB_OBJ    += $(CUDA_CU:%.cu=$(BUILD)/obj/%.o) $(CUDA_C:%.c=$(BUILD)/obj/%.o)
TEST_BIN   += $(patsubst tests/cuda/%.c,$(BUILD)/tests/%,$(sort $(wildcard tests/cuda/test_*.c)))
CPPFLAGS   += -DLMC_CUDA -I$(CUDA_HOME)/include
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++

$(BUILD)/obj/%.o: %.cu $(wildcard src/backend/cuda/*.h src/backend/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -c $< -o $@

$(BUILD)/tests/test_cuda_%: tests/cuda/test_cuda_%.c tests/test.h $(wildcard tests/cuda/cuda_test_*.h) $(BUILD)/liblmc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -o $@ $< $(BUILD)/liblmc.a $(LDFLAGS) $(LDLIBS)
endif
# ---- CUDA backend ---- end -------------------------------------------------------------------------

.PHONY: all test run asan bench clean cuda-check
all: $(BUILD)/liblmc.a $(BUILD)/liblmc.so $(BUILD)/lmc $(TEST_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/liblmc.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/liblmc.so: $(LIB_OBJ)
	$(CC) -shared $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(BUILD)/lmc: $(APP_OBJ) $(BUILD)/liblmc.a
	$(CC) $(CFLAGS) -o $@ $(APP_OBJ) $(BUILD)/liblmc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/test.h $(BUILD)/liblmc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -o $@ $< $(BUILD)/liblmc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/liblmc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/liblmc.a $(LDFLAGS) $(LDLIBS)

test: all
	BUILD=$(BUILD) bash tests/run.sh

run: $(BUILD)/lmc
	$(BUILD)/lmc run $(MODEL) "$(or $(PROMPT),In the beginning)"

# Every sanitizer report (ASan, LeakSanitizer at each process's exit, UBSan) of every process the
# suite starts — test binaries, CLI runs, `lmc serve` — is written to build-asan/sanitizer-logs/;
# any report fails the target even when the process's exit status was not checked.
asan:
	@rm -rf build-asan/sanitizer-logs && mkdir -p build-asan/sanitizer-logs
	@ASAN_OPTIONS=detect_leaks=1:log_path=$(CURDIR)/build-asan/sanitizer-logs/asan \
	 UBSAN_OPTIONS=print_stacktrace=1:log_path=$(CURDIR)/build-asan/sanitizer-logs/ubsan \
	 $(MAKE) BUILD=build-asan OPT="-O1 -march=native -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	        LDFLAGS="-fsanitize=address,undefined" test; rc=$$?; \
	 if [ -n "$$(ls build-asan/sanitizer-logs)" ]; then head -n 60 build-asan/sanitizer-logs/*; \
	     echo "sanitizer reports in build-asan/sanitizer-logs/"; exit 1; fi; exit $$rc

# Without a GPU (CI): the CUDA backend, its tests, bench and the CLI are compiled and linked when
# nvcc is installed, and the CUDA tests run (they print a SKIP line and RESULT 0 0 without a
# device); the standalone bench/cuda_*.cu programs are compiled; without nvcc it says so. Its own
# build folder (objects with -DLMC_CUDA).
CUDA_CHECK_NVCC ?= /usr/local/cuda/bin/nvcc
cuda-check:
	@if [ -x "$(CUDA_CHECK_NVCC)" ]; then \
	    $(MAKE) CUDA=1 NVCC=$(CUDA_CHECK_NVCC) BUILD=build-cuda-check build-cuda-check/lmc build-cuda-check/bench/bench_cuda \
	        $(patsubst tests/cuda/%.c,build-cuda-check/tests/%,$(sort $(wildcard tests/cuda/test_*.c))) || exit 1; \
	    for t in build-cuda-check/tests/test_cuda_*; do echo "== $$t"; $$t || exit 1; done; \
	    for f in bench/cuda_*.cu; do echo "== $$f (standalone: compiled only)"; \
	        $(CUDA_CHECK_NVCC) -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -c $$f \
	            -o build-cuda-check/bench/$$(basename $$f .cu).o || exit 1; done; \
	    echo "cuda-check: the CUDA backend compiled and linked; its tests ran (a GPU runs them for real)"; \
	else echo "cuda-check: SKIP: no nvcc at $(CUDA_CHECK_NVCC): the CUDA backend was not compiled"; fi

bench: $(BENCH_BIN) $(BUILD)/lmc

clean:
	rm -rf build build-asan

# ---- fuzz: libFuzzer targets (tests/fuzz/, docs/FUZZING.md) ---- begin -----------------------------
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="gguf config"] [FUZZ_FLAGS=-runs=1000]
# builds the library and every tests/fuzz/fuzz_<name>.c with clang (libFuzzer + ASan + UBSan)
# into $(FUZZ_BUILD)/ and runs the targets one after another, each for FUZZ_SECONDS, on a
# working corpus ($(FUZZ_BUILD)/corpus/<name>) plus the committed seeds (tests/fuzz/corpus/<name>,
# read only). A crash, leak, timeout or failed FUZZ_CHECK stops the run; the input that caused
# it is in $(FUZZ_BUILD)/artifacts/<name>/. Replay one: $(FUZZ_BUILD)/fuzz/fuzz_<name> FILE.
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz-lf
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   ?=
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_TARGETS ?= $(patsubst tests/fuzz/fuzz_%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))

.PHONY: fuzz fuzz-build fuzz-bins
fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts/$$t; \
	    dict=; [ -f tests/fuzz/dict/$$t.dict ] && dict=-dict=tests/fuzz/dict/$$t.dict; \
	    echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	    $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=25 -rss_limit_mb=2560 -reload=0 \
	        -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t/ $$dict $(FUZZ_FLAGS) \
	        $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t; \
	done

fuzz-build:
	$(MAKE) CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) \
	        OPT="-O1 -g -march=native -fsanitize=fuzzer-no-link $(FUZZ_SAN)" fuzz-bins

fuzz-bins: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)

# clang 14 rejects the CPU kernels' __builtin_cpu_supports("amx-tile") / ("f16c"): gcc compiles
# src/backend/cpu/ (no parser there), without sanitizers or coverage.
$(FUZZ_BUILD)/obj/src/backend/cpu/%.o: src/backend/cpu/%.c
	@mkdir -p $(dir $@)
	gcc $(CPPFLAGS) -std=c11 -D_GNU_SOURCE -O2 -march=native -g -fPIC -pthread -c $< -o $@

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(BUILD)/liblmc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/fuzz -DLMC_FUZZ_LIBFUZZER $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/liblmc.a $(LDLIBS)
# ---- fuzz ---- end ---------------------------------------------------------------------------------

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
