--- cupola.advise.options: cupola.advise's options checked (the engine's,
-- and those the framework modules add: advise/modules.lua's `options`), and
-- sizes as people write them.
local util = require "cupola.util"
local modules = require "cupola.advise.modules"
local raise, shown, typed = util.raise, util.shown, util.typed

local options = {}

-- cupola's pools, the rows every module that has pools gets by default
options.default_pools = { "tlsf", "vmm", "caching" }

-- Units of sizes as people write them on a command line, as dd(1) reads
-- them: K, M, G, T and KiB ... TiB are powers of 1024; KB, MB, GB, TB
-- powers of 1000 (what disk and GPU makers print); any case.
local units = {
  [""] = { 1 }, b = { 1 },
  k = { 2 ^ 10, "2^10" }, ki = { 2 ^ 10, "2^10" }, kib = { 2 ^ 10, "2^10" }, kb = { 1e3, "10^3" },
  m = { 2 ^ 20, "2^20" }, mi = { 2 ^ 20, "2^20" }, mib = { 2 ^ 20, "2^20" }, mb = { 1e6, "10^6" },
  g = { 2 ^ 30, "2^30" }, gi = { 2 ^ 30, "2^30" }, gib = { 2 ^ 30, "2^30" }, gb = { 1e9, "10^9" },
  t = { 2 ^ 40, "2^40" }, ti = { 2 ^ 40, "2^40" }, tib = { 2 ^ 40, "2^40" }, tb = { 1e12, "10^12" },
}

--- options.parse_size(v) -> bytes, how it was read (a sentence), or nil:
-- a whole number of bytes, or a string "6GiB", "6G", "6gib", "6 GB",
-- "1.5T" (GB is 10^9 bytes, G and GiB 2^30; a fraction of a byte is
-- dropped).
function options.parse_size(v)
  if math.type(v) == "integer" then return v, ("%d bytes"):format(v) end
  if math.type(v) == "float" then
    local n = math.tointeger(v)
    if n then return n, ("%d bytes"):format(n) end
    return nil
  end
  if type(v) ~= "string" then return nil end
  local num, unit = v:match "^%s*(%d+%.?%d*)%s*(%a*)%s*$"
  if not num then num, unit = v:match "^%s*(%.%d+)%s*(%a*)%s*$" end
  local u = unit and units[unit:lower()]
  if not u then return nil end
  local x = tonumber(num) * u[1]
  if x >= 2 ^ 63 then return nil end
  local n = math.tointeger(math.floor(x))
  if not n then return nil end
  if not u[2] then return n, ("%d bytes"):format(n) end
  local si = u[2]:sub(1, 2) == "10"
  return n, ("%s read as %s x %s = %d bytes%s"):format(shown(v), num, u[2], n,
    si and ("; %s is 10^%s bytes, %siB or %s 2^%d"):format(unit:upper(), u[2]:match "%^(%d+)",
      unit:sub(1, 1):upper(), unit:sub(1, 1):upper(), ({ k = 10, m = 20, g = 30, t = 40 })[unit:sub(1, 1):lower()])
      or "")
end

-- the engine's options; the modules' follow them
local engine_names = { "limit", "conf", "recorded", "pools", "search", "threads", "progress", "device" }

-- An option a module adds, checked by its type.
local function check_added(d, v)
  if d.type == "size" then
    local n = options.parse_size(v)
    if not n or n <= 0 then
      raise(("cupola.advise: option '%s' must be a size above 0 (bytes, or a string such as \"%s\"), not %s")
        :format(d.key, d.example, typed(v)))
    end
    return n
  end
  error(("cupola.advise: option '%s' of a framework module has type %s, which the engine does not check")
    :format(d.key, shown(d.type)), 0)
end

--- options.check(opts) -> o: the options of cupola.advise checked, with
-- their defaults (raises naming the option and the value).
function options.check(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    raise("bad argument #2 to 'advise' (options table expected, got " .. typed(opts) .. ")")
  end
  local added = modules.options()
  local names, known = {}, {}
  for _, k in ipairs(engine_names) do names[#names + 1] = k end
  for _, d in ipairs(added) do names[#names + 1] = d.key end
  for _, k in ipairs(names) do known[k] = true end
  for k in pairs(opts) do
    if not known[k] then
      raise("cupola.advise: unknown option " .. shown(k) .. " (" .. table.concat(names, ", ") .. ")")
    end
  end
  local o = {}
  if opts.limit ~= nil then
    local n, how = options.parse_size(opts.limit)
    if not n or n <= 0 then
      raise("cupola.advise: option 'limit' must be a size above 0 (bytes, or a string such as \"24GiB\", " ..
        "\"24G\", \"24GB\"), not " .. typed(opts.limit))
    end
    o.limit, o.limit_read = n, how
  end
  local confs = opts.conf
  if type(confs) == "string" then confs = { confs } end
  if confs ~= nil and type(confs) ~= "table" then
    raise("cupola.advise: option 'conf' must be a conf string or a list of them, not " .. typed(confs))
  end
  o.conf = {}
  for i, c in ipairs(confs or {}) do
    if type(c) ~= "string" then
      raise(("cupola.advise: option 'conf': item %d must be a string, not %s"):format(i, typed(c)))
    end
    o.conf[i] = c
  end
  if opts.recorded ~= nil then
    if type(opts.recorded) ~= "string" then
      raise("cupola.advise: option 'recorded' must be a conf string, not " .. typed(opts.recorded))
    end
    o.recorded = opts.recorded
  end
  local pools = opts.pools
  -- pools asked for, not the default rows (a module without pools refuses them)
  o.pools_given = type(pools) == "table" and #pools > 0 or nil
  if pools == nil then pools = options.default_pools end
  if pools == false then pools = {} end
  if type(pools) ~= "table" then
    raise("cupola.advise: option 'pools' must be a list of pool specs (\"vmm\", \"tlsf,reuse=stream\") or false, not "
      .. typed(pools))
  end
  o.pools = {}
  for i, s in ipairs(pools) do
    if type(s) ~= "string" then
      raise(("cupola.advise: option 'pools': item %d must be a pool spec string, not %s"):format(i, typed(s)))
    end
    o.pools[i] = s
  end
  for _, k in ipairs { "search", "progress" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      raise(("cupola.advise: option '%s' must be a boolean, not %s"):format(k, typed(opts[k])))
    end
  end
  o.search, o.search_given = opts.search, opts.search
  if o.search == nil then o.search = o.limit ~= nil end
  o.progress = opts.progress ~= false
  if opts.threads ~= nil and (math.type(opts.threads) ~= "integer" or opts.threads < 0 or opts.threads > 256) then
    raise("cupola.advise: option 'threads' must be an integer in 0..256 (0: one per core), not " .. typed(opts.threads))
  end
  o.threads = opts.threads or 0
  if opts.device ~= nil and (math.type(opts.device) ~= "integer" or opts.device < 0 or opts.device > 65535) then
    raise("cupola.advise: option 'device' must be a device index (an integer from 0), not " .. typed(opts.device))
  end
  o.device = opts.device
  for _, d in ipairs(added) do
    if opts[d.key] ~= nil then o[d.key] = check_added(d, opts[d.key]) end
  end
  return o
end

return options
