--- cupola.advise.jax: what cupola.advise knows of JAX (the framework module
-- of JAX memory profiles, t.format "jax_memory"; the interface is at the
-- top of lua/cupola/advise/modules.lua).  Its rows: XLA's BFC allocator (pool kind
-- "bfc", exact against JAX 0.11.2's recordings) under JAX's two settings:
--
--   growth        XLA_PYTHON_CLIENT_PREALLOCATE=false: regions of 2 MiB that
--                 double, up to JAX's default limit (0.75 of the device)
--   preallocated  JAX's default, the pool taken whole at the first
--                 allocation: the least limit the recorded requests fit in
--                 (a search), as XLA_CLIENT_MEM_FRACTION for the device
--
-- Each with its pool at the peak, the peak in use (BFC's chunk bytes) and
-- the least memory_limit under which every recorded request is served.  The
-- fraction is of --device-memory (option device_memory): a JSON lines file
-- says nothing of the device, so without it no fraction is given.  The
-- fraction is rounded up to three significant digits, and JAX 0.11.2 rounds
-- the limit it makes of a fraction up to 2 MiB (bfc.c): the row "at the
-- fraction" replays that limit to show it fits.  The caveat, always: XLA's
-- compiler chooses algorithms (convolution workspaces, rematerialization)
-- by the memory it has, so a run under less memory may ask for less, and
-- one under more for more, than the recording.
local util = require "cupola.util"
local report = require "cupola.report"
local raise = util.raise

local jax = {
  name = "jax",
  formats = { "jax_memory" },
  via = "XLA_CLIENT_MEM_FRACTION",
  json_fields = { "device_memory", "peak_live", "bfc_peak_bytes_in_use" },
  -- the device's memory, of which JAX's fractions are
  options = {
    { key = "device_memory", flag = "--device-memory", arg = "SIZE", type = "size", example = "80GiB",
      help = "the device's memory",
      use = "JAX: XLA_CLIENT_MEM_FRACTION is a fraction of it; default: what the profile says of it, where it does" },
  },
  reads = {
    "a JAX memory profile (jax.profiler.trace's *.xplane.pb or its directory) or JSON lines of its " ..
      "MemoryAllocation/MemoryDeallocation events: the file is neither",
  },
  usage = {
    reads = { "a JAX memory profile (jax.profiler.trace: the *.xplane.pb, its directory, or JSON lines " ..
      "of its memory events; docs/API.md): XLA's BFC allocator with growth and preallocated, and " ..
      "XLA_CLIENT_MEM_FRACTION for --device-memory" },
    example = "XLA_CLIENT_MEM_FRACTION=0.16 python train.py",
  },
  terms = {
    calls = "device calls: the regions BFC asked the device for (cudaMalloc)",
  },
}

local bytes = report.bytes
local MiB = 1024 * 1024
-- JAX's default memory fraction, and the limit of the unlimited replays
-- where the device's memory is not known
local DEFAULT_FRACTION = 0.75
local UNKNOWN_DEVICE = 1 << 46

function jax.title(info)
  return "JAX memory profile (" .. (info.allocator or "GPU_0_bfc") .. ")"
end

--- jax.check(o): the settings of PyTorch's module are not JAX's.
function jax.check(o)
  if #o.conf > 0 or o.recorded then
    raise("cupola.advise: options 'conf' and 'recorded' are PyTorch's (PYTORCH_CUDA_ALLOC_CONF); a JAX " ..
      "profile's settings are growth and XLA_CLIENT_MEM_FRACTION, which cupola advise tries itself")
  end
  if o.pools_given then
    raise("cupola.advise: option 'pools': a JAX profile gets no rows of cupola's pools (none serves JAX's " ..
      "allocations): XLA's BFC allocator under growth and XLA_CLIENT_MEM_FRACTION only")
  end
end

function jax.setup(ctx)
  local o, result, info = ctx.o, ctx.result, ctx.info
  ctx.device_memory = o.device_memory
  result.device_memory = o.device_memory
  result.peak_live = info.peak_live
  result.bfc_peak_bytes_in_use = info.bfc_peak_bytes_in_use
  -- the least memory is the point of the advice: always searched
  o.search = true
  if not ctx.device_memory then
    result.warnings[#result.warnings + 1] = "the device's memory is unknown (JSON lines do not say it), and " ..
      "JAX's default preallocates 75 % of it: give --device-memory SIZE (option device_memory) for its size " ..
      "and for XLA_CLIENT_MEM_FRACTION"
  end
  if info.unmatched and info.unmatched > 0 then
    result.warnings[#result.warnings + 1] = ("%d frees of blocks allocated before the profile began were " ..
      "skipped: the replays start from an empty pool"):format(info.unmatched)
  end
end

local function limit_cap(ctx)
  local dm = ctx.device_memory
  return dm and math.floor(dm * DEFAULT_FRACTION) or UNKNOWN_DEVICE
end

function jax.rows(ctx)
  local cap = limit_cap(ctx)
  return {
    { setting = "XLA_PYTHON_CLIENT_PREALLOCATE=false", family = "growth", keys = 1,
      via = "XLA_PYTHON_CLIENT_PREALLOCATE", kind = "bfc", growth = true,
      job = { spec = ("bfc,memory_limit=%d,allow_growth=true"):format(cap) },
      pool = { kind = "bfc", memory_limit = cap, allow_growth = true } },
    { setting = "preallocated", family = "preallocated", keys = 1, via = "XLA_CLIENT_MEM_FRACTION",
      kind = "bfc", growth = false,
      job = { spec = ("bfc,memory_limit=%d,allow_growth=false"):format(cap) },
      pool = { kind = "bfc", memory_limit = cap, allow_growth = false } },
  }
end

--- The fraction for a limit: the least of three significant digits whose
-- limit (the product rounded up to 2 MiB, as JAX 0.11.2 made it) holds it.
local function fraction_for(need, dm)
  local f = need / dm
  if f >= 1 then return nil end
  local scale = 10 ^ (2 - math.floor(math.log(f, 10)))
  local fr = math.ceil(f * scale - 1e-9) / scale
  return fr, ((math.floor(dm * fr) + 2 * MiB - 1) // (2 * MiB)) * (2 * MiB)
end
jax.fraction_for = fraction_for

--- jax.fill(r, x, ctx): the fraction of each row's least memory.
function jax.fill(r, x, ctx)
  local dm = ctx.device_memory
  if not r.growth and x.peak_allocated then
    -- preallocated: the pool is the limit; the row's pool at the peak is
    -- the least limit that runs (the search), not the unlimited replay's
    r.pool_at_peak = r.min_memory
  else
    r.pool_at_peak = x.peak_reserved
  end
  -- the fraction's own row keeps the fraction it replays
  local need = r.min_memory or x.min_limit
  if r.family ~= "fraction" and need and dm then r.fraction, r.fraction_limit = fraction_for(need, dm) end
  -- JAX's default takes 0.75 of a device of unknown size: no figure to show
  if not r.growth and not dm and not ctx.limited then r.reserved_text = "75 % of GPU" end
end

--- jax.more(ctx, rows): the preallocated pool at the fraction advised,
-- replayed at the limit JAX would make of it.
function jax.more(ctx, rows)
  local pre
  for _, r in ipairs(rows) do if not r.growth then pre = r end end
  if not (pre and pre.fraction and pre.fraction_limit) then return {} end
  return {
    { setting = ("XLA_CLIENT_MEM_FRACTION=%s"):format(pre.fraction_text or tostring(pre.fraction)),
      family = "fraction", keys = 1, via = "XLA_CLIENT_MEM_FRACTION", kind = "bfc", growth = false,
      fraction = pre.fraction, fraction_limit = pre.fraction_limit,
      job = { spec = ("bfc,memory_limit=%d,allow_growth=false"):format(pre.fraction_limit) },
      pool = { kind = "bfc", memory_limit = pre.fraction_limit, allow_growth = false } },
  }
end

function jax.describe(r)
  if r.family == "growth" then return "growth (XLA_PYTHON_CLIENT_PREALLOCATE=false)" end
  if r.family == "fraction" then return ("preallocated, XLA_CLIENT_MEM_FRACTION=%g"):format(r.fraction) end
  return "preallocated (JAX's default)"
end

local function ftext(f)
  local s = ("%.6f"):format(f):gsub("0+$", ""):gsub("%.$", "")
  return s
end

function jax.paste(r, ctx)
  if r.family == "growth" then return "XLA_PYTHON_CLIENT_PREALLOCATE=false python train.py" end
  if r.fraction then
    local s = ("XLA_CLIENT_MEM_FRACTION=%s python train.py"):format(ftext(r.fraction))
    -- JAX's default row: the fraction is the least that runs it (the fraction's row)
    if r.family == "preallocated" and r.fraction_limit then
      return s, ("preallocated at the least fraction that runs it: a pool of %s"):format(bytes(r.fraction_limit))
    end
    return s
  end
  if ctx and ctx.device_memory then
    return "python train.py", ("no fraction of the device's %s runs it"):format(bytes(ctx.device_memory))
  end
  return "python train.py", "give --device-memory SIZE for the fraction to set"
end

--- jax.summary(res) -> lines for the head of the text report.
function jax.summary(d)
  local lines = {}
  if d.bfc_peak_bytes_in_use then
    lines[#lines + 1] = ("JAX's own peak_bytes_in_use in the profile: %s"):format(bytes(d.bfc_peak_bytes_in_use))
  end
  if d.device_memory then
    lines[#lines + 1] = ("device memory: %s (XLA_CLIENT_MEM_FRACTION is of it)"):format(bytes(d.device_memory))
  end
  return lines
end

function jax.notes(result, ctx)
  local N = result.notes
  N[#N + 1] = "XLA's compiler picks algorithms (convolution workspaces, rematerialization) by the memory it " ..
    "has: a run under less memory may ask for less than this recording, and one under more for more."
  N[#N + 1] = "Growth (XLA_PYTHON_CLIENT_PREALLOCATE=false) keeps regions it no longer needs: its pool at " ..
    "the peak is what it held; preallocated, the pool is the limit, taken at the first allocation."
  if ctx and ctx.device_memory then
    N[#N + 1] = "JAX 0.11.2 rounds the limit of a fraction up to a multiple of 2 MiB; the fraction's row " ..
      "replays that limit."
  end
end

return jax
