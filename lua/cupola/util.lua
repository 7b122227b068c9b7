--- cupola.util: small pieces the Lua modules share (not part of the API).
local util = {}

-- The directory of cupola's Lua files, as error positions name it.
local dir = debug.getinfo(1, "S").short_src:match "^(.*[/\\])" or ""

--- util.at_caller(f, ...): calls f(...) and returns its result; its error,
-- if any, is raised at the caller of the function that called at_caller
-- (level 3 from here), without a position inside cupola's Lua files, so
-- that a message points at the user's line.
function util.at_caller(f, ...)
  local ok, r = pcall(f, ...)
  if ok then return r end
  if type(r) == "string" and dir ~= "" and r:sub(1, #dir) == dir then
    r = r:gsub("^[^\n]-:%d+: ", "", 1)
  end
  error(r, 3)
end

--- util.pool_config(cfg): a copy of a pool configuration without `name`,
-- which labels a replay's row or panel and which cupola.pool does not take.
function util.pool_config(cfg)
  local c = {}
  for k, v in pairs(cfg) do if k ~= "name" then c[k] = v end end
  return c
end

return util
