-- bench/predict.lua: predictions at a size not recorded (cupola.trace.scale)
-- against the runs PyTorch made at that size, as a markdown report.
--   bin/cupola bench/predict.lua DIR [DIR ...] [--out OUT.md]
-- Each DIR holds one program's runs at several sizes (a training step's
-- memory snapshots, recorded from the start) and truth.jsonl, one line per
-- run with PyTorch's figures: "workload", the size ("batch", or "size" with
-- "grows"), "conf" ("default" or "expandable"), "reserved"
-- (max_memory_reserved).  Snapshots are NAME.bSIZE.CONF.pickle.gz or
-- NAME.sSIZE.CONF.pickle.gz (tests/torch/record_scaling.py writes the
-- latter).  Predictions are made from default runs only:
--   1. each size from the two sizes below it (and from every size below it
--      where there are three or more), under the default allocator and
--      under expandable_segments:True, against that size's run;
--   2. each size from the two sizes around it;
--   3. each size's expandable run from its own default run (no scaling:
--      the address model and the setting alone).
-- Beside each prediction, the bar: the straight line through the two runs'
-- max_memory_reserved (of the same setting) at the size predicted.
-- Then the time of one prediction and its advice, and of the search for
-- the largest size under a limit.
local args, dirs, out, devices = arg, {}, nil, {}
local i = 1
while args[i] do
  if args[i] == "--out" then
    out = args[i + 1]
    i = i + 2
  elseif args[i] == "--device" then
    -- NAME=DEVICE: the device a program's runs were recorded on, where
    -- truth.jsonl does not say
    local name, dev = (args[i + 1] or ""):match "^([^=]+)=(.+)$"
    if name then devices[name] = dev end
    i = i + 2
  else
    dirs[#dirs + 1] = args[i]
    i = i + 1
  end
end
if #dirs == 0 then
  io.stderr:write "usage: bin/cupola bench/predict.lua DIR [DIR ...] [--device NAME=DEVICE]... [--out OUT.md]\n"
  os.exit(2)
end

local json = require "dkjson"
local lines = {}
local function put(s) lines[#lines + 1] = s; io.write(s, "\n"); io.flush() end

-- runs[workload] = {sizes = {...}, conf = {default = {[size] = {reserved=, path=}}, ...}, grows=}
local runs, order = {}, {}
for _, dir in ipairs(dirs) do
  for line in io.lines(dir .. "/truth.jsonl") do
    local r = json.decode(line)
    if r and r.workload then
      local size = r.batch or r.size
      local w = runs[r.workload]
      if not w then
        w = { sizes = {}, conf = {}, grows = r.grows or (r.batch and "batch") or "size", device = r.device,
              stacks = r.stacks or "python" }
        runs[r.workload] = w
        order[#order + 1] = r.workload
      end
      w.conf[r.conf] = w.conf[r.conf] or {}
      local tag = r.batch and ("b" .. size) or ("s" .. size)
      w.conf[r.conf][size] = { reserved = r.reserved, path = ("%s/%s.%s.%s.pickle.gz"):format(dir, r.workload, tag, r.conf) }
      local seen = false
      for _, s in ipairs(w.sizes) do if s == size then seen = true end end
      if not seen then w.sizes[#w.sizes + 1] = size end
    end
  end
end
for _, w in pairs(runs) do table.sort(w.sizes) end

-- As advise replays: the base recording's addresses while the model's
-- device calls are that run's, then the driver model ("driver": the
-- driver model alone).
local function peak(t, conf, addresses)
  local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = conf }
  return t:replay(p, { addresses = addresses or "recorded" }).peak_reserved
end
local CONF = { default = "", expandable = "expandable_segments:True" }
local function err(x, truth) return 100 * (x - truth) / truth end
local function pct(x) return ("%+.2f %%"):format(x) end
local notes = {}
local worst = { default = { two = 0, four = 0 }, expandable = { two = 0, four = 0 } }
local bar = { two = { lo = 0, hi = 0 }, four = { lo = 0, hi = 0 } }

local commit = os.getenv "CUPOLA_COMMIT"
if not commit then
  local p = io.popen "git rev-parse --short HEAD 2>/dev/null"
  commit = p and p:read "l" or "unknown"
  if p then p:close() end
end
local function first_line(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  local v = p and p:read "l"
  if p then p:close() end
  return v
end
local machine = ("%s, %s cores (%s)"):format(first_line "uname -m" or "?", first_line "nproc" or "?",
  (first_line "grep -m1 'model name' /proc/cpuinfo" or "?"):gsub("^model name%s*:%s*", ""))
put "# Predictions at a size not recorded, against PyTorch's runs"
put ""
put(("Measured %s with `bin/cupola bench/predict.lua`, commit %s, on %s (%s backend; the predictions "):format(
  os.date "!%Y-%m-%d", commit, machine, cupola.backend()) ..
  "need no GPU). Ground truth: PyTorch 2.11.0 (CUDA 13.0) runs, each size in a fresh process, default " ..
  "and expandable_segments:True, `max_memory_reserved()` at the end; the devices:")
for _, name in ipairs(order) do
  local w = runs[name]
  put(("- `%s`: %s at %s, stacks=\"%s\", recorded on %s"):format(name,
    w.grows == "seq" and "sequence length" or w.grows == "side" and "image side" or "batch",
    table.concat(w.sizes, ", "), w.stacks, devices[name] or w.device or "an NVIDIA H100 or H200 (not named)"))
end
put ""
put "Every prediction is from default runs only: `cupola.trace.scale(recordings, at)` replayed through"
put "cupola's model of PyTorch's allocator (`kind = \"torch\"`, upstream `virtual`) under the setting, as"
put "`cupola advise` replays it: the addresses CUDA gave the base recording's segments while the model's"
put "device calls are that run's, then the driver model (beside: the driver model alone). Error:"
put "(prediction - PyTorch) / PyTorch. The bar: the straight line through the same two runs'"
put "`max_memory_reserved` (of the setting predicted) at the size predicted."
put ""

local function predict(w, from, at)
  local recs = {}
  for _, s in ipairs(from) do recs[s] = w.conf.default[s].path end
  local t0 = os.clock()
  local t = cupola.trace.scale(recs, at)
  return t, os.clock() - t0
end

put "## 1. A larger size from smaller ones"
put ""
put "| program | from | at | times the larger | setting | PyTorch | predicted | error | driver model alone | straight line | its error | matched | by rule (bytes at peak) |"
put "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for _, name in ipairs(order) do
  local w = runs[name]
  local S = w.sizes
  local cases = {}
  for a = 1, #S - 1 do
    for k = a + 2, #S do cases[#cases + 1] = { { S[a], S[a + 1] }, S[k] } end
  end
  if #S >= 4 then
    local from = {}
    for a = 1, #S - 1 do from[#from + 1] = S[a] end
    cases[#cases + 1] = { from, S[#S] }
  end
  for _, c in ipairs(cases) do
    local from, at = c[1], c[2]
    local t = predict(w, from, at)
    local hi = from[#from]
    local ratio = at / hi
    for _, conf in ipairs { "default", "expandable" } do
      local truth = w.conf[conf] and w.conf[conf][at]
      if truth then
        local x = peak(t, CONF[conf])
        local a, b = from[#from - 1], from[#from]
        local ra, rb = w.conf[conf][a].reserved, w.conf[conf][b].reserved
        local line = rb + (rb - ra) * (at - b) / (b - a)
        local e, le = err(x, truth.reserved), err(line, truth.reserved)
        if #from == 2 then
          local key = ratio <= 2 and "two" or "four"
          worst[conf][key] = math.max(worst[conf][key], math.abs(e))
          bar[key].lo = math.min(bar[key].lo, le)
          bar[key].hi = math.max(bar[key].hi, le)
        end
        local xd = peak(t, CONF[conf], "model")
        put(("| %s | %s | %d | %gx | %s | %d | %d | %s | %s | %d | %s | %d of %d | %d (%d) |"):format(name,
          table.concat(from, ", "), at, ratio, conf, truth.reserved, x, pct(e), pct(err(xd, truth.reserved)),
          math.floor(line + 0.5), pct(le), t.scaled.matched, t.allocs, t.scaled.by_rule, t.scaled.by_rule_bytes))
      end
    end
    if t.scaled.note then notes[#notes + 1] = ("- %s from %s: %s"):format(name, table.concat(from, ", "), t.scaled.note) end
    t:close()
  end
end
put ""
if #notes > 0 then
  put ""
  for _, n in ipairs(notes) do put(n) end
  put ""
end
local seen4 = bar.four.lo ~= 0 or bar.four.hi ~= 0
local function abs(x) return (pct(x):gsub("^%+", "")) end
put(("Largest error, from two recordings: at twice the larger %s (default) and %s (expandable)%s. "):format(
  abs(worst.default.two), abs(worst.expandable.two),
  seen4 and (", at four times %s and %s"):format(abs(worst.default.four), abs(worst.expandable.four)) or "") ..
  ("The straight line: %s to %s at twice%s."):format(pct(bar.two.lo), pct(bar.two.hi),
  seen4 and (", %s to %s at four times"):format(pct(bar.four.lo), pct(bar.four.hi)) or ""))
put ""

put "## 2. A size between two others"
put ""
put "| program | from | at | setting | PyTorch | predicted | error | straight line | its error |"
put "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for _, name in ipairs(order) do
  local w = runs[name]
  local S = w.sizes
  for k = 2, #S - 1 do
    local from, at = { S[k - 1], S[k + 1] }, S[k]
    local t = predict(w, from, at)
    for _, conf in ipairs { "default", "expandable" } do
      local truth = w.conf[conf] and w.conf[conf][at]
      if truth then
        local x = peak(t, CONF[conf])
        local ra, rb = w.conf[conf][from[1]].reserved, w.conf[conf][from[2]].reserved
        local line = ra + (rb - ra) * (at - from[1]) / (from[2] - from[1])
        put(("| %s | %s | %d | %s | %d | %d | %s | %d | %s |"):format(name, table.concat(from, ", "), at, conf,
          truth.reserved, x, pct(err(x, truth.reserved)), math.floor(line + 0.5), pct(err(line, truth.reserved))))
      end
    end
    t:close()
  end
end
put ""

put "## 3. Each size's expandable run from its own default run"
put ""
put "No scaling: the default run's own requests replayed under expandable_segments:True, as `cupola advise`"
put "does for every setting of a recording."
put ""
put "| program | size | PyTorch (expandable) | predicted | error |"
put "| --- | --- | --- | --- | --- |"
for _, name in ipairs(order) do
  local w = runs[name]
  for _, s in ipairs(w.sizes) do
    local d, x = w.conf.default[s], w.conf.expandable and w.conf.expandable[s]
    if d and x then
      local t <close> = cupola.trace.load(d.path)
      local p = peak(t, CONF.expandable)
      put(("| %s | %d | %d | %d | %s |"):format(name, s, x.reserved, p, pct(err(p, x.reserved))))
    end
  end
end
put ""

put "## 4. Time"
put ""
put "One prediction from two recordings (loading them, matching, fitting, the trace) and `cupola.advise` on"
put "it (every setting's replay), CPU seconds of this process (advise's replays run on threads: wall"
put "seconds beside), the best of 3, at twice the larger size."
put ""
put "The search for the largest size under a limit (24 GiB, a 24 GiB card), every setting's row: CPU and wall"
put "seconds, once."
put ""
put "| program | allocations | predict | advise (cpu / wall) | largest under 24 GiB (cpu / wall) | largest |"
put "| --- | --- | --- | --- | --- | --- |"
local function wall()
  local p = io.popen "date +%s.%N"
  local v = tonumber(p:read "l")
  p:close()
  return v
end
for _, name in ipairs(order) do
  local w = runs[name]
  local S = w.sizes
  local best_p, best_c, best_w = math.huge, math.huge, math.huge
  local allocs
  for _ = 1, 3 do
    local t, dt = predict(w, { S[1], S[2] }, 2 * S[2])
    allocs = t.allocs
    local c0, w0 = os.clock(), wall()
    cupola.advise(t)
    best_p = math.min(best_p, dt)
    best_c = math.min(best_c, os.clock() - c0)
    best_w = math.min(best_w, wall() - w0)
    t:close()
  end
  local recs = { [S[1]] = w.conf.default[S[1]].path, [S[2]] = w.conf.default[S[2]].path }
  local c0, w0 = os.clock(), wall()
  local res = require("cupola.advise.predict").largest(recs, { limit = "24GiB" })
  local lc, lw = os.clock() - c0, wall() - w0
  local rec
  for _, r in ipairs(res.rows) do if r.recorded then rec = r end end
  put(("| %s | %d | %.3f s | %.3f s / %.3f s | %.3f s / %.3f s | %s: %s (%s: %s) |"):format(name, allocs, best_p,
    best_c, best_w, lc, lw, res.largest_row or "none", tostring(res.largest_size),
    rec and rec.description or "?", rec and tostring(rec.largest) or "?"))
end
put ""

if out then
  local f = assert(io.open(out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
