-- Allocator fuzzing: seeded random sequences of operations --
-- alloc, free on any stream, trim, reset, stats, close, drop-and-collect,
-- stream close, and raw blocks (alloc_raw, free_raw, buffer() handing one
-- to a Buffer) -- against every pool kind x upstream, the native mempool
-- and malloc_async, with the invariants checked after every step:
--
--   * no two live blocks, Buffers or raw, overlap (nothing is handed out twice);
--   * every address is aligned as the pool promises;
--   * conservation: the pool's `used` is the sum of its live buffers'
--     sizes, allocs - frees is their number, used + free <= reserved,
--     peaks are never below the current figures, `max` is never passed;
--   * data integrity: each live buffer with memory holds its own pattern,
--     written by a kernel on its stream when it was allocated and verified
--     by a kernel (kernels.verify == 0) before it is freed, dropped or reset;
--   * stream safety: some frees are queued behind a spin and a kernel that
--     overwrites the block; whoever gets the block next on another stream
--     must not see that late write (the reuse policy's promise).
--
-- Then the argument fuzz (below): random calls of every function, method and
-- metamethod with hostile values, in a child process that must not crash.
--
-- On the CUDA backend the same spec is the GPU data-integrity fuzz.
--
--   CUPOLA_FUZZ_SEED  the seed (default fixed, so `make test` is repeatable)
--   CUPOLA_FUZZ_OPS   operations per allocator (default 120; `make fuzz`
--                     runs many more with a fresh seed)
--   CUPOLA_FUZZ_TRACE  set: each operation is written to stderr first
--   CUPOLA_FUZZ_SKIP   operations to leave out, e.g. "free_late,stream"
-- A failure names the seed, the allocator and the step, which replays it.
-- (The seed fixes the operations; whether a block freed behind queued work
-- is reusable yet depends on timing, so out-of-memory answers, and what
-- follows from them, may differ slightly from run to run.)
local cupola = require "cupola"
local K = cupola.kernels

local SEED = tonumber(os.getenv "CUPOLA_FUZZ_SEED") or 20261121
local OPS = tonumber(os.getenv "CUPOLA_FUZZ_OPS") or 120
-- Bug fixed with this fuzz (backend/cuda.c): destroying a native pool (a
-- closed or collected cupola.Mempool) while frees on it were still queued
-- behind work crashed libcuda at a later stream synchronize; the reproducer
-- was seed 9001, 1000 operations, filter "cupola.mempool".  Destroyed pools
-- now wait for the next device synchronization.
local TRACE = os.getenv "CUPOLA_FUZZ_TRACE" ~= nil -- each operation to stderr, to find a crash
local MAX_LIVE = 48
local KiB, MiB = 1024, 1024 * 1024

local kinds = { "arena", "freelist", "tlsf", "caching" }
local upstreams = { "device", "async", "managed", "pinned", "virtual" }
local reuses = { "stream", "event", "wait" }

-- Totals over the file, printed at the end (the closing note quotes them).
local totals = { ops = 0, allocs = 0, ooms = 0, frees = 0, late_frees = 0, verified = 0, bytes_verified = 0 }

-- A small deterministic generator (xorshift64), independent of
-- math.random so that the sequence does not change with the Lua build.
local function rng(seed)
  local x = seed ~ 0x9E3779B97F4A7C15
  if x == 0 then x = 1 end
  local r = {}
  function r.next()
    x = x ~ (x << 13)
    x = x ~ (x >> 7)
    x = x ~ (x << 17)
    return x
  end
  function r.int(lo, hi) -- inclusive
    return lo + ((r.next() >> 1) % (hi - lo + 1))
  end
  function r.pick(t) return t[r.int(1, #t)] end
  function r.chance(p) return r.int(1, 1000000) <= p * 1000000 end
  return r
end

-- Sizes: mostly small, some medium, a few large (the large ones find the
-- growth paths, and OOM where a max is set).
local function random_size(r)
  local c = r.int(1, 100)
  if c <= 35 then return r.int(1, 512) end
  if c <= 75 then return r.int(513, 64 * KiB) end
  if c <= 96 then return r.int(64 * KiB, MiB) end
  return r.int(2 * MiB, 6 * MiB)
end

-- One fuzzing world: a pool (or native allocator), three streams, the live
-- buffers with their seeds, and the pools whose handles were dropped while
-- they still had buffers.
local World = {}
World.__index = World

function World.new(r, cfg)
  local w = setmetatable({ r = r, cfg = cfg, live = {}, pools = {}, step = 0, next_seed = 1 }, World)
  w.streams = { cupola.default_stream, cupola.stream(), cupola.stream { priority = 0 } }
  w:open_pool()
  return w
end

function World:where()
  return string.format("seed %d, %s, step %d", SEED, self.cfg.name, self.step)
end

-- Opens the world's current allocator.
function World:open_pool()
  local cfg = self.cfg
  local rec = { live = 0, has_memory = cfg.upstream ~= "virtual", alignment = cfg.alignment or 256 }
  if cfg.native == "mempool" then
    rec.handle = cupola.mempool { max_size = cfg.max }
    rec.alloc = function(size, s) return rec.handle:alloc(size, s) end
  elseif cfg.native == "malloc_async" then
    rec.handle = cupola.mempool.current()
    rec.base_live = rec.handle:stats().live_buffers -- buffers of other specs, if any
    rec.alloc = function(size, s) return cupola.malloc_async(size, s) end
  elseif cfg.kind == "bfc" then
    rec.handle = assert(cupola.pool { kind = "bfc", upstream = cfg.upstream, memory_limit = cfg.memory_limit,
                                      allow_growth = cfg.allow_growth, garbage_collection = cfg.gc })
    rec.alloc = function(size, s) return rec.handle:alloc(size, s) end
    rec.custom = true
  elseif cfg.kind == "torch" then
    -- PyTorch's allocator has no alignment, reuse or initial options: its conf
    rec.handle = assert(cupola.pool { kind = "torch", upstream = cfg.upstream, max = cfg.max,
                                      conf = cfg.conf })
    rec.alloc = function(size, s) return rec.handle:alloc(size, s) end
    rec.custom = true
  else
    rec.handle = assert(cupola.pool {
      kind = cfg.kind, upstream = cfg.upstream, alignment = cfg.alignment,
      max = cfg.max, reuse = cfg.reuse, initial = cfg.initial, bin_growth = cfg.bin_growth,
      min_bin = cfg.min_bin, max_bin = cfg.max_bin, max_cached_bytes = cfg.max_cached_bytes,
      release_threshold = cfg.release_threshold, clock = cfg.clock,
    })
    rec.alloc = function(size, s) return rec.handle:alloc(size, s) end
    rec.custom = true
  end
  rec.raw = 0 -- live raw blocks (custom pools)
  self.pool = rec
  self.pools[#self.pools + 1] = rec
end

function World:random_stream()
  return self.r.pick(self.streams)
end

-- Verifies a live buffer's pattern (a kernel on its stream).  Kept in its
-- own function so no register of the caller holds the buffer afterwards.
local function verify(w, e)
  if e.pool.has_memory and not e.raw then
    local bad = K.verify(e.b, e.seed)
    assert(bad == 0, string.format("%s: %d corrupt bytes in a %d-byte buffer at 0x%x", w:where(), bad, e.size, e.address))
    totals.verified = totals.verified + 1
    totals.bytes_verified = totals.bytes_verified + e.size
  end
end

function World:remove(i)
  local e = self.live[i]
  self.live[i] = self.live[#self.live]
  self.live[#self.live] = nil
  if e.raw then e.pool.raw = e.pool.raw - 1 else e.pool.live = e.pool.live - 1 end
  return e
end

-- A live entry of the kind wanted (raw or a Buffer), or nil.
function World:pick_live(raw)
  local n = #self.live
  if n == 0 then return nil end
  local start = self.r.int(1, n)
  for k = 0, n - 1 do
    local i = (start + k - 1) % n + 1
    if (self.live[i].raw or false) == raw then return i end
  end
end

-- ---- operations ----

function World:op_alloc()
  local size = random_size(self.r)
  local s = self:random_stream()
  local p = self.pool
  local b, msg, kind = p.alloc(size, s)
  if not b then
    assert(kind == "out_of_memory", string.format("%s: alloc(%d) failed with %s", self:where(), size, tostring(msg)))
    totals.ooms = totals.ooms + 1
    return
  end
  totals.allocs = totals.allocs + 1
  assert.equals(size, b.size)
  assert.equals(s, b.stream)
  local e = { b = b, size = size, address = b.address, pool = p, seed = self.next_seed * 7919 + SEED }
  self.next_seed = self.next_seed + 1
  assert(e.address % p.alignment == 0,
    string.format("%s: address 0x%x is not %d-aligned", self:where(), e.address, p.alignment))
  if p.has_memory then K.pattern(b, e.seed) end
  p.live = p.live + 1
  self.live[#self.live + 1] = e
end

-- A raw block: an integer address, counted apart from the Buffers.
function World:op_alloc_raw()
  local p = self.pool
  if not p.custom then return self:op_alloc() end
  local size = random_size(self.r)
  local s = self:random_stream()
  local a, msg, kind = p.handle:alloc_raw(size, s)
  if not a then
    assert(kind == "out_of_memory", string.format("%s: alloc_raw(%d) failed with %s", self:where(), size, tostring(msg)))
    totals.ooms = totals.ooms + 1
    return
  end
  totals.allocs = totals.allocs + 1
  assert(math.type(a) == "integer" and a % p.alignment == 0,
    string.format("%s: raw address %s is not a %d-aligned integer", self:where(), tostring(a), p.alignment))
  p.raw = p.raw + 1
  self.live[#self.live + 1] = { raw = true, size = size, address = a, pool = p, seed = self.next_seed * 7919 + SEED }
  self.next_seed = self.next_seed + 1
end

-- A raw block handed over to a Buffer (p:buffer), which gets a pattern.
function World:op_wrap()
  local i = self:pick_live(true)
  if not i then return self:op_alloc_raw() end
  local e = self.live[i]
  if self.r.chance(0.1) and e.pool.alignment > 1 then -- inside the block: refused
    assert.error_matches(function() e.pool.handle:buffer(e.address + 1) end, "lies inside the", 1, true)
  end
  local b = e.pool.handle:buffer(e.address)
  assert.equals(e.address, b.address)
  assert.equals(e.size, b.size)
  e.raw, e.b = nil, b
  e.pool.raw = e.pool.raw - 1
  e.pool.live = e.pool.live + 1
  if e.pool.has_memory then K.pattern(b, e.seed) end
  if self.r.chance(0.1) then
    assert.error_matches(function() e.pool.handle:free_raw(e.address) end, "already belongs to the Buffer", 1, true)
  end
end

function World:op_free()
  if #self.live == 0 then return self:op_alloc() end
  local i = self.r.int(1, #self.live)
  verify(self, self.live[i])
  local e = self:remove(i)
  -- any stream: its own (nil), the default, or another one
  local s
  if not self.r.chance(0.3) then s = self:random_stream() end
  if e.raw then
    e.pool.handle:free_raw(e.address, s)
    totals.frees = totals.frees + 1
    if self.r.chance(0.1) then
      assert.error_matches(function() e.pool.handle:free_raw(e.address) end, "double free", 1, true)
    end
    return
  end
  e.b:free(s)
  assert.is_true(e.b.freed)
  assert.equals(0, e.b.address)
  totals.frees = totals.frees + 1
  if self.r.chance(0.1) then
    assert.error_matches(function() e.b:free() end, "double free", 1, true)
  end
end

-- A free behind unfinished work: a spin, then a kernel that overwrites the
-- buffer with another pattern, both queued on the buffer's stream, then the
-- free on that stream.  Until that work is done the block may go to another
-- stream only as the pool's reuse policy allows (never, after the free's
-- event, or with a wait on it); a pool that hands it over too early lets the
-- late kernel land on the next owner's pattern, which its verify catches.
function World:op_free_late()
  local i = self:pick_live(false)
  if not i then return self:op_alloc() end
  local e = self.live[i]
  if not e.pool.has_memory then return self:op_free() end
  verify(self, e)
  self:remove(i)
  -- (a closed Stream handle cannot take the spin; its C stream still runs
  -- the pattern kernel, which is queued on the buffer's own stream)
  if not e.b.stream.closed then K.spin(self.r.int(500, 3000), { stream = e.b.stream }) end
  K.pattern(e.b, e.seed + 1)
  e.b:free()
  totals.frees = totals.frees + 1
  totals.late_frees = totals.late_frees + 1
end

-- Drops the references to a few buffers and collects: their __gc frees them
-- on their own streams.
function World:op_drop()
  local n = self.r.int(1, 4)
  local ghosts = setmetatable({}, { __mode = "v" })
  for k = 1, n do
    local i = self:pick_live(false) -- (a raw block has no object to drop)
    if not i then n = k - 1 break end
    verify(self, self.live[i])
    local e = self:remove(i)
    ghosts[#ghosts + 1] = e.b
    e.b = nil
  end
  collectgarbage()
  collectgarbage()
  assert(next(ghosts) == nil, self:where() .. ": a dropped buffer was not collected")
  totals.frees = totals.frees + n
end

function World:op_trim()
  local keep = self.r.pick { 0, 0, 64 * KiB, MiB }
  self.pool.handle:trim(keep)
end

function World:op_reset()
  local p = self.pool
  if self.cfg.kind ~= "arena" then
    if self.cfg.kind then
      assert.error_matches(function() p.handle:reset() end, "only arena pools can be reset", 1, true)
    end
    return
  end
  -- every buffer of this pool is verified, then released by the reset
  local gone = {}
  for i = #self.live, 1, -1 do
    if self.live[i].pool == p then
      verify(self, self.live[i])
      gone[#gone + 1] = self:remove(i)
    end
  end
  p.handle:reset()
  for _, e in ipairs(gone) do
    if e.raw then
      if self.r.chance(0.3) then
        assert.error_matches(function() p.handle:free_raw(e.address) end, "freed by the pool's reset()", 1, true)
      end
      goto continue
    end
    assert.is_true(e.b.freed)
    assert.error_matches(function() e.b:read(0, 1) end, "freed by its pool's reset()", 1, true)
    if self.r.chance(0.5) then -- drops the references; else GC does
      if self.r.chance(0.5) then
        assert.error_matches(function() e.b:free() end, "double free", 1, true)
      else
        e.b:close()
      end
    end
    ::continue::
  end
  totals.frees = totals.frees + #gone
end

-- Closes the pool: refused while it has buffers, else a fresh one replaces it.
-- Sometimes the handle is only dropped instead, with its buffers still live:
-- the pool must stay alive for them.
function World:op_close()
  local p = self.pool
  if self.cfg.native == "malloc_async" then return end
  if p.live > 0 then
    if self.r.chance(0.5) then
      assert.error_matches(function() p.handle:close() end, "live buffer", 1, true)
    else
      self:open_pool() -- the old record stays in self.pools until empty
    end
    return
  end
  -- raw blocks do not hold the pool: close frees them and says how many
  local nraw = p.raw
  local closed = p.handle:close()
  if p.custom then assert.equals(nraw, closed) end
  for i = #self.live, 1, -1 do
    if self.live[i].pool == p then self:remove(i) end
  end
  for i, q in ipairs(self.pools) do
    if q == p then table.remove(self.pools, i) break end
  end
  self:open_pool()
end

-- Closes a stream that may have buffers ordered on it (their frees still
-- need it) and puts a new one in its place.
function World:op_stream()
  local i = self.r.int(2, #self.streams)
  self.streams[i]:close()
  self.streams[i] = cupola.stream()
  if self.r.chance(0.5) then collectgarbage() end
end

-- Time passes: a manual clock moves on (a little, a window, or far); a
-- wall clock is only read.  It never goes back.
function World:op_clock()
  local p = self.pool
  if self.cfg.native then return end
  local before = p.handle:time()
  if self.cfg.clock == "manual" then
    local dt = self.r.pick { 0, 1e-4, 0.01, 0.5, 3, 1e6 }
    if self.r.chance(0.5) then
      assert(p.handle:advance(dt) == before + dt)
    else
      p.handle:set_time(before + dt)
    end
    assert.error_matches(function() p.handle:set_time(before - 1) end, "never goes back", 1, true)
  else
    assert.error_matches(function() p.handle:advance(1) end, "only a pool made with", 1, true)
  end
  assert(p.handle:time() >= before, self:where() .. ": the clock went back")
end

function World:op_gc()
  if self.r.chance(0.5) then collectgarbage "step" else collectgarbage() end
end

-- ---- invariants ----

function World:check()
  local where = self:where()
  -- per pool: conservation and consistency of the statistics
  for _, p in ipairs(self.pools) do
    local sum, n, nraw = 0, 0, 0
    for _, e in ipairs(self.live) do
      if e.pool == p then
        sum = sum + e.size
        if e.raw then nraw = nraw + 1 else n = n + 1 end
      end
    end
    assert(n == p.live and nraw == p.raw, where .. ": model count")
    local st = p.handle:stats()
    if self.cfg.native then
      local base = p.base_live or 0
      assert(st.live_buffers - base == n,
        string.format("%s: %d live buffers, the pool says %d", where, n, st.live_buffers - base))
      if not p.base_live then
        assert(st.used_current >= sum, where .. ": used_current below the live bytes")
        assert(st.reserved_current >= st.used_current, where .. ": used above reserved")
        if self.cfg.max then assert(st.reserved_current <= self.cfg.max, where .. ": max_size passed") end
      end
      assert(st.used_high >= st.used_current and st.reserved_high >= st.reserved_current, where .. ": high marks")
    else
      assert(st.live_buffers == n, string.format("%s: %d live buffers, the pool says %d", where, n, st.live_buffers))
      assert(st.live_raw == nraw, string.format("%s: %d live raw blocks, the pool says %d", where, nraw, st.live_raw))
      assert(st.used == sum, string.format("%s: used %d, live blocks hold %d", where, st.used, sum))
      assert(st.allocs - st.frees == n + nraw,
        string.format("%s: allocs %d - frees %d ~= %d live", where, st.allocs, st.frees, n + nraw))
      assert(st.used + st.free_bytes <= st.reserved,
        string.format("%s: used %d + free %d > reserved %d", where, st.used, st.free_bytes, st.reserved))
      assert(st.largest_free <= st.free_bytes, where .. ": largest_free above free_bytes")
      assert(st.used_peak >= st.used and st.reserved_peak >= st.reserved, where .. ": peaks below current")
      assert(st.fragmentation >= 0 and st.fragmentation <= 1, where .. ": fragmentation out of 0..1")
      if self.cfg.max then
        assert(st.reserved <= self.cfg.max, string.format("%s: reserved %d passes max %d", where, st.reserved, self.cfg.max))
      end
    end
  end
  -- across pools: no overlap (virtual addresses only within one pool)
  local groups = {}
  for _, e in ipairs(self.live) do
    local key = e.pool.has_memory and "memory" or e.pool
    groups[key] = groups[key] or {}
    table.insert(groups[key], e)
  end
  for _, g in pairs(groups) do
    table.sort(g, function(a, b) return a.address < b.address end)
    for i = 2, #g do
      local a, b = g[i - 1], g[i]
      assert(a.address + a.size <= b.address,
        string.format("%s: [0x%x, +%d) overlaps [0x%x, +%d)", where, a.address, a.size, b.address, b.size))
    end
  end
  -- pools whose handle was replaced are let go once empty
  for i = #self.pools, 1, -1 do
    local p = self.pools[i]
    if p ~= self.pool and p.live == 0 and p.raw == 0 then
      -- its handle is collected (the pool destroyed) at some later point
          table.remove(self.pools, i)
    end
  end
end

-- ---- the driver ----

local ops = {
  { "alloc", 40 }, { "free", 20 }, { "free_late", 6 }, { "drop", 5 }, { "trim", 5 }, { "reset", 3 },
  { "stats", 5 }, { "close", 3 }, { "stream", 3 }, { "gc", 3 }, { "clock", 4 },
  { "alloc_raw", 15 }, { "wrap", 4 },
}
-- CUPOLA_FUZZ_SKIP=free_late,stream leaves operations out (to narrow down
-- which one a failure needs).
for name in (os.getenv "CUPOLA_FUZZ_SKIP" or ""):gmatch "[%w_]+" do
  for _, o in ipairs(ops) do
    if o[1] == name then o[2] = 0 end
  end
end
local weight = 0
for _, o in ipairs(ops) do weight = weight + o[2] end

function World:run(n)
  for step = 1, n do
    self.step = step
    local name
    if #self.live >= MAX_LIVE then
      name = "free"
    else
      local c = self.r.int(1, weight)
      for _, o in ipairs(ops) do
        c = c - o[2]
        if c <= 0 then name = o[1] break end
      end
    end
    if TRACE then io.stderr:write(string.format("%s: %s (%d live)\n", self:where(), name, #self.live)) end
    if name ~= "stats" then self["op_" .. name](self) end
    self:check()
    totals.ops = totals.ops + 1
  end
  -- wind down: everything verified and freed, the pool left empty
  while #self.live > 0 do self:op_free() self:check() end
  for _, p in ipairs(self.pools) do
    if p.handle.close and self.cfg.native ~= "malloc_async" then p.handle:close() end
  end
  for i = 2, #self.streams do self.streams[i]:close() end
  cupola.synchronize()
end

-- The configurations: every kind x upstream, with options drawn from the
-- seed (alignment, reuse policy, a max for some), then the native paths.
local configs = {}
do
  local r = rng(SEED)
  for _, kind in ipairs(kinds) do
    for _, up in ipairs(upstreams) do
      local cfg = { kind = kind, upstream = up, name = kind .. "/" .. up }
      cfg.alignment = r.pick { 256, 256, 512, 4096 }
      cfg.reuse = r.pick(reuses)
      if r.chance(0.4) then cfg.max = 16 * MiB end
      if kind == "arena" and not cfg.max then cfg.max = 64 * MiB end
      cfg.name = string.format("%s (alignment %d, reuse %s%s)", cfg.name, cfg.alignment, cfg.reuse,
        cfg.max and string.format(", max %d MiB", cfg.max // MiB) or "")
      configs[#configs + 1] = cfg
    end
  end
  -- kind "cub" after the others (their draws stay as they were), with
  -- CUB's settings drawn too; no alignment beyond the upstream's, no initial
  for _, up in ipairs(upstreams) do
    local g = r.pick { { 2, 8, 22 }, { 4, 4, 11 }, { 8, 3, 7 } }
    local cfg = { kind = "cub", upstream = up, alignment = 256, reuse = r.pick(reuses),
      bin_growth = g[1], min_bin = g[2], max_bin = g[3],
      max_cached_bytes = r.pick { 0, MiB, 6291455, 64 * MiB } }
    if r.chance(0.4) then cfg.max = 16 * MiB end
    cfg.name = string.format("cub/%s (bins %d^%d..%d, cache %d, reuse %s%s)", up, g[1], g[2], g[3],
      cfg.max_cached_bytes, cfg.reuse, cfg.max and string.format(", max %d MiB", cfg.max // MiB) or "")
    configs[#configs + 1] = cfg
  end
  -- PyTorch's allocator model under settings drawn from the seed (no max with
  -- expandable segments: PyTorch maps whole 20 MiB pages after checking the
  -- limit, so its reserved bytes may pass the limit by less than a page)
  for _, up in ipairs { "device", "virtual" } do
    local conf = r.pick { "", "expandable_segments:True", "max_split_size_mb:20",
                          "roundup_power2_divisions:4,garbage_collection_threshold:0.5",
                          "max_split_size_mb:32,max_non_split_rounding_mb:40" }
    local cfg = { kind = "torch", upstream = up, conf = conf }
    if conf ~= "expandable_segments:True" and r.chance(0.5) then cfg.max = 48 * MiB end
    cfg.name = string.format("torch/%s (conf '%s'%s)", up, conf,
      cfg.max and string.format(", max %d MiB", cfg.max // MiB) or "")
    configs[#configs + 1] = cfg
  end
  -- vmm over the upstreams it maps, by its default policy on either clock
  -- (a manual one jumps by up to days) or with a release_threshold
  for _, up in ipairs { "device", "virtual" } do
    for _, thr in ipairs { false, 0, 4 * MiB, math.maxinteger } do
      local cfg = { kind = "vmm", upstream = up, alignment = r.pick { 256, 256, 512, 4096 },
        reuse = r.pick(reuses), clock = r.pick { "wall", "manual" } }
      if thr then cfg.release_threshold = thr end
      if r.chance(0.4) then cfg.max = 16 * MiB end
      if r.chance(0.3) then cfg.initial = 4 * MiB end
      cfg.name = string.format("vmm/%s (alignment %d, reuse %s, %s, clock %s%s%s)", up, cfg.alignment,
        cfg.reuse, thr and ("release_threshold " .. thr) or "by time", cfg.clock,
        cfg.max and string.format(", max %d MiB", cfg.max // MiB) or "",
        cfg.initial and ", initial 4 MiB" or "")
      configs[#configs + 1] = cfg
    end
  end
  -- XLA's BFC allocator (kind "bfc"): its limit is memory_limit (no max,
  -- initial or reuse), with growth or preallocated (and then partitioned)
  for _, up in ipairs { "device", "virtual" } do
    for _, growth in ipairs { false, true } do
      local cfg = { kind = "bfc", upstream = up, allow_growth = growth,
        memory_limit = r.pick { 16 * MiB, 48 * MiB, 256 * MiB }, gc = growth and r.chance(0.5) }
      cfg.name = string.format("bfc/%s (%s, memory_limit %d MiB%s)", up,
        growth and "growth" or "preallocated", cfg.memory_limit // MiB,
        cfg.gc and ", garbage_collection" or "")
      configs[#configs + 1] = cfg
    end
  end
  configs[#configs + 1] = { native = "mempool", name = "cupola.mempool (max_size 32 MiB)", max = 32 * MiB }
  configs[#configs + 1] = { native = "malloc_async", name = "cupola.malloc_async" }
end

-- The argument fuzz: random calls of every function, method and metamethod
-- of the module with random values (wrong types, negative, huge, NaN,
-- closed handles, handles of the wrong type, option tables with unknown or
-- mistyped fields), in a child process so that what it breaks (it closes
-- and finalizes handles at random, the default pool's among them) cannot
-- leak into the other specs.  Every call must return or raise a string
-- error; the child must then exit cleanly with whatever it left alive.
local ARG_FUZZ = [==[
local cupola = require "cupola"
local K = cupola.kernels
local seed, calls = tonumber(arg[1]), tonumber(arg[2])
local x = seed ~ 0x2545F4914F6CDD1D
if x == 0 then x = 1 end
local function rnd(n)
  x = x ~ (x << 13); x = x ~ (x >> 7); x = x ~ (x << 17)
  return 1 + ((x >> 1) % n)
end

local values = { nil, true, false, 0, 1, 7, 255, 256, 4096, 65536, -1, -4096,
  math.maxinteger, math.mininteger, 1.5, 0 / 0, 1 / 0, -1 / 0, 1e300,
  "", "x", "4MiB", "64KiB", "-1", "0x10", "1e3", "f32", "u8", "stream", "event",
  {}, { 1, 2 }, { grid = 1, block = 1 }, { block = 0 }, { grid = -1 }, { type = "u8" },
  { type = "f16" }, { stream = 5 }, { timing = false }, { priority = 0 }, { blocking = true },
  { kind = "arena" }, { kind = "caching", upstream = "virtual" }, { max = "1MiB", kind = "tlsf" },
  { kind = "torch", upstream = "virtual", conf = "expandable_segments:True" },
  { kind = "bfc", upstream = "virtual", memory_limit = "64MiB", allow_growth = true },
  { kind = "bfc", memory_limit = "1MiB", garbage_collection = true, fragmentation_fraction = 0.5 },
  { kind = "bfc", upstream = "virtual", memory_limit = 256, spatial_partitioning = false },
  { allocator = "GPU_0_bfc" }, { device_memory = "80GiB" },
  { addresses = "recorded", stop_at_oom = true },
  { kind = "torch", conf = "max_split_size_mb:20,roundup_power2_divisions:[1:4,>:8]" },
  { kind = "torch", conf = "roundup_power2_divisions:[,]" }, { kind = "torch", conf = 5 },
  { location = "device", max_size = "4MiB" }, { ["repeat"] = 2 }, { bogus = 1 },
  { clock = "trace" }, { clock = "manual", kind = "vmm", upstream = "virtual" }, { clock = 3 },
  print, coroutine.create(function() end) }
local NV = 58 -- slots of values: the fixed ones above, then handles
local handles = {}
local function add(v)
  if type(v) == "userdata" then
    if #handles < 64 then handles[#handles + 1] = v else handles[rnd(#handles)] = v end
  end
end
-- raw addresses the pools gave (alloc_raw's results), live or not, and
-- addresses next to them
local addrs = {}
local function value()
  if #handles > 0 and rnd(3) == 1 then return handles[rnd(#handles)] end
  if #addrs > 0 and rnd(4) == 1 then return addrs[rnd(#addrs)] + ({ 0, 0, 0, 1, 256, -256 })[rnd(6)] end
  return values[rnd(NV)]
end

-- handles to start from, of every type, some already closed
local s = cupola.stream(); add(s); add(cupola.default_stream)
local cs = cupola.stream(); cs:close(); add(cs)
add(cupola.event()); local ce = cupola.event(); ce:close(); add(ce)
for _, kind in ipairs { "arena", "freelist", "tlsf", "caching", "torch" } do
  local p = cupola.pool { kind = kind }; add(p); add(p:alloc(4096, s)); add(p:alloc(100))
  addrs[#addrs + 1] = p:alloc_raw(4096, s); addrs[#addrs + 1] = p:alloc_raw(100)
end
local vp = cupola.pool { upstream = "virtual" }; add(vp); add(vp:alloc(1000))
local mp = cupola.pool { kind = "vmm", upstream = "virtual", clock = "manual" }; add(mp); add(mp:alloc(3 << 20))
local cp = cupola.pool {}; cp:close(); add(cp)
local m = cupola.mempool(); add(m); add(m:alloc(4096)); add(cupola.malloc_async(4096, s))
add(cupola.mempool.default()); add(cupola.malloc(4096))
local fb = cupola.malloc(64); fb:free(); add(fb)
local path = os.tmpname()
local f = io.open(path, "w")
f:write("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x100,256,0x0\n0,2,free,0x100,256,0x0\n")
f:close()
add(cupola.trace.load(path)); os.remove(path)
-- a snapshot of PyTorch's with an out-of-memory entry, and a torch pool for it
add(cupola.trace.load "examples/traces/torch/varlen.oom-default.cpsnap.gz")
add(cupola.pool { kind = "torch", upstream = "virtual", max = "1GiB" })

-- every callable: module functions, methods by name, metamethods
local funcs = {}
local function addf(name, fn) funcs[#funcs + 1] = { name, fn } end
for _, t in ipairs { { "cupola", cupola }, { "kernels", K }, { "mempool", cupola.mempool }, { "trace", cupola.trace } } do
  for k, v in pairs(t[2]) do
    -- not the ones that only report, would wait on a minute-long spin, or load files named by the fuzz
    if type(v) == "function" and k ~= "load" then addf(t[1] .. "." .. k, v) end
  end
end
local methods = { "free", "close", "read", "write", "memset", "copy_to", "synchronize", "query", "wait",
  "record", "elapsed", "alloc", "trim", "reset", "reset_high", "stats", "info", "event", "replay",
  "empty_cache", "settings", "time", "set_time", "advance", "alloc_raw", "free_raw", "buffer", "free_raw",
  "buffer" }
local metas = { "__gc", "__close", "__tostring", "__len", "__index", "__newindex", "__call" }

local ok_n, err_n = 0, 0
local function check(ok, err, what)
  if ok then ok_n = ok_n + 1; return end
  err_n = err_n + 1
  if type(err) ~= "string" or err == "" then
    io.stderr:write(what, ": error value is a ", type(err), "\n")
    os.exit(2)
  end
end

for i = 1, calls do
  local c = rnd(10)
  local a, b, d = value(), value(), value()
  if c <= 4 then -- a module function
    local fn = funcs[rnd(#funcs)]
    local r = table.pack(pcall(fn[2], a, b, d))
    check(r[1], r[2], fn[1]); for j = 2, r.n do add(r[j]) end
  elseif c <= 8 and #handles > 0 then -- a method of a handle (or of the wrong one)
    local h = handles[rnd(#handles)]
    local name = methods[rnd(#methods)]
    local okm, fn = pcall(function() return h[name] end)
    if okm and type(fn) == "function" then
      local self = rnd(8) == 1 and value() or h
      local r = table.pack(pcall(fn, self, a, b, d))
      check(r[1], r[2], name); for j = 2, r.n do add(r[j]) end
      if r[1] and name == "alloc_raw" and math.type(r[2]) == "integer" and #addrs < 64 then
        addrs[#addrs + 1] = r[2]
      end
    else
      check(okm, fn, "index " .. name)
    end
  elseif #handles > 0 then -- a metamethod, called directly
    local h = handles[rnd(#handles)]
    local mt = getmetatable(h)
    local fn = type(mt) == "table" and mt[metas[rnd(#metas)]]
    if type(fn) == "function" then
      check(pcall(fn, rnd(4) == 1 and value() or h, a, b))
    end
  end
  if i % 97 == 0 then collectgarbage() end
end
handles, values = nil, nil
collectgarbage()
collectgarbage()
io.write(string.format("calls=%d ok=%d errors=%d\n", calls, ok_n, err_n))
os.exit(0, true)
]==]


describe("fuzz (seed " .. SEED .. ", " .. OPS .. " operations per allocator)", function()
  for i, cfg in ipairs(configs) do
    it(cfg.name .. " keeps its invariants", function()
      collectgarbage()
      local w = World.new(rng(SEED + i), cfg)
      w:run(OPS)
    end)
  end

  -- All allocators at once, sharing streams: overlaps across pools are
  -- caught, and frees on one allocator's stream interleave with another's.
  it("every allocator at once keeps its invariants", function()
    collectgarbage()
    local r = rng(SEED * 31 + 7)
    local worlds = {}
    for i, cfg in ipairs(configs) do
      if cfg.upstream ~= "virtual" then worlds[#worlds + 1] = World.new(rng(SEED + 1000 + i), cfg) end
    end
    -- one set of streams, and one list of live buffers for the overlap check
    local shared = worlds[1]
    for _, w in ipairs(worlds) do w.streams = shared.streams end
    for step = 1, OPS * 2 do
      local w = r.pick(worlds)
      w.step = step
      local name = r.pick { "alloc", "alloc", "free", "free_late", "drop", "trim", "close", "gc", "alloc_raw", "wrap" }
      if #w.live >= MAX_LIVE // 4 then name = "free" end
      w["op_" .. name](w)
      w:check()
      totals.ops = totals.ops + 1
      if step % 16 == 0 then
        -- the cross-allocator overlap check over every world's buffers
        local all = {}
        for _, x in ipairs(worlds) do
          for _, e in ipairs(x.live) do all[#all + 1] = e end
        end
        table.sort(all, function(a, b) return a.address < b.address end)
        for j = 2, #all do
          assert(all[j - 1].address + all[j - 1].size <= all[j].address,
            string.format("seed %d, step %d: buffers of two allocators overlap", SEED, step))
        end
      end
    end
    for k, w in ipairs(worlds) do
      if k > 1 then w.streams = { cupola.default_stream } end
      w:run(0)
    end
  end)

  local run_child = require "spec.support.child"
  ;(run_child.available and it or pending)("random arguments to every function, method and metamethod never crash the process", function()
    local calls = OPS * 20
    local script = string.format("arg = { %d, %d }\n", SEED, calls) .. ARG_FUZZ
    local code, out, err = run_child(script)
    assert.equals("", err)
    assert.equals(0, code)
    local n, ok, errs = out:match "calls=(%d+) ok=(%d+) errors=(%d+)"
    assert.equals(calls, tonumber(n))
    totals.ops = totals.ops + calls
    totals.arg_calls = (totals.arg_calls or 0) + calls
    totals.arg_ok = (totals.arg_ok or 0) + tonumber(ok)
    totals.arg_err = (totals.arg_err or 0) + tonumber(errs)
  end)

  -- The script is spec/support/argfuzz_round2.lua.  Under compute-sanitizer
  -- it is pending here (the tool, following this process and the child at
  -- once, hung the child inside the driver: see the script's header), and
  -- bench/gpu-check.sh runs it alone under each tool instead.
  local round2 = (run_child.available and not os.getenv "CUPOLA_SANITIZER") and it or pending
  round2("random arguments to the functions of modules, kernels, launches, devices, IPC, trace files, timelines, NVTX, reports, conformance and help never crash or hang the process", function()
    local calls = OPS * 10
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -m 700 '" .. dir .. "'"))
    local f = assert(io.open "spec/support/argfuzz_round2.lua")
    local script = f:read "a"
    f:close()
    local code, out, err = run_child(script, nil, { SEED, calls, dir })
    os.execute("rm -rf '" .. dir .. "'")
    assert.equals("", err)
    assert.equals(0, code)
    local n, ok, errs = out:match "calls=(%d+) ok=(%d+) errors=(%d+)"
    assert.equals(calls, tonumber(n))
    totals.ops = totals.ops + calls
    totals.arg_calls = (totals.arg_calls or 0) + calls
    totals.arg_ok = (totals.arg_ok or 0) + tonumber(ok)
    totals.arg_err = (totals.arg_err or 0) + tonumber(errs)
  end)

  teardown(function()
    io.stderr:write(string.format(
      "\nfuzz: seed %d, %d operations (%d allocations, %d out of memory, %d frees of which %d behind queued work), %d buffers verified (%d bytes)\n",
      SEED, totals.ops, totals.allocs, totals.ooms, totals.frees, totals.late_frees, totals.verified, totals.bytes_verified))
    if totals.arg_calls then
      io.stderr:write(string.format("fuzz: %d random calls (%d returned, %d raised), no crash\n",
        totals.arg_calls, totals.arg_ok, totals.arg_err))
    end
    local path = os.getenv "CUPOLA_FUZZ_REPORT"
    if path then
      local f = io.open(path, "a")
      if f then
        f:write(string.format("seed=%d ops=%d allocs=%d ooms=%d frees=%d verified=%d\n",
          SEED, totals.ops, totals.allocs, totals.ooms, totals.frees, totals.verified))
        f:close()
      end
    end
  end)
end)
