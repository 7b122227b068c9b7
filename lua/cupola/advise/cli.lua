--- cupola.advise.cli: bin/cupola advise, the command line of cupola.advise:
-- its arguments read (the engine's options, and those the framework
-- modules add: advise/modules.lua's `options`), its --help (the modules'
-- `usage` words in it), its errors as one line in the command line's words,
-- and the views it prints (advise/text.lua, json.lua, html.lua).
local util = require "cupola.util"
local modules = require "cupola.advise.modules"
local engine = require "cupola.advise.engine"
local text = require "cupola.advise.text"
local json = require "cupola.advise.json"
local html = require "cupola.advise.html"
local predict = require "cupola.advise.predict"
local shown = util.shown
local wrap = text.wrap

local cli = {}

local clean -- below

-- The command line's help: the engine's options; what each framework
-- module reads, its words for --conf, --recorded, --pool and --device (its
-- usage table: reads, conf, recorded, pool, device, example), and the
-- options it adds (after --device).
-- the synopsis: the engine's options, the modules' after --device
local synopsis_head = { "[--limit SIZE]", "[--conf CONF]...", "[--recorded CONF]", "[--pool SPEC]...",
  "[--no-pools]", "[--search]", "[--device N]" }
local synopsis_tail = { "[--threads N]", "[--brief]", "[--json]", "[--html PAGE]" }

local usage_head = [[
       cupola advise A@SIZE B@SIZE... --at SIZE [options]
       cupola advise A@SIZE B@SIZE... --limit SIZE [options]

Replays a recording of a program's allocations offline (no GPU) through
cupola's model of its framework's allocator under a grid of settings, and
cupola's own pools, and says which setting to use and how much memory it
needs.  From recordings of one program at two sizes or more (the batch, the
sequence length: PATH@SIZE, split at the last @), the same for a run not yet
made: --at SIZE gives the advice at that size, --limit alone the largest size
each setting fits at.  It reads:
]]

local usage_options = [[


  --limit SIZE      the memory the run may use: each setting's fit, retries,
                    where it runs out, and the least memory it needs (a search
                    on the limit).  24GiB, 24gib or 24G: 24 x 2^30 bytes;
                    24GB: 24 x 10^9 bytes; also KiB/K/KB, MiB/M/MB, TiB/T/TB,
                    or a number of bytes (default: none, or the limit a run
                    that was refused memory had, read from its recording)
  --conf CONF       a setting of yours to add to the grid (repeatable)%s
  --recorded CONF   the setting the recording was made under, where it does
                    not say%s
  --pool SPEC       a cupola pool to add (repeatable; the default rows are
                    tlsf, vmm, caching)%s
  --no-pools        no rows for cupola's pools
  --search          the least-memory search without a limit
  --at SIZE         with recordings as PATH@SIZE: the size to predict
]]

-- --device's text: the modules' ways of picking a device follow the engine's
local usage_device = "only device N of a recording of several (default: each of a snapshot's%s)"

local usage_tail = [[
  --threads N       replay threads (default: one per core)
  --brief           the answer and the table, without the definitions,
                    warnings and notes below them (counted)
  --json            the result as JSON on stdout instead of the table
  --html PAGE       also write PAGE: the table and the timelines of the
                    recorded and the recommended settings
  -h, --help        this text

Lines fit $COLUMNS, else the terminal (else 100).  Then run your program
with the line it prints, e.g.
]]

-- An option's lines in --help: the flag at column 2, its text at column 20
-- (after two spaces where the flag is longer), in 78 columns.
local function option_lines(flag, s)
  local lead = "  " .. flag
  lead = #lead <= 18 and lead .. string.rep(" ", 20 - #lead) or lead .. "  "
  return wrap(lead, s, 78, string.rep(" ", 20)) .. "\n"
end

