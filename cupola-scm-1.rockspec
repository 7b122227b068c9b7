-- cupola: GPU memory allocation experiments from Lua 5.4.
-- `luarocks make` (Debian's luarocks: `luarocks --lua-version=5.4 make`)
-- builds with the project's Makefile (CUDA when nvcc is found, else
-- host-only) and installs cupola.core, the Lua modules, bin/cupola, the
-- traces (LUADIR/cupola/traces) and the public C headers
-- (LUADIR/cupola/include/cupola).  The install step gets the build's
-- variables too, so it finds the module built and does not rebuild it.
rockspec_format = "3.0"
package = "cupola"
version = "scm-1"
source = {
  url = "git+file:///cupola.git", -- built from a checkout with `luarocks make`
}
description = {
  summary = "GPU memory allocation experiments from Lua: CUDA pools, C allocators, streams and kernels",
  detailed = [[
cupola is a C module for Lua 5.4 that turns GPU memory allocation into
something you can experiment with from a script: cudaMalloc, stream-ordered
cudaMallocAsync and native pools, allocators written in C (arena, free list,
TLSF, caching), streams, events and kernels.  Without a GPU, a host backend
runs the same API on CPU threads.
]],
  license = "MIT",
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
build = {
  type = "make",
  build_target = "all",
  build_variables = {
    CFLAGS = "$(CFLAGS)",
    LUA = "$(LUA)",
    LUA_INCDIR = "$(LUA_INCDIR)",
  },
  install_target = "install",
  -- The reference goes with the rock (`luarocks doc cupola`).
  copy_directories = { "docs" },
  install_variables = {
    CFLAGS = "$(CFLAGS)",
    LUA = "$(LUA)",
    LUA_INCDIR = "$(LUA_INCDIR)",
    LUADIR = "$(LUADIR)",
    LIBDIR = "$(LIBDIR)",
    BINDIR = "$(BINDIR)",
  },
}
