# cupola: GPU memory allocation experiments from Lua 5.4.
#
#   make            build build/cupola/core.so (C core + CUDA kernels)
#   make deps       install what is missing from Debian's packages (idempotent)
#   make test       deps, build, C tests and the busted suite; ends "N passed, N failed"
#   make demo       deps, build, run the main experiment
#   make bench      the binding's cost beside the C it wraps, and the multi-stream comparison
#   make gpu-check  on the GPU machine: build, suite with #gpu, compute-sanitizer, examples, bench
#   make torch-allocator  build/libcupola_torch.so: cupola's pools in PyTorch (CUDA only)
#   make cupy-allocator   build/libcupola_cupy.so: cupola's pools in CuPy (CUDA only;
#                         python/cupola_cupy.py installs it, CUPOLA_CUPY_POOL=vmm)
#   make record     build/libcupola_record.so: the recorder of `bin/cupola record` (CUPTI only),
#                   and build/libcupola_record_preload.so, which it preloads
#   make record-floor  build/libcupola_record_floor.so: its callbacks, empty (bench/record_cost.sh)
#   make install    used by `luarocks make` (LUADIR, LIBDIR, BINDIR; alone: PREFIX=/usr/local)
#   make test-install  only spec/install_spec.lua: `luarocks make` into a temporary tree, used
#                      from another directory (make test runs it too)
#
# Variables worth overriding: LUA (lua5.4), LUA_INCDIR, CUDA_HOME, NVCC (empty: no CUDA),
# BUILD (the build folder), EXTRA_CFLAGS, EXTRA_LDFLAGS (sanitizer builds), V=1 (each
# command printed whole, where the build prints a line per file).

LUA        ?= lua5.4
LUA_INCDIR ?= $(shell pkg-config --variable=includedir lua5.4 2>/dev/null || echo /usr/include)/lua5.4
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))

# The build's output: a line per file ("  CC      build/obj/core/size.o");
# make V=1 prints each command whole.
V ?= 0
ifeq ($(V),1)
Q :=
say =
else
Q := @
say = @printf '  %-7s %s\n' '$(1)' '$(2)'
endif

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
CP_CPPFLAGS = -Isrc/core -Isrc/include -Icuda -Icuda/include $(CUDA_CPPFLAGS) $(CPPFLAGS)
LDLIBS := -lpthread -lm -lz -ldl

# The core's folders are its layers (backend, pool, trace, ...): every .c in
# them is part of the module, but exactly one of the two device backends.
CORE_SRC := $(filter-out src/core/backend/cuda%.c src/core/backend/nocuda.c,\
              $(wildcard src/core/*.c src/core/*/*.c))
