--- cupola.advise.modules: the framework modules of cupola.advise, the list
-- they are asked in, and the interface each implements.  This block is the
-- interface's one statement: the engine (advise/engine.lua), the views
-- (advise/text.lua, json.lua, html.lua) and the command line (advise/cli.lua)
-- read nothing else of a module (spec/advise_ux_spec.lua holds them to it,
-- and docs/API.md to this list).
--
-- ---- the framework module interface -------------------------------------
-- A framework module is the table require("cupola.advise." .. name) returns,
-- for each name in modules.frameworks.  Fields (optional ones marked "opt"):
--
-- What it reads (the registry, below):
--   name            the framework's name ("torch"): result.framework
--   formats         the trace formats it reads (t:info().format), e.g.
--                   {"torch_snapshot"}; a trace goes to the first module in
--                   the list whose detect (or formats) claims it
--   detect(info)    opt -> true where the module reads this trace (info =
--                   t:info()); without it, info.format in formats
--   reads           opt: phrases, what it reads and why a file is not that,
--                   for the refusal of a file of no format any module reads
--   needs_device(err) opt -> true where err, the loader's refusal of a file,
--                   means its format loads one device at a time: with option
--                   device the engine loads that device's ({device = n}).
--                   Asked of every module, since no format is known yet
--   device_ids      opt: true where the format names its devices by ids of
--                   its own: with option device the engine loads that one
--                   and the loader refuses an id the file lacks (else the
--                   engine checks it against the trace's count of devices)
-- Its options (advise/options.lua, advise/cli.lua):
--   options         opt: the options it adds, a list of {key =, flag =,
--                   arg =, type = "size", example =, help =, use =}: option
--                   key of cupola.advise (checked by type: "size", a size
--                   above 0 as parse_size reads it, in o[key]), flag and arg
--                   on the command line, example in the message for a bad
--                   value, help (what it is) and use (what it is to this
--                   framework) for --help.  Two modules may name one key:
--                   the first declaration stands, with every module's use
--                   (modules.options' uses)
--   check(o)        opt: raises (util.raise) for what the options ask that
--                   it does not take: o.conf (a list) and o.recorded are
--                   the framework's setting strings, o.pools_given is true
--                   where the user asked for pools (not the default rows)
--   usage           opt: its words in --help: {reads = {phrases}, conf =,
--                   recorded =, pool = (what --conf, --recorded and --pool
--                   mean to it), device = (how option device picks a device
--                   of its files), example = (a line to paste)}
-- The advice (advise/engine.lua, in this order):
--   title(info)     -> what the trace is, for the report's head ("PyTorch snapshot")
--   setup(ctx)      reads what it needs of the trace once; may set result
--                   fields (recorded_setting, recorded_from, its
--                   json_fields), warnings and notes, o.search, and call
--                   ctx.set_limit
--   rows(ctx)       -> the first row specs, replayed together
--   baseline(ctx)   opt -> bytes, from (a phrase): what "vs recorded"
--                   compares with (default: the recorded row's peak reserved,
--                   "the recorded setting's replay")
--   fill(row, x, ctx) opt: the module's own fields of a replayed row (x is
--                   the row's advise_run result): after the engine's
--                   figures of the replay (peak_reserved ... change), before
--                   those of the limit (fits, fails_at, min_memory)
--   more(ctx, rows) opt -> further row specs, replayed together once the
--                   first rows' figures are in (combinations of the best)
--   describe(row)   -> the row's name in the table
--   paste(row, ctx) -> the line that runs the user's program with the row's
--                   setting (the recommended row's, and each row set aside
--                   that fits), and opt a note on it (what else the run
--                   needs, what the setting is): a sentence, no shell
--                   comment (the views put it beside the line)
--   notes(res, ctx) opt: adds sentences to res.warnings and res.notes
-- Its words in the views:
--   summary(res)    opt -> lines for the text report's head (what was recorded)
--   terms           opt: {calls =, least =}: the text's definitions of those columns
--   aside_title     opt: the text's line above the rows set aside
--   json_fields     opt: the result's fields of its own that JSON writes
--
-- A row spec is a table the engine fills with the row's figures:
--   setting       the setting as the user writes it (its identity)
--   job           the advise_run job (kind/conf/spec/recorded; the engine
--                 adds limit and search)
--   pool          cupola.pool options (or a pool spec string) that replay
--                 it for the HTML page (the page adds upstream, max)
--   kind          the pool kind that serves it (JSON's "kind"; the page
--                 replays the kinds that keep their own clock on it)
--   family        a name for its kind of setting; "recorded" and "default"
--                 are the engine's: the setting of the recording, the
--                 framework's defaults (the text names them where it must)
--   keys          how many settings it changes: the simpler wins a tie
--   recorded      true for the setting the trace was recorded under
--   aside         true: shown after the others and never recommended
--   caveat        a row set aside that costs something its figures do not show (a
--                 pool measured slower inside the framework): said beside its line,
--                 and a row without one that fits is offered first
--   same_as       another row whose replay serves for this one
--   reserved_text (set by fill) the peak reserved cell where the replay's
--                 figure is not the setting's (a default taken as a share
--                 of a device of unknown size: "75 % of GPU")
--   via           the environment variable (or the like) that carries it
-- The engine sets description (describe's), recommended, paste and
-- paste_note (on a row set aside that fits), replay and the figures docs/API.md lists.
--
-- ctx, which setup, rows, baseline, fill, more, paste and notes get: t (the
-- cupola.Trace), info (t:info()), o (the checked options), result, limited (a
-- limit is given or read), module, the engine's metric(row) and better(a, b)
-- (its scoring), baseline (once known), and set_limit(lim, source): the limit
-- the recorded run had, read by the module ({low =, high =}, as
-- advise/search.lua's limit_interval gives it; source names what it was read
-- from, "snapshot"): the advice is made under its least value, as if given.
-- A module keeps what it needs between its hooks in ctx too.
local util = require "cupola.util"
local raise, shown = util.raise, util.shown

local modules = {}

-- the framework modules, asked in this order (one that is not installed is
-- skipped); cupola.advise's `frameworks` is this field
modules.frameworks = { "torch", "jax", "cupy" }

local loaded = {}

--- modules.module(name) -> the framework module, or nil where none is installed.
function modules.module(name)
  if loaded[name] == nil then
    local ok, m = pcall(require, "cupola.advise." .. name)
    if ok then
      loaded[name] = m
    elseif tostring(m):find("module 'cupola.advise." .. name .. "' not found", 1, true) then
      loaded[name] = false
    else
      error(m, 0)
    end
  end
  return loaded[name] or nil
end

--- modules.installed() -> the installed modules, in the order asked, and
-- their names.
function modules.installed()
  local list, names = {}, {}
  for _, name in ipairs(modules.frameworks) do
    local m = modules.module(name)
    if m then list[#list + 1], names[#names + 1] = m, name end
  end
  return list, names
end

--- modules.find(info) -> the module that reads a trace of this info, or nil
-- and the names of those asked (each loaded only when asked).
function modules.find(info)
  local names = {}
  for _, name in ipairs(modules.frameworks) do
    local m = modules.module(name)
    if m then
      local claims
      if m.detect then
        claims = m.detect(info)
      else
        for _, f in ipairs(m.formats or {}) do if f == info.format then claims = true end end
      end
      if claims then return m end
      names[#names + 1] = name
    end
  end
  return nil, names
end

--- modules.module_for(info) -> the module that reads a trace of this info;
-- raises naming the format where none does.
function modules.module_for(info)
  local m, names = modules.find(info)
  if m then return m end
  raise(("cupola.advise: no advice for traces of format %s (the framework modules: %s)"):format(
    shown(info.format), table.concat(names, ", ")))
end

--- modules.formats() -> what each module reads, as phrases.
function modules.formats()
  local out = {}
  for _, m in ipairs((modules.installed())) do
    for _, f in ipairs(m.reads or {}) do out[#out + 1] = f end
  end
  return out
end

--- modules.needs_device(err) -> whether a module says the loader's refusal
-- err asks for one device at a time.
function modules.needs_device(err)
  for _, m in ipairs((modules.installed())) do
    if m.needs_device and m.needs_device(err) then return true end
  end
  return false
end

--- modules.options() -> the options the modules add, by module order, one
-- per key (a copy of the first declaration, with uses: each declaring
-- module's use, in order, and modules: their names).
function modules.options()
  local out, seen = {}, {}
  for _, m in ipairs((modules.installed())) do
    for _, d in ipairs(m.options or {}) do
      local o = seen[d.key]
      if not o then
        o = { uses = {}, modules = {} }
        for k, v in pairs(d) do o[k] = v end
        seen[d.key] = o
        out[#out + 1] = o
      end
      o.uses[#o.uses + 1] = d.use
      o.modules[#o.modules + 1] = m.name
    end
  end
  return out
end

return modules
