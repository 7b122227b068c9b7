-- cupola.trace.scale: a program's trace at a size it was not recorded at
-- (issue 40), on the snapshots of examples/traces/torch/scaling: gpt2 and
-- resnet50 training at three batch sizes, cut to one step.  Each prediction
-- is held to the recording of that size: PyTorch's own peak reserved, and
-- under expandable segments the replay of the real recording.
local cupola = require "cupola"

local DIR = "torch/scaling/"
local function rec(name) return DIR .. name .. ".pickle.gz" end

local function peak(t, conf)
  local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = conf or "" }
  return t:replay(p).peak_reserved
end

local function err(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

describe("trace.scale", function()
  it("predicts gpt2 at batch 8 from batches 2 and 4: PyTorch's own peak, to the byte", function()
    local real <close> = cupola.trace.load(rec "gpt2.b8")
    local t <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, 8)
    assert.equals(7258243072, real.torch_peak_reserved)
    assert.equals(real.torch_peak_reserved, peak(t))
    -- another setting from default runs: as the real run's replay under it
    assert.equals(peak(real, "expandable_segments:True"), peak(t, "expandable_segments:True"))
    local s = t.scaled
    assert.same({ 2, 4 }, s.from)
    assert.equals(8, s.at)
    assert.equals(4, s.base)
    assert.equals(t.allocs, s.matched) -- every request of batch 4 is in batch 2
    assert.equals(0, s.by_rule)
    assert.equals(0, s.by_rule_bytes)
    -- the weights hold, the activations grow with the batch
    assert.is_true(s.fits.constant > 0 and s.fits.linear > 0)
    assert.equals(s.matched, s.fits.constant + s.fits.linear + s.fits.square + s.fits.cube +
      s.fits.affine + s.fits.polynomial)
  end)

  it("matches the same way where C++ frames come first in every stack", function()
    local py <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, 8)
    local cpp <close> = cupola.trace.scale({ [2] = rec "gpt2.b2.cpp", [4] = rec "gpt2.b4.cpp" }, 8)
    assert.equals(py.scaled.matched, cpp.scaled.matched)
    assert.same(py.scaled.fits, cpp.scaled.fits)
    assert.equals(peak(py), peak(cpp))
    -- the stacks are kept: the label is the frame people recognise, not the unwinder's
    local e = cpp:event(1)
    assert.not_matches("unwind", e.label)
    assert.matches("unwind", e.stack[1])
  end)

  it("keeps the base's events and order, only the sizes change", function()
    local base <close> = cupola.trace.load(rec "gpt2.b4")
    local t <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = base }, 8)
    assert.equals(#base, #t)
    assert.equals(base.allocs, t.allocs)
    assert.is_true(t.peak_live > base.peak_live)
    for _, i in ipairs { 1, 2, 100, #t } do
      local a, b = base:event(i), t:event(i)
      assert.equals(a.action, b.action)
      assert.equals(a.label, b.label)
      assert.equals(a.stream, b.stream)
    end
    -- a prediction has no figures of PyTorch's and says what it is
    assert.is_nil(t.torch_peak_reserved)
    assert.matches("gpt2%.b4%.pickle%.gz@8$", t.path)
  end)

  it("at a recorded size gives that recording's requests", function()
    local real <close> = cupola.trace.load(rec "gpt2.b4")
    local t <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = real, [8] = rec "gpt2.b8" }, 4)
    assert.equals(4, t.scaled.base)
    for i = 1, #t, 97 do assert.equals(real:event(i).size, t:event(i).size) end
    assert.equals(peak(real), peak(t))
  end)

  it("from three recordings takes the base nearest the size asked and the lowest fit", function()
    local t <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = rec "gpt2.b4", [8] = rec "gpt2.b8" }, 16)
    assert.same({ 2, 4, 8 }, t.scaled.from)
    assert.equals(8, t.scaled.base)
    -- batch 8's 14 requests of the other path are in no other recording: kept as recorded
    assert.equals(14, t.scaled.by_rule)
    assert.equals(t.allocs, t.scaled.matched + t.scaled.by_rule)
    local b8 <close> = cupola.trace.load(rec "gpt2.b8")
    assert.is_true(peak(t) > peak(b8))
    assert.is_nil(t.scaled.note) -- a third recording fits what a line cannot
  end)

  it("places requests found at one size only by rule (resnet50's cuDNN workspaces)", function()
    local real <close> = cupola.trace.load(rec "resnet50.b64")
    local t <close> = cupola.trace.scale({ [16] = rec "resnet50.b16", [32] = rec "resnet50.b32" }, 64)
    assert.is_true(t.scaled.by_rule > 0)
    assert.is_true(t.scaled.left_out > 0)
    assert.equals(t.allocs, t.scaled.matched + t.scaled.by_rule)
    assert.equals(real.torch_peak_reserved, peak(t))
    assert.equals(peak(real, "expandable_segments:True"), peak(t, "expandable_segments:True"))
  end)

  it("makes a trace like any other: replayed, advised, drawn", function()
    local t <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, 8)
    local p <close> = cupola.pool { kind = "tlsf" }
    assert.equals(0, t:replay(p).failed)
    local res = cupola.advise(t)
    assert.equals(7258243072, res.rows[1].peak_reserved)
    local path = os.tmpname() .. ".html"
    cupola.timeline.write(t, path)
    local f = assert(io.open(path))
    assert.is_true(#f:read "a" > 1000)
    f:close()
    os.remove(path)
  end)

  it("refuses what it cannot predict from, with a sentence", function()
    local e = err(cupola.trace.scale, { [2] = rec "gpt2.b2" }, 8)
    assert.matches("two sizes or more %(got 1%)", e)
    e = err(cupola.trace.scale, { [2] = rec "gpt2.b2", [4] = rec "gpt2.b2" }, 8)
    assert.matches("ask for the same bytes in the same order", e)
    e = err(cupola.trace.scale, { [2] = rec "gpt2.b2", [16] = rec "resnet50.b16" }, 8)
    assert.matches("are not recordings of one program at two sizes", e)
    assert.matches("first differ at allocation 1, 154389504 bytes at", e)
    e = err(cupola.trace.scale, { [2] = "torch/twostream.default.cpsnap.gz",
      [4] = "torch/twostream.expandable.cpsnap.gz" }, 8)
    assert.matches("recorded under PyTorch's defaults and .* under expandable_segments:True", e)
    for _, at in ipairs { 0, -8, 2.5, "8", false } do
      e = err(cupola.trace.scale, { [2] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, at)
      assert.matches("bad argument #2 to 'scale' %(the size to predict must be a positive integer", e)
    end
    e = err(cupola.trace.scale, { [2.5] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, 8)
    assert.matches("each key is a recording's size, an integer in 1%.%.2147483647", e)
    e = err(cupola.trace.scale, { [2] = 7, [4] = rec "gpt2.b4" }, 8)
    assert.matches("the recording at size 2 must be a Trace or a path", e)
    e = err(cupola.trace.scale, "gpt2.b2", 8)
    assert.matches("bad argument #1 to 'scale' %(a table mapping sizes", e)
    e = err(cupola.trace.scale, { [2] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, 1 << 31)
    assert.matches("must be an integer in 1%.%.2147483647", e)
    local t <close> = cupola.trace.scale({ [2] = rec "gpt2.b2", [4] = rec "gpt2.b4" }, 8)
    e = err(cupola.trace.scale, { [2] = rec "gpt2.b2", [8] = t }, 16)
    assert.matches("is itself a prediction", e)
    local closed = cupola.trace.load(rec "gpt2.b2")
    closed:close()
    e = err(cupola.trace.scale, { [2] = closed, [4] = rec "gpt2.b4" }, 8)
    assert.matches("closed", e)
  end)

  it("keeps PyTorch's own operations: pending frees, empty_cache, a refused request, the device calls and the settings", function()
    local pickle = require "spec.support.pickle"
    local str, dict, list = pickle.str, pickle.dict, pickle.list
    local MiB = 1024 * 1024
    -- one program at size s: weights, an activation freed while another
    -- stream still uses it (its free completes later: the next activation
    -- cannot take its block), empty_cache(), a request PyTorch refused (its
    -- frames kept);
    -- `rows`: every free completed at once
    local function snapshot(s, rows)
      local ev, t = {}, 0
      local function add(action, addr, size, line)
        t = t + 1
        local kv = { "action", str(action), "addr", addr, "size", size, "stream", 0, "time_us", t }
        if line then
          kv[#kv + 1] = "frames"
          kv[#kv + 1] = list { dict { "filename", str "train.py", "line", line, "name", str "step" } }
        end
        ev[#ev + 1] = dict(kv)
      end
      local W, A, B = 0x7f0000000000, 0x7f0100000000, 0x7f0200000000
      add("segment_alloc", W, 32 * MiB)
      add("alloc", W, 32 * MiB, 10)
      add("segment_alloc", A, 16 * MiB * s)
      add("alloc", A, 16 * MiB * s, 11)
      add("free_requested", A, 16 * MiB * s)
      if rows then add("free_completed", A, 16 * MiB * s) end
      add("segment_alloc", B, 16 * MiB * s)
      add("alloc", B, 16 * MiB * s, 12)
      if not rows then add("free_completed", A, 16 * MiB * s) end
      add("free_requested", B, 16 * MiB * s)
      add("free_completed", B, 16 * MiB * s)
      add("segment_free", A, 16 * MiB * s)
      add("segment_free", B, 16 * MiB * s)
      add("oom", 0, 2 * MiB, 13)
      add("free_requested", W, 32 * MiB)
      add("free_completed", W, 32 * MiB)
      local settings = dict { "PYTORCH_CUDA_ALLOC_CONF", str "max_split_size_mb:64", "max_split_size", 64 * MiB }
      return "\128\2" .. dict { "device_traces", list { list(ev) }, "segments", list {},
        "allocator_settings", settings } .. "."
    end
    local paths = {}
    local function file(s, rows)
      local path = os.tmpname()
      local f = assert(io.open(path, "wb"))
      f:write(snapshot(s, rows))
      f:close()
      paths[#paths + 1] = path
      return path
    end
    local function replay(t, conf, addresses)
      local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = conf }
      local r = t:replay(p, { addresses = addresses })
      r.ns_per_event, r.seconds = nil, nil
      -- PyTorch's own figures, which a recording has and a prediction not
      r.torch_peak_reserved, r.torch_reserved_over_live = nil, nil
      return r
    end
    local p1, p2 = file(1), file(2)
    local real2 <close> = cupola.trace.load(p2)
    local real4 <close> = cupola.trace.load(file(4))
    local rows4 <close> = cupola.trace.load(file(4, true))
    local at2 <close> = cupola.trace.scale({ [1] = p1, [2] = p2 }, 2)
    local at4 <close> = cupola.trace.scale({ [1] = p1, [2] = p2 }, 4)
    for _, path in ipairs(paths) do os.remove(path) end
    assert.equals(1, real2.ooms)
    assert.equals("max_split_size_mb:64", real2.torch_conf)
    local oom_frames = require("cupola.core").trace.oom_frames
    assert.equals("train.py:13 step", oom_frames(real2, 1))
    for _, t in ipairs { at2, at4 } do
      assert.equals(real2.ooms, t.ooms)
      assert.equals(oom_frames(real2, 1), oom_frames(t, 1)) -- where the run ran out, in its words
      assert.equals(real2.torch_conf, t.torch_conf)
      assert.equals(real2.torch_settings, t.torch_settings)
    end
    -- the pending free is what the replay follows: at once, less is reserved
    assert.is_true(replay(rows4, "", "model").peak_reserved < replay(real4, "", "model").peak_reserved)
    for _, conf in ipairs { "", "expandable_segments:True" } do
      -- at the base's size, the base's replay to the last figure, its
      -- device calls' addresses included
      for _, addresses in ipairs { "recorded", "model" } do
        assert.same(replay(real2, conf, addresses), replay(at2, conf, addresses))
      end
      assert.same(replay(real4, conf, "model"), replay(at4, conf, "model"))
    end
  end)

  it("scales CSV traces by position", function()
    -- the same trace at two sizes asks the same bytes: refused as one size
    local e = err(cupola.trace.scale, { [1] = "gpt2_train", [2] = "gpt2_train" }, 4)
    assert.matches("recordings of one size%?", e)
  end)
end)

local function run(args)
  local env, rest = args:match "^(COLUMNS=%d+) (.*)$"
  if env then args = rest end
  local p = io.popen((env or "") .. " bin/cupola advise " .. args .. " 2>&1; echo \"rc=$?\"")
  local out = p:read "a"
  p:close()
  local rc = tonumber(out:match "rc=(%d+)%s*$")
  return (out:gsub("rc=%d+%s*$", "")), rc
end

local D = "examples/traces/torch/scaling/"
local A, B = D .. "gpt2.b2.pickle.gz@2", D .. "gpt2.b4.pickle.gz@4"

describe("bin/cupola advise A@SIZE B@SIZE", function()
  it("--at gives the advice at that size, the recorded setting's row the prediction", function()
    local out, rc = run(A .. " " .. B .. " --at 8 --json")
    assert.equals(0, rc)
    local res = require("dkjson").decode(out)
    assert.same({ 2, 4 }, res.predicted.from)
    assert.equals(8, res.predicted.at)
    assert.equals(res.allocations, res.predicted.matched)
    assert.equals(0, res.predicted.by_rule)
    assert.equals(0, res.predicted.by_rule_bytes)
    assert.is_nil(res.torch_peak_reserved)
    local rec = res.rows[1]
    assert.is_true(rec.recorded)
    assert.equals("scaled", rec.prediction)
    assert.equals(7258243072, rec.peak_reserved) -- PyTorch's own at batch 8 (spec above)
    assert.equals(0, rec.change)
    local text = run(A .. " " .. B .. " --at 8"):gsub("%s+", " ")
    assert.matches("predicted at size 8 from the recordings at 2, 4", text, 1, true)
  end)

  it("--limit alone gives each setting's largest size, consistent with the predictions", function()
    local out, rc = run(A .. " " .. B .. " --limit 12GiB --json --no-pools")
    assert.equals(0, rc)
    local res = require("dkjson").decode(out)
    assert.is_string(res.largest_setting)
    local predict = require "cupola.advise.predict"
    local recs = { [2] = D .. "gpt2.b2.pickle.gz", [4] = D .. "gpt2.b4.pickle.gz" }
    local best = 0
    for _, r in ipairs(res.rows) do
      assert.is_number(r.largest)
      best = math.max(best, r.largest)
      if r.recorded or r.setting == "expandable_segments:True" then
        -- the prediction at largest fits, at largest + 1 not
        for _, at in ipairs { r.largest, r.largest + 1 } do
          local adv = predict.run(recs, at, { limit = "12GiB", pools = false, search = false })
          for _, x in ipairs(adv.rows) do
            if x.setting == r.setting then assert.equals(at == r.largest, x.fits) end
          end
        end
      end
    end
    assert.equals(best, res.predicted.at)
    local text = run(A .. " " .. B .. " --limit 12GiB --no-pools"):gsub("%s+", " ")
    assert.matches("The largest size that fits in 12.00 GiB: " .. best, text, 1, true)
  end)

  it("--limit where no size fits says so, every row's largest nil", function()
    local out, rc = run(A .. " " .. B .. " --limit 1GiB --json --no-pools")
    assert.equals(0, rc)
    local res = require("dkjson").decode(out)
    assert.is_nil(res.largest_setting)
    for _, r in ipairs(res.rows) do assert.is_nil(r.largest) end
    assert.equals(2, res.predicted.at) -- the advice at the smallest recorded size
    local text = run(A .. " " .. B .. " --limit 1GiB --no-pools"):gsub("%s+", " ")
    assert.matches("No size from 1 up fits in 1.00 GiB with any setting", text, 1, true)
  end)

  it("answers misuse with a sentence", function()
    local cases = {
      { A .. " --at 8", 1, "a prediction needs recordings at two sizes or more" },
      { A .. " " .. D .. "gpt2.b4.pickle.gz@2 --at 8", 1, "are of one size" },
      { A .. " " .. D .. "resnet50.b16.pickle.gz@16 --at 8", 2, "are not recordings of one program at two sizes" },
      { A .. " " .. B .. " --at 0", 1, "--at needs the size to predict, a positive whole number" },
      { A .. " " .. B .. " --at eight", 1, "--at needs the size to predict, a positive whole number" },
      { A .. " " .. B, 1, "--at SIZE gives the advice at that size, --limit SIZE the largest size" },
      { A .. " " .. D .. "gpt2.b4.pickle.gz@four --at 8", 1, "the size after @ must be a whole number" },
      { A .. " " .. D .. "gpt2.b4.pickle.gz --at 8", 1, "has no size: give each recording as PATH@SIZE" },
    }
    for _, c in ipairs(cases) do
      local out, rc = run(c[1])
      out = out:gsub("%s+", " ") -- lines wrapped at $COLUMNS
      assert.equals(c[2], rc)
      assert.matches(c[3], out, 1, true)
      assert.not_matches("%.lua:%d+:", out)
      assert.not_matches("traceback", out)
    end
  end)
end)

describe("README's prediction example", function()
  it("is what bin/cupola advise prints now, to the byte, and its figures hold", function()
    local f = assert(io.open "README.md")
    local readme = f:read "a"
    f:close()
    local cmd, shown = readme:match "\n%$ bin/cupola advise (torch/scaling/[^\n]*)\n(.-)\n%.%.%.\n```"
    assert.is_truthy(cmd)
    local out = run("COLUMNS=100 " .. cmd)
    local got = {}
    for l in out:gmatch "([^\n]*)\n" do got[#got + 1] = l end
    local i = 0
    for l in (shown .. "\n"):gmatch "([^\n]*)\n" do
      i = i + 1
      assert.equals(l, got[i])
    end
    assert.matches("7,258,243,072 bytes", readme, 1, true)
    local real <close> = cupola.trace.load(rec "gpt2.b8")
    assert.equals(7258243072, real.torch_peak_reserved)
  end)
end)
