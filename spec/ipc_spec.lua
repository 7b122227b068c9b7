-- Several processes: a native pool exported with a POSIX fd
-- handle (passed over a Unix socket, SCM_RIGHTS) and its buffers, and the
-- legacy cudaIpcGetMemHandle path for cupola.malloc buffers.  The exporting
-- process is this one; importers are child processes (CUDA maps exported
-- memory into other processes only).  On the host backend the memory is
-- really shared (memfd), so these cases mean the same on both backends.
local cupola = require "cupola"
local run_child = require "spec.support.child"
local MiB = 1024 * 1024

local CHILD = [[
local cupola = require "cupola"
local function raises(fn, text)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. text)
  assert(tostring(err):find(text, 1, true), "error was: " .. tostring(err) .. "\nexpected: " .. text)
end
]]

-- child(code, ...) runs code in a child with the arguments; returns its stdout.
local function child(code, env, ...)
  local rc, out, err = run_child(CHILD .. code, env, { ... })
  assert.equals(0, rc, err)
  return out
end

local function ipc_it(name, fn)
  if run_child.available then it(name, fn) else pending(name .. " (no child processes under this tool)") end
end

local function shareable() return cupola.mempool { handle = "posix_fd" } end

describe("ipc: native pools", function()
  ipc_it("a child imports the parent's pool and buffer, reads what the parent wrote, writes back", function()
    local mp <close> = shareable()
    local s <close> = cupola.stream {}
    local b = mp:alloc("1MiB", s)
    cupola.kernels.fill(b, 0x11, { type = "u8" })
    s:synchronize()
    local out = child([[
      local p = cupola.mempool.import(arg[1])
      assert(p.imported and p.device == 0)
      local b = cupola.buffer.import(p, arg[2])
      assert(b.size == 1024 * 1024 and b.pool == p)
      io.write(cupola.kernels.checksum(b, { type = "u8" }), "\n")
      cupola.kernels.fill(b, 0x22, { type = "u8" })
      cupola.synchronize()
      raises(function() p:close() end, "1 live buffer")
      b:free(); cupola.synchronize(); p:close()
    ]], nil, mp:export(), b:export())
    assert.equals(tostring(0x11 * MiB) .. "\n", out)
    assert.equals(0x22 * MiB, cupola.kernels.checksum(b, { type = "u8" }))
    b:free(s)
    s:synchronize()
  end)

  ipc_it("the export names one pool: a block goes only into the pool it came from", function()
    local a <close> = shareable()
    local b <close> = shareable()
    local x = a:alloc(4096)
    local out = child([[
      local pb = cupola.mempool.import(arg[2])
      raises(function() cupola.buffer.import(pb, arg[3]) end, "belongs to another exported pool")
      local pa = cupola.mempool.import(arg[1])
      raises(function() cupola.buffer.import(arg[3]) end, "a cupola export of a block, not of a malloc")
      raises(function() cupola.buffer.import(pa, arg[1]) end, "a cupola export of a pool, not of a block")
      raises(function() pa:alloc(16) end, "an imported pool cannot allocate")
      raises(function() pa:export() end, "cannot be exported again")
      local y = cupola.buffer.import(pa, arg[3])
      raises(function() y:export() end, "an imported buffer cannot be exported again")
      y:free(); pa:close(); pb:close()
      io.write "done"
    ]], nil, a:export(), b:export(), x:export())
    assert.equals("done", out)
    x:free()
  end)

  ipc_it("the exporting process closing its pool while the child holds a buffer", function()
    -- Defined: the child's buffer keeps its memory until the child frees it
    -- (the importer maps the memory itself); it is no longer shared with the
    -- exporter, which has given it up.  Handshake through two files.
    local ready, closed = os.tmpname(), os.tmpname()
    os.remove(ready); os.remove(closed)
    local mp = shareable()
    local b = mp:alloc("64KiB")
    b:write(string.rep("p", 65536))
    cupola.synchronize()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(string.format("package.path = %q .. package.path\npackage.cpath = %q .. package.cpath\n",
      "lua/?.lua;lua/?/init.lua;", package.cpath .. ";"))
    f:write(CHILD .. [[
      local p = cupola.mempool.import(arg[1])
      local b = cupola.buffer.import(p, arg[2])
      assert(b:read(0, 4) == "pppp")
      io.open(arg[3], "w"):close()                 -- ready
      for _ = 1, 600 do                            -- wait for the parent's close
        local f = io.open(arg[4]); if f then f:close() break end
        os.execute "sleep 0.05"
      end
      assert(io.open(arg[4]), "the parent never closed its pool")
      b:write(string.rep("c", 65536))              -- still mapped, still ours
      assert(b:read() == string.rep("c", 65536))
      assert(cupola.kernels.checksum(b, { type = "u8" }) == 65536 * string.byte "c")
      b:free(); cupola.synchronize(); p:close()
      io.write "survived"
    ]])
    f:close()
    local h = io.popen(string.format("lua5.4 %s '%s' '%s' '%s' '%s'", script, mp:export(), b:export(), ready, closed))
    for _ = 1, 600 do
      local r = io.open(ready)
      if r then r:close() break end
      os.execute "sleep 0.05"
    end
    b:free()
    cupola.synchronize()
    mp:close()
    cupola.synchronize() -- CUDA: the pool is destroyed at the next synchronization
    io.open(closed, "w"):close()
    local out = h:read "a"
    local ok = h:close()
    os.remove(script); os.remove(ready); os.remove(closed)
    assert.equals("survived", out)
    assert.is_true(ok)
  end)

  ipc_it("a closed pool's export is stale: importing it raises", function()
    local mp = shareable()
    local token = mp:export()
    assert.equals(token, mp:export()) -- one export per pool
    mp:close()
    assert.equals("ok", child([[
      raises(function() cupola.mempool.import(arg[1]) end, "the export is stale")
      io.write "ok"
    ]], nil, token))
  end)
end)

