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

.PHONY: all test run asan bench clean
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

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -march=native -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	        LDFLAGS="-fsanitize=address,undefined" test

bench: $(BENCH_BIN) $(BUILD)/lmc

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