LUA_SRC  := $(wildcard src/lua/*.c)
CU_SRC   := $(wildcard cuda/*.cu)

ifneq ($(NVCC),)
  HAVE_CUDA := 1
  CORE_SRC  += $(wildcard src/core/backend/cuda*.c)
  CUDA_CPPFLAGS := -I$(CUDA_HOME)/include
  # NVTX v3 is header-only in the toolkit (src/core/nvtx.c); without it the
  # ranges are no-ops.
  CUDA_CPPFLAGS += $(if $(wildcard $(CUDA_HOME)/include/nvtx3/nvToolsExt.h),-DCUPOLA_HAVE_NVTX)
  # Static runtime: the module loads (and falls back to the host backend) on
  # machines with no driver at all.
  LDLIBS    := -L$(CUDA_HOME)/lib64 -lcudadevrt -lcudart_static -lrt -ldl -lstdc++ $(LDLIBS)
  NVCCFLAGS ?= -O3 -lineinfo
  NVCCFLAGS += -std=c++17 -Icuda -Icuda/include -Isrc/core \
               -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90 \
               -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra \
               -Werror all-warnings
else
  CORE_SRC  += src/core/backend/nocuda.c
endif

CORE_OBJ := $(CORE_SRC:src/core/%.c=$(OBJ)/core/%.o)
LUA_OBJ  := $(LUA_SRC:src/lua/%.c=$(OBJ)/lua/%.o)
# Relocatable device code (-rdc) only where a kernel launches kernels
# (nested device-pool runs); those objects are device-linked, with the
# device runtime, into one more object.  The rest compile as before.
RDC_CU   := cuda/devpool_nested.cu
RDC_OBJ  := $(if $(HAVE_CUDA),$(RDC_CU:cuda/%.cu=$(OBJ)/cuda/%.o))
DLINK_OBJ := $(if $(HAVE_CUDA),$(OBJ)/cuda/dlink.o)
CU_OBJ   := $(if $(HAVE_CUDA),$(CU_SRC:cuda/%.cu=$(OBJ)/cuda/%.o) $(DLINK_OBJ))
DEPFILES := $(CORE_OBJ:.o=.d) $(LUA_OBJ:.o=.d) $(CU_OBJ:.o=.d)

.PHONY: all deps test test-c test-lua demo bench gpu-check install clean torch-allocator cupy-allocator test-cupy-wrapper record record-floor FORCE
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
	$(call say,LD,$@)
	$(Q)$(CC) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(CORE_OBJ) $(LUA_OBJ) $(CU_OBJ) \
	    -Wl,--version-script=src/lua/exports.map -Wl,--no-undefined-version $(LDLIBS)

# Header dependencies are written by the compilers (-MMD -MP) beside each
# object and included below, so a changed header rebuilds what uses it.
$(OBJ)/core/%.o: src/core/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) -MMD -MP -c -o $@ $<

$(OBJ)/lua/%.o: src/lua/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) -I$(LUA_INCDIR) $(CP_CFLAGS) -MMD -MP -c -o $@ $<

$(OBJ)/cuda/%.o: cuda/%.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,NVCC,$@)
	$(Q)$(NVCC) $(NVCCFLAGS) $(NVCC_RDC) -MMD -MP -c -o $@ $<

$(RDC_OBJ): NVCC_RDC := -rdc=true
$(DLINK_OBJ): $(RDC_OBJ)
	$(call say,LD,$@)
	$(Q)$(NVCC) $(NVCCFLAGS) -dlink -o $@ $(RDC_OBJ) -L$(CUDA_HOME)/lib64 -lcudadevrt

-include $(DEPFILES)

# ---- make torch-allocator: cupola's pools inside PyTorch -------------------
# build/libcupola_torch.so for torch.cuda.memory.CUDAPluggableAllocator
# (src/torch/pluggable.h: CUPOLA_TORCH_POOL, streams, record_stream): the C
# core and its CUDA backend, no Lua, exporting only cupola_torch_*
# (src/torch/exports.map).  Skipped where there is no CUDA Toolkit.  Its C
# logic (pluggable.c) is also linked into tests/c/test_torch_pluggable.c,
# which runs on the host backend anywhere.
TORCH_LIB := $(BUILD)/libcupola_torch.so
TORCH_C_OBJ := $(OBJ)/torch/pluggable.o
$(OBJ)/torch/%.o: src/torch/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) -MMD -MP -c -o $@ $<
$(OBJ)/torch/entry.o: src/torch/entry.cpp $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CXX,$@)
	$(Q)$(CXX) -std=c++17 -fPIC -fvisibility=hidden -Wall -Wextra -pedantic -Wshadow -Wcast-qual -Wundef \
	    $(CFLAGS) $(EXTRA_CFLAGS) -Isrc/torch -MMD -MP -c -o $@ $<
$(TORCH_LIB): $(TORCH_C_OBJ) $(OBJ)/torch/entry.o $(CORE_OBJ) $(CU_OBJ) src/torch/exports.map
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CXX) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(TORCH_C_OBJ) $(OBJ)/torch/entry.o \
	    $(CORE_OBJ) $(CU_OBJ) -Wl,--version-script=src/torch/exports.map -Wl,--no-undefined $(LDLIBS)
ifeq ($(HAVE_CUDA),1)
torch-allocator: $(TORCH_LIB)
else
torch-allocator:
	@echo "torch-allocator: no CUDA Toolkit (nvcc) in this build: skipped"
endif
-include $(TORCH_C_OBJ:.o=.d) $(OBJ)/torch/entry.d

# ---- make cupy-allocator: cupola's pools inside CuPy -----------------------
# build/libcupola_cupy.so for cupy.cuda.memory.CFunctionAllocator
# (src/torch/cupy_entry.c: CUPOLA_CUPY_POOL, the stream policy, refusals):
# the same C logic as libcupola_torch.so (pluggable.c) with CuPy's names and
# signatures, exporting only cupola_cupy_* (src/torch/cupy_exports.map);
# python/cupola_cupy.py installs it.  Skipped without a CUDA Toolkit.
CUPY_LIB := $(BUILD)/libcupola_cupy.so
$(CUPY_LIB): $(TORCH_C_OBJ) $(OBJ)/torch/cupy_entry.o $(CORE_OBJ) $(CU_OBJ) src/torch/cupy_exports.map
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CXX) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(TORCH_C_OBJ) $(OBJ)/torch/cupy_entry.o \
	    $(CORE_OBJ) $(CU_OBJ) -Wl,--version-script=src/torch/cupy_exports.map -Wl,--no-undefined $(LDLIBS)
ifeq ($(HAVE_CUDA),1)
cupy-allocator: $(CUPY_LIB)
else
cupy-allocator:
	@echo "cupy-allocator: no CUDA Toolkit (nvcc) in this build: skipped"
endif
-include $(OBJ)/torch/cupy_entry.d
# python/cupola_cupy.py against the library on the host backend: no GPU and
# no CuPy (tests/cupy/test_wrapper.py stands a module in that calls the
# library as CFunctionAllocator does); also builds without nvcc.
test-cupy-wrapper: $(CUPY_LIB)
	CUPOLA_BACKEND=host python3 tests/cupy/test_wrapper.py $(CUPY_LIB)
# ---- make record: the recorder behind `bin/cupola record` -----------------
# build/libcupola_record.so, a CUDA injection library (CUDA_INJECTION64_PATH)
# over CUPTI's callback API: src/record/inject.c (the callbacks) over
# src/record/record.c (buffers, files; plain C, also linked into
# tests/c/test_record.c, which runs anywhere).  Built where the toolkit has
# CUPTI (its headers in include/ or extras/CUPTI/include); libcupti is found
# at run time through the rpath of the folder it was linked from.
RECORD_LIB := $(BUILD)/libcupola_record.so
RECORD_C_OBJ := $(OBJ)/record/record.o
CUPTI_H := $(firstword $(wildcard $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/extras/CUPTI/include/cupti.h))
CUPTI_SO := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcupti.so $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so))
$(RECORD_C_OBJ): src/record/record.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) -MMD -MP -c -o $@ $<
$(OBJ)/record/inject.o: src/record/inject.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) -Isrc/core -Isrc/record -isystem $(CUDA_HOME)/include -isystem $(dir $(CUPTI_H)) \
	    $(CP_CFLAGS) -MMD -MP -c -o $@ $<
$(RECORD_LIB): $(RECORD_C_OBJ) $(OBJ)/record/inject.o src/record/exports.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(RECORD_C_OBJ) $(OBJ)/record/inject.o \
	    -Wl,--version-script=src/record/exports.map -Wl,--no-undefined \
	    -L$(dir $(CUPTI_SO)) -Wl,-rpath,$(abspath $(dir $(CUPTI_SO))) -lcupti \
	    -L$(CUDA_HOME)/lib64/stubs -lcuda -lz -lpthread
# build/libcupola_record_preload.so (src/record/preload.c), which the launcher
# preloads: a profiler the program starts is told, in one line, that the
# recorder holds CUPTI.  Links neither libcupti nor CUDA.
RECORD_PRELOAD := $(BUILD)/libcupola_record_preload.so
$(RECORD_PRELOAD): src/record/preload.c src/record/preload.map $(CONFIG_STAMP)
	$(call say,LD,$@)
	$(Q)$(CC) -isystem $(CUDA_HOME)/include -isystem $(dir $(CUPTI_H)) $(CP_CFLAGS) -shared \
	    $(EXTRA_LDFLAGS) -o $@ $< -Wl,--version-script=src/record/preload.map -ldl
# build/libcupola_record_floor.so: inject.c with an empty callback and no
# files (the floor bench/record_cost.sh measures); never installed.
RECORD_FLOOR := $(BUILD)/libcupola_record_floor.so
$(OBJ)/record/inject_floor.o: src/record/inject.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) -DCP_RECORD_FLOOR=1 -Isrc/core -Isrc/record -isystem $(CUDA_HOME)/include \
	    -isystem $(dir $(CUPTI_H)) $(CP_CFLAGS) -MMD -MP -c -o $@ $<
$(RECORD_FLOOR): $(RECORD_C_OBJ) $(OBJ)/record/inject_floor.o src/record/exports.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(RECORD_C_OBJ) $(OBJ)/record/inject_floor.o \
	    -Wl,--version-script=src/record/exports.map -Wl,--no-undefined \
	    -L$(dir $(CUPTI_SO)) -Wl,-rpath,$(abspath $(dir $(CUPTI_SO))) -lcupti \
	    -L$(CUDA_HOME)/lib64/stubs -lcuda -lz -lpthread
ifneq ($(and $(CUPTI_H),$(CUPTI_SO)),)
record: $(RECORD_LIB) $(RECORD_PRELOAD)
record-floor: $(RECORD_FLOOR)
else
record record-floor:
	@echo "$@: no CUPTI in $(CUDA_HOME) (cupti.h, libcupti.so): skipped"
endif
-include $(RECORD_C_OBJ:.o=.d) $(OBJ)/record/inject.d $(OBJ)/record/inject_floor.d

# C-level tests of the core (no Lua): each tests/c/test_*.c is a program.
# (test_torch_pluggable also links the torch allocator's C logic.)
C_TESTS := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))
$(BUILD)/tests/test_torch_pluggable: $(TORCH_C_OBJ)
$(BUILD)/tests/test_torch_pluggable: TEST_EXTRA_OBJ := $(TORCH_C_OBJ)
$(BUILD)/tests/test_cupy_entry: $(TORCH_C_OBJ) $(OBJ)/torch/cupy_entry.o
$(BUILD)/tests/test_cupy_entry: TEST_EXTRA_OBJ := $(TORCH_C_OBJ) $(OBJ)/torch/cupy_entry.o
$(BUILD)/tests/test_record: $(RECORD_C_OBJ)
$(BUILD)/tests/test_record: TEST_EXTRA_OBJ := $(RECORD_C_OBJ)
$(BUILD)/tests/%: tests/c/%.c $(CORE_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) $(EXTRA_LDFLAGS) -Itests/c -Isrc/torch -Isrc/record -MMD -MP -o $@ $< $(TEST_EXTRA_OBJ) $(CORE_OBJ) $(CU_OBJ) $(LDLIBS)
-include $(C_TESTS:=.d)

# A pool kind that exists only in the tests (tests/c/model_bump.c), registered
# when its object loads: linked into test_models, and into a copy of the
# module that spec/pool_conformance_spec.lua holds to the conformance
# battery in a child process (the module everyone else loads never has it).
TEST_MODEL_OBJ := $(BUILD)/tests/model_bump.o
TEST_MODEL_MOD := $(BUILD)/testmod/models/cupola/core.so
$(TEST_MODEL_OBJ): tests/c/model_bump.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) -MMD -MP -c -o $@ $<
-include $(TEST_MODEL_OBJ:.o=.d)
$(BUILD)/tests/test_models: $(TEST_MODEL_OBJ)
$(BUILD)/tests/test_models: TEST_EXTRA_OBJ := $(TEST_MODEL_OBJ)
$(TEST_MODEL_MOD): $(CORE_OBJ) $(LUA_OBJ) $(CU_OBJ) $(TEST_MODEL_OBJ) src/lua/exports.map
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) -shared $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(CORE_OBJ) $(LUA_OBJ) $(CU_OBJ) \
	    $(TEST_MODEL_OBJ) -Wl,--version-script=src/lua/exports.map -Wl,--no-undefined-version $(LDLIBS)

# The stream-ordered allocation benchmark written directly in CUDA C
# (cudaMalloc against cudaMallocAsync), beside the Lua version.
$(BUILD)/bench/seed000: bench/seed000.cu
	@mkdir -p $(dir $@)
	$(call say,NVCC,$@)
	$(Q)$(NVCC) -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o $@ $<

# bench/launch.c: cuLaunchKernel of an NVRTC-compiled empty kernel from C,
# beside bench/launch.lua (the same launch from Lua).
$(BUILD)/bench/launch: bench/launch.c
	@mkdir -p $(dir $@)
	$(call say,NVCC,$@)
	$(Q)$(NVCC) -O2 -o $@ $< -lnvrtc -lcuda

# The atomic-offset device pool's kernel and CUDA's in-kernel malloc in
# plain CUDA C, beside bench/device_alloc.lua.
$(BUILD)/bench/device_alloc_seed: bench/device_alloc_seed.cu
	@mkdir -p $(dir $@)
	$(call say,NVCC,$@)
	$(Q)$(NVCC) -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o $@ $<

# bench/speed.c: the C side of `make bench` (the same operations through the
# core, beside the Lua figures), linked with the core like the C tests.
$(BUILD)/bench/speed: bench/speed.c $(CORE_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) $(EXTRA_LDFLAGS) -MMD -MP -o $@ $< $(CORE_OBJ) $(CU_OBJ) $(LDLIBS)
-include $(BUILD)/bench/speed.d

# bench/scale_cost.c: a prediction at another size where it is slowest
# (cupola.trace.scale's matching, a trace made from events with long stacks).
$(BUILD)/bench/scale_cost: bench/scale_cost.c $(CORE_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CP_CPPFLAGS) $(CP_CFLAGS) $(EXTRA_LDFLAGS) -MMD -MP -o $@ $< $(CORE_OBJ) $(CU_OBJ) $(LDLIBS)
-include $(BUILD)/bench/scale_cost.d

# bench/floor.c: Lua's own cost for the same call shape with no allocator
# behind it (a Lua module bench/speed.lua loads when present).
$(BUILD)/bench_floor.so: bench/floor.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) -shared -I$(LUA_INCDIR) $(CP_CFLAGS) $(EXTRA_LDFLAGS) -o $@ $<

# make bench: every binding aim beside its C counterpart (bench/speed.lua),
# then the multi-stream comparison of every pool (bench/multistream.lua), on the
# host backend and, when a device answers, on the CUDA backend.
# BENCH_SCALE shortens (0.1) or lengthens the runs; CUPOLA_BENCH_ROUNDS (3)
# is how many times the C and Lua sides alternate; MULTISTREAM_ARGS are
# passed to bench/multistream.lua.
BENCH_SCALE ?= 1
MULTISTREAM_ARGS ?=
bench: deps all $(BUILD)/bench/speed $(BUILD)/bench_floor.so
	@CUPOLA_BACKEND=host $(LUA) bench/speed.lua $(BENCH_SCALE)
	@CUPOLA_BACKEND=host $(LUA) bench/multistream.lua $(MULTISTREAM_ARGS)
	@if CUPOLA_BACKEND=cuda $(LUA) -e 'package.cpath = "$(BUILD)/?.so;" .. package.cpath; require "cupola.core"' >/dev/null 2>&1; then \
	    CUPOLA_BACKEND=cuda $(LUA) bench/speed.lua $(BENCH_SCALE) && \
	    CUPOLA_BACKEND=cuda $(LUA) bench/multistream.lua $(MULTISTREAM_ARGS); \
	else echo "(no usable CUDA device: the cuda backend is skipped)"; fi

# CUPOLA_NO_DEPS=1 skips the installation (the GPU machine has no network;
# bench/gpu-check.sh brings Lua with it).
deps:
	@[ -n "$${CUPOLA_NO_DEPS:-}" ] || sh .ci/deps.sh

# A test-only Lua module with fork/waitpid/_exit (spec/fork_spec.lua,
# spec/kernel_fault_spec.lua); never installed.
TESTMOD := $(BUILD)/testmod/cupola_testposix.so
$(TESTMOD): tests/c/lua_testposix.c
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) -shared -fPIC -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(EXTRA_CFLAGS) -I$(LUA_INCDIR) -o $@ $< $(EXTRA_LDFLAGS)

test: deps all $(C_TESTS) $(TESTMOD) $(TEST_MODEL_MOD)
	@$(LUA) spec/run.lua $(C_TESTS)

demo: deps all
	@bin/cupola examples/demo.lua

gpu-check:
	@sh bench/gpu-check.sh

# `luarocks make` passes LUADIR, LIBDIR and BINDIR (and the build's CFLAGS,
# LUA, LUA_INCDIR again, so the install step does not rebuild); `make
# install` alone installs under PREFIX in the layout Lua 5.4 searches by
# default.  Besides the module and bin/cupola: the traces, which
# cupola.trace.find looks for beside the installed trace.lua, and the public
# C headers (whichever exist) for allocators and kernels of one's own; with
# CUDA, libcupola_torch.so (make torch-allocator) beside core.so.
PREFIX ?= /usr/local
LUADIR ?= $(PREFIX)/share/lua/5.4
LIBDIR ?= $(PREFIX)/lib/lua/5.4
BINDIR ?= $(PREFIX)/bin
PUBLIC_HEADERS := $(wildcard src/include/cupola/*.h cuda/include/cupola/*.h)
TRACE_FILES    := $(filter-out examples/traces/torch examples/traces/jax examples/traces/cupy,\
                    $(wildcard examples/traces/*))
# PyTorch's allocator's ground truth (snapshots and figures), in a folder of its own
TORCH_TRACES   := $(filter-out examples/traces/torch/scaling,$(wildcard examples/traces/torch/*))
# one program at several sizes (predictions at a size not recorded)
SCALING_TRACES := $(wildcard examples/traces/torch/scaling/*)
# JAX's (XLA's BFC allocator): recordings and JAX's figures
JAX_TRACES     := $(wildcard examples/traces/jax/*)
# CuPy's pool's ground truth (hook logs recorded on the GPU), likewise
CUPY_TRACES    := $(wildcard examples/traces/cupy/*)
install: all torch-allocator record
	install -d $(DESTDIR)$(LIBDIR)/cupola $(DESTDIR)$(LUADIR)/cupola/traces/torch $(DESTDIR)$(BINDIR)
	install -d $(DESTDIR)$(LUADIR)/cupola/traces/jax
	install -m 755 $(MODULE) $(DESTDIR)$(LIBDIR)/cupola/core.so
	if [ -f $(TORCH_LIB) ]; then install -m 755 $(TORCH_LIB) $(DESTDIR)$(LIBDIR)/cupola/libcupola_torch.so; fi
	if [ -f $(RECORD_LIB) ]; then install -m 755 $(RECORD_LIB) $(DESTDIR)$(LIBDIR)/cupola/libcupola_record.so; fi
	if [ -f $(RECORD_PRELOAD) ]; then install -m 755 $(RECORD_PRELOAD) $(DESTDIR)$(LIBDIR)/cupola/libcupola_record_preload.so; fi
	install -m 644 lua/cupola/*.lua $(DESTDIR)$(LUADIR)/cupola/
	install -d $(DESTDIR)$(LUADIR)/cupola/advise
	install -m 644 lua/cupola/advise/*.lua $(DESTDIR)$(LUADIR)/cupola/advise/
	install -m 644 $(TRACE_FILES) $(DESTDIR)$(LUADIR)/cupola/traces/
	install -m 644 $(TORCH_TRACES) $(DESTDIR)$(LUADIR)/cupola/traces/torch/
	install -d $(DESTDIR)$(LUADIR)/cupola/traces/torch/scaling
	install -m 644 $(SCALING_TRACES) $(DESTDIR)$(LUADIR)/cupola/traces/torch/scaling/
	install -m 644 $(JAX_TRACES) $(DESTDIR)$(LUADIR)/cupola/traces/jax/
	$(if $(CUPY_TRACES),install -d $(DESTDIR)$(LUADIR)/cupola/traces/cupy && \
	    install -m 644 $(CUPY_TRACES) $(DESTDIR)$(LUADIR)/cupola/traces/cupy/)
	$(if $(PUBLIC_HEADERS),install -d $(DESTDIR)$(LUADIR)/cupola/include/cupola && \
	    install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(LUADIR)/cupola/include/cupola/)
	install -m 755 bin/cupola $(DESTDIR)$(BINDIR)/cupola
	install -d $(DESTDIR)$(LUADIR)/cupola/include/cupola
	install -m 644 cuda/include/cupola/*.h cuda/include/cupola/*.cuh $(DESTDIR)$(LUADIR)/cupola/include/cupola/
	if ls src/include/cupola/*.h >/dev/null 2>&1; then \
	    install -m 644 src/include/cupola/*.h $(DESTDIR)$(LUADIR)/cupola/include/cupola/; fi

.PHONY: test-install
test-install: deps all
	@BUSTED_ARGS=spec/install_spec.lua $(LUA) spec/run.lua

clean:
	rm -rf $(BUILD)

# ---- test-tsan: the host backend under ThreadSanitizer -----------
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

# ---- Reliability harness: sanitizers, aggressive GC, fuzzing ------
# All on the host backend, host-only builds (NVCC=), each in its own build
# folder; each test target ends with spec/run.lua's "N passed, N failed".
#   make test-asan      C tests + busted suite, AddressSanitizer + UBSan + LSan
#   make test-valgrind  C tests + busted suite under memcheck (leaks: definite)
#   make test-gc        busted suite, collector at its most aggressive, ASan
#   make fuzz           long allocator fuzz (FUZZ_SEED, FUZZ_OPS), ASan module
#   make fuzz-gpu       the same fuzz on the default build (CUDA when present)
#   make fuzz-trace     libFuzzer on the trace loader for FUZZ_TRACE_SECONDS
# The interpreter is not instrumented: libasan is preloaded into lua5.4 (and
# inherited by the child processes of lifetime_spec); busted must not re-exec
# itself (--ignore-lua).
REL_BUSTED   := $(shell command -v busted 2>/dev/null || echo /usr/bin/busted)
REL_ENV      := CUPOLA_BACKEND=host CUPOLA_SLOW=1
# C tests that cannot run under the sanitizers or valgrind (none: the host
# backend's test held its streams with spins and bounded their durations
# from above, which a slow or loaded machine broke; it holds them with tasks
# it releases now, and bounds durations from below only).
REL_SLOW_UNSAFE :=
REL_C_TESTS   = $(filter-out $(REL_SLOW_UNSAFE),$(notdir $(C_TESTS)))

ASAN_BUILD   := build-asan
ASAN_CFLAGS  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ASAN_LIB     := $(shell $(CC) -print-file-name=libasan.so)
ASAN_ENV     := LD_PRELOAD=$(ASAN_LIB) \
                ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
                LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
                UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

VG_BUILD     := build-valgrind
VALGRIND     := valgrind -q --error-exitcode=99 --leak-check=full \
                --errors-for-leak-kinds=definite --show-leak-kinds=definite
VG_C_TESTS    = $(REL_C_TESTS)
# Fewer fuzz operations under valgrind (about 50x slower), same seed.
VG_FUZZ_OPS  ?= 40
GC_FUZZ_OPS  ?= 60

FUZZ_SEED    ?= $(shell date +%s)
FUZZ_OPS     ?= 3000
FUZZ_BUILD   := build-fuzz
FUZZ_CC      ?= clang
FUZZ_TRACE_SECONDS ?= 60

.PHONY: rel-asan-build rel-vg-build test-asan test-valgrind test-gc fuzz fuzz-gpu fuzz-trace fuzz-deps fuzz-pickle fuzz-scan fuzz-option fuzz-rawmap
rel-asan-build:
	@$(MAKE) --no-print-directory NVCC= BUILD=$(ASAN_BUILD) EXTRA_CFLAGS="$(ASAN_CFLAGS)" \
	    $(ASAN_BUILD)/cupola/core.so $(addprefix $(ASAN_BUILD)/tests/,$(REL_C_TESTS)) \
	    $(ASAN_BUILD)/testmod/cupola_testposix.so $(ASAN_BUILD)/testmod/models/cupola/core.so

rel-vg-build:
	@$(MAKE) --no-print-directory NVCC= BUILD=$(VG_BUILD) EXTRA_CFLAGS="-O1 -g" \
	    $(VG_BUILD)/cupola/core.so $(addprefix $(VG_BUILD)/tests/,$(VG_C_TESTS)) \
	    $(VG_BUILD)/testmod/cupola_testposix.so $(VG_BUILD)/testmod/models/cupola/core.so

test-asan: deps rel-asan-build
	@echo "== test-asan: AddressSanitizer + UBSan + LeakSanitizer, host backend"
	@$(REL_ENV) $(ASAN_ENV) BUSTED_ARGS="--ignore-lua --cpath=$(ASAN_BUILD)/?.so" \
	    $(LUA) spec/run.lua $(addprefix $(ASAN_BUILD)/tests/,$(REL_C_TESTS))

# valgrind runs one thread at a time: the C tests and the spec files run as
# jobs of their own, one per core (spec/run.lua, CUPOLA_SPEC_JOBS), the
# longest first; a job still running after VG_JOB_SECONDS fails.  test-gc
# runs its spec files the same way: its full collection every 1000
# instructions costs in proportion to the Lua heap, which in one process
# grows with every spec file loaded (50 minutes, against 2 as jobs).
REL_JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
VG_JOBS        ?= $(REL_JOBS)
VG_JOB_SECONDS ?= 1800
VG_FIRST       := tests/test_compile spec/plugin_spec.lua spec/pool_conformance_spec.lua \
                  spec/advise_spec.lua spec/install_spec.lua
test-valgrind: deps rel-vg-build
	@echo "== test-valgrind: memcheck, definite leaks are errors, host backend"
	@$(REL_ENV) CUPOLA_FUZZ_OPS=$(VG_FUZZ_OPS) CUPOLA_CHILD_WRAP="$(VALGRIND)" \
	    CUPOLA_SPEC_JOBS=$(VG_JOBS) CUPOLA_SPEC_TIMEOUT=$(VG_JOB_SECONDS) \
	    CUPOLA_SPEC_FIRST="$(VG_FIRST)" \
	    BUSTED="$(VALGRIND) $(LUA) $(REL_BUSTED)" BUSTED_ARGS="--ignore-lua --cpath=$(VG_BUILD)/?.so" \
	    $(LUA) spec/run.lua $(foreach t,$(VG_C_TESTS),"$(VALGRIND) $(VG_BUILD)/tests/$(t)")

test-gc: deps rel-asan-build
	@echo "== test-gc: incremental collector with pause 0 and a full collection every 1000 instructions (ASan module)"
	@$(REL_ENV) $(ASAN_ENV) CUPOLA_FUZZ_OPS=$(GC_FUZZ_OPS) \
	    CUPOLA_SPEC_JOBS=$(REL_JOBS) CUPOLA_SPEC_TIMEOUT=$(VG_JOB_SECONDS) \
	    BUSTED_ARGS="--ignore-lua --cpath=$(ASAN_BUILD)/?.so --helper=spec/support/gc_stress.lua" \
	    $(LUA) spec/run.lua

fuzz: deps rel-asan-build
	@echo "== fuzz: seed $(FUZZ_SEED), $(FUZZ_OPS) operations per allocator (ASan module, host backend)"
	@$(REL_ENV) $(ASAN_ENV) CUPOLA_FUZZ_SEED=$(FUZZ_SEED) CUPOLA_FUZZ_OPS=$(FUZZ_OPS) \
	    BUSTED_ARGS="--ignore-lua --cpath=$(ASAN_BUILD)/?.so spec/fuzz_spec.lua" $(LUA) spec/run.lua

fuzz-gpu: all
	@echo "== fuzz-gpu: seed $(FUZZ_SEED), $(FUZZ_OPS) operations per allocator ($(BUILD), backend: default)"
	@CUPOLA_FUZZ_SEED=$(FUZZ_SEED) CUPOLA_FUZZ_OPS=$(FUZZ_OPS) \
	    BUSTED_ARGS="--cpath=$(BUILD)/?.so spec/fuzz_spec.lua" $(LUA) spec/run.lua

# libFuzzer ships with Debian's clang (libclang-rt-14-dev); installed when
# missing, like `make deps`.
fuzz-deps:
	@if ! command -v $(FUZZ_CC) >/dev/null 2>&1 || \
	    ! ls $$($(FUZZ_CC) -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then \
	    echo "fuzz-deps: installing clang and libclang-rt-dev"; \
	    sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	    DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends \
	        clang libclang-rt-dev zlib1g-dev >/dev/null; \
	fi

FUZZ_TRACE_SRC := tests/fuzz/fuzz_trace.c $(filter-out src/core/backend/cuda%.c,$(wildcard src/core/*.c src/core/*/*.c))
$(FUZZ_BUILD)/fuzz_trace: $(FUZZ_TRACE_SRC) $(wildcard src/core/*.h src/core/*/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Isrc/core -Isrc/include -Icuda -Icuda/include -o $@ $(FUZZ_TRACE_SRC) -lz -lpthread -lm

# A bounded run: new inputs go to $(FUZZ_BUILD)/corpus (the checked-in seeds
# stay as they are); a crash leaves its reproducer in $(FUZZ_BUILD)/.
fuzz-trace: fuzz-deps $(FUZZ_BUILD)/fuzz_trace
	@mkdir -p $(FUZZ_BUILD)/corpus
	@echo "== fuzz-trace: libFuzzer on cp_trace_load for $(FUZZ_TRACE_SECONDS) s"
	@if $(FUZZ_BUILD)/fuzz_trace -max_total_time=$(FUZZ_TRACE_SECONDS) -max_len=16384 -timeout=20 \
	        -rss_limit_mb=2048 -print_final_stats=1 -dict=tests/fuzz/trace.dict \
	        -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus tests/fuzz/corpus \
	        > $(FUZZ_BUILD)/fuzz_trace.log 2>&1; then \
	    grep -E "^stat::number_of_executed_units|^Done" $(FUZZ_BUILD)/fuzz_trace.log; \
	    echo "1 passed, 0 failed"; \
	else \
	    tail -40 $(FUZZ_BUILD)/fuzz_trace.log; \
	    echo "0 passed, 1 failed"; exit 1; \
	fi

# ---- test-browser: timeline pages in headless Chromium ----------
# Renders cupola.timeline pages (the snapshot, gpt2_beam_search, three pools,
# a pool's log, a synthetic million-event trace) in Debian's chromium, checks
# the peak label in the DOM and the drawn pixels of every plot in the
# screenshot (tests/browser/pngcheck.c, zlib only), and prints each page's
# load+draw time.  chromium is installed when missing, like `make deps`.
CHROMIUM ?= chromium
.PHONY: test-browser browser-deps
browser-deps:
	@if ! command -v $(CHROMIUM) >/dev/null 2>&1; then \
	    echo "browser-deps: installing chromium"; \
	    sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	    DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends \
	        chromium >/dev/null; \
	fi

$(BUILD)/browser/pngcheck: tests/browser/pngcheck.c
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(CC) -O2 -std=c11 $(WARN) $(EXTRA_CFLAGS) -o $@ $< -lz

test-browser: deps browser-deps all $(BUILD)/browser/pngcheck
	@echo "== test-browser: cupola.timeline pages in headless $(CHROMIUM)"
	@CHROMIUM=$(CHROMIUM) LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="$(BUILD)/?.so;;" \
	    $(LUA) tests/browser/check_timeline.lua $(BUILD)/browser $(BUILD)/browser/pngcheck

# ---- test-nvtx: cupola's NVTX ranges reach a tool ---------------
# tests/nvtx/nvtx_count.c is an NVTX injection library that counts ranges per
# domain; check_nvtx.lua runs a workload under it with and without
# CUPOLA_NVTX=1.  Needs the toolkit's NVTX headers (skipped without them).
NVTX_LIB := $(BUILD)/nvtx/libnvtx_count.so
.PHONY: test-nvtx
$(NVTX_LIB): tests/nvtx/nvtx_count.c
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) -shared -fPIC -O1 -I$(CUDA_HOME)/include -o $@ $< -lpthread

