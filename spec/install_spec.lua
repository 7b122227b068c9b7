-- `luarocks make` installs a cupola that works on its own: the spec copies
-- the source tree, installs it into a temporary luarocks tree, deletes the
-- copy, and uses the installation from another directory (require, the
-- shipped traces, bin/cupola).  Pending where luarocks is not installed
-- (`make deps` installs it).
local child = require "spec.support.child"

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Every command runs without this process's preloaded sanitizer runtime
-- (make test-asan): under it the system's own tools report their leaks
-- and fail.
local function sh(cmd)
  local p = assert(io.popen("env -u LD_PRELOAD -u MAKEFLAGS -u MFLAGS -u MAKELEVEL sh -c " .. q(cmd .. " 2>&1")))
  local out = p:read "a"
  local ok, _, code = p:close()
  return ok, out, code
end

local have_luarocks = sh "command -v luarocks"

-- The installation runs without this process's sanitizer preloads and
-- module paths: it is a plain user's shell.
local CLEAN_ENV = "env -u LD_PRELOAD -u ASAN_OPTIONS -u LSAN_OPTIONS -u UBSAN_OPTIONS"
  .. " -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 -u CUPOLA_TRACES"

local function mktemp_dir()
  local ok, out = sh "mktemp -d"
  assert(ok, out)
  return (out:gsub("%s+$", ""))
end

