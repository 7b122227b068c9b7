--- cupola.advise.html: cupola.advise's result as one page (bin/cupola
-- advise --html): the table as advise/text.lua's columns give it, the notes,
-- and the timelines (lua/cupola/timeline.lua) of the recorded and the
-- recommended settings, each replayed again with its pool.
local core = require "cupola.core"
local util = require "cupola.util"
local text = require "cupola.advise.text"
local at_caller = util.at_caller

local html = {}

-- The pool kinds that replay on their own clock (models of a framework's
-- allocator, which decide by no time; cupola's pools decide by time, on
-- the recording's clock): the registry's trait, as src/core/trace/advise.c
-- reads it.
local kinds = core.pool_kinds()
local function own_clock(kind) return kinds[kind] ~= nil and kinds[kind].own_clock end

local function is_trace(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "cupola.Trace"
end

--- html.html(result, trace_or_path, path) -> path: one page with the table and
-- the timelines of the recorded and the recommended settings (cupola.timeline).
function html.html(res, src, path)
  local timeline = require "cupola.timeline"
  local t = is_trace(src) and src or at_caller(core.trace.load, res.trace or src,
    (res.devices or 1) > 1 and { device = res.device } or nil)
  local own = t ~= src
  local ok, a, b = pcall(function()
    local panels, names = {}, {}
    local function replay(r, name)
      local c = r.pool
      -- a cupola pool as the library serves it (src/core/pool/spec.c)
      if type(c) == "string" then c = core.trace.serving(util.pool_spec(c)) else c = util.pool_config(c) end
      c.upstream, c.max = "virtual", res.limit
      -- cupola's pools on the recording's clock, from their creation (as advise_run)
      local by_pool = own_clock(r.kind)
      if not by_pool then c.clock = "manual" end
      local p <close> = core.pool(c)
      local x = t:replay(p, { record = true, progress = false, clock = by_pool and "pool" or "trace",
        idle_streams = true, -- as advise_run replays the rows
        addresses = r.job and r.job.recorded and r.replay and r.replay.recorded and "recorded" or nil })
      panels[#panels + 1] = x
      names[#names + 1] = name
    end
    local rec_row
    for _, r in ipairs(res.rows) do if r.recorded then rec_row = r end end
    if rec_row then replay(rec_row, "recorded: " .. rec_row.description) end
    if res.recommended and res.recommended ~= rec_row then
      replay(res.recommended, "recommended: " .. res.recommended.description)
    end
    if #panels == 0 then replay(res.rows[1], res.rows[1].description) end
    local head, rows = text.columns(res)
    local notes = {}
    for _, w in ipairs(res.warnings) do notes[#notes + 1] = "Warning: " .. w end
    for _, n in ipairs(res.notes) do notes[#notes + 1] = n end
    -- the answer first, as the terminal says it (in its 100 columns: the
    -- lines to paste are continued as a shell reads them)
    return timeline.write(panels, path, {
      title = "cupola advise: " .. (res.trace:match "[^/\\]*$"), names = names, trace = t,
      text = text.answer(res, 100), table = { headers = head, rows = rows }, notes = notes })
  end)
  if own then t:close() end
  if not ok then error(a, 0) end
  return a, b
end

return html