test-nvtx: all
	@if [ ! -f $(CUDA_HOME)/include/nvtx3/nvToolsExt.h ]; then \
	    echo "test-nvtx: no NVTX headers in $(CUDA_HOME): skipped"; echo "0 passed, 0 failed"; \
	else \
	    $(MAKE) --no-print-directory $(NVTX_LIB) && \
	    LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="$(BUILD)/?.so;;" \
	        $(LUA) tests/nvtx/check_nvtx.lua $(NVTX_LIB) $(BUILD)/nvtx; \
	fi

# ---- fuzz-pickle: libFuzzer on the snapshot pickle reader alone --
# In memory, no replay: thousands of inputs a second (fuzz-trace covers the
# same reader through cp_trace_load, a hundred a second).
FUZZ_PICKLE_SECONDS ?= 30
# (the snapshot decoder, snapshot_impl.h's parts; not its reader, snapshot_load.c)
FUZZ_PICKLE_SRC := tests/fuzz/fuzz_pickle.c src/core/error.c src/core/trace/pickle.c \
                   src/core/trace/snapshot.c src/core/trace/snapshot_frames.c \
                   src/core/trace/snapshot_rows.c src/core/trace/snapshot_ops.c \
                   src/core/trace/cpsnap.c src/core/pool/torch_conf.c
