-- busted helper for `make test-gc`: the usual helper, then the collector
-- at its most aggressive, so that every finalizer runs at the earliest
-- moment it legally can, in whatever order the collector picks:
--
--   * incremental mode with pause 0 and the smallest step: a new cycle
--     starts as soon as one ends, and the collector advances at (almost)
--     every allocation, including the ones made inside the C functions
--     (lua_newuserdatauv, luaL_Buffer) between acquiring a resource and
--     anchoring it;
--   * a full collection every CUPOLA_GC_EVERY (default 1000) VM
--     instructions, in the main thread and every coroutine (busted runs
--     tests in coroutines), so objects dropped in the middle of a spec are
--     finalized there, not at its end.
dofile "spec/support/helper.lua"

local every = tonumber(os.getenv "CUPOLA_GC_EVERY") or 1000

collectgarbage("incremental", 0, 1000, 0)

local function hook()
  collectgarbage()
end
debug.sethook(hook, "", every)

-- Hooks are per thread: install it in the coroutines created from now on.
local create, wrap = coroutine.create, coroutine.wrap
local function hooked(f)
  return function(...)
    debug.sethook(hook, "", every)
    return f(...)
  end
end
coroutine.create = function(f) return create(hooked(f)) end
coroutine.wrap = function(f) return wrap(hooked(f)) end

io.stderr:write(string.format("test-gc: incremental collector with pause 0, full collection every %d instructions\n", every))
