-- cupola.timeline: one self-contained HTML page from a trace, a
-- recorded replay, several pools, or a pool's log.  The drawing itself is
-- checked in a real browser by `make test-browser` (tests/browser).
local cupola = require "cupola"

local function readfile(path)
  local f = assert(io.open(path))
  local s = f:read "a"
  f:close()
  return s
end

local function self_contained(html)
  assert.matches("^<!DOCTYPE html>", html)
  assert.not_matches("<script[^>]+src=", html)
  assert.not_matches("<link", html)
  assert.not_matches("https?://", html)
  assert.not_matches("@import", html)
end

describe("timeline", function()
  local path
  before_each(function() path = os.tmpname() end)
  after_each(function() os.remove(path) end)

  it("draws a snapshot: live, PyTorch's reserved, blocks, the peak labelled", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    local p, info = cupola.timeline(t, path)
    assert.equals(path, p)
    assert.same({ panels = 1, events = 563, blocks = 283, bytes = info.bytes }, info)
    local html = readfile(path)
    self_contained(html)
    assert.matches('id="peak%-label%-1">peak live 227.10 MiB at event 227<', html)
    assert.matches("PyTorch reserved", html, 1, true)
    -- A frame label travels to the page for the hover.
    assert.matches("gen_snapshots.py:9 mlp_train", html, 1, true)
  end)

  -- Bug fixed with this spec: a replay's panel counted the requests its
  -- pool refused as live ("peak live 227.10 MiB" above a pool that held
  -- 200 MiB at most).
  it("a replay's live bytes are what its pool served, not what it refused", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    local pool <close> = cupola.pool { kind = "torch", upstream = "virtual", max = 200 * 2 ^ 20 }
    local r = t:replay(pool, { record = true, progress = false })
    assert.is_true(r.failed > 0)
    assert.is_true(r.peak_reserved <= 200 * 2 ^ 20)
    cupola.timeline(r, path, { trace = t })
    local live = readfile(path):match 'peak live ([%d.]+) MiB'
    assert.is_true(tonumber(live) * 2 ^ 20 <= r.peak_reserved, live)
    assert.matches(r.failed .. " allocations refused", readfile(path), 1, true)
    -- the trace's own: every request live
    cupola.timeline(t, path)
    assert.matches("peak live 227.10 MiB", readfile(path), 1, true)
  end)

  it("draws a recorded replay with the pool's reserved line", function()
    local t <close> = cupola.trace.load(cupola.trace.find "gpt2_train")
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local r = cupola.trace.replay(t, p, { record = true })
    assert.is_table(r.recording)
    assert.equals(#r.recording.events, #r.recording.reserved)
    assert.equals(t.allocs * 8, #r.recording.addresses)
    -- The recorded reserved bytes peak where the replay says.
    local peak = 0
    for _, v in ipairs(r.recording.reserved) do peak = math.max(peak, v) end
    assert.equals(r.peak_reserved, peak)
    local _, info = cupola.timeline(r, path)
    assert.equals(4743, info.blocks)
    local html = readfile(path)
    self_contained(html)
    assert.matches("pool reserved", html, 1, true)
  end)

  it("puts several allocators side by side", function()
    local t <close> = cupola.trace.load(cupola.trace.find "resnet50_train")
    local _, info = cupola.timeline(t, path, { pools = { { kind = "tlsf" }, { kind = "caching", name = "cache" },
      { kind = "arena" } } })
    assert.equals(3, info.panels)
    local html = readfile(path)
    assert.matches('id="panel%-3"', html)
    assert.matches("<h2>cache</h2>", html, 1, true)
    local rows = cupola.trace.compare(t, { { kind = "tlsf", upstream = "virtual" },
      { kind = "freelist", upstream = "virtual" } }, { record = true })
    local _, info2 = cupola.timeline(rows, path)
    assert.equals(2, info2.panels)
  end)

  it("draws a pool's log", function()
    local log = os.tmpname()
    do
      local p <close> = cupola.pool { kind = "freelist", upstream = "virtual", log = log }
      local a, b = p:alloc "1MiB", p:alloc "2MiB"
      a:free()
      b:free()
    end
    local _, info = cupola.timeline(nil, path, { log = log })
    os.remove(log)
    assert.equals(2, info.blocks)
    assert.matches("peak live 3.00 MiB at event 2", readfile(path), 1, true)
  end)

  it("escapes what it embeds", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    cupola.timeline(t, path, { title = "</script><b>x</b>&" })
    local html = readfile(path)
    assert.not_matches("</script><b>", html, 1, true)
    assert.matches("&lt;/script>&lt;b>x&lt;/b>&amp;", html, 1, true)
  end)

  it("raises on misuse", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    assert.has_error(function() cupola.timeline(42, path) end)
    assert.has_error(function() cupola.timeline(t, nil) end)
    assert.has_error(function() cupola.timeline(t, path, { colour = 1 }) end,
      "cupola.timeline: unknown option 'colour'")
    assert.has_error(function() cupola.timeline({ events = 1 }, path) end)
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local r = cupola.trace.replay(t, p)
    assert.has_error(function() cupola.timeline(r, path) end,
      "cupola.timeline: a replay result must come from trace.replay(t, pool, {record = true})")
  end)

  it("checks every option's type, naming the option (they failed inside, or went into the page)", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    local cases = {
      { { names = 5 }, "option 'names' must be a list of strings, not integer 5" },
      { { names = { "a", 7 } }, "option 'names' must be a list of strings, not a table holding a number" },
      { { pools = 5 }, "option 'pools' must be a list of pool configuration tables, not integer 5" },
      { { pools = { "tlsf" } }, "option 'pools' must be a list of pool configuration tables, not a table holding a string" },
      { { chart_height = "x" }, "option 'chart_height' must be an integer number of CSS pixels in 1..100000, not string" },
      { { band_height = 0 }, "option 'band_height' must be an integer number of CSS pixels in 1..100000, not integer 0" },
      { { chart_height = 1.5 }, "option 'chart_height' must be an integer number of CSS pixels in 1..100000, not number" },
      { { title = 5 }, "option 'title' must be a string, not integer 5" },
      { { log = true }, "option 'log' must be a path (string), not boolean" },
      { { trace = 5 }, "option 'trace' must be an open cupola.Trace, not integer 5" },
      { { width = 800 }, "unknown option 'width'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(function() local r = cupola.timeline(t, path, c[1]); return r end)
      assert.is_false(ok)
      assert.matches("cupola.timeline: " .. c[2], err, 1, true)
    end
    -- Good values still draw, and are what the page gets.
    cupola.timeline(t, path, { chart_height = 200, band_height = 300, names = { "mine" }, title = "x" })
    assert.matches('{"band":300,"chart":200}', readfile(path), 1, true)
  end)

  it("names a handle's type in a wrong source, and refuses pools without a Trace", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    assert.has_error(function() cupola.timeline(p, path) end,
      "bad argument #1 to 'timeline' (a Trace, a replay result, a list of them or a path expected, got cupola.Pool)")
    assert.has_error(function() cupola.timeline({ 5 }, path) end,
      "bad argument #1 to 'timeline' (entry 1 is a number, not a replay result, got 5)")
    assert.error_matches(function() cupola.timeline(cupola.trace.find "torch_snapshot_mlp", path, { pools = { {} } }) end,
      "cupola.timeline: option 'pools' replays a Trace: the source must be a cupola.Trace, not string '", 1, true)
    assert.error_matches(function() cupola.timeline("x.csv", path .. "\0.html") end,
      "bad argument #2 to 'timeline' (path contains a NUL byte, got '", 1, true)
  end)

  it("raises at the caller's line, not inside cupola's Lua files", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local calls = {
      function() local r = cupola.trace.replay(t, p, { bogus = 1 }); return r end,
      function() local r = cupola.trace.replay(t, p, { ["repeat"] = 0 }); return r end,
      function() local r = cupola.trace.compare(t, { { kind = "tlsf", upstream = "virtual" } }, { bogus = 1 }); return r end,
      function() local r = cupola.trace.compare(t, { { kind = "nope" } }); return r end,
      function() local r = cupola.timeline(t, path, { names = 5 }); return r end,
      function() local r = cupola.timeline(t, path, { pools = { { kind = "nope" } } }); return r end,
      function() local r = cupola.timeline("/nonexistent/t.csv", path); return r end,
      function() local r = cupola.timeline(p, path); return r end,
    }
    for i, f in ipairs(calls) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("^[^:]*timeline_spec%.lua:%d+: ", err, nil, false, "call " .. i .. ": " .. err)
    end
  end)

  it("draws a replay recorded through the method t:replay (it was not registered)", function()
    local t <close> = cupola.trace.load(cupola.trace.find "torch_snapshot_mlp")
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local r = t:replay(p, { record = true })
    local _, info = cupola.timeline(r, path)
    assert.equals(1, info.panels)
  end)
end)
