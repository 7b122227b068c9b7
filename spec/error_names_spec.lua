-- Failures that stand for CUDA failures carry the CUDA error name, worded as
-- the CUDA backend words them ("cudaErrorInvalidValue: invalid argument
-- (...)"), on either backend: a script that matches on the name behaves the
-- same with a GPU and without one.  No #gpu tag: every case must hold on both
-- backends (the kernel fault runs in a child, since on a GPU it leaves the
-- CUDA context unusable).
local cupola = require "cupola"
local run_child = require "spec.support.child"
local K = cupola.kernels

-- The head of the message: name, CUDA's text, then the explanation in
-- parentheses.  Returns the message for further checks.  (failed_cuda
-- checks what a pcall returned: raises_cuda makes the call.)
local function failed_cuda(name, text, ok, err)
  assert.is_false(ok, "expected an error carrying " .. name)
  err = tostring(err)
  local head = name .. ": " .. text .. " ("
  assert.equals(head, err:sub(1, #head), err)
  return err
end

local function raises_cuda(name, text, f, ...)
  return failed_cuda(name, text, pcall(f, ...))
end

describe("CUDA error names on " .. cupola.backend() .. " backend", function()
  it("a stream priority outside the device's range: cudaErrorInvalidValue", function()
    local err = raises_cuda("cudaErrorInvalidValue", "invalid argument", cupola.stream, { priority = 1 })
    assert.matches("priority 1", err, 1, true)
  end)

  it("the elapsed time of events never recorded: cudaErrorInvalidResourceHandle", function()
    local a <close> = cupola.event()
    local b <close> = cupola.event()
    local err = raises_cuda("cudaErrorInvalidResourceHandle", "invalid resource handle", a.elapsed, a, b)
    assert.matches("not recorded", err, 1, true)
    local s <close> = cupola.stream()
    a:record(s)
    s:synchronize()
    err = raises_cuda("cudaErrorInvalidResourceHandle", "invalid resource handle", a.elapsed, a, b)
    assert.matches("not recorded", err, 1, true)
  end)

  it("the elapsed time before the end event completed: cudaErrorNotReady", function()
    local s <close> = cupola.stream()
    local a <close> = cupola.event()
    local b <close> = cupola.event()
    a:record(s)
    local ok, msg = while_spinning(50000, function(us)
      K.spin(us, { stream = s })
      b:record(s)
      return pcall(a.elapsed, a, b) -- b has not completed yet
    end)
    local err = failed_cuda("cudaErrorNotReady", "device not ready", ok, msg)
    assert.matches("not completed", err, 1, true)
    s:synchronize()
    assert.is_true(a:elapsed(b) >= 0)
  end)

  it("a pool of host memory made the device's current pool: cudaErrorInvalidValue", function()
    local p <close> = cupola.mempool { location = "host" }
    local err = raises_cuda("cudaErrorInvalidValue", "invalid argument", cupola.mempool.set_current, p)
    assert.matches("current pool", err, 1, true)
    -- the device's pool is unchanged
    assert.is_true(cupola.mempool.current() ~= p)
  end)

  it("a pool of host memory asked to be shareable: cudaErrorInvalidValue", function()
    local err = raises_cuda("cudaErrorInvalidValue", "invalid argument", cupola.mempool,
      { location = "host", handle = "posix_fd" })
    assert.matches("cannot be exported", err, 1, true)
  end)

  -- Under valgrind the deliberate fault is a memcheck error by definition.
  local VALGRIND = (os.getenv "CUPOLA_CHILD_WRAP" or ""):find("valgrind", 1, true) ~= nil
  local it_child = (run_child.available and not VALGRIND) and it or pending
  it_child("a kernel's illegal memory access: cudaErrorIllegalAddress", function()
    local code, o, e = run_child [[
local cupola = require "cupola"
local m = cupola.module { name = "error_names.cu", source = [=[
extern "C" __global__ void wild(int *x) { volatile int *p = (volatile int *)0x10; p[threadIdx.x] = 1; }
]=] }
local s = cupola.stream()
m:kernel("wild", { "ptr" }):launch({ grid = 1, block = 32, stream = s }, 0)
local ok, err = pcall(s.synchronize, s)
io.write("sync\t", tostring(ok), "\t", tostring(err), "\n")
]]
    assert.equals(0, code, o .. e)
    local msg = o:match "sync\tfalse\t([^\n]*)"
    assert.is_truthy(msg, o .. e)
    local head = "cudaErrorIllegalAddress: an illegal memory access was encountered ("
    -- on a GPU the driver may see the fault first, at the launch call
    local driver = "CUDA_ERROR_ILLEGAL_ADDRESS: "
    assert.is_truthy(msg:sub(1, #head) == head or
      (cupola.backend() == "cuda" and msg:sub(1, #driver) == driver), msg)
    if cupola.backend() == "host" then
      assert.matches("kernel 'wild'", msg, 1, true)
    end
  end)
end)
