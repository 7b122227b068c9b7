-- bench/device_survey.lua: the survey's benchmarks (cupola.survey) on every
-- in-kernel allocator of cupola, a plugin (examples/plugins/stackalloc.cu)
-- and CUDA's malloc, side by side, with cupola's own aims checked.
--
--   lua5.4 bench/device_survey.lua OUTDIR [part]
--
-- part:
--   aims        what the heap's aims are stated in, first and within the
--               time given: the heap's alloc+free pairs at every power of
--               two 16 B-8 KiB and 64 KiB, out of memory and fragmentation,
--               then CUDA's malloc in the same pairs (each size probed at
--               1e4 and 1e5 threads first: a size whose 1e6-thread launch
--               would not fit its share of the time left is reported at the
--               largest count that did), and the aims' lines with the ratios
--   main        (default) every test on heap, slab and the plugin, then bump
--               and warp_bump through the tests that need no free, then
--               CUDA's malloc through the tests but pairs and out of memory
--               (measured by the other parts), as long as time is left
--   malloc-oom  CUDA's malloc alone in the out-of-memory test (its heap
--               keeps the size it has when the first malloc kernel runs, so
--               this needs a process of its own), in a 64 MiB heap
-- Writes OUTDIR/survey-<part>.{csv,json,html,md}; rows are also appended to
-- OUTDIR/survey-<part>.rows as they come, so a run cut short still leaves
-- what it measured.  SURVEY_TIME_LIMIT (seconds) bounds the part: past it,
-- what is left is skipped and the results say so.  SURVEY_SCALE (default 1)
-- scales thread counts (0.1 for a quick look).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local survey = require "cupola.survey"

local out = arg[1] or "."
local part = arg[2] or "main"
local GPU = cupola.backend() == "cuda"
local SCALE = tonumber(os.getenv "SURVEY_SCALE") or 1
local GiB, MiB = 2^30, 2^20
local PLUGIN = { kind = "plugin", path = "examples/plugins/stackalloc.cu", name = "stackalloc (plugin)" }

