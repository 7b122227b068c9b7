-- bench/device_peers.lua's driver: an allocator's tests in child processes,
-- so that a measurement that faults or hangs takes only its own row down.
-- The allocator is spec/plugins/faulty.cu (PEERS_EXTRA): it faults at
-- 1024 B and never returns at 4096 B.  Checked: the rows before and after
-- each, a `fault` row naming what happened for each, the sizes after a
-- second fault in one test marked as not run, and the next test run.
local cupola = require "cupola"

local function sh(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

describe("bench/device_peers.lua drive", function()
  it("turns a fault and a hang into rows of their own and goes on", function()
    local dir = os.tmpname()
    os.remove(dir)
    local cmd = table.concat({ "CUPOLA_BACKEND=" .. cupola.backend(), "PEERS_SHORT=1", "PEERS_MEASURE_LIMIT=4",
      "PEERS_EXTRA=faulty=spec/plugins/faulty.cu", "PEERS_PLAN=" .. sh "thread=16,1024,4096,8192;pairs=16",
      "PEERS_SET=" .. sh "threads=256;warps=64;pair_threads=256;iterations=1;pair_probe=false",
      "lua5.4 bench/device_peers.lua . " .. sh(dir) .. " drive faulty 200 2>/dev/null" }, " ")
    local p = assert(io.popen(cmd))
    local said = p:read "a"
    p:close()
    assert.matches("drive faulty: 3 child process%(es%)", said)
    local f = assert(io.open(dir .. "/rows/faulty.jsonl"))
    local rows = {}
    for line in f:lines() do rows[#rows + 1] = require("dkjson").decode(line) end
    f:close()
    os.execute("rm -rf " .. sh(dir))
    local function row(test, size)
      for _, r in ipairs(rows) do
        if r.test == test and r.size == size then return r end
      end
    end
    assert.equal(0, row("thread", 16).failed)
    assert.matches("illegal", row("thread", 1024).fault:lower())
    assert.matches("no end after %d+ s", row("thread", 4096).fault)
    assert.equal("not run after two faults in this test", row("thread", 8192).skipped)
    assert.equal(0, row("pairs", 16).failed)
  end)
end)
