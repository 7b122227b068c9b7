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
  for _, kind in ipairs { "tlsf", "freelist", "arena" } do
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
end)
