--- cupola.util: small pieces the Lua modules share (not part of the API).
local util = {}

-- The directory of cupola's Lua files: as error positions name it (short_src),
-- and as stack frames give it (source, never shortened).
local dir = debug.getinfo(1, "S").short_src:match "^(.*[/\\])" or ""
local source_dir = debug.getinfo(1, "S").source:match "^(@.*[/\\])"

-- Whether a stack frame is cupola's own, which an error must not point at:
-- a C function (cupola.core, or pcall between), Lua code in cupola's files,
-- or luassert's (cupola.busted's assertions run inside it).
local function internal(info)
  if info.what == "C" then return true end
  local src = info.source
  return (source_dir and src:sub(1, #source_dir) == source_dir) or src:find("/luassert/", 1, true) ~= nil
end

--- util.internal_source(source) -> whether a frame's source (debug.getinfo's
-- `source`) is one of cupola's Lua files.
function util.internal_source(source)
  return source_dir ~= nil and source:sub(1, #source_dir) == source_dir
end

--- util.raise(msg): raises msg at the first function on the stack outside
-- cupola (the user's line that called into cupola, however many of
-- cupola's own functions lie between), as luaL_error does for a C
-- function.  With no such function, msg goes without a position.
function util.raise(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info then level = 0 break end
    if not internal(info) then break end
    level = level + 1
  end
  error(msg, level)
end

--- util.at_caller(f, ...): calls f(...) (a function of cupola.core) and
-- returns its results; its error, if any, is raised with util.raise, its
-- position inside cupola's Lua files (where the core was called from)
-- taken off, so that the message points at the user's line.
function util.at_caller(f, ...)
  local r = table.pack(pcall(f, ...))
  if r[1] then return table.unpack(r, 2, r.n) end
  local e = r[2]
  if type(e) == "string" and dir ~= "" and e:sub(1, #dir) == dir then
    e = e:gsub("^[^\n]-:%d+: ", "", 1)
  end
  if type(e) ~= "string" then error(e, 0) end
  util.raise(e)
end

--- util.os_reason(err, path) -> the reason of an io.open failure without
-- the path io.open puts before it ("x.html: No such file or directory" ->
-- "No such file or directory"), for a message that names the path itself.
function util.os_reason(err, path)
  err = tostring(err)
  if path and err:sub(1, #path + 2) == path .. ": " then return err:sub(#path + 3) end
  return err
end

-- A string in a message shows at most this many characters (as in C).
local SHOWN_MAX = 40

--- util.shown(v) -> v as cupola's messages show a value (the C side's
-- l_pushshown): a string quoted and cut to 40 characters ("..." after),
-- control bytes escaped; numbers and booleans as Lua writes them; nil;
-- anything else by its type, a handle by its __name ("cupola.Pool").
function util.shown(v)
  local t = type(v)
  if t == "string" then
    -- characters, not bytes, where v is UTF-8: a cut never splits one
    local cut = (utf8.len(v) and utf8.offset(v, SHOWN_MAX + 1) or SHOWN_MAX + 1) - 1
    local s = v:sub(1, cut):gsub("[%c]", function(c)
      if c == "\n" then return "\\n" elseif c == "\t" then return "\\t" end
      return "\\" .. c:byte()
    end)
    return "'" .. s .. (#v > cut and "..." or "") .. "'"
  elseif t == "number" or t == "boolean" or t == "nil" then
    return tostring(v)
  end
  return util.typename(v)
end

--- util.typename(v) -> a handle's __name ("cupola.Pool"), else its Lua type.
function util.typename(v)
  local mt = getmetatable(v)
  if type(mt) == "table" and type(rawget(mt, "__name")) == "string" then return mt.__name end
  return type(v)
end

--- util.typed(v) -> "string 'x'", "number 5", "boolean true"; anything
-- else as util.shown ("nil", "table", "cupola.Stream").
function util.typed(v)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" then return t .. " " .. util.shown(v) end
  return util.shown(v)
end

--- util.got(v) -> for messages that named the type already ("row 2 is a
-- number, not a table"): ", got 5" to put after them, "" for a value that
-- is no more than its type (a table, a function, a handle).
function util.got(v)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" then return ", got " .. util.shown(v) end
  return ""
end

--- util.pool_config(cfg): a copy of a pool configuration without `name`,
-- which labels a replay's row or panel and which cupola.pool does not take.
function util.pool_config(cfg)
  local c = {}
  for k, v in pairs(cfg) do if k ~= "name" then c[k] = v end end
  return c
end

--- util.pool_spec(spec) -> cupola.pool options: a pool spec as
-- CUPOLA_TORCH_POOL, CUPOLA_CUPY_POOL and advise's rows write it
-- ("tlsf,reuse=stream,max=4GiB": the kind, then key=value items; a value in
-- double quotes may hold commas: torch,conf="expandable_segments:True,...").
-- Sizes stay strings (cupola.pool reads them); booleans and integers become
-- Lua's, as the kind's options say (cupola.pool_kinds); cupola.pool checks
-- the rest.
function util.pool_spec(spec)
  local c, types = {}, {}
  -- items end at commas outside double quotes
  local items, at, quoted = {}, 1, false
  for i = 1, #spec + 1 do
    local ch = spec:sub(i, i)
    if ch == '"' then
      quoted = not quoted
    elseif (ch == "," and not quoted) or i > #spec then
      items[#items + 1] = spec:sub(at, i - 1)
      at = i + 1
    end
  end
  for _, item in ipairs(items) do
    item = item:match "^%s*(.-)%s*$"
    if item ~= "" and not c.kind then
      c.kind = item
      local kind = require("cupola.core").pool_kinds()[item]
      for _, o in ipairs(kind and kind.options or {}) do types[o.name] = o.type end
    elseif item ~= "" then
      local k, v = item:match "^([%w_]+)%s*=%s*(.-)$"
      if not k then util.raise(("pool spec %q: item %q is not key=value"):format(spec, item)) end
      v = v:match '^"(.*)"$' or v
      if types[k] == "boolean" and (v == "true" or v == "false") then c[k] = v == "true"
      elseif (types[k] == "integer" or types[k] == "number") and tonumber(v) then c[k] = tonumber(v)
      else c[k] = v end
    end
  end
  return c
end

--- util.fraction(x, k, up) -> x (in (0, 1)) as a decimal of k significant
-- digits, rounded up (up) or down, as the number its text reads as (what a
-- framework parses from an environment variable), and its text.
function util.fraction(x, k, up)
  local e = math.floor(math.log(x, 10))
  local scale = 10 ^ (k - 1 - e)
  local v = x * scale
  -- a product that lies a rounding error past a whole number is that number
  local n = up and math.ceil(v - 1e-9) or math.floor(v + 1e-9)
  local text = ("%." .. math.max(k - 1 - e, 0) .. "f"):format(n / scale)
  text = text:find "%." and text:gsub("0+$", ""):gsub("%.$", "") or text
  return tonumber(text), text
end

return util
