-- PYTORCH_CUDA_ALLOC_CONF read as PyTorch 2.11 reads it (kind = "torch").
--
-- The ground truth: conf strings PyTorch 2.11.0 was given on an H100, each
-- in a fresh process, with its verdict and what it read
-- (examples/traces/torch/conf_probe.lua, written by tests/torch/record.py
-- --probe-conf).  A model must take every string PyTorch ran with and read
-- it the same way, and refuse, naming the key and the value, exactly the
-- strings PyTorch refuses.
local cupola = require "cupola"
require "cupola.busted"
local MiB = 1024 * 1024
local probe = dofile "examples/traces/torch/conf_probe.lua"

local function torch_pool(conf, opts)
  local o = { kind = "torch", upstream = "virtual", conf = conf }
  for k, v in pairs(opts or {}) do o[k] = v end
  return cupola.pool(o)
end

-- A conf string's tokens, as PyTorch cuts it: words, and each of , : [ ].
local function words(conf)
  local w = {}
  for sep, word in conf:gsub("%s", ""):gmatch "([,:%[%]]?)([^,:%[%]]*)" do
    if sep ~= "" then w[#w + 1] = sep end
    if word ~= "" then w[#w + 1] = word end
  end
  return w
end

describe("torch conf: PyTorch 2.11's verdict on every probed string", function()
  for _, r in ipairs(probe) do
    it(string.format("%q is %s", r.conf, r.accepted and "accepted" or "refused"), function()
      local ok, p = pcall(torch_pool, r.conf)
      if r.accepted then
        assert.is_true(ok, tostring(p))
        local s = p:settings()
        assert.equals(r.max_split_size, s.max_split_size, "max_split_size as PyTorch reports it")
        assert.equals(r.garbage_collection_threshold, s.garbage_collection_threshold)
        assert.equals(r.expandable_segments, s.expandable_segments)
        assert.equals(r.release_lock_on_cudamalloc, s.release_lock_on_cudamalloc)
        assert.equals(r.graph_capture_record_stream_reuse, s.graph_capture_record_stream_reuse)
        assert.equals(r.pinned_use_cuda_host_register,
          s.host_side.pinned_use_cuda_host_register or false)
        assert.equals(r.pinned_num_register_threads, s.host_side.pinned_num_register_threads or 1)
        for i = 1, 16 do
          local mb = tostring(1 << (i - 1))
          assert.equals(r.roundup_power2_divisions[i], s.roundup_power2_divisions[mb],
            "roundup_power2_divisions for the interval from " .. mb .. " MiB")
        end
        if r.reserved then
          local b = p:alloc(4 * MiB)
          assert.equals(r.reserved, p:stats().reserved, "what one 4 MiB tensor reserves")
          b:free()
        end
        if r.oom then
          -- PyTorch took the conf and raised OutOfMemoryError for the tensor
          local b, msg, code = p:alloc(4 * MiB)
          assert.is_nil(b, "PyTorch ran out of memory: " .. r.oom)
          assert.equals("out_of_memory", code, msg)
        end
        -- the canonical string is read back to the same settings
        local q <close> = torch_pool(s.conf)
        assert.same(s.roundup_power2_divisions, q:settings().roundup_power2_divisions)
        assert.equals(s.max_split_size, q:settings().max_split_size)
        assert.equals(s.large_segment_size, q:settings().large_segment_size)
        p:close()
      else
        assert.is_false(ok, "PyTorch refused it: " .. r.error)
        local msg = tostring(p)
        local lead = "cupola.pool: option 'conf': "
        local at = msg:find(lead, 1, true)
        assert.is_truthy(at, msg)
        -- (the message starts after the caller's position)
        local text = msg:sub(at + #lead)
        local w = words(r.conf)
        local named = false
        for _, t in ipairs(w) do named = named or text:find("'" .. t .. "'", 1, true) ~= nil or
          text:find(t .. " ", 1, true) == 1 end
        assert.is_true(named, "the message names the key or value: " .. msg)
        if #w == 3 and w[2] == ":" and not r.error:match "^Unrecognized key" then
          -- key:value refused for its value: both named
          assert.matches(w[1], msg, 1, true)
          assert.matches("'" .. w[3] .. "'", msg, 1, true)
        end
      end
    end)
  end
end)

describe("torch conf: how PyTorch walks the string", function()
  local function reads(conf, want)
    local p <close> = torch_pool(conf)
    local s = p:settings()
    for k, v in pairs(want) do assert.equals(v, s[k], conf .. ": " .. k) end
  end
  local function refused(conf, pattern)
    local ok, err = pcall(torch_pool, conf)
    assert.is_false(ok, "accepted: " .. conf)
    assert.matches(pattern, err, 1, true)
  end

  it("reads an integer as std::stoull does: leading digits, a sign, modulo 2^64", function()
    reads("max_split_size_mb:64abc", { max_split_size = 64 * MiB })
    reads("max_split_size_mb:+64", { max_split_size = 64 * MiB })
    -- -1 is 2^64 - 1 MiB, capped at (2^64 - 1) / 2^20 MiB: 2^64 - 2^20 bytes
    reads("max_split_size_mb:-1", { max_split_size = -MiB })
    refused("max_split_size_mb:0x40", "not '0x40'") -- base 10: 0
    refused("max_split_size_mb:99999999999999999999", "below 2^64")
    refused("max_split_size_mb:", "needs a value")
  end)

  it("reads a number as std::stod does in the C locale", function()
    reads("garbage_collection_threshold:0.5x", { garbage_collection_threshold = 0.5 })
    reads("garbage_collection_threshold:0x0.8", { garbage_collection_threshold = 0.5 })
    reads("per_process_memory_fraction:-0", { per_process_memory_fraction = 0 })
    refused("garbage_collection_threshold:1e-400", "not '1e-400'") -- underflow
    refused("per_process_memory_fraction:inf", "not 'inf'")
  end)

  it("skips the token after a key and after a value without reading it", function()
    reads("max_split_size_mb:64:expandable_segments:True",
      { max_split_size = 64 * MiB, expandable_segments = true })
    reads("max_split_size_mb,64", { max_split_size = 64 * MiB })
    reads("max_split_size_mb:64,", { max_split_size = 64 * MiB })
    reads(" max_split _size_mb : 64 ", { max_split_size = 64 * MiB }) -- white space dropped
    refused("expandable_segments:True,,max_split_size_mb:64", "unknown key ','")
    refused("max_split_size_mb", "needs ':' and a value")
  end)

  it("walks a roundup list as PyTorch does", function()
    local p <close> = torch_pool "roundup_power2_divisions:[64,4]" -- ',' in place of ':'
    assert.equals(4, p:settings().roundup_power2_divisions["64"])
    assert.equals(4, p:settings().roundup_power2_divisions["1"], "the first bound covers below")
    assert.equals(0, p:settings().roundup_power2_divisions["128"])
    -- the first parser reads to the second ']', CUDA's skips to the first: refused
    refused("roundup_power2_divisions:[64]8]", "unknown key ']'")
    refused("roundup_power2_divisions:[64:4", "closed by ']'")
  end)

  it("keeps divisions as large as a size_t, as PyTorch does", function()
    -- 512 x 2^55 wraps to 0: every request above 512 bytes rounds to a power of two
    local p <close> = torch_pool "roundup_power2_divisions:36028797018963968"
    local b = p:alloc(3 * MiB)
    assert.equals(4 * MiB, p:stats()["allocated_bytes.all.current"])
    b:free()
  end)
end)

describe("torch conf: large_segment_size_mb", function()
  it("reads it before every other key: the least max_split_size_mb and the default rounding", function()
    local p <close> = torch_pool "max_non_split_rounding_mb:64,large_segment_size_mb:32"
    local s = p:settings()
    assert.equals(32 * MiB, s.large_segment_size)
    assert.equals(64 * MiB, s.max_non_split_rounding)
    local q <close> = torch_pool "large_segment_size_mb:32"
    assert.equals(32 * MiB, q:settings().max_non_split_rounding, "the default follows it")
    assert.equals("large_segment_size_mb:32", q:settings().conf)
    local ok, err = pcall(torch_pool, "max_split_size_mb:24,large_segment_size_mb:32")
    assert.is_false(ok)
    assert.matches("max_split_size_mb must be an integer of at least 32 (MiB), not '24'", err, 1, true)
    ok, err = pcall(torch_pool, "large_segment_size_mb:10")
    assert.is_false(ok)
    assert.matches("large_segment_size_mb must be an integer above 10 (MiB), not '10'", err, 1, true)
  end)

  it("is the segment of requests between 1 and 10 MiB", function()
    local p <close> = torch_pool "large_segment_size_mb:64"
    local a = p:alloc(4 * MiB)
    local b = p:alloc(9 * MiB)
    local st = p:stats()
    assert.equals(64 * MiB, st.reserved, "one 64 MiB segment, split")
    assert.equals(1, st.num_device_alloc)
    local c = p:alloc(70 * MiB) -- 10 MiB and more: the request rounded to 2 MiB
    assert.equals((64 + 70) * MiB, p:stats().reserved)
    a:free(); b:free(); c:free()
  end)

  it("is the page of large expandable segments", function()
    local p <close> = torch_pool "expandable_segments:True,large_segment_size_mb:64"
    local a = p:alloc(30 * MiB)
    local b = p:alloc(40 * MiB)
    local st = p:stats()
    assert.equals(b.address, a.address + 30 * MiB, "one segment, grown in place")
    assert.equals(128 * MiB, st.reserved, "two 64 MiB pages")
    assert.equals(2, st.num_device_alloc)
    local c = p:alloc(512 * 1024) -- small requests keep their 2 MiB pages
    assert.equals(130 * MiB, p:stats().reserved)
    a:free(); b:free(); c:free()
  end)

  -- The largest value PyTorch reads (2^44 - 1 MiB, a few MiB short of 2^64
  -- bytes) makes segments no device holds: the model's virtual device
  -- refuses them.  Rounded up to its 2 MiB pages such a size wrapped to 0,
  -- and a 2 MiB request was served with a reserved figure of -1 MiB.
  it("as large as PyTorch reads it: segments and pages no device holds are refused", function()
    for _, conf in ipairs { "large_segment_size_mb:17592186044415",
                            "large_segment_size_mb:17592186044415,expandable_segments:True" } do
      local p <close> = torch_pool(conf)
      local b, msg, why = p:alloc(2 * MiB)
      assert.is_nil(b, conf)
      assert.equals("out_of_memory", why)
      assert.matches("OutOfMemoryError", msg)
      local st = p:stats()
      assert.equals(0, st.reserved, conf)
      assert.equals(0, st["reserved_bytes.all.current"], conf)
      assert.equals(0, st["segment.all.current"], conf)
      assert.truthy(p:alloc(512), "small requests still have their 2 MiB segments"):free()
    end
  end)
end)
