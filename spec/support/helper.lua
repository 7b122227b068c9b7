-- Loaded by busted before every spec file.  GPU-only cases are declared with
-- gpu_it: on the CUDA backend they run (tagged #gpu); elsewhere they are
-- reported as pending, never silently skipped.
local cupola = require "cupola"

-- Both branches are tail calls: busted takes the place it reports for a case
-- from the frame that registered it, and a tail call leaves the spec's own
-- line there instead of this file's.
function _G.gpu_it(name, fn)
  local busted = require "busted"
  if cupola.backend() == "cuda" then
    return busted.it(name .. " #gpu", fn)
  end
  return busted.pending(name .. " #gpu (needs a CUDA device; backend is " .. cupola.backend() .. ")")
end

-- CUDA fixes its in-kernel malloc heap at the first launch of a kernel that
-- can call malloc: a kernel of one's own compiled for every pool kind, as
-- device_plugin_spec's are, fixes it at CUDA's 8 MiB.  docs/API.md's advice
-- ("create malloc pools first") is followed here for the whole suite: a
-- malloc pool of the largest capacity its specs use (device_pool_spec's
-- 512 MiB) sizes the heap before any spec runs, so that the order of the
-- spec files does not decide which of them finds the heap full.
if cupola.backend() == "cuda" then
  local dp = cupola.device_pool { kind = "malloc", capacity = 512 * 1024 * 1024 }
  dp:close()
end

-- CUPOLA_SLOW=1 (sanitizers, valgrind) relaxes assertions about how fast
-- the host returns: those tools slow every call, which is not what they check.
_G.SLOW = os.getenv "CUPOLA_SLOW" ~= nil

--- assert_fast(seconds, limit, what): that an operation returned quickly.
function _G.assert_fast(seconds, limit, what)
  if not SLOW then
    assert(seconds < limit, string.format("%s took %.3f s (limit %.3f s)", what, seconds, limit))
  end
end

--- while_spinning(us, run) -> run's results.  run(us) queues a spin of us
-- microseconds and observes what must hold while it runs (a stream not
-- idle, an event not complete, a call that returns before the work ends);
-- its results count only if run returned sooner than the spin could have
-- ended.  A machine busy with other work can deschedule this process past a
-- short spin, and a "still pending" check failed then by load alone: so
-- when run took too long, everything queued is waited for and run is tried
-- again with a spin four times longer (4 tries; a call that waits for the
-- spin never returns sooner, and fails after the last).
function _G.while_spinning(us, run)
  local cupola = require "cupola"
  if SLOW then us = us * 10 end -- a sanitizer or valgrind slows every call
  for _ = 1, 4 do
    local t0 = cupola.clock()
    local r = table.pack(run(us))
    if cupola.clock() - t0 < 0.8 * us / 1e6 then return table.unpack(r, 1, r.n) end
    cupola.synchronize()
    us = us * 4
  end
  error(string.format("while_spinning: the checks never ran before a spin of %d us ended", us // 4), 2)
end

-- CUPOLA_SERIALIZED=1: a tool (compute-sanitizer) runs kernels one at a
-- time, so work on different streams cannot overlap and assertions that
-- two streams run concurrently do not apply.
_G.SERIALIZED = os.getenv "CUPOLA_SERIALIZED" ~= nil

--- read_file(path) -> the whole file, read in binary.
function _G.read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read "a"
  f:close()
  return s
end

--- tmpfile(bytes) -> the path of a new temporary file holding bytes.
function _G.tmpfile(bytes)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end
