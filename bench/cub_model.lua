-- bench/cub_model.lua: cupola's model of CUB's CachingDeviceAllocator
-- (cupola.pool{kind = "cub"}) over allocation traces, in the figures
-- bench/cub_replay.cu gives for CUB itself on the GPU, and the table that
-- puts the two side by side.
--
--   lua5.4 bench/cub_model.lua run [--upstream virtual|device] [--runs N]
--          [--reuse stream|event|wait] [--max BYTES] [--mode NAME]
--          SETTINGS TRACE...        CSV lines on stdout (the replayer's columns)
--   lua5.4 bench/cub_model.lua peak TRACE    the trace's peak of live bytes
--   lua5.4 bench/cub_model.lua synth DIR
--          writes DIR/streams3_1.csv and DIR/streams3_2.csv (below)
--   lua5.4 bench/cub_model.lua table FILE...
--          a Markdown table from CSV files of both (model and CUB rows)
--
-- SETTINGS: "growth,min_bin,max_bin,max_cached_bytes;..." (the replayer's).
-- --reuse stream is the model of streams that never catch up (CUB with every
-- event query answering not ready); --max the model of a device that refuses
-- cudaMalloc past that many bytes held (CUB frees its cache and retries).
-- The table pairs the mode "model" with CUB's "sync" (and shows "free");
-- --mode names the rows otherwise.
-- Columns: trace,setting,mode,run,events,allocs,failed,mallocs,
--   malloc_failures,frees,peak_held,end_held,mismatch,seconds
-- where, for the model, mallocs = device_allocs + device_alloc_failures,
-- frees = device_frees, peak_held = reserved_peak and end_held = reserved,
-- all read after the replay (which frees what the trace leaves live, in
-- allocation order, as the replayer does) and before the pool is closed.
-- mode is "model" over the virtual upstream (every ready event complete:
-- the replayer's "sync" mode) and "cupola-<backend>" over the device upstream
-- (real cudaMalloc and events through cupola, as free-running as CUB's
-- "free" mode).
--
-- The synthetic traces have three streams (so that cross-stream reuse and
-- its events matter, which the shipped single-stream traces never test):
-- 20,000 allocations, sizes 70 % log-uniform 256 B .. 256 KiB, 25 % 256 KiB
-- .. 2 MiB, 5 % 2 .. 64 MiB; each on a random stream and freed on the same
-- stream after an exponential lifetime (mean 30 allocations).
local cupola = require "cupola"

local cmd = arg[1]

local function trace_name(path)
  return (path:match "([^/]+)$"):gsub("%.csv%.gz$", ""):gsub("%.csv$", "")
end

local function parse_setting(s)
  local g, lo, hi, cap = s:match "^(%d+),(%d+),(%d+),(%d+)$"
  if not g then error("setting '" .. s .. "' is not growth,min_bin,max_bin,max_cached_bytes", 0) end
  return { bin_growth = tonumber(g), min_bin = tonumber(lo), max_bin = tonumber(hi),
    max_cached_bytes = tonumber(cap) }
end

local function run(args)
  local upstream, runs, reuse, max, mode, i = "virtual", 1, nil, nil, nil, 1
  while args[i] and args[i]:sub(1, 2) == "--" do
    if args[i] == "--upstream" then upstream = args[i + 1]
    elseif args[i] == "--runs" then runs = tonumber(args[i + 1])
    elseif args[i] == "--reuse" then reuse = args[i + 1]
    elseif args[i] == "--max" then max = tonumber(args[i + 1])
    elseif args[i] == "--mode" then mode = args[i + 1]
    else error("unknown flag " .. args[i], 0) end
    i = i + 2
  end
  local settings = args[i]
  mode = mode or (upstream == "virtual" and "model" or "cupola-" .. cupola.backend())
  for t = i + 1, #args do
    local path = args[t]
    local tr = cupola.trace.load(path)
    for s in settings:gmatch "[^;]+" do
      local o = parse_setting(s)
      o.kind, o.upstream, o.reuse, o.max = "cub", upstream, reuse, max
      for r = 1, runs do
        local p <close> = cupola.pool(o)
        local res = cupola.trace.replay(tr, p)
        local st = p:stats()
        print(table.concat({ trace_name(path), s, mode, r, res.events, st.allocs, res.failed,
          st.device_allocs + st.device_alloc_failures, st.device_alloc_failures, st.device_frees,
          st.reserved_peak, st.reserved, 0, ("%.6f"):format(res.seconds) }, ","))
        io.stdout:flush()
      end
    end
  end
end

local function synth(dir)
  local function gen(path, seed)
    math.randomseed(seed)
    local r = math.random
    local f = assert(io.open(path, "w"))
    f:write "Thread,Time,Action,Pointer,Size,Stream\n"
    local streams = { 0x0, 0x1a, 0x2b }
    local live, t, ptr = {}, 0, 0x10000
    local function row(action, b)
      f:write(("0,%d.000,%s,0x%x,%d,0x%x\n"):format(t, action, b.ptr, b.size, b.stream))
    end
    local function logu(lo, hi) return math.floor(math.exp(math.log(lo) + r() * (math.log(hi) - math.log(lo)))) end
    for i = 1, 20000 do
      t = t + 1
      -- frees due now, in the order they fall due (ties: allocation order)
      local due = {}
      for k, b in pairs(live) do if b.at <= i then due[#due + 1] = k end end
      table.sort(due, function(a, b) return live[a].at < live[b].at or live[a].at == live[b].at and a < b end)
      for _, k in ipairs(due) do row("free", live[k]); live[k] = nil end
      local u, size = r(), nil
      if u < 0.70 then size = logu(256, 256 * 1024)
      elseif u < 0.95 then size = logu(256 * 1024, 2 * 1024 * 1024)
      else size = logu(2 * 1024 * 1024, 64 * 1024 * 1024) end
      local b = { ptr = ptr, size = size, stream = streams[r(3)], at = i + 1 + math.floor(-30 * math.log(1 - r())) }
      ptr = ptr + ((size + 4095) // 4096) * 4096 + 4096
      live[i] = b
      row("allocate", b)
    end
    f:close()
  end
  for seed = 1, 2 do gen(("%s/streams3_%d.csv"):format(dir, seed), seed) end
end

local function table_of(files)
  local rows, order = {}, {}
  for _, file in ipairs(files) do
    for line in io.lines(file) do
      if not line:match "^#" and line:match "," then
        local c = {}
        for v in (line .. ","):gmatch "([^,]*)," do c[#c + 1] = v end
        -- the setting holds commas: its four fields are c[2..5]
        local setting = table.concat({ c[2], c[3], c[4], c[5] }, ",")
        local key = c[1] .. " " .. setting
        if not rows[key] then
          rows[key] = { trace = c[1], setting = setting, modes = {} }
          order[#order + 1] = key
        end
        local m = rows[key].modes[c[6]] or {}
        rows[key].modes[c[6]] = m
        m[#m + 1] = { events = c[8], failed = tonumber(c[10]), mallocs = tonumber(c[11]), failures = tonumber(c[12]),
          frees = tonumber(c[13]), peak = tonumber(c[14]), mismatch = tonumber(c[16]),
          seconds = tonumber(c[17]) }
      end
    end
  end
  local function fig(list, f)
    if not list then return "-" end
    local lo, hi = math.huge, -math.huge
    for _, x in ipairs(list) do lo = math.min(lo, x[f]); hi = math.max(hi, x[f]) end
    return lo == hi and tostring(lo) or ("%d..%d"):format(lo, hi)
  end
  local out = {
    "| trace | setting | cudaMalloc: model / CUB sync / CUB free | cudaFree: model / sync / free | peak held: model / sync / free (bytes) | failed cudaMalloc / refused allocations: model, sync | model = CUB sync |",
    "| --- | --- | --- | --- | --- | --- | --- |",
  }
  local same, total = 0, 0
  for _, key in ipairs(order) do
    local r = rows[key]
    local m, s, f = r.modes.model, r.modes.sync, r.modes.free
    local ok = "-"
    if m and s then
      total = total + 1
      ok = (fig(m, "mallocs") == fig(s, "mallocs") and fig(m, "frees") == fig(s, "frees")
        and fig(m, "peak") == fig(s, "peak") and fig(m, "failures") == fig(s, "failures")
        and fig(m, "failed") == fig(s, "failed")) and "yes" or "**no**"
      if ok == "yes" then same = same + 1 end
    end
    out[#out + 1] = ("| %s | %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s / %s, %s / %s | %s |"):format(r.trace,
      r.setting, fig(m, "mallocs"), fig(s, "mallocs"), fig(f, "mallocs"), fig(m, "frees"),
      fig(s, "frees"), fig(f, "frees"), fig(m, "peak"), fig(s, "peak"), fig(f, "peak"),
      fig(m, "failures"), fig(m, "failed"), fig(s, "failures"), fig(s, "failed"), ok)
  end
  out[#out + 1] = ""
  out[#out + 1] = ("%d of %d (trace, setting) pairs: the model equals CUB (its \"sync\" rows) in cudaMalloc calls and failures, cudaFree calls, refused allocations and peak bytes held."):format(same, total)
  local extra = {}
  for _, key in ipairs(order) do
    for mode, list in pairs(rows[key].modes) do
      if mode:match "^cupola%-" then
        extra[#extra + 1] = ("| %s | %s | %s | %s | %s | %s |"):format(rows[key].trace, rows[key].setting, mode,
          fig(list, "mallocs"), fig(list, "frees"), fig(list, "peak"))
      end
      for _, x in ipairs(list) do
        if x.mismatch and x.mismatch > 0 then
          out[#out + 1] = ("warning: %s %s %s: the counted bytes disagreed with CUB's cached_bytes after %d rows"):format(
            rows[key].trace, rows[key].setting, mode, x.mismatch)
        end
      end
    end
  end
  if #extra > 0 then
    out[#out + 1] = ""
    out[#out + 1] = "cupola's cub pool over the device upstream (real cudaMalloc and events through cupola):"
    out[#out + 1] = ""
    out[#out + 1] = "| trace | setting | backend | cudaMalloc | cudaFree | peak held |"
    out[#out + 1] = "| --- | --- | --- | --- | --- | --- |"
    for _, l in ipairs(extra) do out[#out + 1] = l end
  end
  print(table.concat(out, "\n"))
end

if cmd == "run" then
  run({ table.unpack(arg, 2) })
elseif cmd == "peak" then
  print(cupola.trace.load(assert(arg[2], "peak TRACE")).peak_live)
elseif cmd == "synth" then
  synth(assert(arg[2], "synth DIR"))
elseif cmd == "table" then
  table_of({ table.unpack(arg, 2) })
else
  io.stderr:write "usage: lua5.4 bench/cub_model.lua run|synth|table ... (see the header)\n"
  os.exit(2)
end
