-- Streams sharing pools, in short: cudaMallocAsync against a native pool and cupola's own
-- pools when K streams each run N x {allocate, pattern kernel, free} with
-- sizes from a seeded distribution.  Prints wall time, bytes reserved at the
-- peak, and whether every block held the right data.  The full comparison
-- (every kind under every reuse policy, K = 1..8) is bench/multistream.lua.
--   bin/cupola examples/multistream_compare.lua [iterations]   (or CUPOLA_ITERS)
local cupola = cupola or require "cupola"
local K = cupola.kernels

local N = tonumber(arg and arg[1]) or tonumber(os.getenv "CUPOLA_ITERS")
  or (cupola.backend() == "cuda" and 200 or 10)

-- The same sizes for everyone: 64 KiB .. 4 MiB, log-uniform, seeded.
math.randomseed(1)
local sizes = {}
for i = 1, N * 4 do sizes[i] = math.floor(2 ^ (16 + 6 * math.random()) / 256) * 256 end

local function pools()
  return {
    { "cudaMallocAsync", function()
        local m = cupola.mempool.default()
        cupola.synchronize()
        m:trim(0)
        m:reset_high()
        return function(n, s) return cupola.malloc_async(n, s) end,
          function() return m.reserved_high end, function() end
      end },
    { "native pool", function()
        local m = cupola.mempool { release_threshold = "1TiB" }
        return function(n, s) return m:alloc(n, s) end,
          function() return m.reserved_high end, function() m:close() end
      end },
  }
end

local candidates = pools()
for _, kr in ipairs { { "tlsf", "event" }, { "tlsf", "stream" }, { "caching", "event" } } do
  candidates[#candidates + 1] = { "cupola " .. kr[1] .. "/" .. kr[2], function()
      local p = cupola.pool { kind = kr[1], reuse = kr[2] }
      return function(n, s) return p:alloc(n, s) end,
        function() return p:stats().reserved_peak end, function() p:close() end
    end }
end

local rows = {}
for _, nstreams in ipairs { 1, 2, 4 } do
  for _, c in ipairs(candidates) do
    local streams = {}
    for k = 1, nstreams do streams[k] = cupola.stream() end
    local alloc, peak, close = c[2]()
    local bad = 0
    local t0 = cupola.clock()
    for i = 1, N do
      for k, s in ipairs(streams) do
        local b = assert(alloc(sizes[(i - 1) * 4 + k], s))
        K.pattern(b, i * 8 + k, { stream = s })
        -- half the streams check their block; the others free it with the
        -- kernel still running, so a block reused too early would show
        if (i + k) % 2 == 0 then bad = bad + K.verify(b, i * 8 + k, { stream = s }) end
        b:free()
      end
    end
    cupola.synchronize()
    local ms = (cupola.clock() - t0) * 1e3
    rows[#rows + 1] = { nstreams, c[1], string.format("%.2f", ms), cupola.report.bytes(peak()),
      bad == 0 and "ok" or (bad .. " bad bytes") }
    close()
    for _, s in ipairs(streams) do s:close() end
  end
end

print(string.format("multi-stream allocation, %d iterations per stream, backend %s (%s)", N, cupola.backend(),
  cupola.device().name))
print(cupola.report.table({ "streams", "allocator", "ms", "reserved peak", "data" }, rows))
for _, r in ipairs(rows) do
  if r[5] ~= "ok" then error("multi-stream comparison: wrong data with " .. r[2]) end
end
return rows
