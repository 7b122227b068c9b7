-- cupola.pool_kinds(): the registry of pool kinds (src/core/pool/model.h) as
-- Lua sees it, and a pool spec string read into cupola.pool's options
-- through it (util.pool_spec, as advise's page replays its rows).
local cupola = require "cupola"
local util = require "cupola.util"

describe("cupola.pool_kinds()", function()
  it("lists every kind in the order cupola.pool names them, each also by name", function()
    local kinds = cupola.pool_kinds()
    local names = {}
    for i, k in ipairs(kinds) do
      names[i] = k.name
      assert.equals(k, kinds[k.name])
    end
    local ok, err = pcall(cupola.pool, { kind = "nosuch" })
    assert.is_false(ok)
    assert.matches("must be one of " .. table.concat(names, ", ") .. ", not 'nosuch'", err, 1, true)
  end)

  it("gives each kind's traits: the frameworks' models on their own clock, with recorded addresses", function()
    local kinds = cupola.pool_kinds()
    for _, k in ipairs(kinds) do
      local framework = k.name == "torch" or k.name == "bfc" or k.name == "cupy"
      assert.equals(framework, k.own_clock, k.name)
      assert.equals(framework, k.recorded_addresses, k.name)
      assert.equals(k.name == "freelist" or k.name == "tlsf" or k.name == "caching", k.keeps_idle, k.name)
      assert.equals(k.name ~= "plugin", k.spec, k.name)
    end
  end)

  it("gives each kind's options as cupola.pool reads them, defaults included", function()
    local function opts(kind)
      local t = {}
      for _, o in ipairs(cupola.pool_kinds()[kind].options) do t[o.name] = o end
      return t
    end
    local cub, torch, bfc = opts "cub", opts "torch", opts "bfc"
    assert.same({ name = "bin_growth", type = "integer", default = 8, spec = true, common = false }, cub.bin_growth)
    assert.equals(6291455, cub.max_cached_bytes.default)
    assert.same({ "device", "async", "managed", "pinned", "virtual" }, cub.upstream.choices)
    assert.equals("device", cub.upstream.default)
    assert.is_true(cub.upstream.common)
    assert.equals("string", torch.conf.type)
    assert.is_nil(torch.initial, "torch refuses initial: not among its options")
    assert.is_nil(bfc.max)
    assert.is_nil(bfc.spatial_partitioning.default, "bfc decides (partitioned when preallocated)")
    assert.equals("number", bfc.fragmentation_fraction.type)
    assert.is_false(opts("tlsf").clock.spec, "a spec does not take clock")
    -- a fresh table each call: changing one changes nothing else
    cupola.pool_kinds().tlsf.options = nil
    assert.is_table(cupola.pool_kinds().tlsf.options)
  end)
end)

describe("a pool spec read into cupola.pool's options (util.pool_spec)", function()
  it("keeps a value in double quotes whole, commas included", function()
    local o = util.pool_spec 'torch, conf = "expandable_segments:True,max_split_size_mb:128" ,upstream=virtual'
    assert.same({ kind = "torch", conf = "expandable_segments:True,max_split_size_mb:128", upstream = "virtual" }, o)
    local p <close> = cupola.pool(o)
    assert.equals("expandable_segments:True,max_split_size_mb:128", p.conf)
    assert.equals("expandable_segments:True,max_split_size_mb:128", p:settings().PYTORCH_CUDA_ALLOC_CONF)
  end)

  it("reads booleans, integers and numbers as the kind's options are typed", function()
    assert.same({ kind = "bfc", memory_limit = "1GiB", allow_growth = true, fragmentation_fraction = 0.25 },
      util.pool_spec "bfc,memory_limit=1GiB,allow_growth=true,fragmentation_fraction=0.25")
    -- a string option keeps "true" as text; an unknown kind leaves everything text
    assert.same({ kind = "torch", conf = "true" }, util.pool_spec "torch,conf=true")
    assert.same({ kind = "nosuch", grow = "false" }, util.pool_spec "nosuch,grow=false")
  end)
end)
