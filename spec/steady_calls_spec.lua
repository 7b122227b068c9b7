-- spec/steady_calls_spec.lua: what sets a pool's step time inside PyTorch
-- (issue 34; bench/results/torch_step.md).  Once warm, a training step that
-- repeats must make no upstream call (a cudaMalloc, or a cudaFree that waits
-- for the whole device, in the middle of a step).  A trace replayed twice
-- through one pool: the second pass is every step after the first.  The
-- pools as libcupola_torch.so serves them: the spec's options with the
-- serving policy (src/core/pool/spec.c, cp_pool_spec_serve), which
-- core.trace.serving applies from Lua and cupola advise applies to its
-- CUPOLA_TORCH_POOL rows.
local cupola = require "cupola"
local core = require "cupola.core"

-- upstream calls in a second pass over the trace, through a warm pool;
-- and the first pass's result (what advise reports) and the pool's stats
local function warm_calls(name, opts, serving)
  local t <close> = cupola.trace.load(name)
  opts.upstream = "virtual"
  if serving then core.trace.serving(opts) end
  local p <close> = cupola.pool(opts)
  local first = t:replay(p, { clock = "trace", progress = false })
  local r = t:replay(p, { clock = "trace", progress = false })
  return r.device_allocs + r.device_frees, r, first, p:stats()
end

describe("a warm pool's upstream calls (step time inside PyTorch)", function()
  it("the serving policy: tlsf, caching and freelist keep every idle chunk unless the spec sets release_threshold; vmm, arena and cub keep their own rules", function()
    local keep = math.maxinteger
    assert.equals(keep, core.trace.serving({ kind = "tlsf" }).release_threshold)
    assert.equals(keep, core.trace.serving({ kind = "caching" }).release_threshold)
    assert.equals(keep, core.trace.serving({ kind = "freelist" }).release_threshold)
    assert.equals(0, core.trace.serving({ kind = "tlsf", release_threshold = 0 }).release_threshold)
    assert.equals("1GiB", core.trace.serving({ kind = "caching", release_threshold = "1GiB" }).release_threshold)
    for _, kind in ipairs { "vmm", "arena", "cub" } do
      assert.is_nil(core.trace.serving({ kind = kind }).release_threshold, kind)
    end
    assert.has_error(function() core.trace.serving({}) end)
    assert.has_error(function() core.trace.serving("tlsf") end)
  end)

  it("tlsf and caching as the library serves them make none on the shipped training traces, and advise's peak (one pass) is what the pool holds after two", function()
    for _, kind in ipairs { "tlsf", "caching" } do
      for _, name in ipairs { "gpt2_train", "resnet50_train", "t5_train_varlen", "mixtral_moe_train",
                              "convnext_multires_train" } do
        local n, _, first, st = warm_calls(name, { kind = kind }, true)
        assert.equals(0, n, kind .. " on " .. name)
        assert.equals(first.peak_reserved, st.reserved_peak, kind .. " on " .. name)
      end
    end
  end)

  it("their peaks on the shipped traces (bench/steady_calls.lua): the price of keeping what is taken", function()
    local MiB = 2 ^ 20
    local want = {
      gpt2_train = { tlsf = 8432, caching = 8462 },
      resnet50_train = { tlsf = 6574, caching = 6700 },
      mixtral_moe_train = { tlsf = 6784, caching = 6844 },
    }
    for name, w in pairs(want) do
      for kind, mib in pairs(w) do
        local _, _, first = warm_calls(name, { kind = kind }, true)
        assert.equals(mib, first.peak_reserved / MiB, kind .. " on " .. name)
      end
    end
  end)

  it("cupola advise reports the pool as the library serves it: its CUPOLA_TORCH_POOL=tlsf row is the served replay", function()
    local res = cupola.advise("gpt2_train", { pools = { "tlsf", "tlsf,release_threshold=0" }, progress = false })
    local rows = {}
    for _, r in ipairs(res.rows) do rows[r.setting] = r end
    local served, before = rows["CUPOLA_TORCH_POOL=tlsf"], rows["CUPOLA_TORCH_POOL=tlsf,release_threshold=0"]
    local _, _, first = warm_calls("gpt2_train", { kind = "tlsf" }, true)
    assert.equals(first.peak_reserved, served.peak_reserved)
    assert.equals(8432 * 2 ^ 20, served.peak_reserved)
    assert.equals(0, served.device_frees)
    assert.equals(7906 * 2 ^ 20, before.peak_reserved)
    assert.is_true(before.device_frees > 0)
  end)

  it("vmm makes none on fixed-shape training: it remaps its cached pages", function()
    for _, name in ipairs { "gpt2_train", "resnet50_train" } do
      local n, r = warm_calls(name, { kind = "vmm" }, true)
      assert.equals(0, n, name)
      assert.equals(0, r.maps, name)
    end
  end)

  it("tlsf and caching made from Lua (release_threshold = 0) return and retake chunks every step: the cause of the step-time gap, and why the library serves them otherwise", function()
    for _, kind in ipairs { "tlsf", "caching" } do
      for _, name in ipairs { "gpt2_train", "resnet50_train" } do
        local n = warm_calls(name, { kind = kind })
        assert.is_true(n >= 3 * 6, ("%s on %s: %d calls in 3 steps"):format(kind, name, n))
        local n0 = warm_calls(name, { kind = kind, release_threshold = 0 }, true)
        assert.equals(n, n0, kind .. " on " .. name .. ": a spec that sets release_threshold keeps it")
      end
    end
  end)
end)
