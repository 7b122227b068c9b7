-- What only a GPU can show: the device itself and the costs the seeds are
-- about.  Pending (not failed) on the host backend.
local cupola = require "cupola"
local K = cupola.kernels

describe("on a CUDA device", function()
  gpu_it("describes a real GPU that supports stream-ordered pools", function()
    local d = cupola.device()
    assert.are_not.equal("host", d.name)
    assert.is_true(d.mempools)
    assert.is_true(tonumber(d.cc) >= 8.0, "built for sm_80 and newer: " .. d.cc)
    assert.is_true(d.sms >= 1 and d.driver >= 12000 and d.runtime >= 12000)
    local free, total = cupola.mem_info()
    assert.is_true(free > 0 and free <= total)
  end)

  gpu_it("makes stream-ordered allocation cheaper than cudaMalloc", function()
    local s <close> = cupola.stream { blocking = true }
    local size = 4 * 1024 * 1024
    local sync = cupola.bench.device_ms(function()
      for _ = 1, 20 do
        local b = cupola.malloc(size)
        K.sqrt_index(b, { stream = s })
        b:free()
      end
    end, { stream = s, reps = 3 })
    local async = cupola.bench.device_ms(function()
      for _ = 1, 20 do
        local b = cupola.malloc_async(size, s)
        K.sqrt_index(b)
        b:free()
      end
    end, { stream = s, reps = 3 })
    -- (a measurement: under a sanitizer every API call is slowed alike)
    if not SLOW then
      assert.is_true(sync > 2 * async, string.format("malloc %.3f ms vs malloc_async %.3f ms", sync, async))
    end
  end)

  gpu_it("keeps a cudaMalloc'd buffer's bytes on the device across kernels and copies", function()
    local a <close> = cupola.malloc "64MiB"
    local b <close> = cupola.malloc "64MiB"
    K.pattern(a, 7)
    a:copy_to(b)
    assert.equals(0, K.verify(b, 7))
    assert.is_true(K.verify(b, 8) > 0)
  end)

  gpu_it("reports CUDA failures with the CUDA error name", function()
    local s <close> = cupola.stream()
    local a <close> = cupola.event()
    local b <close> = cupola.event()
    a:record(s)
    local ok, err = while_spinning(50000, function(us)
      K.spin(us, { stream = s })
      b:record(s)
      return pcall(a.elapsed, a, b) -- b has not completed yet
    end)
    assert.is_false(ok)
    assert.matches("cudaErrorNotReady", err)
    s:synchronize()
  end)
end)
