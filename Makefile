# cupola: GPU memory allocation experiments from Lua 5.4.
#
#   make            build build/cupola/core.so (C core + CUDA kernels)
#   make deps       install what is missing from Debian's packages (idempotent)
#   make test       deps, build, C tests and the busted suite; ends "N passed, N failed"
#   make demo       deps, build, run the main experiment
#   make gpu-check  on the GPU machine: build, suite with #gpu, compute-sanitizer, examples, bench
#   make install    used by `luarocks make` (LUADIR, LIBDIR, BINDIR)
#
# Variables worth overriding: LUA (lua5.4), LUA_INCDIR, CUDA_HOME, NVCC (empty: no CUDA),
# BUILD (the build folder), EXTRA_CFLAGS, EXTRA_LDFLAGS (sanitizer builds).

LUA        ?= lua5.4
LUA_INCDIR ?= $(shell pkg-config --variable=includedir lua5.4 2>/dev/null || echo /usr/include)/lua5.4
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))

BUILD  := build
OBJ    := $(BUILD)/obj
MODULE := $(BUILD)/cupola/core.so

CC     ?= gcc
WARN   := -Wall -Wextra -pedantic -Wmissing-prototypes -Wstrict-prototypes -Wshadow \
          -Wpointer-arith -Wcast-qual -Wundef -Wvla
# CFLAGS is the caller's (luarocks passes its own); what the code needs is in
# CP_CFLAGS, so a command-line CFLAGS cannot drop the standard or warnings.
CFLAGS ?= -O2 -g
CP_CFLAGS = -std=c11 -fPIC -fvisibility=hidden -D_GNU_SOURCE $(WARN) $(CFLAGS) $(EXTRA_CFLAGS)
CP_CPPFLAGS = -Isrc/core -Icuda $(CUDA_CPPFLAGS) $(CPPFLAGS)
LDLIBS := -lpthread -lm -lz

