-- cupola.advise and bin/cupola advise: a PyTorch snapshot in, the setting to
-- use out.  Every snapshot cupola ships (examples/traces/torch, with
-- PyTorch's own figures in truth.lua) is advised on: the recorded setting
-- replays to PyTorch's figure exactly, the recommended row's figures are a
-- direct cupola.trace.replay's, and the rows of the settings PyTorch was
-- also run under are within 1 % of PyTorch's own figures for them.  Then
-- the inputs people have (both pickle writers, gzip or not, frames, several
-- devices, RMM logs), the search for the least memory, tentative
-- allocations, and hostile arguments and command lines.
local cupola = require "cupola"

local DIR = "examples/traces/torch/"
local truth = dofile(DIR .. "truth.lua")
local MiB = 1024 * 1024

local function workload(name) return name:match "^([^.]+)%." end

-- The settings PyTorch itself was run under for a workload, under a limit.
local function shipped(w, limit)
  local out = {}
  for _, r in ipairs(truth) do
    if workload(r.name) == w and r.limit == limit then out[#out + 1] = r end
  end
  return out
end

local function row_of(res, setting)
  for _, r in ipairs(res.rows) do
    if r.kind == "torch" and r.setting == setting then return r end
  end
end

local function canonical(conf)
  local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = conf }
  return p:settings().conf
end

-- Bug fixed with this spec (issue 43, item 6): the 24 snapshots of the six
-- CSV workloads had no allocator_settings (their sources had the key
-- stripped), so advise said "recorded under: unknown (PyTorch before 2.4)"
-- of runs PyTorch 2.11 made under the setting their name carries
-- (tests/torch/settings_from_tag.py put them back).
describe("every snapshot cupola ships says the setting it was recorded under", function()
  for _, r in ipairs(truth) do
    it(r.name, function()
      local t <close> = cupola.trace.load(DIR .. r.name .. ".cpsnap.gz")
      local conf = t:info().torch_conf
      assert.is_truthy(conf, "no allocator_settings")
      assert.equals(canonical(r.conf), canonical(conf))
    end)
  end

  it("and advise reads it from there", function()
    local res = cupola.advise(DIR .. "resnet50_train.pow2div4.cpsnap.gz", { progress = false, pools = false })
    assert.equals("the snapshot's allocator_settings", res.recorded_from)
    assert.equals("roundup_power2_divisions:4", res.recorded_setting)
    for _, w in ipairs(res.warnings) do assert.is_nil(w:find("is unknown", 1, true), w) end
  end)
end)

describe("cupola.advise on every snapshot cupola ships", function()
  for _, r in ipairs(truth) do
    it(r.name, function()
      local limit = r.limit > 0 and r.limit or nil
      local confs = {}
      for _, s in ipairs(shipped(workload(r.name), r.limit)) do confs[#confs + 1] = s.conf end
      local res = cupola.advise(DIR .. r.name .. ".cpsnap.gz",
        { limit = limit, conf = confs, recorded = r.conf, search = false, progress = false })
      -- the recorded setting: PyTorch's run itself, to the byte
      local rec
      for _, x in ipairs(res.rows) do if x.recorded then rec = x end end
      assert.is_truthy(rec, "no recorded row")
      assert.equals(canonical(r.conf), canonical(rec.setting))
      assert.equals("exact", rec.prediction)
      assert.equals(r.reserved, rec.peak_reserved)
      assert.equals(r.device_allocs, rec.device_allocs)
      assert.equals(r.retries, rec.retries)
      -- the recommended row is a direct replay of its setting
      local best = res.recommended
      assert.equals("torch", best.kind)
      local t <close> = cupola.trace.load(DIR .. r.name .. ".cpsnap.gz")
      local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = best.setting, max = limit }
      local x = t:replay(p, { addresses = "recorded", stop_at_oom = limit and "needed" or nil })
      assert.equals(x.peak_reserved, best.peak_reserved)
      assert.equals(x.peak_allocated, best.peak_allocated)
      assert.equals(x.device_allocs, best.device_allocs)
      assert.equals(x.retries, best.retries)
      assert.equals(x.live_at_peak, best.live_at_peak)
      assert.equals(x.complete, best.complete)
      assert.matches("PYTORCH_CUDA_ALLOC_CONF", res.paste, 1, true)
      -- a gain under 1 % is none: another setting than the recorded one is
      -- recommended only for 1 % or more
      if not best.recorded and not limit then
        assert.is_true(best.peak_reserved <= rec.peak_reserved * 0.99, r.name .. ": " .. best.setting)
      end
      -- the settings PyTorch was run under, predicted from the run under its
      -- defaults: its own figure within 1 % (predictions from runs under other
      -- settings: bench/results/advise.md)
      local base = r.name:match "%.default$" or r.name:match "%.limit%-default$" or r.name:match "%.oom%-default$"
      for _, s in ipairs(base and shipped(workload(r.name), r.limit) or {}) do
        -- Python frees some tensors in another order from run to run (varlen: some 300 of
        -- 14109 events). Under the limit, PyTorch's retries give back segments in that
        -- order: varlen.limit-pow2div4 within 2 %, as spec/torch_spec.lua allows
        -- (bench/results/torch_model.md says why). With 64 MiB segments the order moves
        -- the peak by one segment's worth: the model replaying the default run's requests
        -- under large_segment_size_mb:64 gives 1.3 % less than its replay of the seg64
        -- run's own requests, which is PyTorch's figure to the byte.
        local tolerance = (s.name == "varlen.limit-pow2div4" or s.name == "varlen.seg64") and 0.02 or 0.01
        local row = row_of(res, s.conf) or row_of(res, "") -- the default's row is ""
        if s.conf ~= "" then row = row_of(res, s.conf) end
        assert.is_truthy(row, "no row for " .. s.conf)
        local err = math.abs(row.peak_reserved - s.reserved) / s.reserved
        assert.is_true(err <= tolerance, ("%s as %s: %d against PyTorch's %d (%.3f %%)"):format(r.name, s.name,
          row.peak_reserved, s.reserved, err * 100))
      end
    end)
  end
end)

describe("cupola.advise: the result", function()
  local res
  setup(function()
    res = cupola.advise(DIR .. "varlen.default.cpsnap.gz", { progress = false })
  end)

  it("has the grid the documentation promises", function()
    local fam = {}
    for _, r in ipairs(res.rows) do fam[r.family] = (fam[r.family] or 0) + 1 end
    assert.equals(1, fam.recorded)
    assert.equals(1, fam.expandable)
    assert.equals(5, fam.roundup)
    assert.is_true((fam.split or 0) >= 1)
    assert.equals(3, fam.pool)
    assert.is_nil(fam.gc) -- only under a limit
    assert.equals("", res.recorded_setting)
    assert.equals("the snapshot's allocator_settings", res.recorded_from)
    -- roundup_power2_divisions:1 rounds nothing: the defaults' replay
    local one, def = row_of(res, "roundup_power2_divisions:1"), row_of(res, "")
    assert.equals(def.peak_reserved, one.peak_reserved)
  end)

  it("names each row as docs/API.md's JSON does", function()
    for _, r in ipairs(res.rows) do
      assert.equals("string", type(r.setting))
      assert.equals("number", math.type(r.peak_reserved) and "number")
      assert.equals(r.peak_reserved - r.live_at_peak, r.unused_at_peak)
      if r.kind == "torch" then
        assert.equals("PYTORCH_CUDA_ALLOC_CONF", r.via)
      else
        assert.matches("^CUPOLA_TORCH_POOL=", r.setting)
        assert.equals("CUPOLA_TORCH_POOL", r.via)
      end
    end
    assert.equals(res.baseline, 3170893824) -- PyTorch's own peak in the recording
  end)

  it("recommends expandable segments for varlen, and says what to paste", function()
    assert.equals("expandable_segments:True", res.recommended.setting)
    assert.equals("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py", res.paste)
    local text = require("cupola.advise").text(res)
    assert.matches("recommended: expandable_segments:True", text, 1, true)
    assert.matches("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py", text, 1, true)
  end)

  it("writes JSON with rows and recommended, setting as given", function()
    local json = require "dkjson"
    local o = json.decode(require("cupola.advise").json(res))
    assert.equals("", o.rows[1].setting)
    assert.equals("torch", o.rows[1].kind)
    assert.equals(3170893824, o.rows[1].peak_reserved)
    assert.equals(87, o.rows[1].device_allocs)
    assert.equals("expandable_segments:True", o.recommended.setting)
  end)
end)

describe("cupola.advise under a limit", function()
  it("finds the least memory each setting runs in, and where the others run out", function()
    local lim = 2614765568
    local res = cupola.advise(DIR .. "varlen.default.cpsnap.gz", { limit = lim, progress = false, pools = { "tlsf" } })
    local fam = {}
    for _, r in ipairs(res.rows) do fam[r.family] = (fam[r.family] or 0) + 1 end
    assert.equals(2, fam.gc)
    local t <close> = cupola.trace.load(DIR .. "varlen.default.cpsnap.gz")
    local checked = 0
    for _, r in ipairs(res.rows) do
      assert.is_boolean(r.fits)
      if r.kind == "torch" and r.min_memory then
        -- it runs under the least memory found, whatever its figure under the limit
        local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = r.setting, max = r.min_memory }
        local x = t:replay(p, { addresses = "recorded", stop_at_oom = "needed" })
        assert.is_true(x.complete, r.setting)
        assert.is_true(r.min_memory >= x.peak_allocated)
        checked = checked + 1
      end
      if not r.fits then
        assert.is_truthy(r.fails_at)
        assert.matches("out of memory", r.fails_at.message, 1, true)
      end
    end
    assert.is_true(checked >= 10)
    -- the recording's own run: PyTorch's defaults fit in 2.44 GiB with retries
    local rec = row_of(res, "")
    assert.is_true(rec.fits)
    assert.is_true(rec.min_memory <= lim)
  end)

  it("says which settings do not fit, and why", function()
    local res = cupola.advise(DIR .. "varlen.default.cpsnap.gz", { limit = "2GiB", progress = false, pools = false,
      search = false })
    local failing = 0
    for _, r in ipairs(res.rows) do
      if not r.fits then
        failing = failing + 1
        assert.is_truthy(r.fails_at.allocation or r.fails_at.size)
        assert.matches("OutOfMemoryError", r.fails_at.message, 1, true)
      end
    end
    assert.is_true(failing > 0)
    local text = require("cupola.advise").text(res)
    -- the verdict first, and where the run runs out said once
    assert.matches("^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n\n  Nothing fits: no setting runs the recorded requests in 2.00 GiB.", text)
    local _, n = text:gsub("runs out at", "")
    assert.equals(1, n)
  end)

  it("a recording that ended in an out-of-memory error: only settings that serve that request fit", function()
    local r
    for _, x in ipairs(truth) do if x.name == "varlen.oom-default" then r = x end end
    local res = cupola.advise(DIR .. r.name .. ".cpsnap.gz", { limit = r.limit, progress = false, pools = false })
    local warned = false
    for _, w in ipairs(res.warnings) do
      if w:find("ends in an out-of-memory error", 1, true) then warned = true end
    end
    assert.is_true(warned)
    assert.is_false(row_of(res, "").fits)
    assert.is_true(row_of(res, "").min_memory > r.limit)
  end)
end)

