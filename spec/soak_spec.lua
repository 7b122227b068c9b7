-- A short run of the soak (spec/soak/soak.lua) in a child process:
-- the same mix and checks as `make soak`, for a few seconds, so that make
-- test keeps the soak itself working.  The long run is `make soak` (CI: 150 s
-- on the host; the GPU: CUPOLA_BACKEND=cuda make soak SOAK_SECONDS=300).
local cupola = require "cupola"
local run_child = require "spec.support.child"

describe("soak", function()
  local body = function()
    local f = assert(io.open "spec/soak/soak.lua")
    local src = f:read "a"
    f:close()
    local env = { MALLOC_MMAP_THRESHOLD_ = "65536", MALLOC_TRIM_THRESHOLD_ = "131072" }
    if cupola.backend() == "host" then
      env.CUPOLA_HOST_DEVICES = "2"
      env.CUPOLA_BACKEND = "host"
    end
    -- sanitizers and valgrind hold freed memory back: the data checks only
    if SLOW then env.SOAK_NO_FLAT = "1" end
    local rc, out, err = run_child(src:gsub("^#![^\n]*", ""), env, { SLOW and "3" or "5", "7" })
    local p, fl = out:match "\n(%d+) passed, (%d+) failed\n$"
    assert(p, "no summary line:\n" .. out .. err)
    assert.equals("0", fl, out .. err)
    assert.is_true(tonumber(p) > 10, out)
    assert.matches("kernels.verify", out)
    assert.matches("module check", out)
    assert.equals(0, rc, out .. err)
  end
  -- Bug fixed with this case: an error inside the run was printed only in the
  -- summary, after the cleanup, and the cleanup itself raised first ("closing
  -- a pool at the end: ... live buffer") because the blocks the run held were
  -- never freed, so the first error was lost (on two H200s it hid a launch on
  -- the wrong device's context).
  local function injected()
    local f = assert(io.open "spec/soak/soak.lua")
    local src = f:read "a"
    f:close()
    local env = { SOAK_FAIL_AFTER = "100", SOAK_NO_FLAT = "1", SOAK_QUIET = "1" }
    if cupola.backend() == "host" then env.CUPOLA_BACKEND = "host" end
    -- a long run: the injected error, not the clock, ends it (also under valgrind)
    local rc, out, err = run_child(src, env, { "600", "3" })
    assert.matches("FAILED: unexpected error after 100 operations: [^\n]*injected failure", out)
    -- that error is the only failure: every block was freed and every pool closed
    assert.matches("\n%d+ passed, 1 failed\n$", out, out .. err)
    assert.not_matches("closing a pool", out)
    assert.not_equals(0, rc)
  end
  if run_child.available then
    it("a few seconds of everything at once: data intact, memory flat, 0 failed", body)
    it("an error during the run is reported at once, and the cleanup still frees and closes everything", injected)
  else
    pending("the soak smoke (needs a child process, unavailable under this tool)")
  end
end)