describe("ipc: cupola.malloc buffers (the legacy path)", function()
  ipc_it("a child opens the parent's buffer, reads it and writes into it", function()
    local b = cupola.malloc("256KiB")
    b:write("from the parent")
    local out = child([[
      local b = cupola.buffer.import(arg[1])
      assert(b.size == 256 * 1024 and b.origin == "ipc" and b.pool == nil)
      io.write(b:read(0, 15))
      b:write("from the child!")
      cupola.synchronize()
      b:free()
      raises(function() b:free() end, "double free")
    ]], nil, b:export())
    assert.equals("from the parent", out)
    assert.equals("from the child!", b:read(0, 15))
    b:free()
  end)

  if cupola.backend() == "host" then
    ipc_it("a freed buffer's export is stale (host: the memory travels as an fd)", function()
      local b = cupola.malloc(4096)
      local token = b:export()
      b:free()
      assert.equals("ok", child([[
        raises(function() cupola.buffer.import(arg[1]) end, "the export is stale")
        io.write "ok"
      ]], nil, token))
    end)
  end

  local function cross_device()
    local b = cupola.malloc(4096, { device = 0 })
    b:write("dev0")
    local out = child([[
      local b = cupola.buffer.import(arg[1], { device = 1 })
      assert(b.device == 1)
      io.write(b:read(0, 4))
      b:free()
    ]], cupola.backend() == "host" and { CUPOLA_HOST_DEVICES = "2" } or nil, b:export())
    assert.equals("dev0", out)
    b:free()
  end
  if cupola.backend() == "cuda" then
    if cupola.device_count() >= 2 then
      ipc_it("a child opens a buffer of device 0 from device 1 #gpu", cross_device)
    else
      pending("a child opens a buffer of device 0 from device 1 #gpu (needs two CUDA devices)")
    end
  else
    ipc_it("a child opens a buffer of device 0 from device 1 (CUPOLA_HOST_DEVICES=2)", cross_device)
  end
end)

describe("ipc: checks before use", function()
  it("malformed exports raise naming the argument and the problem", function()
    local bad = {
      { "hello", "not a cupola export" },
      { "cupola-ipc/x;kind=pool", "no version" },
      { "cupola-ipc/9;kind=pool", "version 9; this cupola reads version 1" },
      { "cupola-ipc/1;kind=pool", "fields missing" },
      { "cupola-ipc/1;kind=pool;backend=host;device=0;size=0;pid=1;nonce=zz;socket=x;data=-", "field 'nonce'" },
      { "cupola-ipc/1;kind=block;backend=host;device=0;size=5;pid=1;nonce=0123456789abcdef;socket=-;data=abc", "field 'data'" },
      { "cupola-ipc/1;kind=pool;backend=host;device=0;size=0;pid=1;nonce=0123456789abcdef;socket=x;data=-;extra=1", "field 'extra'" },
    }
    for _, case in ipairs(bad) do
      assert.error_matches(function() cupola.mempool.import(case[1]) end,
        "bad argument #1 .*" .. case[2]:gsub("[%-%.%(%)%[%]%*%+%?%^%$]", "%%%0"))
    end
    assert.error_matches(function() cupola.mempool.import(42) end, "not a cupola export")
    assert.error_matches(function() cupola.mempool.import() end, "string expected")
  end)

  it("an export of another backend, device, kind or of this very process raises", function()
    local other = cupola.backend() == "host" and "cuda" or "host"
    local t = "cupola-ipc/1;kind=pool;backend=%s;device=%d;size=0;pid=%d;nonce=0123456789abcdef;socket=cupola-1-x;data=-"
    assert.error_matches(function() cupola.mempool.import(t:format(other, 0, 1)) end,
      "exported by a process using the " .. other .. " backend")
    assert.error_matches(function() cupola.mempool.import(t:format(cupola.backend(), 63, 1)) end,
      "exported from device 63, which this process does not have")
    local mp <close> = shareable()
    assert.error_matches(function() cupola.mempool.import(mp:export()) end,
      "comes from this very process")
    local b <close> = cupola.malloc(64)
    assert.error_matches(function() cupola.buffer.import(b:export()) end, "comes from this very process")
    assert.error_matches(function() cupola.buffer.import(mp, b:export()) end, "a cupola export of a malloc, not of a block")
  end)

  it("a pool export nobody serves is stale", function()
    local t = ("cupola-ipc/1;kind=pool;backend=%s;device=0;size=0;pid=1;nonce=0123456789abcdef;socket=cupola-1-nobody;data=-")
      :format(cupola.backend())
    assert.error_matches(function() cupola.mempool.import(t) end, "the export is stale")
  end)

  it("what cannot be exported says why", function()
    local mp <close> = cupola.mempool {}
    assert.error_matches(function() mp:export() end, "not created shareable")
    local b = mp:alloc(256)
    assert.error_matches(function() b:export() end, "its pool was not created shareable")
    b:free()
    local a = cupola.malloc_async(256)
    assert.error_matches(function() a:export() end, "not one from malloc_async")
    a:free()
    local p <close> = cupola.pool {}
    local c = p:alloc(256)
    assert.error_matches(function() c:export() end, "not one from a cupola.Pool")
    c:free()
    local h <close> = cupola.mempool { location = "host" }
    assert.error_matches(function() cupola.mempool { location = "host", handle = "posix_fd" } end,
      "cannot be exported")
  end)
end)
