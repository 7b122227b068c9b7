-- Runs a Lua script in a child process (lua5.4) with this process's module
-- paths, for specs whose subject is the process itself: exit with live
-- objects, os.exit, or a sequence of calls that might crash it.
--   local run_child = require "spec.support.child"
--   local code, stdout, stderr = run_child(script)
--   run_child(script, { CUPOLA_HOST_DEVICES = "2" }, args): with extra
--   environment variables and command-line arguments (strings, quoted here)
-- CUPOLA_CHILD_WRAP (set by make test-valgrind) runs the child under a tool,
-- so its errors and leaks show up on its stderr.  Under a preloaded libtsan
-- /bin/sh crashes: run_child.available is false there and callers make their
-- cases pending.
local function shquote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function run_child(script, env, args)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(string.format("package.path = %q .. package.path\npackage.cpath = %q .. package.cpath\n",
    "lua/?.lua;lua/?/init.lua;", package.cpath .. ";"))
  f:write(script)
  f:close()
  local err = os.tmpname()
  local wrap = os.getenv "CUPOLA_CHILD_WRAP" or ""
  local pre, post = {}, {}
  for k, v in pairs(env or {}) do pre[#pre + 1] = k .. "=" .. shquote(v) end
  for _, a in ipairs(args or {}) do post[#post + 1] = shquote(a) end
  local p = io.popen(string.format("%s %s lua5.4 %s %s 2>%s", table.concat(pre, " "), wrap, path,
    table.concat(post, " "), err))
  local out = p:read "a"
  local _, how, code = p:close()
  local ef = io.open(err)
  local errtext = ef and ef:read "a" or ""
  if ef then ef:close() end
  os.remove(path)
  os.remove(err)
  -- a child killed by a signal: sh reports 128 + the signal number
  return code, out, errtext, how
end

return setmetatable({ available = not (os.getenv "LD_PRELOAD" or ""):find("tsan", 1, true) },
  { __call = function(_, script, env, args) return run_child(script, env, args) end })
