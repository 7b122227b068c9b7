-- Results as data: cupola.report.csv / json / records over what
-- trace.replay, trace.compare and cupola.bench return.
local cupola = require "cupola"
local dkjson = require "dkjson"

local function readfile(path)
  local f = assert(io.open(path))
  local s = f:read "a"
  f:close()
  return s
end

describe("report", function()
  local t, rows
  setup(function()
    t = cupola.trace.load(cupola.trace.find "gpt2_train")
    rows = cupola.trace.compare(t, { { kind = "tlsf", upstream = "virtual" },
      { kind = "caching", upstream = "virtual", name = "caching, \"big\"" } })
  end)
  teardown(function() t:close() end)

  it("trace.compare names rows, and its configurations may carry a name", function()
    assert.equals("tlsf", rows[1].name)
    assert.equals("caching, \"big\"", rows[2].name)
    assert.equals("caching", rows[2].kind)
  end)

  it("writes CSV with a header, naming columns first, quoting as RFC 4180 says", function()
    local path = os.tmpname()
    local text = cupola.report.csv(rows, path)
    assert.equals(text, readfile(path))
    os.remove(path)
    local lines = {}
    for l in text:gmatch "[^\n]+" do lines[#lines + 1] = l end
    assert.equals(3, #lines)
    assert.matches("^name,kind,upstream,", lines[1])
    assert.matches('^"caching, ""big""",caching,virtual,', lines[3])
    -- Full precision: the float reads back exactly.
    local cols = cupola.report.columns(rows)
    local idx
    for i, c in ipairs(cols) do if c == "reserved_over_live" then idx = i end end
    local fields = {}
    for f in lines[2]:gmatch "[^,]+" do fields[#fields + 1] = f end
    assert.equals(rows[1].reserved_over_live, tonumber(fields[idx]))
  end)

  it("writes JSON that reads back to the same figures", function()
    local path = os.tmpname()
    cupola.report.json(rows, path)
    local back = dkjson.decode(readfile(path))
    os.remove(path)
    assert.equals(2, #back)
    assert.equals(rows[1].peak_live, back[1].peak_live)
    assert.equals(rows[2].reserved_over_live, back[2].reserved_over_live)
    assert.equals(rows[2].name, back[2].name)
  end)

  it("writes a single replay result, leaving the binary recording out of JSON", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local r = cupola.trace.replay(t, p, { record = true })
    local back = dkjson.decode(cupola.report.json(r))
    assert.equals(r.events, back.events)
    assert.is_nil(back.recording.addresses)
    assert.same(r.recording.reserved, back.recording.reserved)
    local csv = cupola.report.csv(r)
    assert.not_matches("recording", csv)
    -- columns in name order: complete first, events among them
    local head, vals = csv:match "^([^\n]*)\n([^\n]*)"
    local cols, row = {}, {}
    for c in head:gmatch "[^,]+" do cols[#cols + 1] = c end
    for v in vals:gmatch "[^,]+" do row[#row + 1] = v end
    local at = {}
    for i, c in ipairs(cols) do at[c] = row[i] end
    assert.equals("complete", cols[1])
    assert.equals("true", at.complete)
    assert.equals("9486", at.events)
  end)

  it("prints records aligned, numbers to the right", function()
    local text = cupola.report.records(rows, { "name", "events", "reserved_over_live" })
    local lines = {}
    for l in text:gmatch "[^\n]+" do lines[#lines + 1] = l end
    assert.equals(4, #lines)
    -- Every data line ends its number columns at the same place.
    local e1 = lines[3]:find "9486"
    local e2 = lines[4]:find "9486"
    assert.equals(e1, e2)
    assert.equals(#lines[1], #lines[2])
  end)

  it("turns bench figures into records", function()
    local med, samples = cupola.bench.host_ns(function() end, 100, { reps = 3 })
    local r = cupola.bench.result("empty", med, samples, { unit = "ns" })
    assert.equals(3, r.reps)
    assert.equals(med, r.median)
    assert.is_true(r.min <= r.median and r.median <= r.max)
    assert.matches("^name,max,median,min,reps,unit\n", cupola.report.csv(r))
  end)

  it("shows progress only on a terminal", function()
    -- Under busted stderr is a pipe or a file: nothing is printed.
    if not require("cupola.core")._isatty(2) then
      assert.is_false(cupola.report.progress("x", 1, 10, cupola.clock() - 10))
    end
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    assert.equals(#t, cupola.trace.replay(t, p, { progress = true }).events)
  end)
end)
