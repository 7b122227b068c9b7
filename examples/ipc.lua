-- Two processes share GPU memory: the parent exports a native pool (its
-- POSIX file descriptor travels over a Unix socket), a buffer of it and a
-- cupola.malloc buffer (CUDA's legacy IPC handle); a child process started
-- from here imports them, checks what the parent wrote and writes back; the
-- parent checks what the child wrote.
--   bin/cupola examples/ipc.lua
local cupola = cupola or require "cupola"
local K = cupola.kernels

if arg and arg[1] == "child" then
  -- the child: arg[2] the pool, arg[3] its buffer, arg[4] the malloc buffer
  local pool = cupola.mempool.import(arg[2])
  local b = cupola.buffer.import(pool, arg[3])
  local m = cupola.buffer.import(arg[4])
  local seen = K.checksum(b, { type = "u8" })
  K.fill(b, 0x5a, { type = "u8" })          -- a kernel writes the parent's buffer
  local text = m:read(0, 12)
  m:write("child says hi")
  cupola.synchronize()
  io.write(string.format("child: pool buffer sum %d, malloc buffer '%s'\n", seen, text))
  b:free(); m:free(); cupola.synchronize(); pool:close()
  return
end

local MiB = 1024 * 1024
local pool <close> = cupola.mempool { handle = "posix_fd" }
local b = pool:alloc(4 * MiB)
K.fill(b, 1, { type = "u8" })
local m = cupola.malloc(4096)
m:write("parent hello")
cupola.synchronize()

-- the child runs the same interpreter and module paths as this process
local lua = os.getenv "CUPOLA_LUA" or "lua5.4"
local script = (arg and arg[0]) or "examples/ipc.lua"
local cmd = string.format("LUA_PATH=%q LUA_CPATH=%q %s %s child %q %q %q",
  package.path, package.cpath, lua, script, pool:export(), b:export(), m:export())
local t0 = cupola.clock()
local child = assert(io.popen(cmd))
local out = child:read "a"
local ok = child:close()
local ms = (cupola.clock() - t0) * 1e3
io.write(out)
if not ok then error("the child process failed") end

local sum = K.checksum(b, { type = "u8" })
local text = m:read(0, 13)
print(string.format("ipc on backend %s: child started and done in %.0f ms", cupola.backend(), ms))
print(string.format("parent sees the child's writes: pool buffer sum %d (expected %d), malloc buffer '%s'",
  sum, 0x5a * 4 * MiB, text))
assert(sum == 0x5a * 4 * MiB and text == "child says hi", "the child's writes did not arrive")
assert(out:find("pool buffer sum " .. 4 * MiB, 1, true), "the child did not see the parent's data")
print("ipc: ok")
b:free(); m:free()
return { ok = true, ms = ms }
