-- PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles) load
-- through cupola.trace.load and replay in one line; hostile pickles fail
-- cleanly; pools that run out of memory explain themselves.
local cupola = require "cupola"

local corpus = "tests/fuzz/corpus/"

describe("snapshot", function()
  it("loads the real snapshot with the counts Python's pickle module gives", function()
    local t <close> = cupola.trace.load(assert(cupola.trace.find "torch_snapshot_mlp"))
    assert.equals("torch_snapshot", t.format)
    assert.equals(563, #t)
    assert.equals(283, t.allocs)
    assert.equals(280, t.frees)
    assert.equals(238129156, t.peak_live)
    assert.equals(1, t.devices)
    assert.equals(264241152, t.torch_reserved_end)
    assert.equals(264241152, t.torch_peak_reserved)
    local e = t:event(1)
    assert.equals("allocate", e.action)
    assert.equals("gen_snapshots.py:9 mlp_train", e.label)
  end)

  it("replays through every pool in one line, beside PyTorch's own reserved figure", function()
    for _, kind in ipairs { "arena", "freelist", "tlsf", "caching" } do
      local r = cupola.trace.replay(cupola.trace.load(cupola.trace.find "torch_snapshot_mlp"),
        cupola.pool { kind = kind, upstream = "virtual" })
      assert.equals(563, r.events)
      assert.equals(0, r.failed)
      assert.equals(238129156, r.peak_live)
      assert.near(264241152 / 238129156, r.torch_reserved_over_live, 1e-9)
      assert.is_true(r.reserved_over_live >= 1)
    end
  end)

  for _, proto in ipairs { 2, 4, 5 } do
    it("reads a snapshot pickled at protocol " .. proto, function()
      local t <close> = cupola.trace.load(corpus .. "snapshot_p" .. proto .. ".pickle")
      assert.equals(14, #t)
      assert.equals(8, t.allocs)
      assert.equals(2, t.devices)
      assert.equals(2, t.ignored)   -- the two "snapshot" actions
      assert.equals(8012, t.peak_live)
      assert.equals(4 * 1024 * 1024, t.torch_peak_reserved)
      -- The second device's addresses lie above 2^63 (LONG1 of 9 bytes):
      -- Lua integers wrap them to negative numbers, bit for bit.
      local high = 0
      for i = 1, #t do
        if t:event(i).pointer < 0 then high = high + 1 end
      end
      assert.equals(7, high)
    end)
  end

  it("reads LONG_BINPUT / LONG_BINGET (C++ write_pickle's memo past 256)", function()
    local t <close> = cupola.trace.load(corpus .. "snapshot_p2_long_memo.pickle")
    assert.equals(70, t.allocs)
    assert.equals(69, t.frees)
  end)

  it("refuses GLOBAL, STACK_GLOBAL and REDUCE without running anything", function()
    local ok, err = pcall(cupola.trace.load, corpus .. "refused_global_p2.pickle")
    assert.is_false(ok)
    assert.matches("opcode GLOBAL %(0x63%) refused", err)
    assert.matches("offset %d+", err)
    ok, err = pcall(cupola.trace.load, corpus .. "refused_stack_global_p4.pickle")
    assert.is_false(ok)
    assert.matches("STACK_GLOBAL", err)
    local path = tmpfile("\128\2)\133R.")
    ok, err = pcall(cupola.trace.load, path)
    os.remove(path)
    assert.is_false(ok)
    assert.matches("offset 4: opcode REDUCE", err)
  end)

  it("fails cleanly on every truncation of a snapshot", function()
    local f = assert(io.open(corpus .. "snapshot_p4.pickle", "rb"))
    local data = f:read "a"
    f:close()
    local path = os.tmpname()
    for cut = 2, #data - 1, 7 do
      local g = assert(io.open(path, "wb"))
      g:write(data:sub(1, cut))
      g:close()
      local ok, err = pcall(cupola.trace.load, path)
      assert.is_false(ok, "cut at " .. cut)
      assert.matches("offset %d+: ", err)
    end
    os.remove(path)
  end)

  it("fails cleanly on hostile pickles", function()
    local cases = {
      { "\128\2Nr\255\255\255\127.", "memo index" },           -- memo index past the data
      { "\128\2X\255\255\255\127abc.", "past the end" },       -- string past the end
      { "\128\2\138\10" .. ("\1"):rep(10) .. ".", "wider than 64 bits" },
      { "\128\2" .. ("("):rep(5000), "truncated" },            -- deep, unfinished
      { "\128\2]N.", "more than one value" },
      { "\128\2K\1.", "not a dict" },                           -- a pickle, not a snapshot
      { "\128\2}.", "neither 'device_traces' nor 'segments'" },
    }
    for _, c in ipairs(cases) do
      local path = tmpfile(c[1])
      local ok, err = pcall(cupola.trace.load, path)
      os.remove(path)
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
  end)
end)

describe("out of memory that explains itself", function()
  it("says requested, free, largest free block, fragmentation, reserved and used", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", initial = "1MiB", grow = false }
    local a = p:alloc "256KiB"
    local b = p:alloc "256KiB"
    local c = p:alloc "256KiB"
    b:free()
    local buf, msg, kind, info = p:alloc "600KiB"
    assert.is_nil(buf)
    assert.equals("out_of_memory", kind)
    assert.matches("requested 600.00 KiB", msg, 1, true)
    assert.matches("free in pool 512.00 KiB", msg, 1, true)
    assert.matches("largest free block 256.00 KiB", msg, 1, true)
    assert.matches("fragmentation 0.50", msg, 1, true)
    assert.matches("reserved 1.00 MiB", msg, 1, true)
    assert.matches("used 512.00 KiB", msg, 1, true)
    assert.same({ requested = 600 * 1024, free = 512 * 1024, largest_free = 256 * 1024,
      fragmentation = 0.5, reserved = 1024 * 1024, used = 512 * 1024, kind = "tlsf" }, info)
    -- The pool is consistent afterwards.
    local d = assert(p:alloc "256KiB")
    a:free(); c:free(); d:free()
    assert.equals(0, p:stats().used)
  end)

  it("explains a refusal by the pool's max the same way", function()
    local p <close> = cupola.pool { kind = "freelist", upstream = "virtual", max = "1MiB" }
    local buf, msg, kind, info = p:alloc "2MiB"
    assert.is_nil(buf)
    assert.equals("out_of_memory", kind)
    assert.matches("requested 2.00 MiB from a freelist pool", msg, 1, true)
    assert.equals(2 * 1024 * 1024, info.requested)
    assert.equals(0, info.used)
  end)

  it("names the kind with its article: an arena pool, a tlsf pool", function()
    -- it used to say "from a arena pool"
    for kind, article in pairs { arena = "an", tlsf = "a", caching = "a" } do
      local p <close> = cupola.pool { kind = kind, upstream = "virtual", max = "1MiB" }
      local _, msg = p:alloc "2MiB"
      assert.matches("requested 2.00 MiB from " .. article .. " " .. kind .. " pool;", msg, 1, true)
    end
  end)
end)

-- Sizes in snapshots: byte counts in 0..2^63-1 (an allocation's above 0),
-- sums checked.  A size of 2^63 used to load with a negative max_size, and
-- one of -100 loaded too.  The pickles are written here by hand, protocol 2
-- as PyTorch's C++ writer does: BINUNICODE strings, LONG1 integers.
describe("snapshot sizes and sums", function()
  local pickle = require "spec.support.pickle"
  local str, dict, list = pickle.str, pickle.dict, pickle.list
  local TWO63 = "\138\9" .. string.pack("<i8", math.mininteger) .. "\0" -- 2^63, nine bytes
  local function entry(action, addr, size, t)
    local kv = { "action", str(action), "addr", addr, "stream", 0, "time_us", t or 1 }
    if size ~= nil then kv[#kv + 1] = "size"; kv[#kv + 1] = size end
    return dict(kv)
  end
  local function load(devices, segments)
    local kv = { "device_traces", list(devices) }
    if segments then kv[3] = "segments"; kv[4] = list(segments) end
    local path = tmpfile("\128\2" .. dict(kv) .. ".")
    local ok, t = pcall(cupola.trace.load, path)
    os.remove(path)
    return ok, t
  end

  it("refuses a size of 2^63 or a negative one, naming the entry", function()
    local ok, err = load { list { entry("alloc", 4096, TWO63) } }
    assert.is_false(ok)
    assert.matches("device_traces[0][0]: size 9223372036854775808 is not in 0..2^63-1", err, 1, true)
    ok, err = load { list { entry("alloc", 4096, 100) }, list { entry("alloc", 8192, 50), entry("alloc", 12288, -100) } }
    assert.is_false(ok)
    assert.matches("device_traces[1][1]: size -100 is not in 0..2^63-1", err, 1, true)
    ok, err = load { list { entry("alloc", 4096, 100), entry("free_completed", 4096, -1) } }
    assert.is_false(ok)
    assert.matches("device_traces[0][1]: size -1 is not in 0..2^63-1", err, 1, true)
  end)

  it("refuses an allocation of size 0, without a size, or with a size that is not an int", function()
    local ok, err = load { list { entry("alloc", 4096, 0) } }
    assert.is_false(ok)
    assert.matches("device_traces[0][0]: an allocation of size 0", err, 1, true)
    ok, err = load { list { entry("alloc", 4096, nil) } }
    assert.is_false(ok)
    assert.matches("device_traces[0][0]: size is missing", err, 1, true)
    ok, err = load { list { entry("alloc", 4096, str "12") } }
    assert.is_false(ok)
    assert.matches("device_traces[0][0]: size is not an integer", err, 1, true)
  end)

  it("refuses live bytes past 2^63-1, naming the entry; takes exactly 2^63-1", function()
    local ok, err = load { list { entry("alloc", 4096, math.maxinteger, 1), entry("alloc", 8192, 1, 2) } }
    assert.is_false(ok)
    assert.matches("device_traces[0][1]: the live bytes (9223372036854775807 bytes) plus this size (1) passes 2^63-1",
      err, 1, true)
    local t
    ok, t = load { list { entry("alloc", 4096, math.maxinteger, 1), entry("free_completed", 4096, nil, 2),
      entry("alloc", 4096, 7, 3), entry("free_completed", 4096, 0, 4) } }
    assert.is_false(ok) -- the total passes 2^63-1 at the second allocation
    assert.matches("device_traces[0][2]: the total of the allocation sizes", t, 1, true)
    ok, t = load { list { entry("alloc", 4096, math.maxinteger, 1), entry("free_completed", 4096, nil, 2) } }
    assert.is_true(ok, t)
    assert.equals(math.maxinteger, t.max_size)
    assert.equals(math.maxinteger, t.peak_live)
    assert.equals(math.maxinteger, t:event(2).size, "a free without a size takes its allocation's")
    t:close()
  end)

  it("reads allocator_settings as PyTorch writes them: size_t as int64, the env string for the rest", function()
    local function settings(kv)
      local path = tmpfile("\128\2" .. dict { "device_traces", list { list { entry("alloc", 4096, 512) } },
        "allocator_settings", dict(kv) } .. ".")
      local t = cupola.trace.load(path)
      os.remove(path)
      return t
    end
    -- max_split_size_mb:-1 is (2^44 - 1) MiB, which PyTorch reports as -2^20; -1 is unset
    local t <close> = settings { "PYTORCH_CUDA_ALLOC_CONF", str "max_split_size_mb:-1,large_segment_size_mb:32",
      "max_split_size", -1048576, "expandable_segments", "\136" }
    assert.equals("max_split_size_mb:-1,large_segment_size_mb:32", t.torch_conf)
    assert.equals("large_segment_size_mb:32,max_split_size_mb:17592186044415,expandable_segments:True",
      t.torch_settings)
    local u <close> = settings { "PYTORCH_CUDA_ALLOC_CONF", str "", "max_split_size", -1,
      "roundup_power2_divisions", dict { "1", 0, "2", 3, "4", 8 } }
    assert.equals("roundup_power2_divisions:[1:0,2:0,4:8,8:0,16:0,32:0,64:0,128:0,256:0,512:0,1024:0," ..
      "2048:0,4096:0,8192:0,16384:0,32768:0]", u.torch_settings, "divisions are 0 or powers of two")
  end)

  it("loads the corpus seed at the bounds and refuses the one past them (Python's pickle)", function()
    local t <close> = cupola.trace.load(corpus .. "sizes_max_p2.pickle")
    assert.equals(math.maxinteger, t.peak_live)
    assert.equals(math.maxinteger, t.torch_peak_reserved)
    assert.equals(math.maxinteger, t:event(2).size)
    local ok, err = pcall(cupola.trace.load, corpus .. "sizes_refused_p4.pickle")
    assert.is_false(ok)
    assert.matches("segments[1]: the segments' total_size sum passes 2^63-1", err, 1, true)
  end)

  it("keeps PyTorch's reserved figures exact, refusing sums past 2^63-1", function()
    local seg = dict { "device", 0, "address", 4096, "total_size", math.maxinteger }
    local ok, err = load({ list { entry("alloc", 4096, 10) } }, { seg, dict { "device", 0, "address", 8192, "total_size", 1 } })
    assert.is_false(ok)
    assert.matches("segments[1]: the segments' total_size sum passes 2^63-1", err, 1, true)
    ok, err = load({ list { entry("alloc", 4096, 10) } }, { dict { "device", 0, "total_size", -4 } })
    assert.is_false(ok)
    assert.matches("segments[0]: total_size is not an integer in 0..2^63-1", err, 1, true)
    ok, err = load { list { entry("segment_alloc", 4096, math.maxinteger, 1), entry("segment_alloc", 1 << 62, 1, 2) } }
    assert.is_false(ok)
    assert.matches("PyTorch's reserved bytes", err, 1, true)
    -- Exact where a double would round: 2^60 + 1 bytes.
    local t
    ok, t = load({ list { entry("segment_alloc", 4096, (1 << 60) + 1, 1), entry("alloc", 4096, 10, 2) } },
      { dict { "device", 0, "address", 4096, "total_size", (1 << 60) + 1 } })
    assert.is_true(ok, t)
    assert.equals((1 << 60) + 1, t.torch_peak_reserved)
    assert.equals((1 << 60) + 1, t.torch_reserved_end)
    t:close()
  end)
end)
