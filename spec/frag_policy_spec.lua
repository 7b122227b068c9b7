-- Policies of the chunked pools that follow from what the pool has seen:
-- each case builds the situation a rule is about and checks
-- the pool's figures, over the virtual upstream (deterministic).
local cupola = require "cupola"
local MiB = 1024 * 1024

describe("chunked pools' growth", function()
  it("caching: small and large requests in turn keep both segments instead of trading them", function()
    -- before: each growth returned the idle segment of the other size to
    -- stay within the peak, so every turn cost a cudaFree and a cudaMalloc
    local p <close> = cupola.pool { kind = "caching", upstream = "virtual" }
    for i = 1, 20 do
      local b = assert(p:alloc(i % 2 == 0 and 512 * 1024 or 4 * MiB))
      b:free()
    end
    local st = p:stats()
    assert.equals(22 * MiB, st.reserved, "a 2 MiB small and a 20 MiB large segment, both kept")
    assert.equals(22 * MiB, st.reserved_peak)
  end)

  for _, kind in ipairs { "caching", "tlsf", "freelist" } do
    it(kind .. ": a chunk that does not serve the request is still returned to stay within the peak", function()
      local p <close> = cupola.pool { kind = kind, upstream = "virtual" }
      local a = assert(p:alloc(100 * MiB))
      a:free()
      local b = assert(p:alloc(200 * MiB))
      assert.is_true(p:stats().reserved < 300 * MiB, "the idle 100 MiB chunk went back")
      b:free()
    end)
  end
end)

-- Bug fixed with this spec: a tlsf or freelist pool made with initial =
-- 64 MiB kept that chunk whole for big requests (a small request does not
-- split an entirely free chunk over 8 times its size) and, growing by 2 MiB
-- for a 1 MiB request, handed the 64 MiB back to stay within its peak:
-- reserved fell to 2 MiB and the reservation asked for was gone.
describe("the initial reservation", function()
  local MiB = 1024 * 1024
  for _, kind in ipairs { "tlsf", "freelist", "arena", "caching" } do
    it("serves small requests and stays reserved (" .. kind .. ")", function()
      local p <close> = cupola.pool { kind = kind, initial = "64MiB" }
      local live = {}
      for i = 1, 40 do
        live[i] = assert(p:alloc(i * 64 * 1024)) -- 51.25 MiB in all
        assert.equals(64 * MiB, p:stats().reserved, "after " .. i .. " requests")
      end
      for i = 1, #live do live[i]:free() end
      assert.equals(64 * MiB, p:stats().reserved)
      local big = assert(p:alloc("48MiB"))
      assert.equals(64 * MiB, p:stats().reserved)
      big:free()
      -- trim, asked, returns it
      p:trim(0)
      if kind ~= "arena" then assert.equals(0, p:stats().reserved) end
    end)
  end
  it("is still returned when max needs the room", function()
    local p <close> = cupola.pool { kind = "tlsf", initial = "64MiB", max = "64MiB" }
    local b = assert(p:alloc("64MiB"))
    b:free()
    assert.equals(64 * MiB, p:stats().reserved)
  end)

  -- Bug fixed with this spec: the caching pool put the chunk `initial`
  -- reserved among its large segments, so with initial = max = 64 MiB a
  -- 1 KiB request (small: its own 2 MiB segments) found nothing it could
  -- take and was refused with 64 MiB free ("1536 more bytes would pass the
  -- pool's max"); without max it grew by 2 MiB beside the idle 64 MiB.
  for _, kind in ipairs { "caching", "tlsf", "freelist", "arena" } do
    it("serves every size under a max it fills (" .. kind .. ")", function()
      local p <close> = cupola.pool { kind = kind, upstream = "device", initial = "64MiB", max = "64MiB" }
      local live = {}
      for i, size in ipairs { 1, 1024, 512, 4096, 1024 * 1024, 1024 * 1024 + 1, 3 * MiB, 20 * MiB } do
        live[i] = assert(p:alloc(size), "a request of " .. size .. " bytes")
        assert.equals(64 * MiB, p:stats().reserved)
      end
      for i = 1, #live do live[i]:free() end
      if kind ~= "arena" then
        -- the whole reservation again, for one request
        local all = assert(p:alloc(60 * MiB))
        all:free()
      end
      assert.equals(64 * MiB, p:stats().reserved)
    end)
  end
  it("does not grow past it for a small request (caching)", function()
    local p <close> = cupola.pool { kind = "caching", initial = "64MiB" }
    local a = assert(p:alloc("1KiB"))
    local b = assert(p:alloc("3MiB"))
    assert.equals(64 * MiB, p:stats().reserved)
    a:free(); b:free()
  end)
end)
