-- cupola.advise on a JAX memory profile (lua/cupola/advise/jax.lua): rows for
-- growth and preallocation, the least memory each needs, that as
-- XLA_CLIENT_MEM_FRACTION of --device-memory, and the line to paste; held to
-- what JAX itself did under those settings (examples/traces/jax).
local cupola = require "cupola"
local advise = require "cupola.advise"

local H100 = 85018542080 -- bytes, as the recordings' device reported them

describe("cupola.advise on a JAX profile", function()
  local stats = dofile "examples/traces/jax/memory_stats.lua"

  it("rows for growth and preallocation, each with its least memory, and the fraction to paste", function()
    local r = advise.run("examples/traces/jax/mlp.grow.jsonl.gz", { device_memory = H100, progress = false })
    assert.equals("jax", r.framework)
    local by = {}
    for _, row in ipairs(r.rows) do by[row.family] = row end
    assert.is_truthy(by.growth and by.preallocated and by.fraction)
    -- growth under JAX's default limit: the recording's own setting, BFC's figures
    assert.equals(stats["mlp.grow"].peak_pool_bytes, by.growth.peak_reserved)
    assert.equals(stats["mlp.grow"].peak_bytes_in_use, by.growth.peak_allocated)
    -- preallocated: JAX ran out at 0.00320 (260 MiB) and ran at 0.00360 (292 MiB)
    local need = by.preallocated.min_memory
    assert.is_true(need > stats["mlp.pre-0.00320"].bytes_limit)
    assert.is_true(need <= stats["mlp.pre-0.00360"].bytes_limit)
    -- the fraction's limit holds the least memory and runs
    local f = by.fraction
    assert.is_true(f.fraction_limit >= need)
    assert.is_true(f.fits ~= false and f.complete)
    assert.equals(f.fraction_limit, f.peak_reserved)
    assert.matches("^XLA_CLIENT_MEM_FRACTION=0%.00%d+ python train.py$", advise.module("jax").paste(f))
    assert.equals("XLA_PYTHON_CLIENT_PREALLOCATE=false python train.py", advise.module("jax").paste(by.growth))
    local text = advise.text(r, 100)
    assert.matches("XLA's compiler picks algorithms", text, 1, true)
  end)

  it("without the device's memory: the rows, no fraction, and a warning saying what to give", function()
    local r = advise.run("examples/traces/jax/tiny.grow.jsonl.gz", { progress = false })
    local warned = false
    for _, w in ipairs(r.warnings) do warned = warned or w:find("--device-memory", 1, true) ~= nil end
    assert.is_true(warned)
    for _, row in ipairs(r.rows) do assert.is_nil(row.fraction) end
  end)

  it("refuses PyTorch's settings for a JAX profile, naming them", function()
    local ok, err = pcall(advise.run, "examples/traces/jax/tiny.grow.jsonl.gz",
      { conf = "expandable_segments:True", progress = false })
    assert.is_false(ok)
    assert.matches("PYTORCH_CUDA_ALLOC_CONF", err)
    ok, err = pcall(advise.run, "examples/traces/jax/tiny.grow.jsonl.gz", { device_memory = "lots", progress = false })
    assert.is_false(ok)
    assert.matches("option 'device_memory'", err)
  end)

  it("the fraction: the least of three significant digits whose 2 MiB-rounded limit holds the need", function()
    local fraction_for = advise.module("jax").fraction_for
    local f, limit = fraction_for(276824064, H100)
    assert.equals(0.00326, f)
    assert.is_true(limit >= 276824064)
    assert.equals(0, limit % (2 * 1024 * 1024))
    assert.is_nil(fraction_for(H100 + 1, H100))
  end)
end)