--- cli.usage_text() -> the command line's help.
function cli.usage_text()
  local reads, conf, recorded, pool, device, example = {}, {}, {}, {}, {}, {}
  for _, m in ipairs((modules.installed())) do
    local u = m.usage
    if u then
      for _, r in ipairs(u.reads or {}) do reads[#reads + 1] = wrap("  - ", r, 78) end
      if u.conf then conf[#conf + 1] = u.conf end
      if u.recorded then recorded[#recorded + 1] = u.recorded end
      if u.pool then pool[#pool + 1] = u.pool end
      if u.device then device[#device + 1] = "; " .. u.device end
      if u.example then example[#example + 1] = "  " .. u.example end
    end
  end
  local function more(list)
    if #list == 0 then return "" end
    return "\n" .. wrap("                    ", "(" .. table.concat(list, "; ") .. ")", 78)
  end
  local tokens = {}
  for _, w in ipairs(synopsis_head) do tokens[#tokens + 1] = w end
  for _, d in ipairs(modules.options()) do tokens[#tokens + 1] = ("[%s %s]"):format(d.flag, d.arg) end
  for _, w in ipairs(synopsis_tail) do tokens[#tokens + 1] = w end
  -- in lines of 78, an option never cut from its argument
  local lines, line = {}, "usage: cupola advise SNAPSHOT"
  for _, w in ipairs(tokens) do
    if #line + 1 + #w > 78 then
      lines[#lines + 1] = line
      line = string.rep(" ", 20)
    end
    line = line .. " " .. w
  end
  lines[#lines + 1] = line
  local synopsis = table.concat(lines, "\n") .. "\n"
  local added = {}
  for _, d in ipairs(modules.options()) do
    local h = d.help .. (#d.uses > 0 and (" (" .. table.concat(d.uses, "; ") .. ")") or "")
    added[#added + 1] = option_lines(d.flag .. " " .. d.arg, h)
  end
  return synopsis .. usage_head .. table.concat(reads, "\n") ..
    usage_options:format(more(conf), more(recorded), more(pool)) ..
    option_lines("--device N", usage_device:format(table.concat(device))) .. table.concat(added) ..
    usage_tail .. table.concat(example, "\n") .. "\n"
end

local function fail(msg)
  error({ advise_usage = msg }, 0)
end

--- cli.parse_args(argv) -> source, opts, output (the command line read;
-- raises {advise_usage = message} for a bad one).
function cli.parse_args(argv)
  local src, opts, out = nil, { conf = {} }, {}
  local inputs = {}
  local pools
  local added = {}
  for _, d in ipairs(modules.options()) do added[d.flag] = d end
  local i = 1
  local function value(name)
    local v = argv[i + 1]
    if v == nil then fail(name .. " needs a value") end
    i = i + 1
    return v
  end
  while i <= #argv do
    local a = argv[i]
    local k, inline = a:match "^(%-%-[%w%-]+)=(.*)$"
    if k then
      a = k
      table.insert(argv, i + 1, inline)
    end
    if a == "-h" or a == "--help" then
      out.help = true
    elseif a == "--limit" then
      opts.limit = value(a)
      if opts.limit:match "^%d+$" then opts.limit = math.tointeger(tonumber(opts.limit)) or opts.limit end
    elseif a == "--conf" then
      opts.conf[#opts.conf + 1] = value(a)
    elseif a == "--recorded" then
      opts.recorded = value(a)
    elseif a == "--pool" then
      pools = pools or {}
      pools[#pools + 1] = value(a)
    elseif a == "--no-pools" then
      opts.pools = false
    elseif a == "--search" then
      opts.search = true
    elseif added[a] then
      -- an option a framework module adds (a size given in bytes: a number)
      local d = added[a]
      local v = value(a)
      if d.type == "size" and v:match "^%d+$" then v = math.tointeger(tonumber(v)) or v end
      opts[d.key] = v
    elseif a == "--device" or a == "--threads" then
      local v = value(a)
      local n = v:match "^%d+$" and math.tointeger(tonumber(v))
      if not n then fail(a .. " needs a whole number, not " .. shown(v)) end
      opts[a:sub(3)] = n
    elseif a == "--json" then
      out.json = true
    elseif a == "--brief" then
      out.brief = true
    elseif a == "--html" then
      out.html = value(a)
    elseif a == "--at" then
      local v = value(a)
      local n = v:match "^%d+$" and math.tointeger(tonumber(v))
      if not n or n < 1 then
        fail("--at needs the size to predict, a positive whole number (the batch, the sequence length), not " ..
          shown(v))
      end
      out.at = n
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      fail("unknown option " .. shown(a))
    else
      local ok, path, size = pcall(predict.input, a)
      if not ok then fail(clean(path)) end
      inputs[#inputs + 1] = { path = path, size = size }
    end
    i = i + 1
  end
  if pools then
    if opts.pools == false then fail("--pool and --no-pools together") end
    opts.pools = pools
  end
  if out.help then return src, opts, out end
  if #inputs == 0 then fail("which snapshot? (cupola advise SNAPSHOT)") end
  local sized = 0
  for _, x in ipairs(inputs) do if x.size then sized = sized + 1 end end
  if #inputs == 1 and sized == 0 and not out.at then return inputs[1].path, opts, out end
  -- recordings at several sizes: a prediction
  if #inputs == 1 and sized == 0 then
    fail("--at predicts from recordings at two sizes or more, each as PATH@SIZE (got " .. inputs[1].path .. ")")
  end
  if sized == 0 then
    fail(("one snapshot at a time (got %s and %s), or recordings at several sizes as PATH@SIZE with --at SIZE")
      :format(inputs[1].path, inputs[2].path))
  end
  local okr, recs = pcall(predict.recordings, inputs)
  if not okr then fail(clean(recs)) end
  if sized < 2 then
    fail(("a prediction needs recordings at two sizes or more (got one: %s@%d): the sizes show how each request " ..
      "grows"):format(inputs[1].path, inputs[1].size))
  end
  if not out.at and not opts.limit then
    fail("recordings at several sizes: --at SIZE gives the advice at that size, --limit SIZE the largest size " ..
      "that fits")
  end
  out.recordings = recs
  return nil, opts, out
end

-- A message without the positions Lua puts before errors ("file.lua:12: ",
-- "(command line):1: ": on the command line there is no line of the user's
-- to point at), however many there are.
function clean(e)
  e = tostring(e)
  while true do
    local n1, n2
    e, n1 = e:gsub("^[^\n]-%.lua:%d+: ", "", 1)
    e, n2 = e:gsub("^%(command line%):%d+: ", "", 1)
    if n1 + n2 == 0 then break end
  end
  return (e:gsub("^bad argument #1 to 'advise' ", "the snapshot: "))
end

--- cli.main(argv) -> exit status: bin/cupola advise.  Errors are one line
-- on stderr and status 2 (1 for a bad command line), never a traceback.
function cli.main(argv)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local width = text.width()
  -- one message, in the command line's words, in lines that fit
  local function complain(msg)
    -- the options by their flags (device_memory: --device-memory, pools: --pool),
    -- the value as it was typed ("not '0'", not "not number 0")
    local flags = { pools = "pool" }
    msg = msg:gsub("^cupola%.advise: ", ""):gsub("option '([%w_]+)'", function(k)
      return "--" .. (flags[k] or k):gsub("_", "-")
    end):gsub(", not number (%S+)$", ", not '%1'"):gsub(", not string '", ", not '")
    io.stderr:write(wrap("cupola advise: ", msg, width, "  "), "\n")
  end
  local ok, src, opts, out = pcall(cli.parse_args, args)
  if not ok then
    local e = src
    complain(type(e) == "table" and e.advise_usage or clean(e))
    io.stderr:write("(cupola advise --help for the options)\n")
    return 1
  end
  if out.help then
    io.stdout:write(cli.usage_text())
    return 0
  end
  opts.progress = not out.json or nil
  local okr, res
  if out.recordings and out.at then
    okr, res = pcall(predict.run, out.recordings, out.at, opts)
  elseif out.recordings then
    okr, res = pcall(predict.largest, out.recordings, opts)
  else
    okr, res = pcall(engine.run, src, opts)
  end
  if not okr then
    complain(clean(res))
    return 2
  end
  if out.html then
    local okh, err = pcall(html.html, res, src, out.html)
    if not okh then
      -- "--html x.html: cannot write: No such file or directory", the path once
      local msg = clean(err):gsub("^cupola%.[%w.]+: ", "")
      local head = "cannot write " .. out.html .. ": "
      if msg:sub(1, #head) == head then msg = "cannot write: " .. msg:sub(#head + 1) end
      complain("--html " .. out.html .. ": " .. msg)
      return 2
    end
  end
  if out.json then
    io.stdout:write(json.json(res))
  else
    io.stdout:write(text.text(res, width, { brief = out.brief }))
    if out.html then io.stdout:write(wrap("\n  page: ", out.html, width), "\n") end
  end
  return 0
end

return cli
