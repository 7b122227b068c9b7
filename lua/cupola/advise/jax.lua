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
-- says nothing of the device, so without it no fraction is given.  JAX
-- 0.11.2 rounds the pool it makes of a fraction up to 2 MiB (pool_of): the
-- fraction is the least of the fewest digits that gets the least pool the
-- requests fit in, and the row "at the fraction" replays that pool to show
-- it fits.  A profile that ends with blocks allocated may be of a run that
-- ran out (BFC traces no refused request): a warning says what that means
-- for the advice.  The caveat, always: XLA's
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
  json_fields = { "device_memory", "device_memory_from", "peak_live", "bfc_peak_bytes_in_use" },
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
    least = "least memory: the smallest pool (to 2 MiB) in which XLA's BFC serves every request as recorded, " ..
      "found by replaying under limits: the least for the requests as recorded, which XLA makes fewer of " ..
      "under less memory (see below)",
  },
}

local bytes = report.bytes
local MiB = 1024 * 1024
local ran_out
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
  -- the device's memory: given, else what the profile says of it (an
  -- XSpace's memory_size of the allocator's /device:GPU:<n>)
  ctx.device_memory = o.device_memory or info.device_memory
  result.device_memory = ctx.device_memory
  result.device_memory_from = o.device_memory and "--device-memory" or info.device_memory and "the profile"
  result.peak_live = info.peak_live
  result.bfc_peak_bytes_in_use = info.bfc_peak_bytes_in_use
  -- the least memory is the point of the advice: always searched
  o.search = true
  if not ctx.device_memory then
    result.warnings[#result.warnings + 1] = "the device's memory is unknown (JSON lines do not say it; the " ..
      "profile itself, *.xplane.pb, does), and JAX's default preallocates 75 % of it: the preallocated row at " ..
      "the least pool has no fraction; give --device-memory SIZE (option device_memory) for " ..
      "XLA_CLIENT_MEM_FRACTION"
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

-- jaxlib 0.11.2's pool of XLA_CLIENT_MEM_FRACTION f: the double product
-- f x the device's memory, truncated (CreateBFCAllocator), then rounded up
-- to a multiple of 2 MiB.  The rounding is not in the XLA source read (its
-- CreateBFCAllocator truncates and stops there); it is what memory_stats()
-- reported as bytes_limit on all five preallocated recordings of
-- examples/traces/jax (0.00161 -> 138,412,032: the product 136,879,852 is
-- nearer 130.5 MiB than 132, so it is rounded up, not to the nearest).
local GRAIN = 2 * MiB
local function pool_of(f, dm)
  return (math.floor(f * dm) + GRAIN - 1) // GRAIN * GRAIN
end
jax.pool_of = pool_of

--- jax.fraction_for(need, dm) -> the least fraction whose pool holds need
-- bytes, its pool, and its text: of the fewest significant digits (three or
-- more) that reach the least pool JAX can make (need rounded up to 2 MiB;
-- any fraction whose product lies within the 2 MiB below it rounds to it).
local function fraction_for(need, dm)
  local want = (need + GRAIN - 1) // GRAIN * GRAIN
  if want > dm then return nil end
  -- floor(f x dm) > want - 2 MiB: f x dm >= want - 2 MiB + 1
  local x = (want - GRAIN + 1) / dm
  for k = 3, 15 do
    local f, text = util.fraction(math.max(x, 1e-15), k, true)
    if f and f < 1 and pool_of(f, dm) >= need and pool_of(f, dm) <= want then return f, want, text end
  end
  return nil
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
  if r.family ~= "fraction" and need and dm then
    r.fraction, r.fraction_limit, r.fraction_text = fraction_for(need, dm)
  end
  -- JAX's default takes 0.75 of a device of unknown size: no figure to show
  if r.family == "preallocated" and not dm and not ctx.limited then r.reserved_text = "75 % of GPU" end
end

--- jax.more(ctx, rows): the preallocated pool at the fraction advised,
-- replayed at the limit JAX would make of it.
function jax.more(ctx, rows)
  local pre
  for _, r in ipairs(rows) do if not r.growth then pre = r end end
  if pre and pre.min_memory and not ctx.device_memory then
    -- no device's size: preallocated at the least pool all the same (it
    -- needs less than growth holds), its fraction that pool over the size
    local pool = (pre.min_memory + GRAIN - 1) // GRAIN * GRAIN
    return {
      { setting = ("XLA_CLIENT_MEM_FRACTION for %s"):format(bytes(pool)), family = "fraction", keys = 1,
        via = "XLA_CLIENT_MEM_FRACTION", kind = "bfc", growth = false, fraction_limit = pool,
        job = { spec = ("bfc,memory_limit=%d,allow_growth=false"):format(pool) },
        pool = { kind = "bfc", memory_limit = pool, allow_growth = false } },
    }
  end
  if not (pre and pre.fraction and pre.fraction_limit) then return {} end
  return {
    { setting = ("XLA_CLIENT_MEM_FRACTION=%s"):format(pre.fraction_text),
      family = "fraction", keys = 1, via = "XLA_CLIENT_MEM_FRACTION", kind = "bfc", growth = false,
      fraction = pre.fraction, fraction_limit = pre.fraction_limit, fraction_text = pre.fraction_text,
      job = { spec = ("bfc,memory_limit=%d,allow_growth=false"):format(pre.fraction_limit) },
      pool = { kind = "bfc", memory_limit = pre.fraction_limit, allow_growth = false } },
  }
