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

  it("scales CSV traces by position", function()
    -- the same trace at two sizes asks the same bytes: refused as one size
    local e = err(cupola.trace.scale, { [1] = "gpt2_train", [2] = "gpt2_train" }, 4)
    assert.matches("recordings of one size%?", e)
  end)
end)
