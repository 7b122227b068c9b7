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