$(FUZZ_BUILD)/fuzz_pickle: $(FUZZ_PICKLE_SRC) $(wildcard src/core/*.h src/core/trace/*.h src/core/pool/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Isrc/core -o $@ $(FUZZ_PICKLE_SRC)

fuzz-pickle: fuzz-deps $(FUZZ_BUILD)/fuzz_pickle
	@mkdir -p $(FUZZ_BUILD)/corpus-pickle
	@echo "== fuzz-pickle: libFuzzer on the pickle reader for $(FUZZ_PICKLE_SECONDS) s"
	@if $(FUZZ_BUILD)/fuzz_pickle -max_total_time=$(FUZZ_PICKLE_SECONDS) -max_len=16384 -timeout=10 \
	        -rss_limit_mb=2048 -print_final_stats=1 -dict=tests/fuzz/trace.dict \
	        -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus-pickle tests/fuzz/corpus \
	        > $(FUZZ_BUILD)/fuzz_pickle.log 2>&1; then \
	    grep -E "^stat::number_of_executed_units|^Done" $(FUZZ_BUILD)/fuzz_pickle.log; \
	    echo "1 passed, 0 failed"; \
	else \
	    tail -40 $(FUZZ_BUILD)/fuzz_pickle.log; \
	    echo "0 passed, 1 failed"; exit 1; \
	fi

# ---- fuzz-scan, fuzz-option: libFuzzer on what reads user kernels
# fuzz-scan: the kernel source scanner (kernel/scan.c), in memory.
# fuzz-option: the compile option allow-list (cp_cc_check_option), against
# an independent statement of it.  Seeds: tests/fuzz/corpus-scan, -option.
FUZZ_SCAN_SECONDS ?= 30
FUZZ_OPTION_SECONDS ?= 20
FUZZ_RAWMAP_SECONDS ?= 20
FUZZ_SCAN_SRC := tests/fuzz/fuzz_scan.c src/core/error.c src/core/kernel/scan.c
FUZZ_OPTION_SRC := tests/fuzz/fuzz_option.c src/core/error.c src/core/kernel/compile.c \
                   src/core/pool/torch_conf.c
$(FUZZ_BUILD)/fuzz_scan: $(FUZZ_SCAN_SRC) $(wildcard src/core/*.h src/core/kernel/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Isrc/core -o $@ $(FUZZ_SCAN_SRC)
$(FUZZ_BUILD)/fuzz_option: $(FUZZ_OPTION_SRC) $(wildcard src/core/*.h src/core/kernel/*.h src/core/pool/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Isrc/core -o $@ $(FUZZ_OPTION_SRC) -lpthread
# fuzz-rawmap: a Pool's map of raw blocks (src/lua/rawmap.h, plain C), against a model.
$(FUZZ_BUILD)/fuzz_rawmap: tests/fuzz/fuzz_rawmap.c src/lua/rawmap.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -Isrc/lua -o $@ tests/fuzz/fuzz_rawmap.c

# Every harness writes its findings beside its binary unless told otherwise.
$(addprefix $(FUZZ_BUILD)/fuzz_,trace pickle scan option rawmap): tests/fuzz/artifact.h

# $(call run_fuzzer,name,seconds,max_len,dict): a bounded run with its own
# "N passed, N failed" line; the corpus grows under $(FUZZ_BUILD).
define run_fuzzer
	@mkdir -p $(FUZZ_BUILD)/corpus-$(1)
	@echo "== fuzz-$(1): libFuzzer for $(2) s"
	@if $(FUZZ_BUILD)/fuzz_$(1) -max_total_time=$(2) -max_len=$(3) -timeout=10 \
	        -rss_limit_mb=2048 -print_final_stats=1 -dict=$(4) \
	        -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus-$(1) tests/fuzz/corpus-$(1) \
	        > $(FUZZ_BUILD)/fuzz_$(1).log 2>&1; then \
	    grep -E "^stat::number_of_executed_units|^Done" $(FUZZ_BUILD)/fuzz_$(1).log; \
	    echo "1 passed, 0 failed"; \
	else \
	    tail -40 $(FUZZ_BUILD)/fuzz_$(1).log; \
	    echo "0 passed, 1 failed"; exit 1; \
	fi
endef

.PHONY: fuzz-scan fuzz-option fuzz-rawmap
fuzz-scan: fuzz-deps $(FUZZ_BUILD)/fuzz_scan
	$(call run_fuzzer,scan,$(FUZZ_SCAN_SECONDS),8192,tests/fuzz/scan.dict)

fuzz-option: fuzz-deps $(FUZZ_BUILD)/fuzz_option
	$(call run_fuzzer,option,$(FUZZ_OPTION_SECONDS),512,tests/fuzz/option.dict)

fuzz-rawmap: fuzz-deps $(FUZZ_BUILD)/fuzz_rawmap
	$(call run_fuzzer,rawmap,$(FUZZ_RAWMAP_SECONDS),4096,tests/fuzz/rawmap.dict)

# ---- soak: a seeded random mix of everything for a bounded time --
# spec/soak/soak.lua says what it mixes and checks.  Two emulated devices on
# the host backend (ignored by the CUDA backend).  The C library's heap is
# told to give large freed blocks back to the OS (a fixed mmap threshold,
# not the dynamic one that keeps the largest blocks ever freed), so the
# resident set it checks follows what cupola holds rather than what glibc
# chose to keep.  On the GPU: CUPOLA_BACKEND=cuda make soak SOAK_SECONDS=300.
SOAK_SECONDS ?= 150
SOAK_SEED ?= 1
.PHONY: soak
soak: deps all
	@CUPOLA_HOST_DEVICES=$${CUPOLA_HOST_DEVICES:-2} MALLOC_MMAP_THRESHOLD_=65536 \
	    MALLOC_TRIM_THRESHOLD_=131072 $(LUA) spec/soak/soak.lua $(SOAK_SECONDS) $(SOAK_SEED)
