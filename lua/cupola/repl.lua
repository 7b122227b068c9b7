--- cupola.repl: the REPL of bin/cupola (not part of the API).
-- Lua 5.4's own REPL prints a table as "table: 0x55d4..." and an error
-- raised inside cupola's Lua files with their stack frames; and since it
-- runs `expr` as `return expr`, a tail call, the user's line is no longer
-- on the stack when cupola looks for it (an error then named
-- "(command line):1:", bin/cupola's own chunk, or no line at all).  This one
-- reads a line (with the interpreter's readline when it has one: history and
-- editing as in Lua's), runs an expression so that the line stays on the
-- stack, prints what it returns readably (tables as { key = value }, sizes
-- in bytes also as KiB/MiB/GiB, strings as they are) and an error as the
-- message at the user's line, with only the user's own frames under it.
local util = require "cupola.util"
local core = require "cupola.core"

local repl = {}

-- ---- printing values ------------------------------------------------------

-- Field names whose integers are byte counts: shown also as 64 MiB.
local BYTES = { "bytes", "reserved", "allocated", "used", "peak", "free", "size", "max", "total",
  "memory", "capacity", "initial", "threshold", "cached", "idle", "live", "requested", "largest",
  "waste", "granularity", "alignment" }

local function bytes_key(k)
  if type(k) ~= "string" then return false end
  local lk = k:lower()
  for _, w in ipairs(BYTES) do
    if lk:find(w, 1, true) then return true end
  end
  return false
end

local function human(n)
  local units = { "KiB", "MiB", "GiB", "TiB" }
  local v, u = n / 1024, 1
  while v >= 1024 and u < #units do v, u = v / 1024, u + 1 end
  return string.format(v >= 100 and "%.0f %s" or (v >= 10 and "%.1f %s" or "%.2f %s"), v, units[u])
end

local function key_text(k)
  if type(k) == "string" and k:match "^[%a_][%w_]*$" then return k end
  if type(k) == "string" then return "[" .. string.format("%q", k) .. "]" end
  return "[" .. tostring(k) .. "]"
end

local function scalar(v)
  if type(v) == "string" then return string.format("%q", v):gsub("\\\n", "\\n") end
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then
    return string.format("%.1f", v)
  end
  return tostring(v)
end

local function sorted_keys(t)
  local keys, n = {}, 0
  for k in pairs(t) do
    n = n + 1
    keys[n] = k
  end
  local len = #t
  table.sort(keys, function(a, b)
    local ai = math.type(a) == "integer" and a >= 1 and a <= len
    local bi = math.type(b) == "integer" and b >= 1 and b <= len
    if ai ~= bi then return ai end
    if ai then return a < b end
    -- then numbers, then names, then the rest by type
    local ra = type(a) == "number" and 1 or type(a) == "string" and 2 or 3
    local rb = type(b) == "number" and 1 or type(b) == "string" and 2 or 3
    if ra ~= rb then return ra < rb end
    if ra < 3 then return a < b end
    return type(a) < type(b)
  end)
  return keys, len
end

local MAX_ITEMS = 200 -- a longer table shows its first ones and how many more

local show

-- One line when it fits 80 columns, else one field a line, nested tables
-- indented; a table seen before on the way down is named, not repeated.
local function show_table(t, indent, seen, depth)
  if seen[t] then return "<" .. tostring(t) .. ": seen above>" end
  local mt = getmetatable(t)
  if mt and mt.__tostring then return tostring(t) end
  if next(t) == nil then return "{}" end
  if depth > 4 then return "{ ... }" end
  seen[t] = true
  local keys, len = sorted_keys(t)
  local parts, notes = {}, {}
  for i, k in ipairs(keys) do
    if i > MAX_ITEMS then
      parts[#parts + 1] = string.format("... (%d more)", #keys - MAX_ITEMS)
      break
    end
    local v = t[k]
    local text = show(v, indent .. "  ", seen, depth + 1)
    local note
    if math.type(v) == "integer" and v >= 1024 and bytes_key(k) then note = human(v) end
    local is_list = math.type(k) == "integer" and k >= 1 and k <= len
    parts[#parts + 1] = is_list and text or (key_text(k) .. " = " .. text)
    notes[#parts] = note
  end
  seen[t] = nil
  local line = {}
  for i, p in ipairs(parts) do line[i] = p .. (notes[i] and " --[[" .. notes[i] .. "]]" or "") end
  local one = "{ " .. table.concat(line, ", ") .. " }"
  if #one <= 80 - #indent and not one:find("\n", 1, true) then return one end
  local out = { "{" }
  for i, p in ipairs(parts) do
    out[#out + 1] = indent .. "  " .. p .. "," .. (notes[i] and "  -- " .. notes[i] or "")
  end
  out[#out + 1] = indent .. "}"
  return table.concat(out, "\n")
end

function show(v, indent, seen, depth)
  if type(v) == "table" then return show_table(v, indent or "", seen or {}, depth or 1) end
  if type(v) == "string" or type(v) == "number" then return scalar(v) end
  return tostring(v)
end

--- repl.show(v) -> text: v as the REPL prints it (a table readably, its
-- fields sorted, byte counts also in KiB/MiB/GiB; strings quoted).
repl.show = function(v) return show(v) end

--- repl.print(...): the values as the REPL prints them, tab-separated: a
-- string as it is (as Lua's REPL does: help texts read as text), the
-- rest as repl.show.
function repl.print(...)
  local n = select("#", ...)
  local out = {}
  for i = 1, n do
    local v = select(i, ...)
    out[i] = type(v) == "string" and v or show(v)
  end
  io.write(table.concat(out, "\t"), "\n")
end

-- ---- errors -----------------------------------------------------------------

local CHUNK = "stdin"
local SELF = debug.getinfo(1, "S").source

-- The message, and under it the frames of the user's own code (their
-- files, and the REPL line itself only when something else is listed):
-- cupola's files, C functions and this REPL's machinery are left out.
local function report(err, line_no)
  local msg
  if type(err) == "string" then
    msg = err
  else
    local mt = getmetatable(err)
    msg = mt and mt.__tostring and tostring(err) or ("(error object is a " .. type(err) .. " value)")
  end
  -- an error that found no line of the user's (raised from C at the top of
  -- a `return expr`) gets the REPL line's
  if type(err) == "string" and not msg:match "^[^\n]-:%d+: " then
    msg = CHUNK .. ":" .. line_no .. ": " .. msg
  end
  return msg
end

local function handler(line_no)
  return function(err)
    local msg = report(err, line_no)
    local frames = {}
    local level = 2
    while true do
      local info = debug.getinfo(level, "Sln")
      -- below this file's own frame (the loop's xpcall) lies only bin/cupola
      if not info or info.source == SELF then break end
      if info.what ~= "C" and not util.internal_source(info.source) then
        local where = info.short_src .. ":" .. (info.currentline or 0)
        local what = info.what == "main" and "in main chunk"
          or (info.name and ("in function '" .. info.name .. "'") or "in a function")
        frames[#frames + 1] = "\t" .. where .. ": " .. what
      end
      level = level + 1
    end
    -- the REPL line alone says nothing the message does not
    if #frames > 1 then
      return msg .. "\nstack traceback:\n" .. table.concat(frames, "\n")
    end
    return msg
  end
end

-- ---- reading ----------------------------------------------------------------

-- The interpreter's readline (Lua 5.4's lua.c links it), found at run time
-- by the core (core._readline), on a terminal only: history and editing as
-- in Lua's own REPL.  Else a plain read.
-- Prompts only on a terminal: input piped in gives the results alone.
local tty = core._isatty ~= nil and core._isatty(0)
local readline = tty and core._readline or nil

local function read(prompt)
  if readline then
    local ok, line, found = pcall(readline, prompt)
    if ok and found ~= false then return line end
    readline = nil
  end
  if tty then
    io.write(prompt)
    io.flush()
  end
  return io.read "l"
end

-- Ctrl-C: Lua's interpreter (which runs this loop) turns it into the error
-- "interrupted!" at the next Lua instruction; while reading a line, that
-- drops the line being typed instead of ending the REPL.
local function read_line(prompt)
  local ok, line = pcall(read, prompt)
  if ok then return line end
  io.write "\n"
  return false
end

local function incomplete(err)
  return type(err) == "string" and err:find("<eof>$") ~= nil
end

-- The chunk for source: an expression (or a list of them) as an argument
-- of a function call, not as `return expr` (a tail call would take the
-- user's line off the stack); else the statements.  nil, err when it is
-- not Lua; nil, "incomplete" when more lines may complete it.
local function compile(source)
  local f = load("local __show = ...; __show(" .. source .. "\n)", "=" .. CHUNK, "t")
  if f then return f, true end
  local g, err = load(source, "=" .. CHUNK, "t")
  if g then return g, false end
  if incomplete(err) then return nil, "incomplete" end
  -- the statement's own message; line numbers count from 1 as typed
  return nil, err
end

--- repl.run(): the loop, until the end of input (Ctrl-D) or os.exit.
function repl.run()
  local p1 = function() return rawget(_G, "_PROMPT") or "> " end
  local p2 = function() return rawget(_G, "_PROMPT2") or ">> " end
  while true do
    local line = read_line(p1())
    if line == nil then
      if tty then io.write "\n" end
      return
    end
    local source = line and line:gsub("^=", "return ")
    local f, expr_or_err
    while source do
      f, expr_or_err = compile(source)
      if f or expr_or_err ~= "incomplete" then break end
      local more = read_line(p2())
      if not more then
        if more == false then f, expr_or_err = nil, "incomplete" end
        break
      end
      source = source .. "\n" .. more
    end
    if not source then
      -- Ctrl-C at the prompt: a new line
    elseif not f then
      io.stdout:flush()
      if expr_or_err ~= "incomplete" then io.stderr:write(expr_or_err, "\n") end
    else
      local results
      local ok, err = xpcall(function()
        if expr_or_err then
          f(function(...) results = table.pack(...) end)
        else
          results = table.pack(f()) -- `return x` prints x, as in Lua's REPL
        end
      end, handler(1))
      if not ok then
        io.stdout:flush() -- what the line printed first comes first
        io.stderr:write(err, "\n")
      elseif results and results.n > 0 then
        repl.print(table.unpack(results, 1, results.n))
      end
      io.stdout:flush()
    end
  end
end

--- repl.help(topic): prints cupola.help(topic) (the REPL's global `help`).
function repl.help(topic)
  io.write(require("cupola.help").text(topic), "\n")
end

--- repl.start(): the banner, the globals `help` and `show`, then the loop.
function repl.start()
  rawset(_G, "help", repl.help)
  rawset(_G, "show", repl.print)
  io.write(require("cupola.help").banner(), "\n")
  io.flush()
  repl.run()
end

return repl