CORE_SRC := $(filter-out src/core/backend_cuda.c src/core/backend_nocuda.c,$(wildcard src/core/*.c))
LUA_SRC  := $(wildcard src/lua/*.c)
CU_SRC   := $(wildcard cuda/*.cu)

ifneq ($(NVCC),)
  HAVE_CUDA := 1
  CORE_SRC  += src/core/backend_cuda.c
  CUDA_CPPFLAGS := -I$(CUDA_HOME)/include
  # Static runtime: the module loads (and falls back to the host backend) on
  # machines with no driver at all.
  LDLIBS    := -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl -lstdc++ $(LDLIBS)
  NVCCFLAGS ?= -O3 -lineinfo
  NVCCFLAGS += -std=c++17 -Icuda -Isrc/core \
               -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90 \
               -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra \
               -Werror all-warnings
else
  CORE_SRC  += src/core/backend_nocuda.c
endif

CORE_OBJ := $(CORE_SRC:src/core/%.c=$(OBJ)/core/%.o)
LUA_OBJ  := $(LUA_SRC:src/lua/%.c=$(OBJ)/lua/%.o)
CU_OBJ   := $(if $(HAVE_CUDA),$(CU_SRC:cuda/%.cu=$(OBJ)/cuda/%.o))
DEPFILES := $(CORE_OBJ:.o=.d) $(LUA_OBJ:.o=.d) $(CU_OBJ:.o=.d)

.PHONY: all deps test test-c test-lua demo gpu-check install clean FORCE
all: $(MODULE)

# The build's configuration, rewritten only when it changes: objects depend
# on it, so switching between a CUDA and a host-only build (NVCC=), or
# changing flags, rebuilds instead of linking stale objects.
CONFIG_STAMP := $(BUILD)/config.stamp
BUILD_CONFIG := cuda=$(HAVE_CUDA) cc=$(CC) cflags=$(CP_CFLAGS) ldflags=$(EXTRA_LDFLAGS) nvcc=$(NVCC) $(NVCCFLAGS)
$(CONFIG_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(BUILD_CONFIG)' | cmp -s - $@ || echo '$(BUILD_CONFIG)' > $@

$(MODULE): $(CORE_OBJ) $(LUA_OBJ) $(CU_OBJ) src/lua/exports.map $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(CORE_OBJ) $(LUA_OBJ) $(CU_OBJ) \
	    -Wl,--version-script=src/lua/exports.map -Wl,--no-undefined-version $(LDLIBS)

# Header dependencies are written by the compilers (-MMD -MP) beside each
# object and included below, so a changed header rebuilds what uses it.
$(OBJ)/core/%.o: src/core/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) -MMD -MP -c -o $@ $<

$(OBJ)/lua/%.o: src/lua/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CP_CPPFLAGS) -I$(LUA_INCDIR) $(CP_CFLAGS) -MMD -MP -c -o $@ $<

$(OBJ)/cuda/%.o: cuda/%.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

-include $(DEPFILES)

# C-level tests of the core (no Lua): each tests/c/test_*.c is a program.
C_TESTS := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))
$(BUILD)/tests/%: tests/c/%.c $(CORE_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) $(EXTRA_LDFLAGS) -Itests/c -MMD -MP -o $@ $< $(CORE_OBJ) $(CU_OBJ) $(LDLIBS)
-include $(C_TESTS:=.d)

# The seeds' benchmark written directly in CUDA C, beside the Lua version.
$(BUILD)/bench/seed000: bench/seed000.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o $@ $<

# CUPOLA_NO_DEPS=1 skips the installation (the GPU machine has no network;
# bench/gpu-check.sh brings Lua with it).
deps:
	@[ -n "$${CUPOLA_NO_DEPS:-}" ] || sh .ci/deps.sh

test: deps all $(C_TESTS)
	@$(LUA) spec/run.lua $(C_TESTS)

demo: deps all
	@bin/cupola examples/demo.lua

gpu-check:
	@sh bench/gpu-check.sh

LUADIR ?= /usr/local/share/lua/5.4
LIBDIR ?= /usr/local/lib/lua/5.4
BINDIR ?= /usr/local/bin
install: all
	install -d $(DESTDIR)$(LIBDIR)/cupola $(DESTDIR)$(LUADIR)/cupola $(DESTDIR)$(BINDIR)
	install -m 755 $(MODULE) $(DESTDIR)$(LIBDIR)/cupola/core.so
	install -m 644 lua/cupola/*.lua $(DESTDIR)$(LUADIR)/cupola/
	install -m 755 bin/cupola $(DESTDIR)$(BINDIR)/cupola

clean:
	rm -rf $(BUILD)

# ---- test-tsan: the host backend under ThreadSanitizer (issue 3) -----------
# Rebuilds the core and the C tests in build-tsan with -fsanitize=thread
# (EXTRA_CFLAGS reaches the link line too), without CUDA since its runtime
# does not run under TSAN, and runs them on the host backend; any race report
# makes the run fail (TSAN exits 66).
TSAN_BUILD := build-tsan
.PHONY: test-tsan
test-tsan:
	@$(MAKE) --no-print-directory NVCC= BUILD=$(TSAN_BUILD) \
	    EXTRA_CFLAGS="-fsanitize=thread -O1 -g" \
	    $(patsubst $(BUILD)/%,$(TSAN_BUILD)/%,$(C_TESTS))
	@for t in $(patsubst $(BUILD)/%,$(TSAN_BUILD)/%,$(C_TESTS)); do \
	    echo "== $$t (tsan)"; \
	    CUPOLA_BACKEND=host TSAN_OPTIONS="halt_on_error=1" timeout 900 $$t || exit 1; \
	done

# test-tsan-lua: the busted suite on the host backend with a TSAN-built
# module, libtsan preloaded into the (uninstrumented) interpreter.  busted
# must not re-exec itself through sh (--ignore-lua), and the specs that start
# subprocesses are filtered out: sh crashes with libtsan preloaded.
TSAN_LIB := $(shell $(CC) -print-file-name=libtsan.so)
TSAN_BUSTED := $(shell command -v busted 2>/dev/null || echo busted)
.PHONY: test-tsan-lua
test-tsan-lua:
	@$(MAKE) --no-print-directory NVCC= BUILD=$(TSAN_BUILD) \
	    EXTRA_CFLAGS="-fsanitize=thread -O1 -g" $(TSAN_BUILD)/cupola/core.so
	CUPOLA_BACKEND=host TSAN_OPTIONS="halt_on_error=1" LD_PRELOAD=$(TSAN_LIB) \
	    $(LUA) $(TSAN_BUSTED) --ignore-lua --cpath="$(TSAN_BUILD)/?.so" -o utfTerminal \
	    --filter-out="CUPOLA_BACKEND="
