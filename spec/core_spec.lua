-- The module itself: loading, backend choice, sizes, device description.
local cupola = require "cupola"

describe("cupola", function()
  it("loads with a backend and describes the device", function()
    assert.is_true(cupola.backend() == "cuda" or cupola.backend() == "host")
    local d = cupola.device()
    assert.is_string(d.name)
    assert.is_true(d.memory > 0)
    assert.is_true(d.sms >= 1)
    assert.matches("^%d+%.%d+$", d.cc)
    assert.is_boolean(d.mempools)
    assert.equals(cupola.backend(), d.backend)
    if cupola.backend() == "host" then
      assert.equals("host", d.name)
      assert.is_true(d.mempools)
    end
  end)

  it("honours CUPOLA_BACKEND=host and rejects unknown backends", function()
    local lua = "CUPOLA_BACKEND=host lua5.4 -e 'package.path=\"lua/?.lua;lua/?/init.lua;\"..package.path; package.cpath=\"build/?.so;\"..package.cpath; print(require(\"cupola\").backend())'"
    local p = io.popen(lua .. " 2>&1")
    assert.equals("host\n", p:read "a")
    p:close()
    local bad = "CUPOLA_BACKEND=tpu lua5.4 -e 'package.path=\"lua/?.lua;lua/?/init.lua;\"..package.path; package.cpath=\"build/?.so;\"..package.cpath; require(\"cupola\")'"
    p = io.popen(bad .. " 2>&1")
    assert.matches("CUPOLA_BACKEND must be 'cuda' or 'host'", p:read "a")
    p:close()
  end)

  it("gives CUPOLA_BACKEND=cuda where a device exists, and refuses it, saying why, elsewhere", function()
    local cmd = "CUPOLA_BACKEND=cuda lua5.4 -e 'package.path=\"lua/?.lua;lua/?/init.lua;\"..package.path; package.cpath=\"build/?.so;\"..package.cpath; print(require(\"cupola\").backend())' 2>&1"
    local p = io.popen(cmd)
    local out = p:read "a"
    p:close()
    if out ~= "cuda\n" then
      assert.matches("CUPOLA_BACKEND=cuda, but no CUDA device is usable: %S+", out)
    end
  end)

  describe("bytes", function()
    it("parses binary units", function()
      assert.equals(4194304, cupola.bytes "4MiB")
      assert.equals(256, cupola.bytes "256B")
      assert.equals(65536, cupola.bytes "64KiB")
      assert.equals(1073741824, cupola.bytes "1GiB")
      assert.equals(4096, cupola.bytes "4096")
      assert.equals(4096, cupola.bytes(4096))
      assert.equals(1536, cupola.bytes "1.5KiB")
      assert.equals(4194304, cupola.bytes "4 MiB")
    end)
    it("rejects negative, fractional and malformed sizes", function()
      assert.has_error(function() cupola.bytes(-1) end, "bad argument #1 to 'bytes' (size must not be negative, got -1)")
      assert.error_matches(function() cupola.bytes(1.5) end, "whole number of bytes")
      assert.error_matches(function() cupola.bytes "4MB" end, "malformed size '4MB'")
      assert.error_matches(function() cupola.bytes "-4MiB" end, "size must not be negative, got '%-4MiB'")
      assert.error_matches(function() cupola.bytes "1.1B" end, "malformed size")
      assert.error_matches(function() cupola.bytes {} end, "size %(integer or string")
      assert.error_matches(function() cupola.bytes "" end, "malformed size")
    end)
  end)

  it("has a monotonic clock", function()
    local a = cupola.clock()
    local b = cupola.clock()
    assert.is_true(b >= a)
  end)

  it("formats reports", function()
    assert.equals("4.00 MiB", cupola.report.bytes(4194304))
    assert.equals("12 B", cupola.report.bytes(12))
    local t = cupola.report.table({ "name", "n" }, { { "a", 1 }, { "bbb", 22 } })
    assert.equals("name   n\n----  --\na      1\nbbb   22", t)
  end)
end)
