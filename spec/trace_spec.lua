-- Traces: RMM logging-adaptor CSV, plain or gzip, loaded and replayed in C.
local cupola = require "cupola"


-- What examples/traces/README.md says of each trace.
local known = {
  resnet50_train = { allocs = 2538, peak_live = 5830299792 },
  gpt2_train = { allocs = 4743, peak_live = 8044901064 },
  t5_train_varlen = { allocs = 22179, peak_live = 4854130272 },
}

describe("trace", function()
  it("loads a trace that ships with cupola by its name alone", function()
    local t <close> = cupola.trace.load "resnet50_train"
    assert.equals(known.resnet50_train.allocs, t.allocs)
    assert.equals(cupola.trace.find "resnet50_train", t.path)
  end)

  -- Bug fixed with this spec: examples/replay.lua printed the path found as
  -- ".../lua/cupola/../../examples/traces/gpt2_train.csv.gz" (138 columns).
  it("finds a shipped trace under a path without '..' or '.' in it", function()
    for _, name in ipairs { "gpt2_train", "resnet50_train.csv.gz", "torch/varlen.default.cpsnap.gz" } do
      local path = assert(cupola.trace.find(name))
      assert.not_matches("/%.%./", path)
      assert.not_matches("/%./", path)
      assert.not_matches("^%.%./", path)
      local f = assert(io.open(path, "rb"))
      f:close()
    end
  end)

  it("loads a shipped trace in a folder of the traces by its path there", function()
    local t <close> = cupola.trace.load "torch/varlen.default.cpsnap.gz"
    assert.equals(cupola.trace.find "torch/varlen.default.cpsnap.gz", t.path)
    assert.equals("torch_snapshot", t.format)
    -- a path that is neither a file nor a shipped trace keeps the loader's message
    local ok, err = pcall(cupola.trace.load, "torch/no_such.cpsnap.gz")
    assert.is_false(ok)
    assert.matches("torch/no_such.cpsnap.gz: cannot open", err, 1, true)
  end)

  it("says a replay is incomplete when the pool refused allocations, in the result, report and timeline", function()
    local t <close> = cupola.trace.load "gpt2_train"
    local small <close> = cupola.pool { kind = "tlsf", upstream = "virtual", max = "2GiB" }
    local r = cupola.trace.replay(t, small, { record = true })
    assert.is_true(r.failed > 0)
    assert.is_false(r.complete)
    assert.matches("incomplete replay: the pool refused " .. r.failed .. " of the trace's allocations", r.warning, 1, true)
    r.name = "small"
    assert.matches("\nwarning: small: incomplete replay", cupola.report.records({ r }, { "name", "failed" }), 1, true)
    local path = os.tmpname()
    cupola.timeline(r, path)
    local f = assert(io.open(path))
    local page = f:read "a"
    f:close()
    os.remove(path)
    assert.matches('<p class="warning">warning: incomplete replay', page, 1, true)
    local big <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local ok = cupola.trace.replay(t, big)
    assert.is_true(ok.complete)
    assert.is_nil(ok.warning)
    assert.not_matches("warning", cupola.report.records({ ok }, { "failed" }), 1, true)
  end)

  it("keeps trace.find's message when load is given find's failure", function()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() local t = cupola.trace.load(cupola.trace.find "no_such_trace"); return t end)
    assert.is_false(ok)
    assert.matches("trace_spec.lua:" .. line .. ": no trace named no_such_trace ships with cupola; looked in ", err, 1, true)
    ok, err = pcall(function() return cupola.trace.load "no_such_trace" end)
    assert.is_false(ok)
    assert.matches("cannot open 'no_such_trace' (no such file), and no trace named no_such_trace", err, 1, true)
    -- the folders as people read them (issue 43, polish: "lua/cupola/../../examples/traces")
    assert.is_nil(err:find("/../", 1, true), err)
    assert.is_nil(select(2, cupola.trace.find "no_such_trace"):find("/../", 1, true))
  end)

  for name, want in pairs(known) do
    it("loads " .. name .. " with the figures its README gives", function()
      local t <close> = cupola.trace.load(assert(cupola.trace.find(name)))
      assert.equals("cupola.Trace", getmetatable(t).__name)
      assert.equals(want.allocs, t.allocs)
      assert.equals(want.peak_live, t.peak_live)
      assert.equals(t.allocs + t.frees, #t)
      local e = t:event(1)
      assert.equals("allocate", e.action)
      assert.is_true(e.size > 0)
    end)

    it("replays " .. name .. " on every allocator over the virtual upstream", function()
      local t <close> = cupola.trace.load(assert(cupola.trace.find(name)))
      for _, kind in ipairs { "freelist", "tlsf", "caching" } do
        local p <close> = cupola.pool { kind = kind, upstream = "virtual" }
        local r = cupola.trace.replay(t, p)
        assert.equals(#t, r.events)
        assert.equals(0, r.failed)
        assert.equals(want.peak_live, r.peak_live)
        assert.is_true(r.peak_reserved >= r.peak_live)
        assert.is_true(r.reserved_over_live >= 1 and r.reserved_over_live < 2, kind .. " " .. r.reserved_over_live)
        assert.is_true(r.ns_per_event > 0)
        assert.equals(0, p:stats().used, "the replay leaves the pool empty")
      end
    end)
  end

  it("reads plain CSV too, and replays it on several streams", function()
    local path = tmpfile(table.concat({
      "Thread,Time,Action,Pointer,Size,Stream",
      "0,0.0,allocate,0x1000,4096,0x0",
      "0,1.0,allocate,0x2000,8192,0x7f00",
      "0,2.0,free,0x1000,4096,0x0",
      "0,3.0,free,0x2000,8192,0x7f00",
    }, "\n") .. "\n")
    local t <close> = cupola.trace.load(path)
    os.remove(path)
    assert.equals(4, #t)
    assert.equals(2, t.streams)
    assert.equals(12288, t.peak_live)
    local p <close> = cupola.pool { kind = "tlsf", upstream = "device" }
    local r = cupola.trace.replay(t, p, { ["repeat"] = 3 })
    assert.equals(12, r.events)
    assert.equals(0, r.failed)
  end)

  it("counts allocations the pool refuses and carries on", function()
    local path = tmpfile("Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,8388608,0x0\n"
      .. "0,1,allocate,0x20,1024,0x0\n0,2,free,0x10,8388608,0x0\n0,3,free,0x20,1024,0x0\n")
    local t <close> = cupola.trace.load(path)
    os.remove(path)
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", max = "1MiB" }
    local r = cupola.trace.replay(t, p)
    assert.equals(1, r.failed)
    assert.equals(1, r.skipped_frees)
  end)

  local malformed = {
    { "Thread,Time,Action\n", "header" },
    { "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,12,0x0\n0,1,borrow,0x10,12,0x0\n", ":3:" },
    { "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0xZZ,12,0x0\n", ":2:" },
    { "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,twelve,0x0\n", ":2:" },
    { "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10\n", ":2:" },
    { "Thread,Time,Action,Pointer,Size,Stream\n0,0,free,0x10,12,0x0\n", ":2:" },
    { "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,12,0x0\n0,0,allocate,0x10,12,0x0\n", ":3:" },
  }
  for i, case in ipairs(malformed) do
    it("rejects malformed input " .. i .. " with the line and the reason", function()
      local path = tmpfile(case[1])
      local ok, err = pcall(cupola.trace.load, path)
      os.remove(path)
      assert.is_false(ok)
      assert.matches(case[2], err, 1, true)
    end)
  end

  it("rejects a missing file and a truncated gzip stream", function()
    assert.has_error(function() cupola.trace.load "/nonexistent/trace.csv" end)
    local f = assert(io.open(assert(cupola.trace.find "gpt2_train"), "rb"))
    local data = f:read "a"
    f:close()
    local path = tmpfile(data:sub(1, #data // 2))
    local ok, err = pcall(cupola.trace.load, path)
    os.remove(path)
    assert.is_false(ok)
    assert.is_string(err)
  end)

  it("compare labels rows with a config's name (it was passed to cupola.pool, which refused it)", function()
    local t = cupola.trace.load(cupola.trace.find "resnet50_train")
    local rows = cupola.trace.compare(t, { { name = "mine", kind = "tlsf", upstream = "virtual" } })
    assert.equal("mine", rows[1].name)
    assert.equal("tlsf", rows[1].kind)
  end)

  it("compares allocators in one call", function()
    local t <close> = cupola.trace.load(assert(cupola.trace.find "resnet50_train"))
    local rows = cupola.trace.compare(t, { { kind = "tlsf", upstream = "virtual" }, { kind = "caching", upstream = "virtual" } })
    assert.equals(2, #rows)
    assert.equals("tlsf", rows[1].kind)
    assert.equals("caching", rows[2].name)
  end)
end)

-- Sizes and their sums reach Lua as integers (signed 64-bit): a trace whose
-- figures would pass 2^63-1 used to load with negative ones (two rows of
-- 2^63-1: peak_live = total_bytes = -2) and replay to a negative peak.
describe("trace sizes and sums", function()
  local H = "Thread,Time,Action,Pointer,Size,Stream\n"
  local function load(body)
    local path = tmpfile(H .. body)
    local ok, t = pcall(cupola.trace.load, path)
    os.remove(path)
    return ok, t
  end

  it("refuses a live sum past 2^63-1, naming the line", function()
    local ok, err = load("0,1,allocate,0x1000,9223372036854775807,0x0\n"
      .. "0,2,allocate,0x2000,9223372036854775807,0x0\n")
    assert.is_false(ok)
    assert.matches(":3: the live bytes (9223372036854775807 bytes) plus this size "
      .. "(9223372036854775807) passes 2^63-1", err, 1, true)
    ok, err = load("0,1,allocate,0x1000,4611686018427387904,0x0\n"
      .. "0,2,allocate,0x2000,4611686018427387904,0x0\n")
    assert.is_false(ok)
    assert.matches(":3: the live bytes", err, 1, true)
  end)

  it("refuses a total past 2^63-1 even when the live bytes stay below", function()
    local ok, err = load("0,1,allocate,0x1000,6000000000000000000,0x0\n"
      .. "0,2,free,0x1000,,0x0\n0,3,allocate,0x1000,6000000000000000000,0x0\n")
    assert.is_false(ok)
    assert.matches(":4: the total of the allocation sizes (6000000000000000000 bytes)", err, 1, true)
  end)

  it("refuses sizes above 2^63-1 and of 0; takes exactly 2^63-1", function()
    local ok, err = load("0,1,allocate,0x1000,9223372036854775808,0x0\n")
    assert.is_false(ok)
    assert.matches(":2: size 9223372036854775808 is above 2^63-1", err, 1, true)
    ok, err = load("0,1,allocate,0x1000,99999999999999999999999,0x0\n")
    assert.is_false(ok)
    assert.matches(":2: size 99999999999999999999999 is above 2^63-1", err, 1, true)
    ok, err = load("0,1,allocate,0x1000,0,0x0\n")
    assert.is_false(ok)
    assert.matches(":2: an allocate of size 0", err, 1, true)
    ok, err = load("0,1,allocate,0x1000,-5,0x0\n")
    assert.is_false(ok)
    assert.matches(":2: size is not a number ('-5')", err, 1, true)
    local t
    ok, t = load("0,1,allocate,0x1000,9223372036854775807,0x0\n0,2,free,0x1000,0,0x0\n")
    assert.is_true(ok, t)
    assert.equals(math.maxinteger, t.peak_live)
    assert.equals(math.maxinteger, t.total_bytes)
    assert.equals(math.maxinteger, t.max_size)
    -- A pool cannot serve it (the virtual upstream's address space is 2^63
    -- bytes; it used to hand out 2^63 twice): refused, never a wrapped figure.
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local r = cupola.trace.replay(t, p)
    assert.equals(1, r.failed)
    assert.is_true(r.peak_reserved >= 0)
    t:close()
  end)

  it("replays a trace of large sizes with exact, non-negative figures", function()
    -- Three blocks of 2^61 live at once: 3 * 2^61 bytes, within 2^63-1.
    local s = 1 << 61
    local ok, t = load(("0,1,allocate,0x1000,%d,0x0\n0,2,allocate,0x2000,%d,0x0\n"
      .. "0,3,allocate,0x3000,%d,0x0\n0,4,free,0x1000,,0x0\n0,5,free,0x2000,,0x0\n"
      .. "0,6,free,0x3000,,0x0\n"):format(s, s, s))
    assert.is_true(ok, t)
    assert.equals(3 * s, t.peak_live)
    for _, kind in ipairs { "arena", "freelist", "tlsf", "caching" } do
      local p <close> = cupola.pool { kind = kind, upstream = "virtual" }
      local r = cupola.trace.replay(t, p)
      assert.equals(0, r.failed, kind)
      assert.equals(3 * s, r.peak_live, kind)
      assert.is_true(r.peak_reserved >= r.peak_live, kind)
      assert.equals(0, p:stats().used, kind)
    end
    t:close()
  end)

  it("takes an empty free size as missing: the allocation's (the docs said so)", function()
    local ok, t = load("0,1,allocate,0x1000,4096,0x0\n0,2,free,0x1000,,0x0\n"
      .. "0,3,allocate,0x2000,100,0x0\n0,4,free,0x2000,0,0x0\n")
    assert.is_true(ok, t)
    assert.equals(4096, t:event(2).size)
    assert.equals(100, t:event(4).size)
    assert.equals(4096, t.peak_live)
    t:close()
    -- An allocate's size is not optional.
    local err
    ok, err = load("0,1,allocate,0x1000,,0x0\n")
    assert.is_false(ok)
    assert.matches(":2: size is missing", err, 1, true)
  end)

  it("names a NUL byte and its line (it was called 'line too long')", function()
    local ok, err = load("0,1,allocate,0x1000,4096,0x0\n0,2,fr\0ee,0x1000,4096,0x0\n")
    assert.is_false(ok)
    assert.matches(":3: a NUL byte in the line", err, 1, true)
    -- On the last line, without its newline, it used to be cut off silently.
    ok, err = load("0,1,allocate,0x1000,4096,0x0\n0,2,free,0x1000,4096,0x0\0junk")
    assert.is_false(ok)
    assert.matches(":3: a NUL byte in the line", err, 1, true)
    local path = tmpfile("Thread,Time,Action,Pointer,Size,Stream\0\n")
    ok, err = pcall(cupola.trace.load, path)
    os.remove(path)
    assert.is_false(ok)
    assert.matches(":1: a NUL byte in the line", err, 1, true)
    -- A long line is still called that.
    ok, err = load("0,1,allocate,0x1000," .. ("1"):rep(2000) .. ",0x0\n")
    assert.is_false(ok)
    assert.matches(":2: line too long", err, 1, true)
  end)

  it("refuses threads above 2^32-1 and times that are not finite (they were cut, or counted per row)", function()
    for _, c in ipairs {
      { "18446744073709551615,1,allocate,0x10,5,0x0\n", ":2: thread is above 2^32-1" },
      { "4294967296,1,allocate,0x10,5,0x0\n", ":2: thread is above 2^32-1" },
      { "0,nan,allocate,0x10,5,0x0\n", ":2: time is not a finite number ('nan')" },
      { "0,-inf,allocate,0x10,5,0x0\n", ":2: time is not a finite number ('-inf')" },
    } do
      local ok, err = load(c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    local ok, t = load("4294967295,1,allocate,0x10,5,0x0\n4294967295,2,free,0x10,5,0x0\n")
    assert.is_true(ok, t)
    assert.equals(4294967295, t:event(2).thread)
    assert.equals(1, t.threads)
    t:close()
  end)

  it("refuses a path with a NUL byte (it opened the part before it)", function()
    local path = tmpfile(H .. "0,1,allocate,0x1000,4096,0x0\n")
    assert.error_matches(function() cupola.trace.load(path .. "\0.other") end,
      "bad argument #1 to 'load' (path contains a NUL byte, got '" .. path:sub(1, 40), 1, true)
    os.remove(path)
  end)
end)

-- The trace's own time in a replay: byte-seconds, and the pool's clock.
describe("trace time in a replay", function()
  local MiB = 1024 * 1024
  local H = "Thread,Time,Action,Pointer,Size,Stream\n"
  local function load(body)
    local path = tmpfile(H .. body)
    local t = cupola.trace.load(path)
    os.remove(path)
    return t
  end

  -- 1 MiB from 0 s, 2 MiB from 1 s; the first freed at 3 s, the second at
  -- 4 s: live 1 MiB for 1 s, 3 MiB for 2 s, 2 MiB for 1 s
  local BODY = "0,0,allocate,0x10,1048576,0x0\n0,1000000,allocate,0x20,2097152,0x0\n" ..
    "0,3000000,free,0x10,1048576,0x0\n0,4000000,free,0x20,2097152,0x0\n"

  it("integrates live and reserved bytes over the trace's seconds, for every pool", function()
    local t <close> = load(BODY)
    for _, kind in ipairs { "arena", "freelist", "tlsf", "caching", "vmm" } do
      local p <close> = cupola.pool { kind = kind, upstream = "virtual" }
      local r = cupola.trace.replay(t, p)
      assert.near(9 * MiB, r.live_byte_seconds, 1e-6 * MiB, kind)
      assert.is_true(r.reserved_byte_seconds >= r.live_byte_seconds, kind)
      assert.is_true(r.reserved_byte_seconds <= 4 * r.peak_reserved + 1e-6, kind)
    end
  end)

  it("integrates a vmm pool's pages exactly, and sums repetitions", function()
    local t <close> = load(BODY)
    local p <close> = cupola.pool { kind = "vmm", upstream = "virtual", release_threshold = math.maxinteger }
    -- the first block's page from 0 s; the second lies across it and the
    -- next one: two pages from 1 s to the end
    local r = cupola.trace.replay(t, p)
    assert.equals(14 * MiB, r.reserved_byte_seconds)
    -- again, twice: both pages stay mapped, 4 MiB from 0 s in each
    -- repetition, and the repetitions add up
    local r2 = cupola.trace.replay(t, p, { ["repeat"] = 2 })
    assert.equals(2 * 16 * MiB, r2.reserved_byte_seconds)
    assert.equals(18 * MiB, r2.live_byte_seconds)
  end)

  -- Freed at 1 s, then nothing until an allocation at 100 s: a pool whose
  -- clock reads the trace has seen its pages idle for 99 s (far past the
  -- window of a 64-page pool), one whose clock is its own has not.
  local IDLE = "0,0,allocate,0x10,134217728,0x0\n0,1000000,free,0x10,134217728,0x0\n" ..
    "0,100000000,allocate,0x20,1024,0x0\n0,100000001,free,0x20,1024,0x0\n"

  it("gives the pool the trace's seconds with clock = 'trace'", function()
    local t <close> = load(IDLE)
    local p <close> = cupola.pool { kind = "vmm", upstream = "virtual", clock = "manual" }
    local r = cupola.trace.replay(t, p, { clock = "trace" })
    -- demand 1 page at 100 s, 1 + 1 kept: 62 of the 64 pages released
    assert.equals(62, r.unmaps)
    assert.equals(2 * 2 * MiB, p:stats().reserved)
    assert.near(100.000001, p:time(), 1e-9, "the clock stays where the trace left it")
    -- a wall-clock pool: the same, and its clock runs on from there
    local w <close> = cupola.pool { kind = "vmm", upstream = "virtual" }
    local rw = cupola.trace.replay(t, w, { clock = "trace" })
    assert.equals(62, rw.unmaps)
    assert.equals("wall", w.clock)
    assert.is_true(w:time() >= 100, "the wall clock went on from the trace's end")
  end)

  it("leaves the pool its own clock by default", function()
    local t <close> = load(IDLE)
    -- a manual clock nobody moves: no time passes, nothing is released
    local p <close> = cupola.pool { kind = "vmm", upstream = "virtual", clock = "manual" }
    local r = cupola.trace.replay(t, p)
    assert.equals(0, r.unmaps)
    assert.equals(0, p:time())
    -- the wall clock: the replay takes microseconds, not 100 s
    local w <close> = cupola.pool { kind = "vmm", upstream = "virtual" }
    local rw = cupola.trace.replay(t, w, { clock = "pool" })
    assert.equals(0, rw.unmaps)
    assert.is_true(w:time() < 50)
    -- both integrate over the trace's time all the same
    assert.equals(r.reserved_byte_seconds, rw.reserved_byte_seconds)
  end)

  it("refuses an unknown clock", function()
    local t <close> = load(BODY)
    local p <close> = cupola.pool { upstream = "virtual" }
    assert.has_error(function() cupola.trace.replay(t, p, { clock = "wall" }) end,
      "cupola.trace.replay: option 'clock' must be one of pool, trace, not 'wall'")
    assert.error_matches(function() cupola.trace.replay(t, p, { clock = 1 }) end,
      "option 'clock' must be a string, not number", 1, true)
  end)
end)
