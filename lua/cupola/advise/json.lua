--- cupola.advise.json: cupola.advise's result as JSON (bin/cupola advise
-- --json): the rows first, each row's setting first; a framework's own
-- fields of the result are its module's json_fields (advise/modules.lua).
local report = require "cupola.report"
local modules = require "cupola.advise.modules"

local json = {}

local json_order = { "rows", "recommended", "paste", "paste_note", "setting", "largest", "kind", "via", "description",
  "peak_reserved", "overhead", "unused_at_peak", "live_at_peak", "peak_allocated", "device_allocs", "device_frees",
  "retries", "change", "change_pct", "fits", "min_memory", "fails_at", "complete", "warning" }

local function plain_row(r)
  local o = {}
  for _, k in ipairs { "setting", "kind", "via", "description", "family", "recorded", "recommended",
    "peak_reserved", "peak_allocated", "live_at_peak", "unused_at_peak", "overhead", "device_allocs", "device_frees",
    "retries", "change", "change_pct", "complete", "warning", "prediction", "divergence", "fits",
    "fails_at", "min_memory", "search_steps", "error", "pool", "seconds", "paste", "paste_note", "largest" } do
    o[k] = r[k]
  end
  return o
end

local function plain_result(res)
  local o = {}
  for _, k in ipairs { "trace", "format", "events", "allocations", "streams", "devices", "device", "limit",
    "limit_read", "recorded_limit",
    "framework", "title", "recorded_setting", "recorded_from", "baseline", "baseline_from",
    "paste", "paste_note", "conf", "warnings", "notes", "predicted", "largest_setting" } do
    o[k] = res[k]
  end
  -- the framework's own fields
  local mod = modules.module(res.framework)
  for _, k in ipairs(mod and mod.json_fields or {}) do o[k] = res[k] end
  o.rows = {}
  for i, r in ipairs(res.rows) do o.rows[i] = plain_row(r) end
  o.recommended = res.recommended and plain_row(res.recommended) or nil
  return o
end

--- json.json(result) -> JSON text: {"rows": [...], "recommended": {...}, ...}
-- (with "per_device" for a snapshot of several devices).
function json.json(res)
  local o = plain_result(res)
  if res.per_device then
    o.per_device = {}
    for i, d in ipairs(res.per_device) do o.per_device[i] = plain_result(d) end
  end
  local ok, dkjson = pcall(require, "dkjson")
  if not ok then return report.json(o) end
  -- the rows first, each row's setting first: the order people read in
  return dkjson.encode(o, { indent = true, keyorder = json_order }) .. "\n"
end

return json