describe("luarocks make", function()
  if not have_luarocks then
    pending("luarocks is not installed (make deps installs Debian's luarocks): installation not checked")
    return
  end
  if not child.available then
    pending("no child processes under a preloaded libtsan: installation not checked")
    return
  end

  local src, tree, elsewhere, install_log

  setup(function()
    src, tree, elsewhere = mktemp_dir(), mktemp_dir(), mktemp_dir()
    -- What a clone has (build/ too when present, with its times kept, so
    -- an unchanged build is not redone).
    local parts = { "Makefile", "cupola-scm-1.rockspec", "README.md", "docs", "src", "cuda", "lua", "bin",
      "examples" }
    local have = {}
    for _, p in ipairs(parts) do
      if io.open(p) then have[#have + 1] = p end
    end
    if io.open "build/cupola/core.so" then have[#have + 1] = "build" end
    local ok, out = sh(string.format("cp -Rp %s %s/", table.concat(have, " "), q(src)))
    assert(ok, out)
    -- The same compiler and flags as a plain `make`, so a copied build/ is reused.
    local ok2, log = sh(string.format(
      "cd %s && %s luarocks --lua-version=5.4 make --tree=%s CC=cc 'CFLAGS=-O2 -g'",
      q(src), CLEAN_ENV, q(tree)))
    install_log = log
    assert(ok2, "luarocks make failed:\n" .. log)
    -- Nothing may depend on the sources once installed.
    sh("rm -rf " .. q(src))
  end)

  teardown(function()
    if tree then sh("rm -rf " .. q(tree) .. " " .. q(elsewhere)) end
  end)

  -- A Lua 5.4 that searches only the luarocks tree (what `luarocks path
  -- --tree` would add), started in a directory with nothing of cupola's.
  local function lua_in_tree(code)
    local path = string.format("%s/share/lua/5.4/?.lua;%s/share/lua/5.4/?/init.lua;;", tree, tree)
    local cpath = string.format("%s/lib/lua/5.4/?.so;;", tree)
    return sh(string.format("cd %s && %s LUA_PATH=%s LUA_CPATH=%s lua5.4 -e %s", q(elsewhere), CLEAN_ENV,
      q(path), q(cpath), q(code)))
  end

  it("installs the module, the Lua files, bin/cupola and the traces", function()
    assert.matches("is now installed", install_log)
    local lua = tree .. "/share/lua/5.4/cupola/"
    for _, f in ipairs { "init.lua", "trace.lua", "bench.lua", "report.lua", "help.lua",
      "traces/gpt2_train.csv.gz", "traces/torch_snapshot_mlp.pickle", "traces/README.md" } do
      assert.is_truthy(io.open(lua .. f), "missing " .. lua .. f)
    end
    assert.is_truthy(io.open(tree .. "/lib/lua/5.4/cupola/core.so"), "missing core.so")
    assert.is_truthy(io.open(tree .. "/bin/cupola"), "missing bin/cupola")
    local doc = tree .. "/lib/luarocks/rocks-5.4/cupola/scm-1/docs/API.md"
    assert.is_truthy(io.open(doc), "missing " .. doc)
  end)

  -- (the .cuh too: <cupola/device.h> includes the in-kernel allocators'
  -- headers, the heap's parts among them)
  it("installs every public header there is", function()
    local ls = assert(io.popen "ls src/include/cupola/*.h cuda/include/cupola/*.h cuda/include/cupola/*.cuh 2>/dev/null")
    local listing = ls:read "a"
    ls:close()
    local n = 0
    for h in listing:gmatch "[^\n]+" do
      local name = h:match "([^/]+%.cuh?)$"
      if name then
        n = n + 1
        local dst = tree .. "/share/lua/5.4/cupola/include/cupola/" .. name
        assert.is_truthy(io.open(dst), "missing " .. dst)
      end
    end
    if n == 0 then
      assert.is_falsy(io.open(tree .. "/share/lua/5.4/cupola/include/cupola"), "an empty header folder")
    end
  end)

  it("loads with require from another directory, from the tree", function()
    local ok, out = lua_in_tree [[
      local cupola = require "cupola"
      print(package.searchpath("cupola", package.path))
      print(package.searchpath("cupola.core", package.cpath))
      print(cupola.backend(), cupola.version)]]
    assert(ok, out)
    assert.matches(tree .. "/share/lua/5.4/cupola/init.lua", out, 1, true)
    assert.matches(tree .. "/lib/lua/5.4/cupola/core.so", out, 1, true)
    assert.matches("\n(%a+)%s+%d+%.%d+%.%d+", out)
  end)

  it("finds and loads the installed traces", function()
    local ok, out = lua_in_tree [[
      local cupola = require "cupola"
      local path = assert(cupola.trace.find "gpt2_train")
      print(path)
      print(#cupola.trace.load(path))]]
    assert(ok, out)
    assert.matches(tree .. "/share/lua/5.4/cupola/traces/gpt2_train.csv.gz", out, 1, true)
    assert.matches("\n9486\n", out, 1, true)
  end)

  it("installs a bin/cupola that runs a script and a one-liner with the installed module", function()
    local script = elsewhere .. "/one.lua"
    local f = assert(io.open(script, "w"))
    f:write 'print(package.searchpath("cupola", package.path), cupola.trace.find "resnet50_train", ...)\n'
    f:close()
    local ok, out = sh(string.format("cd %s && %s %s/bin/cupola one.lua x y", q(elsewhere), CLEAN_ENV, q(tree)))
    assert(ok, out)
    assert.matches(tree .. "/share/lua/5.4/cupola/init.lua", out, 1, true)
    assert.matches(tree .. "/share/lua/5.4/cupola/traces/resnet50_train.csv.gz\tx\ty", out, 1, true)
    local ok2, out2 = sh(string.format("cd %s && %s %s/bin/cupola -e %s", q(elsewhere), CLEAN_ENV, q(tree),
      q 'print(cupola.bytes "4MiB")'))
    assert(ok2, out2)
    assert.equals("4194304\n", out2)
  end)

  it("installs a REPL that names the backend and lists the API", function()
    local ok, out = sh(string.format("cd %s && printf 'help()\\n' | %s %s/bin/cupola", q(elsewhere), CLEAN_ENV,
      q(tree)))
    assert(ok, out)
    assert.matches("cupola %d+%.%d+%.%d+, backend %a+", out)
    assert.matches("cupola.pool{", out, 1, true)
  end)

  it("compiles a kernel that allocates from a heap against the installed <cupola/device.h>", function()
    -- (the source tree is gone: every header device.h includes, the heap's
    -- parts among them, comes from the tree)
    local ok, out = lua_in_tree [[
      local cupola = require "cupola"
      print(table.concat(require("cupola.core")._include_path(), ":"))
      local m = cupola.module { name = "installed_heap.cu", source = [=[
        #include <cupola/device.h>
        extern "C" __global__ void use(cupola_device_pool *pool, unsigned long long *out, unsigned long long n)
        {
            unsigned long long i = cupola_global_index();
            if (i >= n)
                return;
            unsigned long long *p = (unsigned long long *)cupola_alloc(pool, 48 + 4096 * (i % 3));
            out[i] = p ? 1 : 0;
            if (p) {
                *p = i;
                out[i] = *p == i;
                cupola_free(pool, p);
            }
        }
      ]=] }
      local use = m:kernel("use", { "device_pool", "ptr", "u64" })
      local dp <close> = cupola.device_pool { kind = "heap", capacity = 16 << 20 }
      local out = cupola.malloc(8 * 64)
      use:launch({ threads = 64, block = 32 }, dp, out, 64)
      local served = 0
      for i = 0, 63 do served = served + string.unpack("<I8", out:read(8 * i, 8)) end
      print("served " .. served)
      out:free()]]
    assert(ok, out)
    assert.matches(tree .. "/share/lua/5.4/cupola/include\n", out, 1, true)
    assert.matches("\nserved 64\n", out, 1, true)
  end)

  it("compiles a plugin allocator from source against the installed <cupola/allocator.h>", function()
    local ok, out = lua_in_tree [[
      local cupola = require "cupola"
      print(cupola.include_dir)
      local p = cupola.pool { kind = "plugin", symbol = "pass", source = [=[
        #include <cupola/allocator.h>
        static void *c(cupola_upstream *up, const char *o) { (void)o; return up; }
        static void d(void *s) { (void)s; }
        static void *a(void *s, size_t n, void *st) { cupola_upstream *u = s; return u->allocate(u, n, st); }
        static void f(void *s, void *p, size_t n, void *st) { cupola_upstream *u = s; u->deallocate(u, p, n, st); }
        const cupola_allocator pass = { CUPOLA_ALLOCATOR_VERSION, c, d, a, f, 0, 0 };
      ]=] }
      local b = assert(p:alloc "1MiB")
      b:write "plugged"
      print(b:read(0, 7))
      b:free()]]
    assert(ok, out)
    assert.matches(tree .. "/share/lua/5.4/cupola/include\n", out, 1, true)
    assert.matches("\nplugged\n", out, 1, true)
  end)
end)
