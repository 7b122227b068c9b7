--- cupola.bench: timing helpers for experiments.
-- Device work is timed with events (what the device did), host work with the
-- monotonic clock (what the caller waited); both after a warm-up, reporting
-- the median of several repetitions.
local core = require "cupola.core"
local report = require "cupola.report"
local util = require "cupola.util"
local typed, raise = util.typed, util.raise

local bench = {}

-- A whole number (4 or 4.0), else nil.
local function count(v) return type(v) == "number" and math.tointeger(v) or nil end

-- The options of device_ms and host_ns: each one known, reps >= 1 and
-- warmup >= 0 integers, stream a cupola.Stream (wrong ones used to fail
-- inside, "attempt to call a number value" at a line of this file).
local function check_opts(fname, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    raise(("bad argument #%d to '%s' (options table expected, got %s)"):format(
      fname == "host_ns" and 3 or 2, fname, typed(opts)))
  end
  for k, v in pairs(opts) do
    if not allowed[k] then raise(("cupola.bench.%s: unknown option %s"):format(fname, util.shown(k))) end
    local least = k == "reps" and 1 or 0
    if (k == "reps" or k == "warmup") and not ((count(v) or -1) >= least) then
      raise(("cupola.bench.%s: option '%s' must be an integer >= %d, not %s"):format(fname, k, least, typed(v)))
    end
    if k == "stream" and util.typename(v) ~= "cupola.Stream" then
      raise(("cupola.bench.%s: option 'stream' must be a cupola.Stream, not %s"):format(fname, typed(v)))
    end
  end
  return opts
end

local function check_fn(fname, fn)
  if type(fn) ~= "function" then
    raise(("bad argument #1 to '%s' (function expected, got %s)"):format(fname, typed(fn)))
  end
end

local function median(xs)
  if type(xs) ~= "table" then raise("bad argument #1 to 'median' (a list of numbers expected, got " .. typed(xs) .. ")") end
  for i, v in ipairs(xs) do
    if type(v) ~= "number" then
      raise(("bad argument #1 to 'median' (item %d is a %s, not a number%s)"):format(i, util.typename(v), util.got(v)))
    end
  end
  local s = {}
  for i, v in ipairs(xs) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return 0 end
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end
bench.median = median

--- bench.device_ms(fn, {stream=, reps=5, warmup=1}) -> median ms, all samples
-- Records an event before and after fn() on the stream and waits for it.
function bench.device_ms(fn, opts)
  check_fn("device_ms", fn)
  opts = check_opts("device_ms", opts, { stream = true, reps = true, warmup = true })
  local s = opts.stream or core.default_stream
  local reps, warmup = opts.reps or 5, opts.warmup or 1
  local e0 <close> = core.event { timing = true }
  local e1 <close> = core.event { timing = true }
  for _ = 1, warmup do fn() end
  s:synchronize()
  local samples = {}
  local t0 = core.clock()
  for i = 1, reps do
    e0:record(s)
    fn()
    e1:record(s)
    e1:synchronize()
    samples[i] = e0:elapsed(e1)
    report.progress("cupola bench", i, reps, t0)
  end
  return median(samples), samples
end

--- bench.host_ns(fn, n, {reps=5, warmup=1}) -> median ns per call of fn
-- over n calls per repetition (host wall time).
function bench.host_ns(fn, n, opts)
  check_fn("host_ns", fn)
  if not ((count(n) or 0) >= 1) then
    raise("bad argument #2 to 'host_ns' (a count of calls >= 1 expected, got " .. typed(n) .. ")")
  end
  opts = check_opts("host_ns", opts, { reps = true, warmup = true })
  local reps, warmup = opts.reps or 5, opts.warmup or 1
  for _ = 1, warmup do fn() end
  local samples = {}
  local start = core.clock()
  for r = 1, reps do
    local t0 = core.clock()
    for _ = 1, n do fn() end
    samples[r] = (core.clock() - t0) * 1e9 / n
    report.progress("cupola bench", r, reps, start)
  end
  return median(samples), samples
end

--- bench.result(name, median, samples, extra) -> a record for cupola.report
-- (csv, json, records): {name=, median=, min=, max=, reps=, ...extra}.
function bench.result(name, med, samples, extra)
  -- wrong types used to fail inside (attempt to get length of a nil value)
  if type(name) ~= "string" then raise("bad argument #1 to 'result' (string expected, got " .. typed(name) .. ")") end
  if type(med) ~= "number" then raise("bad argument #2 to 'result' (number expected, got " .. typed(med) .. ")") end
  if type(samples) ~= "table" then
    raise("bad argument #3 to 'result' (a list of samples expected, got " .. typed(samples) .. ")")
  end
  if extra ~= nil and type(extra) ~= "table" then
    raise("bad argument #4 to 'result' (table expected, got " .. typed(extra) .. ")")
  end
  local r = { name = name, median = med, reps = #samples }
  local mn, mx = math.huge, -math.huge
  for _, v in ipairs(samples) do
    if v < mn then mn = v end
    if v > mx then mx = v end
  end
  if #samples > 0 then r.min, r.max = mn, mx end
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

return bench