-- A snapshot written here by hand (protocol 2 as PyTorch's C++ writer):
-- allocations, a request PyTorch refused that the program survived (it
-- allocated again after it), more allocations.
local pickle = require "spec.support.pickle"
local str, dict, list = pickle.str, pickle.dict, pickle.list
local function entry(action, addr, size, t)
  return dict { "action", str(action), action == "oom" and "device_free" or "addr", addr, "size", size,
    "stream", 0, "time_us", t }
end

-- Bug fixed with this spec: where PyTorch's defaults were recommended the
-- line to paste was "PYTORCH_CUDA_ALLOC_CONF= python train.py".
describe("cupola.advise: PyTorch's defaults recommended", function()
  it("says to run with the variable unset", function()
    local base = 0x7f0000000000
    local ev = { entry("segment_alloc", base, 20 * MiB, 1), entry("alloc", base, 8 * MiB, 2),
      entry("free_requested", base, 8 * MiB, 3), entry("free_completed", base, 8 * MiB, 4) }
    local path = tmpfile("\128\2" .. dict { "device_traces", list { list(ev) }, "segments", list {} } .. ".")
    local ok, res = pcall(cupola.advise, path, { progress = false, pools = {} })
    os.remove(path)
    assert.is_true(ok, res)
    assert.equals("", res.recommended.setting)
    assert.equals("env -u PYTORCH_CUDA_ALLOC_CONF python train.py", res.paste)
    assert.equals("PyTorch's defaults", res.paste_note)
  end)
end)

describe("cupola.advise: tentative allocations", function()
  it("marks a refused request the program survived, and does not count it against a setting", function()
    local base = 0x7f0000000000
    local ev, t = {}, 1
    local function add(e) ev[#ev + 1] = e; t = t + 1 end
    add(entry("segment_alloc", base, 20 * MiB, t))
    add(entry("alloc", base, 8 * MiB, t))
    add(entry("oom", 1024, 64 * 1024 * MiB, t)) -- 64 GiB: a workspace the library then did without
    add(entry("alloc", base + 8 * MiB, 4 * MiB, t))
    add(entry("free_requested", base, 8 * MiB, t))
    add(entry("free_completed", base, 8 * MiB, t))
    add(entry("free_requested", base + 8 * MiB, 4 * MiB, t))
    add(entry("free_completed", base + 8 * MiB, 4 * MiB, t))
    local path = tmpfile("\128\2" .. dict { "device_traces", list { list(ev) }, "segments", list {} } .. ".")
    local ok, res = pcall(cupola.advise, path, { limit = "1GiB", progress = false, pools = { "tlsf" } })
    os.remove(path)
    assert.is_true(ok, res)
    assert.equals(1, #res.tentative)
    assert.is_true(res.tentative[1].survived)
    local warned
    for _, w in ipairs(res.warnings) do if w:find("survived", 1, true) then warned = true end end
    assert.is_true(warned)
    for _, r in ipairs(res.rows) do
      assert.is_true(r.fits, r.setting) -- the 64 GiB request is refused under 1 GiB, and that is fine
    end
  end)
end)

describe("cupola.advise reads what people have", function()
  it("both pickle writers, with frames: the same advice", function()
    local a = cupola.advise(DIR .. "twostream.full.pickle.gz", { progress = false, pools = false })
    local b = cupola.advise("tests/torch/twostream.cpp.pickle.gz", { progress = false, pools = false })
    assert.equals(#a.rows, #b.rows)
    for i, r in ipairs(a.rows) do
      assert.equals(r.setting, b.rows[i].setting)
      assert.equals(r.peak_reserved, b.rows[i].peak_reserved)
    end
    assert.equals("exact", a.rows[1].prediction)
    local t1 <close> = cupola.trace.load(DIR .. "twostream.full.pickle.gz")
    local t2 <close> = cupola.trace.load "tests/torch/twostream.cpp.pickle.gz"
    for i = 1, #t1, 97 do
      local x, y = t1:event(i), t2:event(i)
      assert.equals(x.label, y.label)
      assert.equals(x.pointer, y.pointer)
    end
  end)

  it("a plain (not gzip) pickle of the C++ writer, two devices: one table per device", function()
    local res = cupola.advise("tests/fuzz/corpus/snapshot_cpp_writer.pickle", { progress = false, pools = false })
    assert.equals(2, #res.per_device)
    assert.equals(0, res.per_device[1].device)
    assert.equals(1, res.per_device[2].device)
    local one = cupola.advise("tests/fuzz/corpus/snapshot_cpp_writer.pickle", { device = 1, progress = false,
      pools = false })
    assert.equals(1, one.device)
    assert.equals(res.per_device[2].rows[1].peak_reserved, one.rows[1].peak_reserved)
    local text = require("cupola.advise").text(res)
    assert.matches("(device 1)", text, 1, true)
  end)

  it("an RMM log: the driver's placement, the recorded setting unknown", function()
    local res = cupola.advise(cupola.trace.find "resnet50_train", { progress = false, pools = false })
    assert.is_nil(res.recorded_setting)
    assert.equals("driver model", res.rows[1].prediction)
    local unknown
    for _, w in ipairs(res.warnings) do if w:find("unknown", 1, true) then unknown = true end end
    assert.is_true(unknown)
  end)

  it("a Trace already loaded", function()
    local t <close> = cupola.trace.load(DIR .. "twostream.default.cpsnap.gz")
    local res = cupola.advise(t, { progress = false, pools = false, recorded = "" })
    assert.equals(1035993088, res.rows[1].peak_reserved)
  end)
end)

describe("cupola.advise: hostile arguments", function()
  local path = DIR .. "twostream.default.cpsnap.gz"
  local cases = {
    { function() cupola.advise(5) end, "a cupola.Trace or the path of a snapshot expected, got number 5" },
    { function() cupola.advise "/nonexistent/snap.pickle" end, "/nonexistent/snap.pickle: cannot open" },
    { function() cupola.advise(path, 5) end, "options table expected, got number 5" },
    { function() cupola.advise(path, { bogus = 1 }) end, "cupola.advise: unknown option 'bogus'" },
    { function() cupola.advise(path, { limit = "lots" }) end, "option 'limit' must be a size above 0" },
    { function() cupola.advise(path, { limit = -5 }) end, "option 'limit' must be a size above 0" },
    { function() cupola.advise(path, { conf = { "max_split_size_mb:5" } }) end, "option 'conf': item 1 'max_split_size_mb:5'" },
    { function() cupola.advise(path, { conf = 7 }) end, "option 'conf' must be a conf string or a list" },
    { function() cupola.advise(path, { conf = { 7 } }) end, "item 1 must be a string, not number 7" },
    { function() cupola.advise(path, { recorded = "bogus_key:1" }) end, "option 'recorded' 'bogus_key:1'" },
    { function() cupola.advise(path, { recorded = "backend:cudaMallocAsync" }) end, "cupola.mempool" },
    { function() cupola.advise(path, { pools = { "buddy" } }) end, "buddy" },
    { function() cupola.advise(path, { pools = 3 }) end, "option 'pools' must be a list of pool specs" },
    { function() cupola.advise(path, { threads = -1 }) end, "option 'threads' must be an integer in 0..256" },
    { function() cupola.advise(path, { search = "yes" }) end, "option 'search' must be a boolean" },
    { function() cupola.advise(path, { device = 3 }) end, "the recording has 1 device (0..0), not 3" },
  }
  for i, c in ipairs(cases) do
    it("case " .. i .. ": " .. c[2], function()
      local line = debug.getinfo(c[1], "S").linedefined
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.equals("string", type(err))
      assert.matches(c[2], err, 1, true)
      local where = "spec/advise_spec.lua:" .. line .. ":"
      assert.equals(where, err:sub(1, #where), err)
    end)
  end

  it("a closed Trace", function()
    local t = cupola.trace.load(path)
    t:close()
    local ok, err = pcall(cupola.advise, t)
    assert.is_false(ok)
    assert.matches("closed cupola.Trace", err, 1, true)
  end)

  -- Bug fixed with this spec: the progress function runs while the replays
  -- read the trace, and a close() there freed it under them (a crash, so
  -- the case runs in a child process).
  it("a Trace closed from the progress function while its replays run", function()
    local run_child = require "spec.support.child"
    local code, out, err = run_child([[
      local cupola = require "cupola"
      local core = require "cupola.core"
      local t = cupola.trace.load "examples/traces/torch/twostream.default.cpsnap.gz"
      local jobs, refused = {}, nil
      for i = 1, 4 do jobs[i] = { kind = "torch", conf = "", limit = 700 * 1024 * 1024 } end
      local res = core.trace.advise_run(t, jobs, { threads = 1, progress = function()
        local ok, e = pcall(t.close, t)
        if not ok then refused = e end
      end })
      print(#res, #t > 0, refused)
      t:close()
      print("closed after", pcall(function() return #t end))
    ]])
    assert.equals(0, code, err)
    assert.matches("^4\ttrue\t[^\n]*attempt to close a cupola%.Trace while advise_run replays it", out)
    assert.matches("closed after\tfalse", out)
  end)

  -- Bug fixed with this spec (found by the trace fuzzer through advise's
  -- replays): a snapshot with operations and no row (segment and oom entries
  -- only) made the torch model's replay read the rows' times at NULL.
  it("a snapshot of segment and oom entries only", function()
    local p = tmpfile("\128\2" .. dict { "device_traces", list { list {
      entry("segment_alloc", 0x7f0000000000, 20 * MiB, 1), entry("oom", 0, 64 * MiB, 2) } } } .. ".")
    local ok, t = pcall(cupola.trace.load, p)
    assert.is_true(ok, t)
    assert.equals(0, #t)
    local pool <close> = cupola.pool { kind = "torch", upstream = "virtual" }
    local x = t:replay(pool, { addresses = "recorded" })
    assert.equals(1, x.oom_attempts)
    t:close()
    local res = cupola.advise(p, { progress = false, limit = "1GiB" })
    os.remove(p)
    assert.is_truthy(res.recommended)
  end)

  it("a file that is no snapshot", function()
    local p = tmpfile("\128\2K\1.")
    local ok, err = pcall(cupola.advise, p, { progress = false })
    os.remove(p)
    assert.is_false(ok)
    assert.matches("not a dict", err, 1, true)
  end)
end)

describe("bin/cupola advise", function()
  local function run(args)
    local p = io.popen("bin/cupola advise " .. args .. " 2>&1; echo \"rc=$?\"")
    local out = p:read "a"
    p:close()
    local rc = tonumber(out:match "rc=(%d+)%s*$")
    return out:gsub("rc=%d+%s*$", ""), rc
  end

  it("prints the table, the recommendation and the line to paste", function()
    local out, rc = run(DIR .. "twostream.default.cpsnap.gz --no-pools")
    assert.equals(0, rc)
    assert.matches("recommended: expandable_segments:True", out, 1, true)
    assert.matches("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py", out, 1, true)
    assert.matches("PyTorch's defaults (recorded)", out, 1, true)
  end)

  it("--json: rows and recommended", function()
    local out, rc = run(DIR .. "twostream.default.cpsnap.gz --json --no-pools --conf max_split_size_mb:64")
    assert.equals(0, rc)
    local o = require("dkjson").decode(out)
    assert.equals("expandable_segments:True", o.recommended.setting)
    local found
    for _, r in ipairs(o.rows) do if r.setting == "max_split_size_mb:64" then found = r end end
    assert.equals(1094713344, found.peak_reserved) -- PyTorch's own figure for that setting
  end)

  it("--html: one self-contained page with the table and two timelines", function()
    local page = os.tmpname()
    local out, rc = run(DIR .. "twostream.default.cpsnap.gz --no-pools --html " .. page)
    assert.equals(0, rc, out)
    local f = assert(io.open(page))
    local html = f:read "a"
    f:close()
    os.remove(page)
    assert.matches("<table", html, 1, true)
    assert.matches("expandable_segments:True", html, 1, true)
    assert.matches("panel-2", html, 1, true)
    assert.is_nil(html:find("<script src", 1, true))
  end)

  -- Bug fixed with this spec (issue 43, item 2): under a limit the page
  -- said "Recommended: ..." and nothing of what the terminal says first
  -- (nothing fits, the limit, the least memory, where it runs out), and its
  -- timelines drew the refused requests as live ("peak live 227.10 MiB"
  -- above "peak reserved 200.00 MiB").
  it("--html under a limit: the terminal's answer first, in its order; timelines of what was served", function()
    local page = os.tmpname()
    local cmd = "examples/traces/torch_snapshot_mlp.pickle --limit 200MiB --threads 2"
    local out, rc = run(cmd .. " --html " .. page)
    assert.equals(0, rc, out)
    local f = assert(io.open(page))
    local html = f:read "a"
    f:close()
    os.remove(page)
    local pre = html:match '<pre class="text">(.-)</pre>'
    assert.is_truthy(pre)
    pre = pre:gsub("&gt;", ">"):gsub("&lt;", "<"):gsub("&amp;", "&")
    -- the terminal's head and answer, to the line, above the table
    local p = io.popen("COLUMNS=100 bin/cupola advise " .. cmd .. " 2>/dev/null")
    local term = p:read "a":match "^(.-\n)\n +least\n"
    p:close()
    assert.is_truthy(term)
    assert.equals(term, pre)
    for _, s in ipairs { "Nothing fits: no setting runs the recorded requests in 200.00 MiB.", "Least memory: ",
      "runs out at allocation 35 (16.00 MiB)", "With 242.00 MiB or more, run:" } do
      assert.matches(s, pre, 1, true)
    end
    assert.is_true(html:find('<pre class="text">', 1, true) < html:find("<table", 1, true))
    assert.is_nil(html:find("Recommended: ", 1, true))
    -- each timeline: what its pool served, never more in use than it held
    local n = 0
    for live, reserved in html:gmatch "peak live ([%d.]+) MiB.-peak reserved ([%d.]+) MiB" do
      n = n + 1
      assert.is_true(tonumber(live) <= tonumber(reserved), live .. " > " .. reserved)
    end
    assert.equals(2, n)
    assert.matches("34 allocations refused", html, 1, true)
  end)

  it("--help, and errors as one line with a non-zero status", function()
    local out, rc = run "--help"
    assert.equals(0, rc)
    assert.matches("usage: cupola advise SNAPSHOT", out, 1, true)
    for _, c in ipairs {
      { "", 1, "which snapshot?" },
      { DIR .. "twostream.default.cpsnap.gz --limit", 1, "--limit needs a value" },
      { DIR .. "twostream.default.cpsnap.gz --colour", 1, "unknown option '--colour'" },
      { DIR .. "twostream.default.cpsnap.gz --threads x", 1, "--threads needs a whole number" },
      { "/nonexistent.pickle", 2, "cannot open" },
      { DIR .. "twostream.default.cpsnap.gz --limit 12XB", 2, "--limit must be a size" },
      { DIR .. "twostream.default.cpsnap.gz --conf max_split_size_mb:1", 2, "max_split_size_mb" },
      { "tests/fuzz/corpus/refused_global_p2.pickle", 2, "opcode GLOBAL" },
    } do
      local o, code = run(c[1])
      assert.equals(c[2], code, o)
      for l in o:gmatch "[^\n]+" do assert.is_true(#l <= 100, l) end
      o = o:gsub("\n  ", " ") -- one message, wrapped to 100 columns
      assert.matches(c[3], o, 1, true)
      assert.is_nil(o:find("stack traceback", 1, true), o)
      assert.is_nil(o:find("%.lua:%d+:"), o)
    end
  end)
end)

describe("a pool spec as CUPOLA_TORCH_POOL and advise's rows write it", function()
  local util = require "cupola.util"
  it("reads as cupola.pool options, the way the library serves it", function()
    local o = util.pool_spec "tlsf, reuse=stream,max=4GiB,grow=false"
    assert.same({ kind = "tlsf", reuse = "stream", max = "4GiB", grow = false }, o)
    assert.same({ kind = "cub", bin_growth = 8, min_bin = 3 }, util.pool_spec "cub,bin_growth=8,min_bin=3")
    local served = require("cupola.core").trace.serving(util.pool_spec "tlsf")
    assert.equals(math.maxinteger, served.release_threshold, "a served tlsf keeps its idle chunks")
    local p <close> = cupola.pool(served)
    assert.equals("tlsf", p.kind)
  end)
  it("refuses an item that is not key=value", function()
    assert.error_matches(function() util.pool_spec "tlsf,max" end, 'item "max" is not key=value')
  end)
end)

-- Bug fixed with this spec: a snapshot of segment entries alone (no
-- allocation, so no stream in the trace) had the torch replay read its
-- operations' streams through a null table (UBSan, in fuzz-trace).
describe("a snapshot with segment entries only", function()
  it("replays through the torch model and advises", function()
    local base = 0x7f0000000000
    local ev = { entry("segment_alloc", base, 20 * MiB, 1), entry("segment_free", base, 20 * MiB, 2) }
    local path = tmpfile("\128\2" .. dict { "device_traces", list { list(ev) }, "segments", list {} } .. ".")
    local t <close> = cupola.trace.load(path)
    assert.equals(0, #t)
    local r = t:replay(cupola.pool { kind = "torch", upstream = "virtual" })
    assert.equals(0, r.peak_reserved)
    local ok, res = pcall(cupola.advise, path, { progress = false, pools = {} })
    os.remove(path)
    assert.is_true(ok, res)
  end)
end)

-- A trace of several streams through cupola's pools: a block freed on one
-- stream is another's once its event is done.  The replay's streams carry
-- no work, so that is at once; on the host backend it waited for the
-- stream's worker thread to wake, and the same advise gave tlsf 718 to 770
-- MiB (and ordered the pools' rows differently) as the host's load moved.
describe("the pools' rows on a trace of several streams", function()
  it("are the same from run to run, however loaded the host", function()
    local t <close> = cupola.trace.load(DIR .. "twostream.default.cpsnap.gz")
    assert.is_true(t.streams > 1)
    local core = require "cupola.core"
    for _, spec in ipairs { "tlsf", "caching", "tlsf,release_threshold=0" } do
      local seen = {}
      for i = 1, 4 do
        local o = core.trace.serving(require("cupola.util").pool_spec(spec))
        o.upstream = "virtual"
        local p <close> = cupola.pool(o)
        seen[i] = t:replay(p, { progress = false }).peak_reserved
      end
      for i = 2, 4 do assert.equals(seen[1], seen[i], spec) end
    end
    local a = cupola.advise(t, { progress = false, limit = "600MiB" })
    local b = cupola.advise(t, { progress = false, limit = "600MiB" })
    for i, r in ipairs(a.rows) do
      if r.kind ~= "torch" and r.pool ~= "vmm" then
        assert.equals(r.description, b.rows[i].description)
        assert.equals(r.min_memory, b.rows[i].min_memory, r.description)
      end
    end
  end)
end)

-- A snapshot of a run PyTorch refused memory in (set_per_process_memory_
-- fraction), advised without --limit: every row was replayed without a
-- limit, the recorded one serving the request PyTorch refused (+7.2 % on
-- varlen.oom-default), and expandable_segments came out "recommended" at
-- more than the run had.  The snapshot bounds the limit the run had.
describe("cupola.advise on a snapshot that ran out under a limit, none given", function()
  local torch_advise = require "cupola.advise.torch"

  it("reads the limit of both runs PyTorch ran out in as intervals holding the fraction they ran under", function()
    for _, name in ipairs { "varlen.oom-default", "varlen.oom-expandable" } do
      local r
      for _, x in ipairs(truth) do if x.name == name then r = x end end
      local t <close> = cupola.trace.load(DIR .. name .. ".cpsnap.gz")
      local lim = torch_advise.recorded_limit(t, t:info().torch_conf)
      assert.is_truthy(lim, name)
      assert.is_true(lim.low <= r.limit and r.limit <= lim.high, ("%s: %d not in [%d, %d]"):format(name, r.limit,
        lim.low, lim.high))
    end
  end)

  it("reads the run's limit as an interval holding PyTorch's own, and advises under its least", function()
    local r = nil
    for _, x in ipairs(truth) do if x.name == "varlen.oom-default" then r = x end end
    local t <close> = cupola.trace.load(DIR .. "varlen.oom-default.cpsnap.gz")
    local lim = torch_advise.recorded_limit(t, "")
    assert.is_truthy(lim)
    assert.is_true(lim.low <= r.limit and r.limit <= lim.high, ("%d not in [%d, %d]"):format(r.limit, lim.low,
      lim.high))
    local res = cupola.advise(t, { progress = false })
    assert.equals(lim.low, res.limit)
    assert.equals("snapshot", res.recorded_limit.source)
    local rec = row_of(res, "")
    assert.is_true(rec.recorded)
    assert.is_false(rec.fits)
    assert.equals(r.reserved, rec.peak_reserved) -- the recorded run, up to its out-of-memory error
    assert.is_truthy(rec.min_memory)
    -- PyTorch ran out with expandable segments too, under the same limit: so does the advice
    local ex = row_of(res, "expandable_segments:True")
    assert.is_false(ex.fits)
    assert.is_true(ex.min_memory > r.limit)
    local text = require("cupola.advise").text(res, 400)
    assert.matches("limit: between 1.70 GiB and 1.82 GiB (read from the snapshot", text, 1, true)
    assert.matches("Nothing fits: no setting runs the recorded requests in 1.70 GiB (the least the recorded "
      .. "run's limit can have been).", text, 1, true)
  end)

  it("is not read from a snapshot without PyTorch's device calls (it returns nil, it does not raise)", function()
    local t <close> = cupola.trace.load(DIR .. "varlen.oom-default.cpsnap.gz")
    local csv <close> = cupola.trace.load "examples/traces/gpt2_train.csv.gz"
    assert.is_nil(torch_advise.recorded_limit(csv, ""))
  end)

  it("is not read where PyTorch refused nothing, or where --limit is given", function()
    local t <close> = cupola.trace.load(DIR .. "varlen.limit-default.cpsnap.gz")
    assert.is_nil(torch_advise.recorded_limit(t, ""))
    local res = cupola.advise(t, { progress = false, pools = false })
    assert.is_nil(res.limit)
    assert.is_nil(res.recorded_limit)
    local given = cupola.advise(DIR .. "varlen.oom-default.cpsnap.gz", { progress = false, pools = false,
      limit = 1852773580 })
    assert.is_nil(given.recorded_limit)
    assert.equals(1852773580, given.limit)
  end)
end)

-- Bugs fixed with this spec (issue 43, item 1): under --limit 6GB the
-- threshold was recommended over the recorded defaults although under that
-- limit it changed nothing (its least memory was lower, at limits near it);
-- and its line to paste omitted the call PyTorch runs it under
-- (set_per_process_memory_fraction: without it the threshold does nothing).
describe("cupola.advise: a setting that needs a memory fraction", function()
  local MLP = "examples/traces/torch_snapshot_mlp.pickle"

  it("one that changes nothing where everything fits is not recommended over the recorded setting", function()
    local res = cupola.advise(MLP, { limit = "6GB", progress = false, pools = false })
    local gc = row_of(res, "garbage_collection_threshold:0.8")
    assert.is_true(gc.fits)
    assert.is_true(gc.min_memory < row_of(res, "").min_memory) -- it would do better at a limit near 242 MiB
    assert.is_true(res.recommended.recorded)
    assert.equals("", res.recommended.setting)
    -- as without a limit
    assert.equals("", cupola.advise(MLP, { progress = false, pools = false }).recommended.setting)
  end)

  it("its line says to call set_per_process_memory_fraction, with the fraction of --device-memory", function()
    local res = cupola.advise(MLP, { limit = "200MiB", progress = false, pools = false })
    local rec = res.recommended
    assert.matches("garbage_collection_threshold", rec.setting, 1, true)
    assert.equals("PYTORCH_CUDA_ALLOC_CONF=" .. rec.setting .. " python train.py", res.paste)
    assert.matches("torch.cuda.set_per_process_memory_fraction(F)", res.paste_note, 1, true)
    assert.matches("F = 242.00 MiB / the device's memory (give --device-memory SIZE for F)", res.paste_note, 1, true)
    res = cupola.advise(MLP, { limit = "200MiB", progress = false, pools = false, device_memory = "80GB" })
    assert.equals(80e9, res.device_memory)
    local f = tonumber(res.paste_note:match "set_per_process_memory_fraction%(([%d.]+)%)")
    assert.equals(0.00318, f)
    -- PyTorch allows floor(f x the device's memory): the least fraction of three digits that holds 242 MiB
    assert.is_true(math.floor(f * 80e9) >= res.recommended.min_memory)
    assert.is_true(math.floor((f - 0.00001) * 80e9) < res.recommended.min_memory)
    -- the text puts it above the line, as a comment
    local raw = require("cupola.advise").text(res, 100)
    assert.matches("\n    # garbage_collection_threshold acts", raw, 1, true)
    local text = raw:gsub("\n    # ", " ")
    assert.matches("run: garbage_collection_threshold acts only under a memory fraction: call " ..
      "torch.cuda.set_per_process_memory_fraction(0.00318) in train.py before its first allocation " ..
      "(242.61 MiB of the device's 74.51 GiB)\n    PYTORCH_CUDA_ALLOC_CONF=", text, 1, true)
  end)

  it("the fraction of a limit it fits in: the most of the fewest digits within the limit", function()
    local torch = require "cupola.advise.torch"
    local dm = 85017493504
    -- within [lo, hi]: 0.0706 x dm = 6002235041 > 6e9; 0.0705 x dm below 5.9e9 is not; more digits
    local f = torch.fraction_for(5.99e9, 6e9, dm)
    assert.is_true(math.floor(f * dm) <= 6e9 and math.floor(f * dm) >= 5.99e9, tostring(f))
    assert.equals(f, torch.fraction_for(5.99e9, 6e9, dm)) -- the same each time
    assert.equals(0.0705, torch.fraction_for(5e9, 6e9, dm))
    assert.is_nil(torch.fraction_for(dm, nil, dm))
  end)
end)
