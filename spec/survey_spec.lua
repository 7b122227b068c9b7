-- cupola.survey: the survey's test cases on cupola's pools, a plugin and
-- CUDA's malloc, run small; what the results say about correctness (no
-- NULL where memory is there, nothing corrupt, the heap's out-of-memory and
-- fragmentation figures) is checked, never how fast anything was.
local cupola = require "cupola"
local survey = require "cupola.survey"

local GPU = cupola.backend() == "cuda"
local MiB = 1024 * 1024

local function run_small(tests, allocators, extra)
  local o = {
    -- on a GPU 2e4 blocks of 8 KiB or 64 KiB live at once; CUDA's malloc
    -- takes up to a second per launch of 1e5 threads, so the cases stay at
    -- 2e4 (the survey's own counts are bench/device_survey.lua's)
    allocators = allocators, tests = tests, capacity = GPU and 2048 * MiB or 64 * MiB, oom_capacity = 4 * MiB,
    iterations = 2, threads = GPU and 20000 or 3000, warps = GPU and 2000 or 300,
    sizes = { 4, 64, 1024, 8192 }, mixed_ranges = { 512, 8192 }, scaling_sizes = { 64 },
    scaling_threads = { 1, 32, 1024 }, pair_sizes = { 16, 4096, 65536 }, pair_threads = GPU and 20000 or 5000,
    frag_sizes = { 16, 256, 4096 }, oom_sizes = { 16, 1024, 65536 }, oom_threads = GPU and 20000 or 2000,
    synth_ranges = { 64 }, synth_threads = { 1, 1000 }, synth_writes = 2,
  }
  for k, v in pairs(extra or {}) do o[k] = v end
  return survey.run(o)
end

