-- bench/advise.lua: how fast cupola.advise is, how well its rows predict
-- PyTorch's own runs, and how much memory loading a frame-laden snapshot
-- takes, as a markdown report.
--   bin/cupola bench/advise.lua [OUT.md]          (after make; host backend)
--   ADVISE_BIG=1: also synthesize big snapshots (python3 bench/big_snapshot.py,
--                 about a minute) and measure the loader's peak RSS on them
--
-- 1. Speed: loading each workload's default snapshot and advising on it
--    without a limit and with one (90 % of PyTorch's own peak reserved: the
--    search for the least memory of every row), on every core and on one
--    thread; the best of three for the 476k-operation gpt2_beam_search.
-- 2. Predictions: each of the 39 snapshots advised on (under its own limit
--    and setting), every row of a setting PyTorch was also run under beside
--    PyTorch's figure for it.
-- 3. Memory: peak RSS of a process that loads a big frame-laden snapshot
--    (ADVISE_BIG=1).
local out = arg[1]
local DIR = "examples/traces/torch/"
local truth = dofile(DIR .. "truth.lua")
local lines = {}
local function put(s) lines[#lines + 1] = s; io.write(s, "\n"); io.flush() end

local function cores()
  local p = io.popen "nproc 2>/dev/null"
  local n = p and tonumber(p:read "l")
  if p then p:close() end
  return n or 1
end
local commit = os.getenv "CUPOLA_COMMIT"
if not commit then
  local p = io.popen "git rev-parse --short HEAD 2>/dev/null"
  commit = p and p:read "l" or "unknown"
  if p then p:close() end
end
local function cpu_model()
  local f = io.open "/proc/cpuinfo"
  if not f then return "?" end
  for l in f:lines() do
    local m = l:match "^model name%s*:%s*(.-)%s*$"
    if m then f:close() return m end
  end
  f:close()
  return "?"
end
local function loadavg()
  local f = io.open "/proc/loadavg"
  local s = f and f:read "l" or "?"
  if f then f:close() end
  return s:match "^(%S+ %S+ %S+)" or s
end

put("# cupola advise: speed, predictions, memory")
put("")
put(string.format("Measured %s on %s, %d cores (%s), %s backend, commit %s, load average %s at the start,",
  os.date "!%Y-%m-%d", cpu_model(), cores(), cupola.device().name, cupola.backend(), commit, loadavg()))
put("with `bin/cupola bench/advise.lua`. Times are wall-clock seconds of `cupola.advise` (the load apart).")
put("")

-- ---- 1. speed -----------------------------------------------------------
put("## 1. Speed")
put("")
put("Each workload's default snapshot: the grid without a limit, and with a limit of 90 % of")
put("PyTorch's own peak reserved (every row's least memory searched). `replays`: the rows' replays")
put("and the search's. All cores, then one thread.")
put("")
put("| snapshot | replayed operations | load | rows | grid | grid, 1 thread | replays with limit | with limit | with limit, 1 thread |")
put("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
local function timed(f)
  local t0 = cupola.clock()
  local r = f()
  return cupola.clock() - t0, r
end
local function best(n, f)
  local b, res = math.huge, nil
  for _ = 1, n do
    local s, r = timed(f)
    if s < b then b, res = s, r end
  end
  return b, res
end
for _, w in ipairs { "resnet50_train", "t5_train_varlen", "gpt2_train", "mixtral_moe_train",
  "convnext_multires_train", "twostream", "varlen", "gpt2_beam_search" } do
  local path = DIR .. w .. ".default.cpsnap.gz"
  local reps = w == "gpt2_beam_search" and 3 or 1
  local tl, t = best(reps, function() return cupola.trace.load(path) end)
  local lim = math.floor(t.torch_peak_reserved * 0.9)
  local g1, r1 = best(reps, function() return cupola.advise(t, { progress = false }) end)
  local g2 = best(reps, function() return cupola.advise(t, { progress = false, threads = 1 }) end)
  local l1, rl = best(reps, function() return cupola.advise(t, { progress = false, limit = lim }) end)
  local l2 = best(reps, function() return cupola.advise(t, { progress = false, limit = lim, threads = 1 }) end)
  local replays = 0
  for _, r in ipairs(rl.rows) do replays = replays + 1 + (r.search_steps or 0) end
  local ops = 0
  do
    local p <close> = cupola.pool { kind = "torch", upstream = "virtual" }
    ops = t:replay(p, { progress = false }).events
  end
  put(string.format("| %s | %d | %.2f | %d | %.2f | %.2f | %d | %.2f | %.2f |", w, ops, tl, #r1.rows, g1, g2,
    replays, l1, l2))
  t:close()
end
put("")
do
  local l1 = tonumber(loadavg():match "^(%S+)") or 0
  if l1 >= cores() - 0.5 then
    put(string.format("The machine was shared (load average %.1f on %d cores at the start): the threads found", l1, cores()))
    put("no free core, so the all-core columns show little of the parallel replays; the one-thread")
    put("columns are the work itself.")
    put("")
  end
end

-- ---- 2. predictions -----------------------------------------------------
put("## 2. Predictions")
put("")
put("Each snapshot advised on under its own limit and recorded setting; for every other setting")
put("PyTorch was run under on the same workload and limit, the row's peak reserved against")
put("PyTorch's own (error in %). The recorded row is PyTorch's run replayed with its own")
put("addresses; the others use the recorded addresses while the model's device calls match the")
put("recording's, then the driver's placement.")
put("")
put("| snapshot | recorded row | exact | other settings (error %) | largest error |")
put("| --- | ---: | --- | --- | ---: |")
local function workload(name) return name:match "^([^.]+)%." end
local worst_default, worst_all, n_default, n_all = 0, 0, 0, 0
local sum_default, sum_all = 0, 0
for _, r in ipairs(truth) do
  local limit = r.limit > 0 and r.limit or nil
  local same = {}
  for _, s in ipairs(truth) do
    if workload(s.name) == workload(r.name) and s.limit == r.limit and s.name ~= r.name then same[#same + 1] = s end
  end
  local confs = {}
  for _, s in ipairs(same) do confs[#confs + 1] = s.conf end
  local res = cupola.advise(DIR .. r.name .. ".cpsnap.gz", { limit = limit, conf = confs, recorded = r.conf,
    search = false, progress = false, pools = false })
  local rec
  for _, x in ipairs(res.rows) do if x.recorded then rec = x end end
  local parts, worst = {}, 0
  local base = r.name:match "%.default$" or r.name:match "%.limit%-default$" or r.name:match "%.oom%-default$"
  for _, s in ipairs(same) do
    local row
    for _, x in ipairs(res.rows) do if x.kind == "torch" and x.setting == s.conf then row = x end end
    local e = (row.peak_reserved - s.reserved) / s.reserved * 100
    parts[#parts + 1] = string.format("%s %+.3f", s.name:match "%.(.*)$", e)
    worst = math.max(worst, math.abs(e))
    n_all, sum_all, worst_all = n_all + 1, sum_all + math.abs(e), math.max(worst_all, math.abs(e))
    if base then
      n_default, sum_default = n_default + 1, sum_default + math.abs(e)
      worst_default = math.max(worst_default, math.abs(e))
    end
  end
  put(string.format("| %s | %d | %s | %s | %s |", r.name, rec.peak_reserved,
    rec.prediction == "exact" and rec.peak_reserved == r.reserved and "yes" or "**no**",
    #parts > 0 and table.concat(parts, ", ") or "-", #parts > 0 and string.format("%.3f", worst) or "-"))
end
put("")
put(string.format("From the default runs: %d pairs, largest error %.3f %%, mean %.3f %%. From every run: %d pairs,",
  n_default, worst_default, n_default > 0 and sum_default / n_default or 0, n_all))
put(string.format("largest %.3f %%, mean %.3f %%. A run under another setting predicts less well: its recording",
  worst_all, n_all > 0 and sum_all / n_all or 0))
put("carries that setting's own releases of cached segments (garbage collection, retries under the")
put("limit), which a replay under other settings takes for `empty_cache()` calls at the same points,")
put("and its addresses stop matching at the first call that differs.")
put("")

-- ---- 3. memory ------------------------------------------------------------
put("## 3. Loading a frame-laden snapshot")
put("")
if os.getenv "ADVISE_BIG" then
  put("`python3 bench/big_snapshot.py FILE ENTRIES DEPTH` (Python's pickle as `_dump_snapshot` writes it,")
  put("gzip; each entry its own list of DEPTH frames, the frame dicts shared), loaded in a fresh process:")
  put("its peak RSS (VmHWM).")
  put("")
  put("| entries | frames each | file (gzip) | pickle | events | load | peak RSS |")
  put("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for _, c in ipairs { { 150000, 8 }, { 150000, 96 }, { 400000, 48 } } do
    local f = string.format("/tmp/cupola-big-%d-%d.pickle.gz", c[1], c[2])
    if not io.open(f) then
      os.execute(string.format("python3 bench/big_snapshot.py %s %d %d", f, c[1], c[2]))
    end
    local fh = io.open(f, "rb")
    local gz = fh:seek "end"
    fh:close()
    local p = io.popen("gzip -dc " .. f .. " | wc -c")
    local raw = tonumber(p:read "l")
    p:close()
    p = io.popen([[bin/cupola -e 'local t0 = cupola.clock() local t = cupola.trace.load("]] .. f
      .. [[") local s = cupola.clock() - t0 local h for l in io.lines "/proc/self/status" do h = h or l:match "^VmHWM:%s+(%d+)" end print(t.events, s, h)']])
    local ev, secs, hwm = p:read "l":match "(%d+)%s+(%S+)%s+(%d+)"
    p:close()
    put(string.format("| %d | %d | %.1f MB | %.1f MB | %s | %.2f s | %.1f MiB |", c[1], c[2], gz / 1e6, raw / 1e6,
      ev, tonumber(secs), tonumber(hwm) / 1024))
  end
  put("")
  put("Before the reader took the pickle as a stream and turned frame lists into labels as it read")
  put("them (main at 36b74dd, the same files): 115 MiB for 150k entries of 8 frames, 312 MiB with 96,")
  put("546 MiB for 400k entries of 48.")
else
  put("(ADVISE_BIG=1 measures it: synthesizing the files takes about a minute.)")
end
put("")

if out then
  local f = assert(io.open(out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
