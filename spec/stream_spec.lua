-- Streams and events: asynchrony, ordering, timing, errors.  Runs on both
-- backends: the host backend gives real asynchrony with worker threads.
local cupola = require "cupola"
local spin = cupola.kernels.spin

describe("streams", function()
  it("have the contract's type name, tostring and default stream", function()
    local s <close> = cupola.stream()
    assert.equals("cupola.Stream", getmetatable(s).__name)
    assert.matches("^cupola.Stream", tostring(s))
    assert.equals("cupola.Stream (default)", tostring(cupola.default_stream))
    assert.is_true(cupola.default_stream.default)
  end)

  -- (while_spinning: the checks count only when made before the spin could
  -- have ended, so that load alone cannot fail them; spin returning before
  -- its work ends is what makes that possible at all)
  it("run work asynchronously: spin returns at once and query tells", function()
    local s <close> = cupola.stream()
    local idle, t0, us = while_spinning(50000, function(us)
      local t = cupola.clock()
      spin(us, { stream = s })
      return s:query(), t, us
    end)
    assert.is_false(idle)
    s:synchronize()
    assert.is_true(s:query())
    assert.is_true(cupola.clock() - t0 >= 0.9 * us / 1e6)
  end)

  it("order a waiting stream after an event of another", function()
    local a <close> = cupola.stream()
    local b <close> = cupola.stream()
    local e <close> = cupola.event()
    local idle = while_spinning(40000, function(us)
      spin(us, { stream = a })
      e:record(a)
      b:wait(e)
      spin(1, { stream = b })
      return b:query()
    end)
    assert.is_false(idle)
    b:synchronize()
    assert.is_true(e:query())
    assert.is_true(a:query())
  end)

  it("accept priorities in the device's range and blocking flags", function()
    local d = cupola.device()
    local lo, hi = d.priority_least, d.priority_greatest
    local s1 <close> = cupola.stream { priority = hi, blocking = true }
    local s2 <close> = cupola.stream { priority = lo, blocking = false }
    s1:synchronize()
    s2:synchronize()
  end)

  it("order blocking streams with the default stream, but not non-blocking ones", function()
    local blocking <close> = cupola.stream { blocking = true }
    local nonblocking <close> = cupola.stream { blocking = false }
    -- On the legacy default stream; long enough to outlast the calls below
    -- even when a sanitizer slows them.
    local function run(us)
      spin(us)
      spin(1, { stream = nonblocking })
      nonblocking:synchronize()
      return cupola.default_stream:query()
    end
    if not SERIALIZED then
      assert.is_false(while_spinning(SLOW and 3000000 or 60000, run),
        "non-blocking stream must not wait for the default stream")
    else -- (kernels run one at a time: the synchronize waits for the spin)
      run(60000)
    end
    spin(1, { stream = blocking })
    blocking:synchronize()
    assert.is_true(cupola.default_stream:query(), "blocking stream work waits for prior default-stream work")
  end)

  it("close safely twice and refuse use after close", function()
    local s = cupola.stream()
    s:close()
    s:close()
    assert.is_true(s.closed)
    assert.has_error(function() s:synchronize() end, "attempt to use a closed cupola.Stream")
    assert.has_error(function() spin(1, { stream = s }) end, "attempt to use a closed cupola.Stream")
  end)

  it("reject unknown options and wrong types", function()
    assert.error_matches(function() cupola.stream { prio = 1 } end, "unknown option 'prio'")
    assert.error_matches(function() cupola.stream { blocking = 1 } end, "'blocking' must be a boolean")
    assert.error_matches(function() cupola.stream(5) end, "table expected")
  end)

  it("close through <close>", function()
    local s
    do
      local t <close> = cupola.stream()
      s = t
    end
    assert.is_true(s.closed)
  end)
end)

describe("events", function()
  it("measure elapsed time between markers", function()
    local s <close> = cupola.stream()
    local a <close> = cupola.event()
    local b <close> = cupola.event { timing = true }
    a:record(s)
    spin(20000, { stream = s })
    b:record(s)
    b:synchronize()
    local ms = a:elapsed(b)
    -- (the upper bound only catches nonsense: a loaded machine stretches a spin)
    assert.is_true(ms >= 15 and ms < 30000, "elapsed " .. ms)
    assert.is_true(a:query() and b:query())
  end)

  it("report query false while pending", function()
    local s <close> = cupola.stream()
    local e <close> = cupola.event { timing = false }
    assert.is_false(while_spinning(30000, function(us)
      spin(us, { stream = s })
      e:record(s)
      return e:query()
    end))
    e:synchronize()
    assert.is_true(e:query())
  end)

  it("refuse elapsed without timing or without a record", function()
    local a <close> = cupola.event { timing = false }
    local b <close> = cupola.event()
    a:record()
    b:record()
    b:synchronize()
    assert.error_matches(function() a:elapsed(b) end, "timing")
    local c <close> = cupola.event()
    assert.has_error(function() c:elapsed(b) end)
    assert.has_error(function() b:elapsed(c) end)
  end)

  it("count as done when never recorded, as CUDA does", function()
    local e <close> = cupola.event()
    assert.is_true(e:query())
    e:synchronize()
  end)

  -- The host backend completes a marker on an idle stream as it is
  -- recorded, as a GPU with nothing queued does within microseconds; it was
  -- left to the stream's worker thread, so a query right after it said
  -- false for as long as the host took to wake the thread, and a replay's
  -- cross-stream reuse (which asks that) followed the host's load.
  it("recorded on an idle host stream, are done at once (the answer does not wait for a thread)", function()
    if cupola.backend() ~= "host" then return pending "the host backend's scheduling" end
    local s <close> = cupola.stream()
    local e <close> = cupola.event { timing = true }
    for _ = 1, 200 do
      e:record(s)
      assert.is_true(e:query())
    end
    e:record()
    assert.is_true(e:query())
    -- and after work, only once the work is done
    assert.is_false(while_spinning(30000, function(us)
      spin(us, { stream = s })
      e:record(s)
      return e:query()
    end))
    s:synchronize()
    assert.is_true(e:query())
    -- a marker completed as recorded keeps its time
    local a <close> = cupola.event { timing = true }
    local b <close> = cupola.event { timing = true }
    a:record(s)
    spin(20000, { stream = s })
    s:synchronize()
    b:record(s)
    local ms = a:elapsed(b)
    assert.is_true(ms >= 15 and ms < 30000, "elapsed " .. ms)
  end)

  it("close safely twice", function()
    local e = cupola.event()
    e:close()
    e:close()
    assert.has_error(function() e:record() end, "attempt to use a closed cupola.Event")
  end)

  it("synchronize the whole device", function()
    local s <close> = cupola.stream()
    spin(20000, { stream = s })
    cupola.synchronize()
    assert.is_true(s:query())
  end)
end)
