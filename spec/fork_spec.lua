-- fork() after cupola started: in the child every call that would
-- block on a stream worker (which does not exist there) or touch the device
-- raises a clear error instead of hanging; the child can exit (its handles'
-- finalizers and cupola's destructors do not wait for the parent's threads);
-- the parent is unaffected.  fork comes from a test-only C module
-- (tests/c/lua_testposix.c, built by make), run in a child process of busted.
local cupola = require "cupola"
local run_child = require "spec.support.child"

local TESTMOD = package.searchpath("cupola_testposix",
  "build/testmod/?.so;build-asan/testmod/?.so;build-vg/testmod/?.so")

local function it_fork(name, fn)
  if not run_child.available then
    pending(name .. " (no child processes here)")
  elseif not TESTMOD then
    pending(name .. " (needs the test-only module cupola_testposix: make builds it)")
  else
    -- #fork: compute-sanitizer follows a forked child and the child, which
    -- must not touch CUDA, then waits on the tool for ever (bench/gpu-check.sh
    -- leaves these cases out of its sanitizer runs)
    it(name .. " #fork", fn)
  end
end

local SCRIPT = [[
local posix = package.loadlib(%q, "luaopen_cupola_testposix")()
local cupola = require "cupola"
local function out(...) io.write(table.concat({ ... }, "\t"), "\n") io.stdout:flush() end
-- start everything: streams (workers), a kernel, a native pool, a custom pool
local s = cupola.stream()
local b = cupola.malloc(4096)
b:memset(1, s)
s:synchronize()
local m = cupola.module { name = "forked.cu", source = [=[
extern "C" __global__ void set(int *x, int v) { x[threadIdx.x] = v; }
]=] }
local k = m:kernel("set", { "ptr", "i32" })
k:launch({ grid = 1, block = 32, stream = s }, b, 4)
s:synchronize()
local p = cupola.pool { kind = "freelist", upstream = "device", initial = 1 << 20 }
local vp = cupola.pool { kind = "arena", upstream = "virtual", initial = 1 << 20 }
-- keep a worker busy while forking, so its lock is likely taken at fork time
k:launch({ grid = 64, block = 32, stream = s }, b, 5)
local pid = posix.fork()
if pid == 0 then
  posix.alarm(60) -- a hang kills the child with SIGALRM, which the parent sees
  local function try(name, f, ...)
    local ok, err = pcall(f, ...)
    out("child", name, tostring(ok), tostring(err))
  end
  try("synchronize", cupola.synchronize)
  try("stream:synchronize", s.synchronize, s)
  try("stream", cupola.stream)
  try("malloc", cupola.malloc, 1024)
  try("memset", b.memset, b, 0)
  try("read", b.read, b, 0, 4)
  try("launch", k.launch, k, { grid = 1, block = 32, stream = s }, b, 6)
  try("pool:alloc", p.alloc, p, 4 << 20) -- more than it holds: the upstream is asked
  try("event", function() local e = cupola.event() e:record(s) e:synchronize() end)
  -- a pool over the virtual upstream never touches the device: it still works
  local vb = vp:alloc(256)
  out("child", "virtual", tostring(vb ~= nil))
  -- exit closing the state: every handle's finalizer runs, then the
  -- destructors; none may wait for the parent's threads
  os.exit(7, true)
end
local how, code = posix.wait(pid)
out("parent", "child", how, tostring(code))
-- the parent goes on as before
k:launch({ grid = 2, block = 32, stream = s }, b, 9)
s:synchronize()
out("parent", "value", tostring(string.unpack("i4", b:read(0, 4))))
local s2 = cupola.stream()
local b2 = p:alloc(256, s2)
b2:memset(3, s2)
s2:synchronize()
out("parent", "pool", tostring(b2:read(0, 1):byte()))
]]

describe("fork() after cupola started", function()
  it_fork("the child gets a clear error from every call, exits cleanly; the parent goes on", function()
    local code, o, e = run_child(string.format(SCRIPT, TESTMOD))
    assert.equals(0, code, o .. e)
    for _, what in ipairs { "synchronize", "stream:synchronize", "stream", "malloc", "memset",
                            "read", "launch", "pool:alloc", "event" } do
      local line = o:match("child\t" .. what:gsub("%p", "%%%0") .. "\t[^\n]*")
      assert.is_truthy(line, what .. " missing in:\n" .. o .. e)
      assert.matches("\tfalse\t", line, 1, true)
      assert.matches("cupola cannot be used in a child process created by fork%(%) after cupola started",
        line)
    end
    assert.matches("child\tvirtual\ttrue", o, 1, true)
    -- Under LeakSanitizer the child's exit reports what it cannot free (the
    -- parent's streams and workers' memory, by design) and exits with 1.
    -- Likewise under valgrind (make test-valgrind): definite leaks exit 99.
    if (os.getenv "LD_PRELOAD" or ""):find("asan", 1, true) and o:find("parent\tchild\texit\t1", 1, true) then
      assert.matches("LeakSanitizer", e, 1, true)
    elseif (os.getenv "CUPOLA_CHILD_WRAP" or ""):find("valgrind", 1, true) and
        o:find("parent\tchild\texit\t99", 1, true) then
      assert.matches("definitely lost", e, 1, true)
    else
      assert.matches("parent\tchild\texit\t7", o, 1, true)
    end
    assert.matches("parent\tvalue\t9", o, 1, true)
    assert.matches("parent\tpool\t3", o, 1, true)
  end)
end)