local function scaled(n) return math.max(1, math.floor(n * SCALE)) end
local function pow2s(lo, hi, step)
  local t, v = {}, lo
  while v <= hi do t[#t + 1] = v; v = v * (step or 2) end
  return t
end

local rows_file = assert(io.open(out .. "/survey-" .. part .. ".rows", "w"))
local t0 = cupola.clock()
-- every row of the part, as it comes (meta: the first run's, completed by
-- the later ones)
local res = { meta = nil, rows = {} }
local write_outputs
local function progress(r)
  res.rows[#res.rows + 1] = r
  -- CUDA's malloc may take many seconds a launch: the aims' files after each
  if part == "aims" and r.allocator == "CUDA malloc" then write_outputs() end
  rows_file:write(string.format("%8.1fs %-12s %-22s size=%-9s threads=%-8s %s\n", cupola.clock() - t0, r.test,
    r.allocator, tostring(r.size or ""), tostring(r.threads or ""),
    r.alloc_ms and string.format("alloc %.4f ms free %.4f ms failed %d", r.alloc_ms, r.free_ms or 0, r.failed or 0)
    or r.per_second and string.format("%.4g pairs/s failed %d%s", r.per_second, r.failed or 0,
      r.probe and string.format(" (probe; all threads ~%.1f s)", r.estimate_ms / 1e3) or "")
    or r.ratio and string.format("range/live %.3f", r.ratio)
    or r.fraction and string.format("served %.1f%%", 100 * r.fraction)
    or r.ms and string.format("%.4f ms", r.ms)
    or r.alloc_registers and string.format("registers %s / %s", r.alloc_registers, r.free_registers) or ""))
  rows_file:flush()
end

local LIMIT = tonumber(os.getenv "SURVEY_TIME_LIMIT")
local function left() return LIMIT and LIMIT - (cupola.clock() - t0) or false end

local base = {
  -- 1e6 pairs of 64 KiB keep ~270k blocks live at once on an H100: 17 GiB
  capacity = GPU and 24 * GiB or 256 * MiB,
  frag_capacity = GPU and 2 * GiB or 64 * MiB,
  oom_capacity = GPU and 256 * MiB or 16 * MiB,
  threads = scaled(GPU and 100000 or 4000),
  warps = scaled(GPU and 10000 or 1000),
  pair_threads = scaled(GPU and 1000000 or 20000),
  oom_threads = scaled(GPU and 100000 or 4000),
  scaling_threads = pow2s(1, GPU and 2^20 or 2^12, 4),
  budget_ms = 1000,
  synth_threads = pow2s(1, GPU and 2^20 or 2^12, 4),
  progress = progress,
}
local function with(t)
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  for k, v in pairs(t) do o[k] = v end
  o.time_limit = left() and math.max(left(), 1) or false
  return o
end

local function merge(r)
  res.meta = res.meta or r.meta
  for k, v in pairs(r.meta) do
    if res.meta[k] == nil then res.meta[k] = v end
  end
end
-- A run of the survey while time is left (a part never starts what it cannot
-- begin in the last 10 s).
local function run(t)
  if left() and left() < 10 then
    if res.meta then
      res.meta.cut_short = "the part's time limit was reached: the measurements after it were skipped"
    end
    return
  end
  merge(survey.run(with(t)))
end

-- The part's files, rewritten after each run of it (a part stopped from
-- outside keeps what it finished).

-- cupola's aims for the heap, on the figures of this run.
local function find(test, alloc, size)
  for _, r in ipairs(res.rows) do
    if r.test == test and r.allocator == alloc and r.size == size then return r end
  end
end

-- The part's files from the rows so far: CSV, JSON, HTML, and markdown
-- (with the aims' lines in the aims part).
function write_outputs(final)
  if not res.meta then return end
  local aims = {}
  local function aim(ok, text, label)
    aims[#aims + 1] = string.format("- %s %s", label or (ok and "met:" or "**missed:**"), text)
  end
  if part == "aims" then
    for _, size in ipairs { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 65536 } do
      local h, m = find("pairs", "heap", size), find("pairs", "CUDA malloc", size)
      local want = size == 65536 and 100 or 400
      if h and m and m.per_second > 0 then
        local k = h.per_second / m.per_second
        aim(GPU and k >= want and h.failed == 0, string.format("alloc+free pairs at %d B, %d threads: heap %.4g/s, " ..
          "CUDA's malloc %.4g/s%s: %sx (aim >= %dx)%s%s", size, h.threads, h.per_second, m.per_second,
          m.probe and string.format(" (at %d threads: %d would take ~%.0f s)", m.threads, h.threads,
            m.estimate_ms / 1e3) or "",
          string.format(k >= 10 and "%.0f" or "%.2f", k), want, h.failed > 0 and string.format(", heap: %d failed", h.failed) or "",
          m.failed > 0 and string.format(", CUDA's malloc: %d NULL (its heap: %s)", m.failed,
            tostring(res.meta.malloc_heap)) or ""), not GPU and "CPU:" or nil)
      elseif h then
        aim(false, string.format("alloc+free pairs at %d B: heap %.4g/s; CUDA's malloc not measured (time)", size,
          h.per_second), "**not measured:**")
      end
    end
    for _, r in ipairs(res.rows) do
      if r.allocator == "heap" and r.test == "oom" then
        aim(r.fraction >= 0.9, string.format("out of memory at %d B: %.1f%% of the capacity served (aim >= 90%%)", r.size,
          100 * r.fraction))
      elseif r.allocator == "heap" and r.test == "frag" then
        aim(r.ratio <= 2, string.format("fragmentation at %d B: address range %.2fx the bytes live (aim <= 2x)", r.size, r.ratio))
      end
    end
  end

  local stem = out .. "/survey-" .. part
  survey.csv(res, stem .. ".csv")
  survey.json(res, stem .. ".json")
  survey.html(res, stem .. ".html")
  local md = survey.markdown(res)
  if #aims > 0 then
    md = "### The heap's aims\n\n" .. (GPU and "" or "(host backend: the pairs aims are the GPU's; here both sides " ..
      "run on the CPU and their ratio says nothing about them)\n\n") .. table.concat(aims, "\n") .. "\n\n" .. md
  end
  local f = assert(io.open(stem .. ".md", "w"))
  f:write(md, "\n")
  f:close()
  if final then print(md) end
end

if part == "aims" then
  run { allocators = { "heap" }, tests = { "pairs", "oom", "frag" } }
  write_outputs()
  run { allocators = { "malloc" }, tests = { "pairs" }, pair_probe = { scaled(10000), scaled(100000) },
    pair_budget_ms = 8000 }
elseif part == "malloc-oom" then
  run { allocators = { "malloc" }, tests = { "oom" }, oom_capacity = GPU and 64 * MiB or 16 * MiB }
else
  run { allocators = { "heap", "slab", PLUGIN } }
  write_outputs()
  run { allocators = { "bump", "warp_bump" }, tests = { "init", "registers", "pairs", "thread", "warp", "synth" } }
  write_outputs()
  -- CUDA's malloc takes up to seconds per launch, which no time limit can
  -- cut short: its thread counts stop at 2^18
  run { allocators = { "malloc" }, tests = { "init", "registers", "thread", "warp", "mixed", "scaling", "frag",
    "synth", "synth_write" }, scaling_threads = pow2s(1, GPU and 2^18 or 2^12, 4),
    synth_threads = pow2s(1, GPU and 2^18 or 2^12, 4) }
end
rows_file:close()
if not res.meta then
  print("survey " .. part .. ": no time left to start")
  os.exit(1)
end
write_outputs(true)
print(string.format("survey %s: %d rows in %.1f s", part, #res.rows, cupola.clock() - t0))
