-- spec/steady_calls_spec.lua: what sets a pool's step time inside PyTorch
-- (issue 34; bench/results/torch_step.md).  Once warm, a training step that
-- repeats must make no upstream call (a cudaMalloc, or a cudaFree that waits
-- for the whole device, in the middle of a step).  A trace replayed twice
-- through one pool: the second pass is every step after the first.
local cupola = require "cupola"

-- upstream calls in a second pass over the trace, through a warm pool
local function warm_calls(name, opts)
  local t <close> = cupola.trace.load(name)
  opts.upstream = "virtual"
  local p <close> = cupola.pool(opts)
  t:replay(p, { clock = "trace", progress = false })
  local r = t:replay(p, { clock = "trace", progress = false })
  return r.device_allocs + r.device_frees, r
end

describe("a warm pool's upstream calls (step time inside PyTorch)", function()
  it("vmm makes none on fixed-shape training: it remaps its cached pages", function()
    for _, name in ipairs { "gpt2_train", "resnet50_train" } do
      local n, r = warm_calls(name, { kind = "vmm" })
      assert.equals(0, n, name)
      assert.equals(0, r.maps, name)
    end
  end)

  it("tlsf with release_threshold above what it holds makes none either", function()
    for _, name in ipairs { "gpt2_train", "resnet50_train" } do
      assert.equals(0, (warm_calls(name, { kind = "tlsf", release_threshold = "1TiB" })), name)
    end
  end)

  it("tlsf and caching as advise names them return and retake chunks every step (why advise must not recommend them to PyTorch users as they are)", function()
    for _, kind in ipairs { "tlsf", "caching" } do
      for _, name in ipairs { "gpt2_train", "resnet50_train" } do
        local n = warm_calls(name, { kind = kind })
        assert.is_true(n >= 3 * 6, ("%s on %s: %d calls in 3 steps"):format(kind, name, n))
      end
    end
  end)
end)
