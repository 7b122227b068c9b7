-- What a PyTorch user meets in cupola advise (issue 34, items 1-7): the
-- frames they recognise, the verdict first when nothing fits, lines that
-- fit the terminal, columns defined under the table, sizes as people write
-- them, cupola.advise without options, bin/cupola --help, and errors as
-- one message that says what was tried.  Besides the framework module
-- interface the engine offers (lua/cupola/advise/modules.lua's head).
local cupola = require "cupola"
local advise = require "cupola.advise"
local pickle = require "spec.support.pickle"
local str, dict, list, int = pickle.str, pickle.dict, pickle.list, pickle.int

local MiB = 1024 * 1024
local DIR = "examples/traces/torch/"
local JAX_TINY = "examples/traces/jax/tiny.grow.jsonl.gz"

local function tmpfile(data)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
  return path
end

local function frame(file, line, name) return dict { "filename", str(file), "line", int(line), "name", str(name) } end

-- A stack as PyTorch's default _record_memory_history() writes it: the
-- allocator's C++ frames first (the unwinder's own at the very first,
-- "??:0" without debug information), then Python's, innermost first,
-- then the interpreter's start.
local SITE = "/home/u/.venv/lib/python3.12/site-packages/"
local function stack(user_line)
  return list {
    frame("??", 0, "torch::unwind::unwind()"),
    frame("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
    frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
    frame("??", 0, "at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)"),
    frame(SITE .. "torch/nn/modules/linear.py", 125, "forward"),
    frame(SITE .. "torch/nn/modules/module.py", 1751, "_call_impl"),
    frame("/home/u/proj/train.py", user_line, "step"),
    frame("/home/u/proj/train.py", 80, "<module>"),
    frame("??", 0, "Py_BytesMain"),
    frame("??", 0, "_start"),
  }
end

-- 24 MiB tensors allocated in turn, each freed two allocations later: at
-- most 3 live at once (72 MiB), from user line 41, the last from line 57.
local function snapshot(n)
  local base = 0x7f0000000000
  local ev, t = {}, 0
  local function add(action, addr, size, line)
    t = t + 1
    local kv = { "action", str(action), "addr", addr, "size", size, "stream", 0, "time_us", t }
    if line then kv[#kv + 1] = "frames"; kv[#kv + 1] = stack(line) end
    ev[#ev + 1] = dict(kv)
  end
  for i = 1, n do
    local addr = base + (i - 1) * 32 * MiB
    add("segment_alloc", addr, 24 * MiB, i == n and 57 or 41)
    add("alloc", addr, 24 * MiB, i == n and 57 or 41)
    if i >= 3 then
      local old = base + (i - 3) * 32 * MiB
      add("free_requested", old, 24 * MiB)
      add("free_completed", old, 24 * MiB)
    end
  end
  return "\128\2" .. dict { "device_traces", list { list(ev) }, "segments", list {} } .. "."
end

local function lines_fit(text, width)
  for l in text:gmatch "[^\n]+" do
    if #l > width then return false, l end
  end
  return true
end

local function run(args, env)
  local p = io.popen((env or "") .. " bin/cupola " .. args .. " 2>&1; echo \"rc=$?\"")
  local out = p:read "a"
  p:close()
  local rc = tonumber(out:match "rc=(%d+)%s*$")
  return (out:gsub("rc=%d+%s*$", "")), rc
end

describe("advise (1): frames as file.py:LINE function", function()
  local path
  setup(function() path = tmpfile(snapshot(6)) end)
  teardown(function() os.remove(path) end)

  it("an allocation's label is the user's frame, then the innermost Python frame, then the whole stack", function()
    local t <close> = cupola.trace.load(path)
    local e = t:event(2)
    assert.equals("allocate", e.action)
    assert.equals("train.py:41 step", e.label)
    assert.equals("torch/nn/modules/linear.py:125 forward", e.python_frame)
    assert.equals(10, #e.stack)
    assert.equals("??:0 torch::unwind::unwind()", e.stack[1])
    assert.equals(SITE .. "torch/nn/modules/linear.py:125 forward", e.stack[5])
    assert.equals("??:0 _start", e.stack[10])
  end)

  it("the shipped snapshot with C++ frames: the recording script's frame", function()
    local t <close> = cupola.trace.load(DIR .. "twostream.cppframes.pickle.gz")
    local e = t:event(100)
    assert.equals("record.py:70 workload_twostream", e.label)
    assert.equals("torch/nn/modules/module.py:1370 convert", e.python_frame)
    assert.equals("??:0 torch::unwind::unwind()", e.stack[1])
    -- the same events as the snapshot without C++ frames, the same user's frame
    local u <close> = cupola.trace.load(DIR .. "twostream.full.pickle.gz")
    assert.equals(#u, #t)
    assert.equals(u:event(100).label, e.label)
  end)

  it("only C++ frames: not the unwinder's own; a stack beyond 96 frames is counted", function()
    local fr = { frame("??", 0, "torch::unwind::unwind()") }
    for i = 1, 120 do fr[#fr + 1] = frame("/src/c10/alloc.cpp", i, "f" .. i) end
    local ev = dict { "action", str("alloc"), "addr", 0x7f0000000000, "size", MiB, "stream", 0, "frames", list(fr) }
    local p = tmpfile("\128\2" .. dict { "device_traces", list { list { ev } }, "segments", list {} } .. ".")
    local t <close> = cupola.trace.load(p)
    os.remove(p)
    local e = t:event(1)
    assert.equals("alloc.cpp:1 f1", e.label)
    assert.is_nil(e.python_frame)
    assert.equals(97, #e.stack)
    assert.equals("... 25 more frames", e.stack[97])
  end)

  it("where the run runs out: the user's frame in the text, the whole stack in the JSON and the page", function()
    local res = cupola.advise(path, { limit = "64MiB", progress = false, pools = { "tlsf" } })
    local text = advise.text(res):gsub("\n +", " ")
    assert.matches("train.py:41 step (in torch/nn/modules/linear.py:125 forward)", text, 1, true)
    assert.is_nil(text:find("unwind", 1, true))
    local o = require("dkjson").decode(advise.json(res))
    local f = o.recommended.fails_at
    assert.equals("train.py:41 step", f.label)
    assert.equals("torch/nn/modules/linear.py:125 forward", f.python_frame)
    assert.equals(10, #f.stack)
    local page = os.tmpname()
    advise.html(res, path, page)
    local h = assert(io.open(page)):read "a"
    os.remove(page)
    -- every block's label goes to the page whole: the hover shows the frame and the stack
    assert.matches("train.py:41 step\\ntorch/nn/modules/linear.py:125 forward\\n??:0 torch::unwind::unwind()", h, 1, true)
  end)
end)

-- Bug fixed with this spec (issue 43, item 10): where the recording itself
-- ran out (its last entry PyTorch's `oom`), the answer said only "runs out
-- at a request of 60.00 MiB"; the entry has the frames.
describe("advise: where a run ran out, when the recording itself ran out", function()
  it("names the user's frame and the innermost Python frame of the oom entry", function()
    local base = 0x7f0000000000
    local ev, t = {}, 0
    local function add(action, addr, size, line)
      t = t + 1
      local kv = { "action", str(action), "addr", addr, "size", size, "stream", 0, "time_us", t }
      if line then kv[#kv + 1] = "frames"; kv[#kv + 1] = stack(line) end
      ev[#ev + 1] = dict(kv)
    end
    add("segment_alloc", base, 40 * MiB, 41)
    add("alloc", base, 40 * MiB, 41)
    add("segment_alloc", base + 64 * MiB, 40 * MiB, 42)
    add("alloc", base + 64 * MiB, 40 * MiB, 42)
    add("oom", 0, 60 * MiB, 57)
    local path = tmpfile("\128\2" .. dict { "device_traces", list { list(ev) }, "segments", list {} } .. ".")
    local res = cupola.advise(path, { limit = "100MiB", pools = false, progress = false })
    local text = advise.text(res, 200)
    assert.matches("runs out at a request of 60.00 MiB: train.py:57 step (in torch/nn/modules/linear.py:125 " ..
      "forward).", text, 1, true)
    local f = res.recommended.fails_at
    assert.equals("train.py:57 step", f.label)
    assert.equals(10, #f.stack)
    local trace <close> = cupola.trace.load(path)
    assert.is_nil(require("cupola.core").trace.oom_frames(trace, 2))
    os.remove(path)
  end)
end)

describe("advise (2): when nothing fits, the verdict first", function()
  it("says so before the table, with the least memory, and where it runs out once", function()
    local path = tmpfile(snapshot(6))
    local res = cupola.advise(path, { limit = "64MiB", progress = false, pools = { "tlsf" } })
    os.remove(path)
    local text = advise.text(res)
    local verdict = text:find("Nothing fits: no setting runs the recorded requests in 64.00 MiB.", 1, true)
    local tbl = text:find("   setting", 1, true)
    assert.is_truthy(verdict)
    assert.is_true(verdict < tbl)
    assert.is_nil(text:find("recommended:", 1, true))
    assert.matches("Least memory: 72.00 MiB with", text, 1, true)
    assert.matches("With 72.00 MiB or more, run:", text, 1, true)
    local _, n = text:gsub("out of memory", "")
    assert.equals(1, n)
  end)
end)

describe("advise (2): where some settings fit", function()
  it("the recommendation first; the others counted and grouped by where they run out, once", function()
    local res = cupola.advise(DIR .. "varlen.default.cpsnap.gz", { limit = "2.5GiB", progress = false, pools = false })
    local text = advise.text(res)
    assert.matches("^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n\n  recommended: ", text)
    assert.matches("1 of 16 settings does not fit in 2.50 GiB; where it runs out:\n    - allocation 6113 (164.06 MiB), " ..
      "event 11880: roundup_power2_divisions:2\n", text, 1, true)
    local _, n = text:gsub("OutOfMemoryError", "")
    assert.equals(0, n)
  end)
end)

describe("advise (2): only a row set aside fits", function()
  it("says that no setting does and which row does, with its line to paste", function()
    -- tlsf with release_threshold=0 (idle chunks returned to stay within its
    -- peak): as the library serves plain tlsf (every idle chunk kept, no
    -- upstream call once warm: src/core/pool/spec.c) it needs 8.27 GiB here
    local res = cupola.advise(DIR .. "gpt2_train.default.cpsnap.gz", { limit = "7.85GiB", progress = false,
      pools = { "tlsf,release_threshold=0" } })
    local text = advise.text(res):gsub("\n +", " ")
    assert.matches("No setting runs the recorded requests in 7.85 GiB; cupola tlsf,release_threshold=0 inside " ..
      "PyTorch does (it needs 7.83 GiB): # after make torch-allocator", text, 1, true)
    -- the comment above the command: a backslash in a comment continues nothing
    assert.matches("\n    CUPOLA_TORCH_POOL=tlsf,release_threshold=0 python train.py\n", advise.text(res), 1, true)
    assert.is_nil(text:find("Nothing fits", 1, true))
  end)
end)

describe("advise (2b): a pool measured slower inside PyTorch is offered last", function()
  -- vmm ran 5-18 % slower steps than PyTorch's allocator on an H100
  -- (bench/results/torch_step.md): where another pool fits it is offered
  -- instead, though vmm needs less; where only vmm fits, it comes with that
  it("a pool without a step-time cost first", function()
    local res = cupola.advise(DIR .. "gpt2_train.default.cpsnap.gz", { limit = "7.85GiB", progress = false,
      pools = { "vmm", "tlsf,release_threshold=0" } })
    local text = advise.text(res):gsub("\n +", " ")
    assert.matches("; cupola tlsf,release_threshold=0 inside PyTorch does (it needs 7.83 GiB)", text, 1, true)
    assert.is_nil(text:find("but: inside PyTorch", 1, true))
  end)
  it("vmm alone: offered, with what it costs", function()
    local res = cupola.advise(DIR .. "gpt2_train.default.cpsnap.gz", { limit = "7.85GiB", progress = false,
      pools = { "vmm" } })
    local text = advise.text(res):gsub("\n +", " ")
    assert.matches("; cupola vmm inside PyTorch does (it needs 7.67 GiB)", text, 1, true)
    assert.matches("but: inside PyTorch its steps ran 5 % slower than PyTorch's own allocator", text, 1, true)
    assert.is_true(lines_fit(advise.text(res), 100))
  end)
end)

describe("advise (3): every line fits the terminal", function()
  it("100 columns, and $COLUMNS: the table, the paste line, the notes", function()
    for _, args in ipairs {
      DIR .. "resnet50_train.default.cpsnap.gz",
      DIR .. "gpt2_train.default.cpsnap.gz --limit 7GiB --no-pools",
      DIR .. "twostream.cppframes.pickle.gz --limit 640MiB",
      DIR .. "twostream.cppframes.pickle.gz --limit 900MiB",
    } do
      local out, rc = run("advise " .. args)
      assert.equals(0, rc, out)
      assert.is_true(lines_fit(out, 100))
      local out80 = run("advise " .. args, "COLUMNS=80")
      local ok, long = lines_fit(out80, 80)
      assert.is_true(ok, long)
    end
  end)

  it("a long setting's name wraps at its commas; the line to paste still runs", function()
    local out = run("advise " .. DIR .. "twostream.cppframes.pickle.gz --limit 900MiB", "COLUMNS=80")
    assert.matches("     expandable_segments:True, +[%d.]+ MiB[^\n]*\n +max_split_size_mb:68\n", out)
    out = run("advise " .. DIR .. "twostream.cppframes.pickle.gz --limit 900MiB", "COLUMNS=60")
    assert.is_true(lines_fit(out, 60))
    -- cut after a comma, a backslash ending the line: a shell reads one word
    local paste = out:match "\n(PYTORCH_CUDA_ALLOC_CONF=[^\n]*\\\n[^\n]*\n[^\n]*)"
    assert.is_truthy(paste, out)
    local p = io.popen("sh -c " .. ("'%s'"):format((paste:gsub("python train.py", "env"))) .. " | grep PYTORCH")
    assert.equals("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,roundup_power2_divisions:16\n", p:read "a")
    p:close()
  end)
end)

describe("advise (4): columns a reader understands", function()
  local res
  setup(function() res = cupola.advise(DIR .. "resnet50_train.default.cpsnap.gz", { progress = false }) end)

  it("defines each column under the table", function()
    local text = advise.text(res)
    local cols = text:find("\n  columns:\n", 1, true)
    assert.is_truthy(cols)
    for _, name in ipairs { "peak reserved:", "overhead:", "device calls:", "vs recorded:" } do
      local at = text:find("    - " .. name, 1, true)
      assert.is_truthy(at, name)
      assert.is_true(at > cols)
    end
    assert.is_nil(text:find("unused at peak", 1, true))
  end)

  -- Bug fixed with this spec (issue 43, item 8): on an RMM log, where no
  -- setting was recorded, the answer compared with "the recorded run" and
  -- the column said "vs recorded"; the baseline is a replay of the defaults.
  it("an RMM log: the change is against the defaults replayed, named so", function()
    local log = cupola.advise("examples/traces/gpt2_train.csv.gz", { progress = false, pools = false })
    local text = advise.text(log, 100)
    assert.is_nil(text:find("recorded run", 1, true))
    assert.is_nil(text:find("vs recorded", 1, true))
    assert.matches("1.1 % less than PyTorch's defaults, replayed (8.26 GiB)", text, 1, true)
    assert.matches("\n     setting +reserved +overhead +calls +baseline\n", text)
    assert.matches("    - vs baseline: peak reserved against PyTorch's defaults, replayed (8.26 GiB)", text, 1, true)
  end)

  it("overhead is peak reserved less the most in use at once; a change under 1 % is 'same'", function()
    for _, r in ipairs(res.rows) do
      assert.equals(r.peak_reserved - res.peak_live, r.overhead)
    end
    local _, rows = advise.columns(res)
    for i, r in ipairs(res.rows) do
      if r.change_pct and math.abs(r.change_pct) < 1 then assert.equals("same", rows[i][#rows[i]]) end
    end
  end)
end)

describe("advise (5): sizes as people write them", function()
  it("reads 6GB as 10^9 bytes a GB, 6G and 6gib as 2^30 a GiB", function()
    local cases = {
      { "6GB", 6000000000 }, { "6G", 6 * 2 ^ 30 }, { "6gib", 6 * 2 ^ 30 }, { "6 GiB", 6 * 2 ^ 30 },
      { "1.5T", math.floor(1.5 * 2 ^ 40) }, { "512m", 512 * MiB }, { "100MB", 100000000 }, { "4096", 4096 },
      { 4096, 4096 },
    }
    for _, c in ipairs(cases) do assert.equals(math.tointeger(c[2]), (advise.parse_size(c[1])), tostring(c[1])) end
    for _, bad in ipairs { "6XB", "-1G", "G", "", "1e9", "0x10", "6 G B", {} } do
      assert.is_nil(advise.parse_size(bad), tostring(bad))
    end
  end)

  it("the command line takes them and echoes how the limit was read", function()
    local out, rc = run("advise " .. DIR .. "twostream.default.cpsnap.gz --no-pools --limit 1GB")
    assert.equals(0, rc, out)
    assert.matches("limit: 953.67 MiB ('1GB' read as 1 x 10^9 = 1000000000 bytes; GB is 10^9 bytes, GiB or G 2^30)",
      out, 1, true)
    out = run("advise " .. DIR .. "twostream.default.cpsnap.gz --no-pools --limit 1g")
    assert.matches("limit: 1.00 GiB ('1g' read as 1 x 2^30 = 1073741824 bytes)", out, 1, true)
  end)

  it("an impossible limit is answered with a sentence", function()
    local res = cupola.advise(DIR .. "twostream.default.cpsnap.gz", { limit = "1KiB", progress = false, pools = false })
    local text = advise.text(res)
    assert.matches("Nothing fits: no setting runs the recorded requests in 1.00 KiB.", text, 1, true)
    assert.matches("in use at once as it ran: no allocator runs it in less", text, 1, true)
    assert.is_nil(text:find("-100.0 %", 1, true))
    assert.is_nil(text:find(" 0 B", 1, true))
  end)
end)

describe("advise (6): cupola.advise without options", function()
  it("on a path, and on a Trace already loaded", function()
    local a = cupola.advise(DIR .. "twostream.default.cpsnap.gz")
    assert.equals("expandable_segments:True", a.recommended.setting)
    local t <close> = cupola.trace.load(DIR .. "twostream.default.cpsnap.gz")
    local b = cupola.advise(t)
    assert.equals(a.recommended.peak_reserved, b.recommended.peak_reserved)
  end)
end)

describe("advise (7): bin/cupola --help, and errors people can read", function()
  it("bin/cupola --help lists scripts, the REPL and advise", function()
    for _, flag in ipairs { "--help", "-h" } do
      local out, rc = run(flag)
      assert.equals(0, rc)
      assert.matches("usage: cupola", out, 1, true)
      assert.matches("SCRIPT.lua", out, 1, true)
      assert.matches("REPL", out, 1, true)
      assert.matches("cupola advise SNAPSHOT", out, 1, true)
      assert.is_true(lines_fit(out, 100))
    end
  end)

  it("a message once, without '(command line):1:'", function()
    local out, rc = run "advise /nonexistent/snap.pickle"
    assert.equals(2, rc)
    assert.equals("cupola advise: /nonexistent/snap.pickle: cannot open: No such file or directory\n", out)
  end)

  it("a file of no format it reads: which formats were tried", function()
    local path = tmpfile("step,loss\n1,0.5\n")
    local out, rc = run("advise " .. path)
    os.remove(path)
    assert.equals(2, rc)
    out = out:gsub("\n  ", " ")
    assert.matches("not a recording cupola advise reads; it tried a PyTorch memory snapshot", out, 1, true)
    assert.matches("an RMM log", out, 1, true)
    assert.is_nil(out:find("header must be", 1, true))
    local ok, err = pcall(cupola.advise, "/etc/hostname")
    assert.is_false(ok)
    assert.matches("^spec/advise_ux_spec.lua:%d+: /etc/hostname: not a recording cupola advise reads", err)
  end)
end)

describe("advise: the framework module interface", function()
  it("a module for a format of its own: its rows, names and paste line; the engine's scoring", function()
    package.preload["cupola.advise.spec_fake"] = function()
      return {
        name = "spec_fake", formats = { "rmm_csv" },
        title = function() return "a log" end,
        setup = function(ctx) ctx.result.peak_live = ctx.info.peak_live end,
        rows = function()
          return {
            { setting = "a", family = "default", keys = 0, recorded = true, job = { spec = "caching" }, pool = "caching" },
            { setting = "b", family = "other", keys = 1, job = { spec = "tlsf" }, pool = "tlsf" },
          }
        end,
        describe = function(r) return "setting " .. r.setting end,
        paste = function(r) return "FAKE=" .. r.setting .. " run" end,
      }
    end
    local saved = advise.frameworks
    advise.frameworks = { "spec_fake", "torch" }
    local ok, res = pcall(cupola.advise, cupola.trace.find "resnet50_train", { progress = false })
    advise.frameworks = saved
    package.loaded["cupola.advise.spec_fake"] = nil
    assert.is_true(ok, res)
    assert.equals("spec_fake", res.framework)
    assert.equals(2, #res.rows)
    assert.matches("^FAKE=[ab] run$", res.paste)
    assert.matches("a log: ", advise.text(res), 1, true)
  end)

  -- The interface's one statement, the head of lua/cupola/advise/modules.lua:
  -- the names of the fields it lists, and them as a set.
  local function interface()
    local src = read_file "lua/cupola/advise/modules.lua"
    local block = src:match "%-%- %-%-%-%- the framework module interface %-+\n(.-)\n%-%- A row spec"
    local names, set = {}, {}
    for name in (block or ""):gmatch "\n%-%-   ([%a_]+)" do
      names[#names + 1] = name
      set[name] = true
    end
    return names, set
  end

  it("the engine, the views and the command line read of a module what the interface states, all of it", function()
    local names, stated = interface()
    assert.is_true(#names >= 20, #names .. " fields")
    -- PyTorch's module, under a name of its own (the views find a result's
    -- module by it), behind a table that notes each field read of it (its
    -- own functions reach it directly, not through the table)
    local torch = require "cupola.advise.torch"
    local read = {}
    package.preload["cupola.advise.spec_watch"] = function()
      return setmetatable({}, { __index = function(_, k)
        read[k] = true
        if k == "name" then return "spec_watch" end
        return torch[k]
      end })
    end
    local saved = advise.frameworks
    advise.frameworks = { "spec_watch" }
    local page = os.tmpname()
    local ok, err = pcall(function()
      local path = DIR .. "twostream.default.cpsnap.gz"
      local res = cupola.advise(path, { progress = false, device = 0 })
      advise.text(res)
      advise.json(res)
      advise.html(res, path, page)
      advise.usage_text()
      -- a file no module reads, with a device asked for: the loader's refusal goes to every module
      assert(not pcall(cupola.advise, "/etc/hostname", { progress = false, device = 0 }))
    end)
    advise.frameworks = saved
    package.loaded["cupola.advise.spec_watch"] = nil
    os.remove(page)
    assert.is_true(ok, err)
    for k in pairs(read) do assert.is_true(stated[k], "read of a module but not in the interface: " .. tostring(k)) end
    for _, k in ipairs(names) do assert.is_true(read[k], "in the interface but never read: " .. k) end
  end)

  it("docs/API.md lists the fields the interface states, and no hook it does not", function()
    local names, stated = interface()
    local para = read_file("docs/API.md"):match "\n%*%*Framework modules%.%*%*(.-)\n\n"
    assert.is_truthy(para)
    for _, n in ipairs(names) do assert.is_truthy(para:find("`" .. n .. "[`(]"), n) end
    for n in para:gmatch "`([%a_]+)%(" do assert.is_true(stated[n], "docs/API.md names a hook the interface does not: " .. n) end
  end)

  it("a format no module reads is refused naming it", function()
    local saved = advise.frameworks
    advise.frameworks = { "torch" }
    local ok, err = pcall(advise.module_for, { format = "jax_memory" })
    advise.frameworks = saved
    assert.is_false(ok)
    assert.matches("no advice for traces of format 'jax_memory' (the framework modules: torch)", err, 1, true)
  end)
end)

-- Polish of issue 43: --brief, the answer and the table without the prose
-- below them (the answer was in the first 10 lines of 56-60).
describe("advise --brief", function()
  it("prints the head, the answer and the table, and counts what it leaves out", function()
    local full = run("advise " .. DIR .. "twostream.default.cpsnap.gz --no-pools", "COLUMNS=100")
    local out, rc = run("advise " .. DIR .. "twostream.default.cpsnap.gz --no-pools --brief", "COLUMNS=100")
    assert.equals(0, rc, out)
    local head = full:match "^(.-\n)\n  columns:\n"
    assert.is_truthy(head)
    assert.equals(head, out:sub(1, #head))
    assert.is_nil(out:find("columns:", 1, true))
    assert.is_nil(out:find("how to read it:", 1, true))
    local _, n = out:gsub("\n", "")
    assert.is_true(n < 30, n .. " lines")
    -- the usage names it, and the modules' options in the synopsis
    local help = run "advise --help"
    assert.matches("[--brief]", help, 1, true)
    assert.matches("[--device-memory SIZE]", help:match "^(.-)\n\n", 1, true)
    local res = cupola.advise(JAX_TINY, { progress = false })
    assert.matches("%(1 warning, the columns defined and how to read them: without %-%-brief%)",
      advise.text(res, 100, { brief = true }))
  end)
end)

-- Polish of issue 43: a real terminal's width where COLUMNS is not
-- exported (the text was 100 wide in a terminal of 83), and one unit per
-- column of sizes ("59.38 GiB" above "266.00 MiB").
describe("advise's text: the terminal's width, one unit a column", function()
  it("fits the terminal it is printed in where COLUMNS is not exported", function()
    if not os.execute "command -v script >/dev/null 2>&1" then
      pending("needs script(1), to run under a terminal")
      return
    end
    local p = io.popen("script -qc 'stty cols 83; env -u COLUMNS bin/cupola advise " .. DIR ..
      "twostream.default.cpsnap.gz --no-pools --brief' /dev/null 2>&1")
    local out = p:read "a":gsub("\r", "")
    p:close()
    local widest = 0
    for l in out:gmatch "[^\n]+" do widest = math.max(widest, #l) end
    assert.is_true(widest <= 83 and widest > 70, widest .. "\n" .. out)
    -- not a terminal: 100
    assert.equals(100, (function()
      local q = io.popen "env -u COLUMNS lua5.4 -e 'package.path=\"lua/?.lua;\"..package.path; package.cpath=\"build/?.so;\"..package.cpath; print(require(\"cupola.advise\").width())'"
      local w = tonumber(q:read "a")
      q:close()
      return w
    end)())
  end)

  it("gives each column of sizes one unit", function()
    local res = cupola.advise("examples/traces/jax/mlp.pre-0.00360.jsonl.gz", { progress = false,
      device_memory = "80GB" })
    local _, rows = advise.columns(res)
    for c = 2, #rows[1] do
      local units = {}
      for _, r in ipairs(rows) do
        local u = r[c]:match "%d ([KMGT]?i?B)%*?$"
        if u then units[u] = true end
      end
      local n = 0
      for _ in pairs(units) do n = n + 1 end
      assert.is_true(n <= 1, "column " .. c)
    end
    assert.matches("\n     preallocated %(JAX's default%) +57220%.46 MiB ", advise.text(res, 100))
  end)
end)

-- Polish of issue 43: --device-memory on a CuPy log was taken and ignored,
-- where --conf on a JAX profile is refused.
describe("advise: an option no module of the input declares", function()
  it("is refused naming the input and the modules it is for", function()
    local ok, err = pcall(cupola.advise, "examples/traces/cupy/fft.unlimited.jsonl.gz",
      { device_memory = "80GB", progress = false })
    assert.is_false(ok)
    assert.matches("option 'device_memory' is not for a CuPy memory-hook log (an option of the 'torch' and " ..
      "'jax' modules): remove it", err, 1, true)
    local out, rc = run("advise examples/traces/cupy/fft.unlimited.jsonl.gz --device-memory 80GB", "COLUMNS=200")
    assert.equals(2, rc)
    assert.equals("cupola advise: --device-memory is not for a CuPy memory-hook log (an option of the 'torch' " ..
      "and 'jax' modules): remove it\n", out)
    -- the modules that declare it take it
    assert.equals(80e9, cupola.advise(JAX_TINY, { device_memory = "80GB", progress = false }).device_memory)
  end)
end)

describe("advise: README's example output", function()
  it("is what bin/cupola advise prints now, to the byte", function()
    local readme = read_file "README.md"
    local cmd, shown = readme:match "\n%$ bin/cupola (advise torch/twostream%.cppframes%.pickle%.gz[^\n]*)\n(.-)\n```"
    assert.is_truthy(cmd)
    local out = run(cmd)
    local function norm(text)
      local lines = {}
      for l in (text .. "\n"):gmatch "(.-)\n" do lines[#lines + 1] = l end
      return lines
    end
    local want, got = norm(shown), norm(out)
    for i, l in ipairs(want) do assert.equals(l, got[i]) end
  end)
end)

-- What the run over every shipped recording found (COLUMNS 100 and 80,
-- limits of each kind, --json, --html, --pool, --device-memory, the error
-- paths, the one-liners of the REPL).
describe("advise (8): what a run over every shipped recording found", function()
  local JAX = "examples/traces/jax/"

  it("print(cupola.advise(path)) prints the report, not 'table: 0x...'", function()
    local res = cupola.advise(DIR .. "twostream.default.cpsnap.gz", { progress = false, pools = false })
    assert.equals(advise.text(res), tostring(res))
    local out, rc = run("-e 'print(cupola.advise(\"examples/traces/gpt2_train.csv.gz\"))'", "COLUMNS=100")
    assert.equals(0, rc, out)
    assert.matches("^cupola advise: examples/traces/gpt2_train.csv.gz\n", out)
    assert.is_nil(out:find("table: 0x", 1, true))
  end)

  it("a path that cannot be opened: the caller's position once", function()
    local ok, err = pcall(cupola.advise, "/nonexistent/snap.pickle")
    assert.is_false(ok)
    assert.matches("^spec/advise_ux_spec.lua:%d+: /nonexistent/snap.pickle: cannot open", err)
    assert.is_nil(err:find("advise_ux_spec.lua:%d+: spec/advise_ux_spec.lua"))
  end)

  it("an empty file and a truncated gzip: said so, the path once", function()
    local empty = tmpfile("")
    local out, rc = run("advise " .. empty)
    assert.equals(2, rc)
    assert.equals(("cupola advise: %s: the file is empty: no recording in it\n"):format(empty), out)
    os.remove(empty)
    local f = assert(io.open("examples/traces/gpt2_train.csv.gz", "rb"))
    local cut = tmpfile(f:read(3000))
    f:close()
    out, rc = run("advise " .. cut, "COLUMNS=100")
    os.remove(cut)
    assert.equals(2, rc)
    assert.matches("truncated or corrupt gzip data (unexpected end of file)", out, 1, true)
    local _, n = out:gsub(cut:gsub("%p", "%%%0"), "")
    assert.equals(1, n)
  end)

  it("the command line names options by their flags and values as typed", function()
    local out, rc = run("advise " .. JAX .. "tiny.grow.jsonl.gz --device-memory lots", "COLUMNS=100")
    assert.equals(2, rc)
    assert.equals("cupola advise: --device-memory must be a size above 0 (bytes, or a string such as \"80GiB\"), " ..
      "not 'lots'\n", (out:gsub("\n  ", " ")))
    out = run("advise " .. DIR .. "twostream.default.cpsnap.gz --limit 0", "COLUMNS=100")
    assert.matches("not '0'\n$", out)
    out = run("advise " .. DIR .. "twostream.default.cpsnap.gz --limit garbage", "COLUMNS=100")
    assert.matches("not 'garbage'\n$", out)
  end)

  it("--html where it cannot write: the path once", function()
    local out, rc = run("advise " .. DIR .. "twostream.default.cpsnap.gz --no-pools --html /nonexistent/dir/p.html")
    assert.equals(2, rc)
    assert.equals("cupola advise: --html /nonexistent/dir/p.html: cannot write: No such file or directory\n", out)
  end)

  it("least memory is defined once; a '-' is defined only where the table shows one", function()
    local res = cupola.advise(DIR .. "twostream.default.cpsnap.gz", { limit = "8GiB", progress = false, pools = false })
    local text = advise.text(res, 100)
    local _, n = text:gsub("least memory: ", "")
    assert.equals(1, n)
    assert.is_nil(text:find("a \"-\"", 1, true))
    res = cupola.advise(DIR .. "twostream.default.cpsnap.gz", { limit = "700MiB", progress = false, pools = false })
    text = advise.text(res, 100)
    assert.matches("   no  ", text, 1, true)
    assert.matches("a \"-\": the run stopped when it ran out", text, 1, true)
  end)

  it("an RMM log is not called a snapshot", function()
    local res = cupola.advise("examples/traces/gpt2_train.csv.gz", { progress = false, pools = false })
    local text = advise.text(res, 100)
    assert.is_nil(text:find("snapshot", 1, true))
    assert.matches("the setting the log was recorded under is unknown (an RMM log does not say it)",
      text:gsub("\n +", " "), 1, true)
  end)

  it("JAX without the device's memory: no made-up size for JAX's default, no empty 'vs recorded'", function()
    local res = cupola.advise(JAX .. "mlp.grow.jsonl.gz", { progress = false })
    local text = advise.text(res, 100)
    assert.is_nil(text:find("TiB", 1, true))
    assert.matches("\n     preallocated %(JAX's default%) +75 %% of GPU  ", text)
    assert.is_nil(text:find("vs recorded", 1, true))
    assert.is_nil(text:find("\n +vs +least\n"))
  end)

  it("JAX under a limit: the line to paste says what it sets", function()
    local res = cupola.advise(JAX .. "mlp.grow.jsonl.gz", { progress = false, limit = "1GiB", device_memory = "80GB" })
    -- the fraction's row: the least pool (264 MiB) at the least fraction that gets it (issue 43, item 4)
    assert.equals("XLA_CLIENT_MEM_FRACTION=0.00344", res.recommended.setting)
    assert.equals("XLA_CLIENT_MEM_FRACTION=0.00344 python train.py", res.paste)
    local pre
    for _, r in ipairs(res.rows) do if r.setting == "preallocated" then pre = r end end
    local cmd, note = advise.module("jax").paste(pre)
    assert.equals("XLA_CLIENT_MEM_FRACTION=0.00344 python train.py", cmd)
    assert.equals("preallocated at the least fraction that runs it: a pool of 264.00 MiB", note)
  end)

  -- Bug fixed with this spec: --json's paste held a shell comment ("...
  -- python train.py   # PyTorch's defaults"), which a program that runs
  -- the line has to cut off; the note is a field of its own.
  it("--json: paste is the command alone, its note a field of its own; the text puts the note above it", function()
    for _, args in ipairs { DIR .. "twostream.default.cpsnap.gz --no-pools", JAX .. "mlp.grow.jsonl.gz --limit 1GiB " ..
      "--device-memory 80GB", "examples/traces/cupy/fft.limit68089128.jsonl.gz" } do
      local out, rc = run("advise " .. args .. " --json")
      assert.equals(0, rc, out)
      local paste = out:match "\n  \"paste\": ?\"(.-)\",?\n"
      assert.is_truthy(paste, out)
      assert.is_nil(paste:find("#", 1, true), paste)
    end
    local res = cupola.advise("examples/traces/torch_snapshot_mlp.pickle", { progress = false, pools = false })
    assert.equals("env -u PYTORCH_CUDA_ALLOC_CONF python train.py", res.paste)
    local text = advise.text(res, 100)
    assert.matches("\n    # PyTorch's defaults\n    env -u PYTORCH_CUDA_ALLOC_CONF python train.py\n", text, 1, true)
  end)

  it("JAX on a device too small for the program: said so, not a recommendation", function()
    local res = cupola.advise(JAX .. "mlp.grow.jsonl.gz", { progress = false, device_memory = "100MiB" })
    local text = advise.text(res, 100)
    assert.matches("Nothing runs: no setting served every recorded request", text, 1, true)
    assert.is_nil(text:find("recommended:", 1, true))
    assert.is_nil(text:find("give --device-memory", 1, true))
    assert.matches("a \"-\" under least memory: no limit the search tried served every recorded request", text:gsub("\n +", " "), 1, true)
  end)

  it("JAX refuses --pool (no pool of cupola's serves JAX) instead of ignoring it", function()
    local out, rc = run("advise " .. JAX .. "tiny.grow.jsonl.gz --pool vmm", "COLUMNS=100")
    assert.equals(2, rc)
    assert.matches("^cupola advise: %-%-pool: a JAX profile gets no rows of cupola's pools", out)
    local _, rc2 = run("advise " .. JAX .. "tiny.grow.jsonl.gz --no-pools", "COLUMNS=100")
    assert.equals(0, rc2)
  end)

  it("bin/cupola --help fits 80 columns", function()
    local out = run "--help"
    local ok, long = lines_fit(out, 80)
    assert.is_true(ok, long)
  end)
end)