local function rows(res, test, alloc)
  local t = {}
  for _, r in ipairs(res.rows) do
    if r.test == test and (not alloc or r.allocator == alloc) then t[#t + 1] = r end
  end
  return t
end

describe("cupola.survey", function()
  local res
  setup(function()
    res = run_small(nil, { "heap", "slab", { kind = "plugin", path = "examples/plugins/stackalloc.cu",
      name = "stackalloc" }, "malloc" })
  end)

  it("runs every test for every allocator and names the run", function()
    assert.equal(cupola.backend(), res.meta.backend)
    assert.is_string(res.meta.device)
    for _, t in ipairs(survey.tests) do
      for _, a in ipairs { "heap", "slab", "stackalloc", "CUDA malloc" } do
        if not (t == "oom" and a == "CUDA malloc") then
          assert.is_true(#rows(res, t, a) > 0, t .. " for " .. a)
        end
      end
    end
    assert.is_true(#rows(res, "synth", "baseline (prefix sum)") > 0)
    if not GPU then
      assert.matches("CPU", res.meta.timing)
      assert.is_nil(rows(res, "registers", "heap")[1].alloc_registers)
    else
      assert.is_true(rows(res, "registers", "heap")[1].alloc_registers > 0)
    end
  end)

  it("every block of the heap and the plugin is served and keeps its data", function()
    for _, a in ipairs { "heap", "stackalloc" } do
      for _, t in ipairs { "thread", "warp", "mixed", "scaling", "pairs" } do
        for _, r in ipairs(rows(res, t, a)) do
          assert.equal(0, r.failed, t .. " " .. a .. " " .. r.size)
          assert.equal(0, r.corrupt, t .. " " .. a .. " " .. r.size)
          assert.is_true((r.alloc_ms or r.ms) > 0)
        end
      end
    end
    -- the slab stops at 8 KiB: its 64 KiB pairs fail, and say so
    local big = rows(res, "pairs", "slab")[3]
    assert.equal(65536, big.size)
    assert.equal(big.threads, big.failed)
  end)

  it("the heap's out-of-memory and fragmentation figures meet their marks", function()
    for _, r in ipairs(rows(res, "oom", "heap")) do
      assert.is_true(r.fraction >= 0.9, r.size .. " B: " .. r.fraction)
      assert.equal(0, r.corrupt)
    end
    -- Enough blocks that the slabs the warps spread over are full: on the
    -- host a warp is a CPU thread (as many as cores), on the GPU 1e5
    -- threads is the survey's own count.
    local frag = survey.run { allocators = { "heap" }, tests = { "frag" }, frag_sizes = { 16, 64, 1024 },
      threads = GPU and 100000 or 131072, frag_capacity = 256 * MiB, iterations = 2 }
    assert.equal(3, #frag.rows)
    for _, r in ipairs(frag.rows) do
      assert.equal(0, r.failed)
      assert.is_true(r.ratio >= 1 and r.ratio <= 2, r.size .. " B: " .. r.ratio)
    end
    -- the plugin's 16-byte headers show: half the memory at powers of two
    for _, r in ipairs(rows(res, "oom", "stackalloc")) do
      assert.is_true(r.fraction < 0.6)
    end
  end)

  it("writes CSV, JSON, one self-contained HTML page and markdown", function()
    local base = os.tmpname()
    survey.csv(res, base .. ".csv")
    survey.json(res, base .. ".json")
    survey.html(res, base .. ".html")
    local f = assert(io.open(base .. ".csv"))
    local head = f:read "l"
    local lines = 1
    for _ in f:lines() do lines = lines + 1 end
    f:close()
    assert.matches("^test,allocator,size,threads,", head)
    assert.equal(#res.rows + 1, lines)
    f = assert(io.open(base .. ".json"))
    local doc = require("dkjson").decode(f:read "a")
    f:close()
    assert.equal(#res.rows, #doc.rows)
    assert.equal(res.meta.device, doc.meta.device)
    f = assert(io.open(base .. ".html"))
    local page = f:read "a"
    f:close()
    assert.matches("<!DOCTYPE html>", page)
    assert.is_nil(page:find("src=\"http", 1, true), "no network")
    assert.is_nil(page:find("</script>[^<]*</script>", 1)) -- the data cannot close its script
    local md = survey.markdown(res)
    for _, s in ipairs { "Initialisation", "Registers", "per thread", "per warp", "mixed sizes", "Scaling",
      "pairs", "Fragmentation", "Out of memory", "Synthetic workload" } do
      assert.matches(s, md, 1, true)
    end
    for _, ext in ipairs { "", ".csv", ".json", ".html" } do os.remove(base .. ext) end
  end)

  it("pairs with probes: a count whose launch would not fit the budget is not run, and the row says so", function()
    local r = survey.run { allocators = { "heap" }, tests = { "pairs" }, pair_sizes = { 64 }, pair_threads = 5000,
      pair_probe = { 50, 500 }, pair_budget_ms = 1e-9, capacity = 16 * MiB }
    assert.equal(1, #r.rows)
    local x = r.rows[1]
    assert.is_true(x.probe)
    assert.equal(50, x.threads)
    assert.equal(5000, x.of_threads)
    assert.is_true(x.estimate_ms > 0 and x.failed == 0)
    assert.matches("at 50 threads: 5000 would take", survey.markdown(r), 1, true)
    -- a budget that fits: the full count, no probe row
    r = survey.run { allocators = { "heap" }, tests = { "pairs" }, pair_sizes = { 64 }, pair_threads = 5000,
      pair_probe = { 50, 500 }, pair_budget_ms = 1e9, capacity = 16 * MiB, iterations = 1 }
    assert.equal(5000, r.rows[1].threads)
    assert.is_nil(r.rows[1].probe)
  end)

  it("compiles a built-in allocator's module with the options its entry gives", function()
    local function one(entry)
      return survey.run { allocators = { entry }, tests = { "pairs" }, pair_sizes = { 16 }, pair_threads = 64,
        capacity = 16 * MiB, iterations = 1 }
    end
    -- with CUPOLA_SURVEY_SCAN the survey's header holds its scan kernel alone
    assert.error_matches(function() one { kind = "heap", options = { "-DCUPOLA_SURVEY_SCAN" } } end,
      "no kernel 'sv_alloc' in module survey_heap.cu", 1, true)
    local r = one { kind = "heap", name = "heap -D", options = { "-DCUPOLA_SURVEY_UNUSED_SETTING=1" } }
    assert.equal("heap -D", r.rows[1].allocator)
    assert.equal(0, r.rows[1].failed)
  end)

  -- The interface the peers' adapters (bench/peers/) are written against: a
  -- plugin created on the host, with an include folder and compiler = "nvcc"
  -- (the host backend compiles it with its own compiler), beside the heap.
  it("measures a plugin created on the host beside the heap, include and compiler passed through", function()
    local hs = { kind = "plugin", path = "examples/plugins/hostslots.cu", name = "hostslots",
      include = { "examples/plugins" }, compiler = "nvcc" }
    local r = run_small({ "init", "thread", "warp", "pairs", "frag", "oom" }, { "heap", hs },
      { sizes = { 16, 1024 }, pair_sizes = { 16, 1024 }, frag_sizes = { 16, 1024 }, oom_sizes = { 1024 } })
    for _, t in ipairs { "init", "thread", "warp", "pairs", "frag", "oom" } do
      assert.is_true(#rows(r, t, "hostslots") > 0, t)
    end
    -- blocks up to its slot (1 KiB) are all served, intact, and in its own memory
    for _, t in ipairs { "thread", "warp", "pairs" } do
      for _, x in ipairs(rows(r, t, "hostslots")) do
        assert.equal(0, x.failed, t .. " " .. x.size)
        assert.equal(0, x.corrupt, t .. " " .. x.size)
      end
    end
    -- 1 KiB blocks fill every slot of the pool's capacity
    assert.is_true(rows(r, "oom", "hostslots")[1].fraction > 0.9)
    for _, x in ipairs(rows(r, "frag", "hostslots")) do assert.equal(0, x.failed) end
  end)

  -- The heap's variants (alloc_heap.cuh, "Variants"), each a module of its
  -- own beside the heap: every block served and intact where the memory is
  -- there, out of memory as the heap, the counters counting.
  it("runs the heap's variants side by side, each serving every block", function()
    local V = {
      { name = "wide", options = { "-DCPD_HEAP_SLOTS_WIDE" } },
      { name = "probe", options = { "-DCPD_HEAP_PROBE=4" } },
      { name = "spread", options = { "-DCPD_HEAP_SPREAD_REFILL" } },
      { name = "dense", options = { "-DCPD_HEAP_BULK_DENSE" } },
      { name = "line", options = { "-DCPD_HEAP_TAKE_LINE" } },
      { name = "stream", options = { "-DCPD_HEAP_STREAM", "-DCPD_HEAP_COUNTERS" }, events = true },
      { name = "stream+", options = { "-DCPD_HEAP_STREAM", "-DCPD_HEAP_SLOTS_WIDE", "-DCPD_HEAP_PROBE=4",
        "-DCPD_HEAP_TAKE_LINE" } },
    }
    local allocs = {}
    for _, v in ipairs(V) do allocs[#allocs + 1] = { kind = "heap", name = v.name, options = v.options, events = v.events } end
    local r = run_small({ "thread", "warp", "mixed", "pairs", "oom" }, allocs,
      { sizes = { 16, 1024, 8192 }, pair_sizes = { 16, 1024, 65536 }, oom_sizes = { 16, 4096 } })
    for _, v in ipairs(V) do
      for _, t in ipairs { "thread", "warp", "mixed", "pairs" } do
        local got = rows(r, t, v.name)
        assert.is_true(#got > 0, t .. " " .. v.name)
        for _, x in ipairs(got) do
          assert.equal(0, x.failed, t .. " " .. v.name .. " " .. x.size)
          assert.equal(0, x.corrupt, t .. " " .. v.name .. " " .. x.size)
        end
      end
      for _, x in ipairs(rows(r, "oom", v.name)) do
        assert.is_true(x.fraction >= 0.9, v.name .. " " .. x.size .. " B: " .. x.fraction)
        assert.equal(0, x.corrupt)
      end
    end
    -- the counted stream: every 16 B block of the per-thread test from a stream
    local ev = rows(r, "thread", "stream")[1].events
    assert.equal(1, ev.calls)
    assert.equal(1, ev.stream)
    assert.equal(1, ev.frees)
    assert.is_nil(rows(r, "thread", "wide")[1].events)
  end)

  -- The stream variant's aim: a class's blocks packed from the lowest
  -- chunks, the address range at most a tenth above the bytes live at 16 B
  -- .. 1 KiB (enough blocks that a warp's share of the runs is small).
  it("the stream variant packs small blocks: fragmentation at most 1.1", function()
    local frag = survey.run { allocators = { { kind = "heap", name = "stream", options = { "-DCPD_HEAP_STREAM" } } },
      tests = { "frag" }, frag_sizes = { 16, 64, 256, 1024 }, threads = GPU and 100000 or 131072,
      frag_capacity = GPU and 2048 * MiB or 512 * MiB, iterations = 3 }
    assert.equal(4, #frag.rows)
    for _, x in ipairs(frag.rows) do
      assert.equal(0, x.failed)
      assert.is_true(x.ratio >= 1 and x.ratio <= 1.1, x.size .. " B: " .. x.ratio)
    end
  end)

  it("shows what an allocator does not run, with the reason, and warms and probes the pairs", function()
    local starts = {}
    local r = run_small({ "thread", "pairs", "oom" }, { { kind = "heap", name = "capped",
      limits = { max_size = 1024, reason = "above its largest class", tests = { oom = "no out-of-memory test" } } } },
      { sizes = { 16, 4096 }, pair_sizes = { 64, 8192 }, pair_warm = 64, pair_capacity = 32 * MiB,
        pair_probe = { 100 }, starting = function(t, size) starts[#starts + 1] = t .. " " .. tostring(size) end })
    local big = rows(r, "thread", "capped")[2]
    assert.equal(4096, big.size)
    assert.equal("above its largest class", big.skipped)
    assert.is_nil(big.alloc_ms)
    assert.equal("no out-of-memory test", rows(r, "oom", "capped")[1].skipped)
    local p = rows(r, "pairs", "capped")[1]
    assert.equal(0, p.failed + p.corrupt)
    assert.is_true(p.warm)
    assert.equal(32 * MiB, p.capacity)
    assert.equal(100, p.probes[1].threads)
    assert.equal(0, p.probes[1].corrupt)
    -- only what ran was started
    assert.same({ "thread 16", "pairs 64" }, starts)
    local md = survey.markdown(r)
    assert.matches("| 4096 | n/a [1] |", md, 1, true)
    assert.matches("[1] capped: not run: above its largest class", md, 1, true)
    assert.has_error(function() survey.run { allocators = { { kind = "heap", limits = 5 } } } end,
      "cupola.survey: allocators[1]: 'limits' must be a table")
    assert.has_error(function() survey.run { pair_warm = "yes" } end,
      "cupola.survey.run: 'pair_warm' must be true or a count")
  end)

  it("refuses unknown options, tests and kinds", function()
    assert.has_error(function() survey.run { nope = 1 } end, "cupola.survey.run: unknown option 'nope'")
    assert.has_error(function() survey.run { tests = { "speed" } } end, "cupola.survey.run: unknown test 'speed'")
    assert.has_error(function() survey.run { allocators = { "tlsf" } } end,
      "cupola.survey: allocators[1]: unknown kind 'tlsf'")
  end)
end)
