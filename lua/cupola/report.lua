--- cupola.report: plain-text tables and units for experiment output.
local report = {}
local util = require "cupola.util"
local typed, raise = util.typed, util.raise

local units = { "B", "KiB", "MiB", "GiB", "TiB" }

--- report.bytes(n) -> "4.00 MiB"
function report.bytes(n)
  if type(n) ~= "number" then
    raise("bad argument #1 to 'cupola.report.bytes' (number expected, got " .. typed(n) .. ")")
  end
  local i, v = 1, n
  while v >= 1024 and i < #units do
    v, i = v / 1024, i + 1
  end
  if i == 1 then return math.type(n) == "integer" and string.format("%d B", n) or string.format("%g B", n) end
  return string.format("%.2f %s", v, units[i])
end

--- report.table(headers, rows) -> string: columns aligned, numbers right.
-- rows are arrays of values (converted with tostring).
function report.table(headers, rows)
  for i, v in ipairs { headers, rows } do
    if type(v) ~= "table" then
      raise(("bad argument #%d to 'cupola.report.table' (table expected, got %s)"):format(i, typed(v)))
    end
  end
  for r, row in ipairs(rows) do
    if type(row) ~= "table" then
      raise(("bad argument #2 to 'cupola.report.table' (row %d is a %s, not a table%s)"):format(r, type(row), util.got(row)))
    end
  end
  local widths, cells = {}, {}
  local function measure(row)
    local out = {}
    for c, v in ipairs(row) do
      local s = type(v) == "number" and math.type(v) == "float" and string.format("%.3f", v) or tostring(v)
      out[c] = s
      widths[c] = math.max(widths[c] or 0, #s)
    end
    return out
  end
  local head = measure(headers)
  for r, row in ipairs(rows) do cells[r] = measure(row) end
  -- A column of numbers is right-aligned, its header too.
  local numeric_cols = {}
  for c = 1, #head do numeric_cols[c] = rows[1] and type(rows[1][c]) == "number" or nil end
  local function line(row, src)
    local parts = {}
    for c, s in ipairs(row) do
      local numeric = src and (src[c] == true or type(src[c]) == "number")
      parts[c] = numeric and string.rep(" ", widths[c] - #s) .. s or s .. string.rep(" ", widths[c] - #s)
    end
    return (table.concat(parts, "  "):gsub("%s+$", ""))
  end
  local out = { line(head, numeric_cols), (line((function()
    local d = {}
    for c = 1, #head do d[c] = string.rep("-", widths[c]) end
    return d
  end)())) }
  for r, row in ipairs(cells) do out[#out + 1] = line(row, rows[r]) end
  return table.concat(out, "\n")
end

-- ---- Results as data -------------------------------------------
-- Rows are records: the tables trace.replay, trace.compare and the bench
-- helpers return (one table, or a list of them).  Columns are the scalar
-- fields (numbers, strings, booleans) present in any row: first the naming
-- ones (name, kind, upstream), then the others in alphabetical order; nested
-- tables (a replay's `recording`) are left out of CSV and the aligned table.

local first_cols = { name = 1, kind = 2, upstream = 3 }

local function as_rows(rows, fname)
  if type(rows) ~= "table" then
    raise(("bad argument #1 to '%s' (a record or a list of records expected, got %s)"):format(
      fname or "?", typed(rows)))
  end
  if rows[1] == nil and next(rows) ~= nil then return { rows } end
  return rows
end

--- report.columns(rows) -> the column names, in order
function report.columns(rows)
  rows = as_rows(rows, "columns")
  local seen, cols = {}, {}
  for _, r in ipairs(rows) do
    for k, v in pairs(r) do
      local t = type(v)
      if type(k) == "string" and not seen[k] and (t == "number" or t == "string" or t == "boolean") then
        seen[k] = true
        cols[#cols + 1] = k
      end
    end
  end
  table.sort(cols, function(a, b)
    local fa, fb = first_cols[a] or 99, first_cols[b] or 99
    if fa ~= fb then return fa < fb end
    return a < b
  end)
  return cols
end

local function cell(v)
  if v == nil then return "" end
  if math.type(v) == "float" then return string.format("%.17g", v) end
  return tostring(v)
end

local function csv_field(s)
  if s:find '[,"\r\n]' then return '"' .. s:gsub('"', '""') .. '"' end
  return s
end

-- The optional path (argument #2) of csv and json: a string, checked before
-- any work (a number used to be taken as a file name, a table raised inside
-- io.open).
local function check_path(path, fname)
  if path ~= nil and type(path) ~= "string" then
    raise(("bad argument #2 to '%s' (a file name expected, got %s)"):format(fname, typed(path)))
  end
end

-- The optional columns: a list of strings.
local function check_columns(cols, arg, fname)
  if cols == nil then return end
  if type(cols) ~= "table" then
    raise(("bad argument #%d to '%s' (a list of column names expected, got %s)"):format(arg, fname, typed(cols)))
  end
  for i, c in ipairs(cols) do
    if type(c) ~= "string" then
      raise(("bad argument #%d to '%s' (column %d is a %s, not a string%s)"):format(arg, fname, i, type(c), util.got(c)))
    end
  end
end

--- report.csv(rows [, path]) -> the CSV text (written to path when given):
-- a header line, then one line per row (RFC 4180 quoting, full precision).
function report.csv(rows, path, opts)
  rows = as_rows(rows, "csv")
  check_path(path, "csv")
  if opts ~= nil and type(opts) ~= "table" then
    raise("bad argument #3 to 'csv' (options table expected, got " .. typed(opts) .. ")")
  end
  check_columns(opts and opts.columns, 3, "csv")
  local cols = (opts and opts.columns) or report.columns(rows)
  local out = {}
  local head = {}
  for i, c in ipairs(cols) do head[i] = csv_field(c) end
  out[1] = table.concat(head, ",")
  for _, r in ipairs(rows) do
    local line = {}
    for i, c in ipairs(cols) do line[i] = csv_field(cell(r[c])) end
    out[#out + 1] = table.concat(line, ",")
  end
  local text = table.concat(out, "\n") .. "\n"
  if path then
    local f, err = io.open(path, "w")
    if not f then raise("cupola.report.csv: cannot write " .. path .. ": " .. util.os_reason(err, path)) end
    f:write(text)
    f:close()
  end
  return text
end

-- Floats keep every digit (dkjson writes tostring's 14): a float becomes an
-- object whose __tojson gives "%.17g", which reads back to the same double.
local exact = { __tojson = function(self) return string.format("%.17g", self[1]) end }

-- Only plain data goes to JSON: handles (userdata) and functions are left out.
local function plain(v, depth)
  local t = type(v)
  if t == "table" then
    if depth > 32 then return nil end
    local o = {}
    for k, x in pairs(v) do
      if type(k) == "string" or math.type(k) == "integer" then o[k] = plain(x, depth + 1) end
    end
    return o
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return nil end
    if math.type(v) == "float" then return setmetatable({ v }, exact) end
    return v
  elseif t == "boolean" then
    return v
  elseif t == "string" then
    -- Binary strings (a recording's packed addresses) are not text: left out.
    return utf8.len(v) and v or nil
  end
  return nil
end

--- report.json(rows [, path]) -> the JSON text (written to path when given),
-- through Debian's lua-dkjson; a record stays an object, a list an array.
function report.json(rows, path)
  -- 42 used to be written as the JSON text "42"
  as_rows(rows, "json")
  check_path(path, "json")
  local ok, dkjson = pcall(require, "dkjson")
  if not ok then raise("cupola.report.json needs dkjson (Debian: apt-get install lua-dkjson)") end
  local text = dkjson.encode(plain(rows, 0), { indent = true }) .. "\n"
  if path then
    local f, err = io.open(path, "w")
    if not f then raise("cupola.report.json: cannot write " .. path .. ": " .. util.os_reason(err, path)) end
    f:write(text)
    f:close()
  end
  return text
end

--- report.records(rows [, columns]) -> an aligned table of records as a
-- string (report.table over report.columns), numbers right-aligned.
function report.records(rows, cols)
  rows = as_rows(rows, "records")
  check_columns(cols, 2, "records")
  cols = cols or report.columns(rows)
  local body = {}
  for i, r in ipairs(rows) do
    local line = {}
    for c, k in ipairs(cols) do
      local v = r[k]
      line[c] = v == nil and "" or v
    end
    body[i] = line
  end
  local text = report.table(cols, body)
  -- A record that carries a warning (an incomplete replay) says so under
  -- the table: its figures would otherwise read as good ones.
  local notes = {}
  for _, r in ipairs(rows) do
    if type(r.warning) == "string" then
      notes[#notes + 1] = "warning: " .. (r.name and (tostring(r.name) .. ": ") or "") .. r.warning
    end
  end
  if #notes > 0 then text = text .. "\n" .. table.concat(notes, "\n") end
  return text
end

--- report.progress(label, done, total, t0): a progress line on stderr, only
-- when stderr is a terminal and the work has run two seconds since t0
-- (cupola.clock()); done >= total erases it.  Returns whether it printed.
local core = require "cupola.core"
local shown = false
function report.progress(label, done, total, t0)
  -- checked before the terminal test: a wrong call fails in a log too
  if type(label) ~= "string" then raise("bad argument #1 to 'progress' (string expected, got " .. typed(label) .. ")") end
  for i, v in ipairs { done, total, t0 } do
    if type(v) ~= "number" then
      raise(("bad argument #%d to 'progress' (number expected, got %s)"):format(i + 1, typed(v)))
    end
  end
  if not core._isatty(2) then return false end
  if done >= total then
    if shown then io.stderr:write "\r\27[K" end
    shown = false
    return false
  end
  local el = core.clock() - t0
  if el < 2 then return false end
  shown = true
  io.stderr:write(string.format("\r%s: %d / %d (%.0f%%), %.1f s", label, done, total, 100 * done / total, el))
  io.stderr:flush()
  return true
end

return report