end

function jax.describe(r)
  if r.family == "growth" then return "growth (XLA_PYTHON_CLIENT_PREALLOCATE=false)" end
  if r.family == "fraction" and not r.fraction_text then
    return ("preallocated, a pool of %s"):format(bytes(r.fraction_limit))
  end
  if r.family == "fraction" then return "preallocated, XLA_CLIENT_MEM_FRACTION=" .. r.fraction_text end
  return "preallocated (JAX's default)"
end

function jax.paste(r, ctx)
  if r.family == "growth" then return "XLA_PYTHON_CLIENT_PREALLOCATE=false python train.py" end
  if r.fraction then
    local s = ("XLA_CLIENT_MEM_FRACTION=%s python train.py"):format(r.fraction_text)
    -- JAX's default row: the fraction is the least that runs it (the fraction's row)
    if r.family == "preallocated" and r.fraction_limit then
      return s, ("preallocated at the least fraction that runs it: a pool of %s"):format(bytes(r.fraction_limit))
    end
    return s
  end
  if ctx and ctx.device_memory then
    return "python train.py", ("no fraction of the device's %s runs it"):format(bytes(ctx.device_memory))
  end
  if r.family == "fraction" then
    -- a pool without a device's size: the fraction is for the user to make
    return "XLA_CLIENT_MEM_FRACTION=F python train.py", ("F = %s / the device's memory, rounded up; " ..
      "give --device-memory SIZE for F"):format(bytes(r.fraction_limit))
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
    lines[#lines + 1] = ("device memory: %s (%s; XLA_CLIENT_MEM_FRACTION is of it)"):format(bytes(d.device_memory),
      d.device_memory_from == "the profile" and "the profile's memory_size of the device" or "as given")
  end
  return lines
end

-- A profile that ends with blocks still allocated, as the profile of a run
-- that stopped on an error does: XLA's BFC traces no request it refused,
-- so where that error was RESOURCE_EXHAUSTED the profile ends before the
-- request, and the program needs more than the figures show.  Said with
-- what the run had (--limit) and what the advice changes for it.
function ran_out(result, ctx)
  local info = ctx.info
  if (info.leaked or 0) == 0 then return end
  local W = result.warnings
  local s = ("the profile ends with %d block%s still allocated, as a run's does that stopped on an error: if it " ..
    "ran out of memory (RESOURCE_EXHAUSTED), the request XLA's BFC refused is not in the profile (BFC " ..
    "traces none), and the program needs more than these figures show"):format(info.leaked,
    info.leaked > 1 and "s" or "")
  local pre
  for _, r in ipairs(result.rows) do if r.family == "preallocated" then pre = r end end
  local L = ctx.o.limit
  if L and pre and pre.min_memory and pre.min_memory <= L then
    local pool = pre.fraction_limit or pre.min_memory
    s = s .. ("; the run had %s (--limit), and the least pool for the requests recorded is %s%s: %s, so " ..
      "if that run ran out this one would too; it needs at least the refused request (its size is in the " ..
      "error) beyond what was in use when it was refused"):format(bytes(L), bytes(pre.min_memory),
      pre.fraction_text and (" (XLA_CLIENT_MEM_FRACTION=%s: %s)"):format(pre.fraction_text, bytes(pool)) or "",
      pool <= L and "no more than the run had" or ("%s more than the run had"):format(bytes(pool - L)))
  elseif not L then
    s = s .. "; give the pool the run had with --limit (option 'limit'; memory_stats()['bytes_limit']) to see the advice " ..
      "against it"
  end
  W[#W + 1] = s
end

function jax.notes(result, ctx)
  local N = result.notes
  N[#N + 1] = "XLA's compiler picks algorithms (convolution workspaces, rematerialization) by the memory it " ..
    "has: a run under less memory may ask for less than this recording, and one under more for more. Eager " ..
    "code too: XLA compiles each operation, and its autotuner's buffers (each with 8 MiB redzones on both " ..
    "sides) and cuDNN's and cuFFT's scratch are asked for without BFC's wait-and-retry, so a pool that " ..
    "refuses them makes XLA pick another algorithm, and the refusal is not in the profile (JAX 0.11.2 on an " ..
    "H100: eager code ran in a pool of 132 MiB, where its growth run's requests need 142 MiB; the " ..
    "preallocated run made 72 fewer requests). The least memory is for the requests as recorded; of a " ..
    "profile recorded under the pool it ran in, it is that run's."
  N[#N + 1] = "Growth (XLA_PYTHON_CLIENT_PREALLOCATE=false) keeps regions it no longer needs: its pool at " ..
    "the peak is what it held; preallocated, the pool is the limit, taken at the first allocation."
  if ctx and ctx.device_memory then
    N[#N + 1] = "JAX 0.11.2 makes a fraction's pool of the product rounded up to a multiple of 2 MiB, so " ..
      "any fraction whose product lies within the 2 MiB below a pool gets that pool: the fraction given is " ..
      "the least of the fewest digits that gets the least pool, and the fraction's row replays that pool."
  end
  if ctx then ran_out(result, ctx) end
end

return jax
