--- cupola.conformance: the battery every pool passes, against any function
-- that makes a pool (cupola's own allocators, a plugin, a Lua-side wrapper).
--
--   local report = cupola.conformance(function(o)
--     return cupola.pool { kind = "plugin", path = "libmine.so", symbol = "mine",
--                          reuse = o.reuse, max = o.max }
--   end)
--   -> { ok = true|false, violations = { {check=, message=, ops=, reproducer=}, ... },
--        ops = <the first violation's operations>, reproducer = <its Lua text> }
--
-- make_pool(o) is called with a table of pool options the check needs (o.reuse:
-- "stream"|"event"|"wait"; o.max with o.initial for out of memory); a factory
-- passes them on to cupola.pool.  It may return nil, msg to say it cannot
-- make such a pool: the check is then skipped, and named in report.skipped.
--
-- The checks (opts.checks, a list of names, picks some; all by default):
--   random     a randomised alloc/free sequence over two streams (opts.ops
--              operations, opts.seed), the invariants after every step: every
--              block aligned to pool.alignment, no two live blocks overlap,
--              stats used == sum of live sizes, allocs - frees == live blocks ==
--              live_buffers, reserved >= used, peaks >= current values,
--              largest_free <= free_bytes, fragmentation in [0, 1], and the data:
--              each block is filled with a pattern by a kernel when allocated and
--              checked by a kernel before it is freed (memory upstreams).  A
--              violation is shrunk (delta debugging over the operation list) to
--              a short sequence that still shows it.
--   oom        at the pool's max (o.max = 8 MiB, o.initial = 4 MiB) a request
--              that cannot fit is nil, msg, "out_of_memory", counted in failed,
--              and what fits is still served; so is a request of 2^60 bytes.
--   conserved  once everything is freed: used 0, allocs == frees, and after
--              trim(0) free_bytes <= reserved <= reserved_peak.
--   streams    for each reuse policy: a block freed on stream A behind pending
--              work is never handed to stream B before that work is done (A's
--              late fill never lands on what B wrote), twice on one pool; the
--              second time, once the pool has seen both streams, under "stream"
--              and "event" B must get another address (the pool does not wait
--              for A); opts.nonblocking asks that of the first time too (pools
--              that never synchronize, as cupola's own).
--   lifetime   a pool outlives its buffers when collected; close() refuses
--              while buffers are live, saying how many, and is safe twice.
--   raw        raw blocks (p:alloc_raw, p:free_raw, p:buffer): a randomised
--              sequence mixing raw blocks and Buffers on two streams, some raw
--              blocks handed over to Buffers (filled and checked by kernels),
--              with the invariants above over both (no overlap, alignment,
--              used, allocs - frees == live_buffers + live_raw, live_raw);
--              then out of memory as data from alloc_raw (2^63 - 1 bytes), bytes
--              conserved across buffer(), and close() freeing the raw blocks
--              still live and returning their number (refusing while a
--              Buffer lives); needs no pool option, so any factory takes it.
--              Skipped for a pool without alloc_raw.
-- An error raised by the pool is a violation too (class "error"; "address"
-- when cupola refused a plugin's block outside the memory the plugin holds
-- from its upstream, "overlap" when it refused one overlapping a live block):
-- the battery reports it, with a reproducer, where one is found.
local cupola = require "cupola"
local K = cupola.kernels
local util = require "cupola.util"
local raise, shown, typed = util.raise, util.shown, util.typed

local M = {}

local MiB = 1024 * 1024
local ALL = { "random", "oom", "conserved", "streams", "lifetime", "raw" }
M.checks = ALL

-- A small deterministic generator, so a sequence can be replayed.
local function rng(seed)
  local x = seed
  return function(n)
    x = (x * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return (x >> 20) % n + 1
  end
end

local function fmt(...) return string.format(...) end

-- Raised inside a check with a class, so that shrinking keeps looking for
-- the same kind of violation.
local Violation = {}
Violation.__index = Violation
local function violation(class, msg)
  error(setmetatable({ class = class, message = msg }, Violation), 0)
end
local function as_violation(err)
  if getmetatable(err) == Violation then return err end
  -- (the position is the battery's, not the pool's: left out)
  local msg = tostring(err):gsub("^[^\n:]+%.lua:%d+: ", "")
  -- A block cupola refused to hand out (a plugin's) is classed by its fault.
  local class = msg:find("outside the memory it holds from its upstream", 1, true) and "address"
    or msg:find("returned a block .* that overlaps the") and "overlap" or "error"
  return { class = class, message = msg }
end

local function has_memory(p)
  return p.upstream ~= "virtual"
end

--- The invariants of a pool and the blocks it has live (a set of buffers,
-- and of raw blocks as { address =, size =, raw = true }).
local function check_invariants(p, live)
  local sorted, used, align, nraw = {}, 0, p.alignment or 1, 0
  for b in pairs(live) do
    if b.raw then nraw = nraw + 1 end
    if b.address % align ~= 0 then
      violation("alignment", fmt("block at 0x%x (%d bytes) is not aligned to %d", b.address, b.size, align))
    end
    sorted[#sorted + 1] = b
    used = used + b.size
  end
  table.sort(sorted, function(a, b) return a.address < b.address end)
  for i = 2, #sorted do
    local a, b = sorted[i - 1], sorted[i]
    if a.address + a.size > b.address then
      violation("overlap", fmt("live blocks overlap: [0x%x, +%d) and [0x%x, +%d)", a.address, a.size,
        b.address, b.size))
    end
  end
  local st = p:stats()
  local function need(ok, what)
    if not ok then
      violation("stats", fmt("stats: %s (used=%d reserved=%d allocs=%d frees=%d live=%d live_raw=%s "
        .. "largest_free=%d free_bytes=%d fragmentation=%s; %d blocks (%d raw), %d bytes live)", what, st.used,
        st.reserved, st.allocs, st.frees, st.live_buffers, tostring(st.live_raw), st.largest_free,
        st.free_bytes, st.fragmentation, #sorted, nraw, used))
    end
  end
  need(st.used == used, "used ~= the sum of the live blocks' sizes")
  need(st.allocs - st.frees == #sorted, "allocs - frees ~= the number of live blocks")
  need(st.live_buffers == #sorted - nraw, "live_buffers ~= the number of live buffers")
  if nraw > 0 or st.live_raw ~= nil then
    need(st.live_raw == nraw, "live_raw ~= the number of live raw blocks")
  end
  need(st.reserved >= st.used, "reserved < used")
  need(st.used_peak >= st.used and st.reserved_peak >= st.reserved, "a peak below its current value")
  need(st.largest_free <= st.free_bytes, "largest_free > free_bytes")
  need(st.fragmentation >= 0 and st.fragmentation <= 1, "fragmentation outside [0, 1]")
end

---------------------------------------------------------------------------
-- Operation sequences: generated, run, shrunk, printed.
--   { op = "alloc", id = k, size = n, s = 1|2 }   b[k] = pool:alloc(n, s[i])
--   { op = "free", id = k, s = 1|2 }              b[k]:free(s[i]), or
--                                                 pool:free_raw(b[k], s[i]) for a raw block
-- and with opts.raw (the "raw" check):
--   { op = "raw", id = k, size = n, s = 1|2 }     b[k] = pool:alloc_raw(n, s[i])
--   { op = "wrap", id = k }                       b[k] = pool:buffer(b[k])

--- A random sequence of n operations (deterministic in seed).
function M.generate(n, seed, opts)
  opts = opts or {}
  local rand = rng(seed)
  local ops, live, nextid, raw = {}, {}, 0, {}
  local max_live = opts.max_live or 40
  local small = opts.small or 64 * 1024
  local large = opts.large or 2 * MiB
  for _ = 1, n do
    if #live > 0 and (rand(100) <= 45 or #live > max_live) then
      local at = rand(#live)
      local id = live[at]
      -- (the extra draws only with opts.raw: other sequences stay as they were)
      if opts.raw and raw[id] and rand(100) <= 25 then
        raw[id] = nil
        ops[#ops + 1] = { op = "wrap", id = id }
      else
        table.remove(live, at)
        ops[#ops + 1] = { op = "free", id = id, s = rand(2) }
      end
    else
      nextid = nextid + 1
      local size = rand(100) <= 10 and rand(large) + 32 or rand(small) + 32
      local op = opts.raw and rand(100) <= 60 and "raw" or "alloc"
      ops[#ops + 1] = { op = op, id = nextid, size = size, s = rand(2) }
      live[#live + 1] = nextid
      raw[nextid] = op == "raw" or nil
    end
  end
  return ops
end

-- Runs ops on a fresh pool; returns nil, or the violation and the index of
-- the operation after which it showed, and the indices of the operations
-- that did something (frees of blocks that were never had are skipped).
local function run_ops(make_pool, streams, ops, opts)
  local ok_pool, p, why = pcall(make_pool, {})
  if not ok_pool then
    return { class = "error", message = "make_pool raised: " .. tostring(p) }, 0, {}
  end
  if not p then
    return { class = "error", message = "make_pool returned no pool: " .. tostring(why) }, 0, {}
  end
  local mem = has_memory(p) and not opts.no_data
  local b, live, did = {}, {}, {}
  local at = 0
  local ok, err = pcall(function()
    for i, o in ipairs(ops) do
      at = i
      if o.op == "alloc" then
        did[#did + 1] = i
        local buf, msg, kind = p:alloc(o.size, streams[o.s])
        if buf then
          if mem then K.pattern(buf, o.id, { stream = streams[o.s] }) end
          b[o.id] = buf
          live[buf] = true
        elseif kind ~= "out_of_memory" then
          violation("oom", fmt("alloc(%d) failed without \"out_of_memory\": %s", o.size, tostring(msg)))
        end
      elseif o.op == "raw" then
        did[#did + 1] = i
        local a, msg, kind = p:alloc_raw(o.size, streams[o.s])
        if a then
          if math.type(a) ~= "integer" then
            violation("raw", fmt("alloc_raw(%d) returned %s, not an integer address", o.size, tostring(a)))
          end
          local x = { address = a, size = o.size, raw = true }
          b[o.id] = x
          live[x] = true
        elseif kind ~= "out_of_memory" then
          violation("oom", fmt("alloc_raw(%d) failed without \"out_of_memory\": %s", o.size, tostring(msg)))
        end
      elseif o.op == "wrap" then
        local x = b[o.id]
        if x and x.raw then
          did[#did + 1] = i
          local buf = p:buffer(x.address)
          if buf.address ~= x.address or buf.size ~= x.size or buf.pool ~= p then
            violation("raw", fmt("buffer(0x%x) of a %d-byte raw block gave a Buffer of %d bytes at 0x%x",
              x.address, x.size, buf.size, buf.address))
          end
          if mem then K.pattern(buf, o.id) end
          live[x] = nil
          b[o.id] = buf
          live[buf] = true
        end
      elseif b[o.id] and b[o.id].raw then
        did[#did + 1] = i
        local x = b[o.id]
        b[o.id] = nil
        live[x] = nil
        p:free_raw(x.address, streams[o.s])
      elseif b[o.id] then
        did[#did + 1] = i
        local buf = b[o.id]
        if mem then
          local bad = K.verify(buf, o.id)
          if bad ~= 0 then
            violation("data", fmt("%d bytes of the live block #%d [0x%x, +%d) changed before its free", bad,
              o.id, buf.address, buf.size))
          end
        end
        b[o.id] = nil
        live[buf] = nil
        buf:free(streams[o.s])
      end
      check_invariants(p, live)
    end
  end)
  for x in pairs(live) do
    if x.raw then pcall(p.free_raw, p, x.address) else pcall(x.free, x) end
  end
  pcall(cupola.synchronize)
  pcall(p.close, p)
  if ok then return nil, nil, did end
  return as_violation(err), at, did
end

-- Delta debugging (Zeller's ddmin) over the list: the smallest list found
-- for which fails() still holds, within a budget of runs.
local function ddmin(list, fails, budget)
  local n, runs = 2, 0
  while #list >= 2 and runs < budget do
    local size = math.ceil(#list / n)
    local reduced = false
    for i = 1, n do
      local lo, hi = (i - 1) * size + 1, math.min(i * size, #list)
      if lo > #list then break end
      local cand = {}
      for j = 1, #list do
        if j < lo or j > hi then cand[#cand + 1] = list[j] end
      end
      runs = runs + 1
      if #cand > 0 and fails(cand) then
        list, n, reduced = cand, math.max(n - 1, 2), true
        break
      end
      if runs >= budget then break end
    end
    if not reduced then
      if n >= #list then break end
      n = math.min(n * 2, #list)
    end
  end
  return list
end

--- Lua text that replays ops on a pool of make_pool's with two streams.
function M.reproducer(ops)
  local lines = { "local pool = make_pool {}", "local s = { cupola.stream(), cupola.stream() }", "local b = {}" }
  local rename, k, raw = {}, 0, {}
  for _, o in ipairs(ops) do
    if o.op == "alloc" or o.op == "raw" then
      k = k + 1
      rename[o.id] = k
      raw[o.id] = o.op == "raw"
      lines[#lines + 1] = fmt("b[%d] = pool:%s(%d, s[%d])", k, o.op == "raw" and "alloc_raw" or "alloc", o.size, o.s)
    elseif not rename[o.id] then
      -- (its block's allocation was shrunk away: the operation does nothing)
    elseif o.op == "wrap" then
      raw[o.id] = false
      lines[#lines + 1] = fmt("b[%d] = pool:buffer(b[%d])", rename[o.id], rename[o.id])
    elseif raw[o.id] then
      lines[#lines + 1] = fmt("pool:free_raw(b[%d], s[%d])", rename[o.id], o.s)
    else
      lines[#lines + 1] = fmt("b[%d]:free(s[%d])", rename[o.id], o.s)
    end
  end
  return table.concat(lines, "\n")
end

local function copy_ops(ops)
  local out = {}
  for i, o in ipairs(ops) do
    out[i] = { op = o.op, id = o.id, size = o.size, s = o.s }
  end
  return out
end

local function shrink(make_pool, streams, ops, class, opts)
  local function fails(cand)
    local v = run_ops(make_pool, streams, cand, opts)
    return v ~= nil and v.class == class
  end
  local small = ddmin(ops, fails, opts.shrink_runs or 400)
  -- Drop what the run skipped (frees of blocks whose alloc was removed).
  local v, at, did = run_ops(make_pool, streams, small, opts)
  if v and v.class == class then
    local kept = {}
    for _, i in ipairs(did) do
      if i <= at then kept[#kept + 1] = small[i] end
    end
    return kept, v
  end
  return small, v
end

---------------------------------------------------------------------------
-- The checks.  Each returns nil or { message=, class=, ops=, reproducer= },
-- or "skip", why.

local checks = {}

-- A random sequence (generated with gen_opts) run, and shrunk if it fails.
local function random_sequence(make_pool, streams, opts, gen_opts, seed)
  local n = opts.ops or 300
  local ops = M.generate(n, seed, gen_opts)
  local v, at = run_ops(make_pool, streams, ops, opts)
  if not v then return nil end
  local prefix = {}
  for i = 1, at do prefix[i] = ops[i] end
  local small, sv = shrink(make_pool, streams, copy_ops(prefix), v.class, opts)
  local msg = sv and sv.class == v.class and sv.message or v.message
  return {
    class = v.class,
    message = msg .. fmt(" (random sequence, seed %d: operation %d of %d; shrunk to %d)", seed, at, n, #small),
    ops = small,
    reproducer = M.reproducer(small) .. "\n-- ^ " .. v.class .. ": " .. msg,
  }
end

function checks.random(make_pool, streams, opts)
  return random_sequence(make_pool, streams, opts, opts, opts.seed or 1)
end

-- The fixed checks run as steps with their text, so a failure names them.
local function steps(fn)
  local done = {}
  local function step(text) done[#done + 1] = text end
  local ok, err = pcall(fn, step)
  if ok then return nil end
  local v = as_violation(err)
  return { class = v.class, message = v.message, ops = done, reproducer = table.concat(done, "\n") }
end

local function expect(ok, class, ...)
  if not ok then violation(class, fmt(...)) end
end

local function make(make_pool, o)
  local ok, p, why = pcall(make_pool, o)
  if not ok then violation("error", "make_pool raised: " .. tostring(p)) end
  return p, why
end

function checks.oom(make_pool)
  local p, why = make(make_pool, { initial = "4MiB", max = "8MiB" })
  if not p then return "skip", why end
  return steps(function(step)
    step 'pool = make_pool { initial = "4MiB", max = "8MiB" }'
    local a, msg = p:alloc "2MiB"
    step 'a = pool:alloc "2MiB"'
    expect(a, "oom", "2 MiB under a max of 8 MiB failed: %s", tostring(msg))
    local before = p:stats().failed
    local none, m2, kind = p:alloc "64MiB"
    step 'x, msg, kind = pool:alloc "64MiB"   -- past max'
    expect(none == nil and kind == "out_of_memory" and type(m2) == "string", "oom",
      "64 MiB past a max of 8 MiB gave %s, %s, %s (wanted nil, msg, \"out_of_memory\")", tostring(none),
      tostring(m2), tostring(kind))
    expect(p:stats().failed == before + 1, "stats", "failed did not count the refused request")
    local huge, _, k2 = p:alloc(1 << 60)
    step 'x, msg, kind = pool:alloc(1 << 60)'
    expect(huge == nil and k2 == "out_of_memory", "oom", "a request of 2^60 bytes was not out_of_memory")
    local c, m3 = p:alloc "1MiB"
    step 'c = pool:alloc "1MiB"   -- what fits is still served'
    expect(c, "oom", "after out of memory, 1 MiB failed: %s", tostring(m3))
    check_invariants(p, { [a] = true, [c] = true })
    a:free(); c:free()
    step 'a:free(); c:free()'
    expect(p:stats().used == 0, "stats", "used is %d after every block was freed", p:stats().used)
    p:close()
  end)
end

function checks.conserved(make_pool, streams)
  local p, why = make(make_pool, {})
  if not p then return "skip", why end
  return steps(function(step)
    step "pool = make_pool {}"
    local list = {}
    for i = 1, 24 do
      local b = p:alloc(i * 37 * 1024 + 5, streams[i % 2 + 1])
      expect(b, "oom", "allocation %d of %d bytes failed", i, i * 37 * 1024 + 5)
      list[i] = b
    end
    step "24 blocks of 37 KiB * i + 5 bytes on s1/s2"
    for i = 1, 24, 2 do list[i]:free(streams[(i + 1) % 2 + 1]) end
    step "every other block freed, on the other stream"
    for i = 2, 24, 2 do list[i]:free() end
    step "the rest freed"
    check_invariants(p, {})
    local st = p:stats()
    expect(st.used == 0 and st.allocs == st.frees and st.allocs == 24, "stats",
      "after every free: used=%d allocs=%d frees=%d", st.used, st.allocs, st.frees)
    cupola.synchronize()
    p:trim(0)
    step "cupola.synchronize(); pool:trim(0)"
    st = p:stats()
    expect(st.free_bytes <= st.reserved and st.reserved <= st.reserved_peak, "stats",
      "after trim: free_bytes=%d reserved=%d reserved_peak=%d", st.free_bytes, st.reserved, st.reserved_peak)
    p:close()
  end)
end

-- A block freed on A behind pending work and handed to B counts as a
-- violation only when B's allocation returned before A's spin could have
-- ended: a machine busy with other work can deschedule this process past
-- the spin, and the hand-over was then right.  Such a try is run again on a
-- fresh pool with a spin four times longer (4 tries).
local STREAMS_SPIN_US, STREAMS_TRIES = 60000, 4

function checks.streams(make_pool, streams, opts)
  for _, reuse in ipairs(opts.reuse or { "stream", "event", "wait" }) do
    local p, why = make(make_pool, { reuse = reuse })
    if not p then return "skip", why end
    if not has_memory(p) then
      p:close()
      return "skip", "the pool has no memory behind its blocks (virtual upstream)"
    end
    local r = steps(function(step)
      local size = MiB
      local a, b = streams[1], streams[2]
      local us = STREAMS_SPIN_US
      for try = 1, STREAMS_TRIES do
        step(fmt('pool = make_pool { reuse = "%s" }', reuse))
        local late = false
        -- Twice: first on a pool that has seen one stream, then on one that
        -- has seen two (a pool may switch how it orders frees then).
        for round = 1, 2 do
          local first = p:alloc(size, a)
          expect(first, "oom", "1 MiB failed")
          local addr = first.address
          local t0 = cupola.clock()
          K.spin(us, { stream = a })
          K.fill(first, 1, { type = "u8" })
          first:free(a)
          step(fmt("x = pool:alloc(1 MiB, A); spin %d ms on A; fill x with 1 on A; x:free(A)", us // 1000))
          local second = p:alloc(size, b)
          local pending = cupola.clock() - t0 < 0.8 * us / 1e6
          expect(second, "oom", "the second 1 MiB failed")
          step "y = pool:alloc(1 MiB, B)"
          if reuse ~= "wait" and second.address == addr and (round == 2 or opts.nonblocking) then
            if pending then
              second:free()
              violation("streams", fmt('reuse = "%s": the block freed on A was handed to B while A\'s work was '
                .. "pending", reuse))
            end
            late = true
          end
          K.fill(second, 2, { type = "u8" })
          cupola.synchronize()
          step "fill y with 2 on B; cupola.synchronize()"
          local sum = K.checksum(second, { type = "u8" })
          second:free()
          expect(sum == 2 * size, "streams", 'reuse = "%s": A\'s late fill landed on the block B got (checksum %d, '
            .. "wanted %d)", reuse, sum, 2 * size)
          if late then break end
        end
        p:close()
        if not late then return end
        expect(try < STREAMS_TRIES, "streams", 'reuse = "%s": B got the block freed on A each time, but only '
          .. "after a spin of %d ms on A could have ended: the machine is too busy to tell", reuse, us // 1000)
        us = us * 4
        step(fmt("B's allocation returned after the spin could have ended: again, with a spin of %d ms",
          us // 1000))
        local again
        p, again = make(make_pool, { reuse = reuse })
        expect(p, "error", 'make_pool { reuse = "%s" } gave no pool on the retry: %s', reuse, tostring(again))
      end
    end)
    if r then return r end
  end
end

function checks.raw(make_pool, streams, opts)
  local p, why = make(make_pool, {})
  if not p then return "skip", why end
  local has_raw = type(p.alloc_raw) == "function"
  pcall(p.close, p)
  if not has_raw then return "skip", "the pool has no alloc_raw" end
  local gen = {}
  for k, v in pairs(opts) do gen[k] = v end
  gen.raw = true
  local r = random_sequence(make_pool, streams, opts, gen, (opts.seed or 1) + 7919)
  if r then return r end
  local q
  q, why = make(make_pool, {})
  if not q then return "skip", why end
  return steps(function(step)
    step "pool = make_pool {}"
    local a, msg = q:alloc_raw("2MiB", streams[1])
    step 'a = pool:alloc_raw("2MiB", s[1])'
    expect(math.type(a) == "integer", "oom", "2 MiB failed: %s", tostring(msg))
    expect(a % (q.alignment or 1) == 0, "alignment", "raw block at 0x%x is not aligned to %d", a, q.alignment or 1)
    local before = q:stats().failed
    -- (the virtual upstream serves 2^60 bytes: addresses only)
    local huge, m2, k2, info = q:alloc_raw(math.maxinteger)
    step 'x, msg, kind, info = pool:alloc_raw(math.maxinteger)'
    expect(huge == nil and k2 == "out_of_memory" and type(m2) == "string" and type(info) == "table", "oom",
      "a request of 2^63 - 1 bytes gave %s, %s, %s, %s (wanted nil, msg, \"out_of_memory\", info)", tostring(huge),
      tostring(m2), tostring(k2), tostring(info))
    expect(q:stats().failed == before + 1, "stats", "failed did not count the refused request")
    local st = q:stats()
    expect(st.used == 2 * MiB and st.live_raw == 1 and st.live_buffers == 0, "stats",
      "one raw block of 2 MiB live: used=%d live_raw=%s live_buffers=%d", st.used, tostring(st.live_raw),
      st.live_buffers)
    local b = q:buffer(a)
    step "b = pool:buffer(a)"
    expect(b.address == a and b.size == 2 * MiB and b.pool == q, "raw",
      "buffer(a) gave %d bytes at 0x%x (wanted 2 MiB at 0x%x)", b.size, b.address, a)
    st = q:stats()
    expect(st.used == 2 * MiB and st.live_raw == 0 and st.live_buffers == 1, "stats",
      "after buffer(a): used=%d live_raw=%s live_buffers=%d", st.used, tostring(st.live_raw), st.live_buffers)
    local ok = pcall(q.free_raw, q, a)
    step "pool:free_raw(a)   -- must raise: the Buffer owns the block"
    expect(not ok, "raw", "free_raw of a block a Buffer owns did not raise")
    local c, m4 = q:alloc_raw(4096)
    local d, m5 = q:alloc_raw(100)
    step 'c = pool:alloc_raw(4096); d = pool:alloc_raw(100); pool:close()   -- b is live'
    expect(c and d, "oom", "4 KiB and 100 bytes beside 2 MiB failed: %s", tostring(m4 or m5))
    local ok2, err2 = pcall(q.close, q)
    expect(not ok2 and tostring(err2):find("1 live buffer", 1, true), "error",
      "close() with a live buffer (and raw blocks) did not refuse saying \"1 live buffer\" (%s)", tostring(err2))
    b:free()
    st = q:stats()
    expect(st.used == 4096 + 100 and st.live_raw == 2 and st.allocs - st.frees == 2, "stats",
      "two raw blocks live: used=%d live_raw=%s allocs=%d frees=%d", st.used, tostring(st.live_raw), st.allocs,
      st.frees)
    local freed = q:close()
    step "b:free(); n = pool:close()"
    expect(freed == 2, "raw", "close() freed %s raw blocks, not 2", tostring(freed))
    expect(q:close() == 0, "raw", "a second close() did not return 0")
    local ok3, err3 = pcall(q.free_raw, q, c)
    step "pool:free_raw(c)   -- a closed pool"
    expect(not ok3 and tostring(err3):find("attempt to use a closed cupola.Pool", 1, true), "error",
      "free_raw on a closed pool did not refuse (%s)", tostring(err3))
    cupola.synchronize()
  end)
end

function checks.lifetime(make_pool)
  local kind
  local b
  do
    local p, why = make(make_pool, {})
    if not p then return "skip", why end
    kind = p.kind
    b = p:alloc "4KiB"
    if not b then return { class = "oom", message = "4 KiB failed", ops = {}, reproducer = "" } end
  end
  return steps(function(step)
    step 'do local pool = make_pool {}; b = pool:alloc "4KiB" end; collectgarbage()'
    collectgarbage(); collectgarbage()
    local mem = has_memory(b.pool)
    if mem then
      b:write "alive"
      expect(b:read(0, 5) == "alive", "data", "a buffer of a collected pool lost its data")
    end
    expect(b.pool.kind == kind, "error", "b.pool.kind is %s, not %s", tostring(b.pool.kind), tostring(kind))
    b:free()
    local p = make(make_pool, {})
    local a = p:alloc "4KiB"
    step 'pool = make_pool {}; a = pool:alloc "4KiB"; pool:close()'
    local ok, err = pcall(p.close, p)
    expect(not ok and tostring(err):find("1 live buffer", 1, true), "error",
      "close() with a live buffer did not refuse saying \"1 live buffer\" (%s)", tostring(err))
    a:free()
    p:close()
    p:close()
    step "a:free(); pool:close(); pool:close()"
    local ok2, err2 = pcall(p.alloc, p, "4KiB")
    expect(not ok2 and tostring(err2):find("attempt to use a closed cupola.Pool", 1, true), "error",
      "a closed pool did not refuse alloc (%s)", tostring(err2))
  end)
end

-- The options, checked before any pool is made: a number for opts used to
-- fail inside, and ops = -1 or "x", or a misspelled option, ran a battery
-- other than the one asked for without a word.
local count_opts = { ops = 0, seed = false, max_live = 1, small = 1, large = 1, shrink_runs = 0 }
-- and at most this many: a huge count (ops = 10^18) ran the battery for ever
local count_max = { ops = 10000000, max_live = 1000000, small = 1 << 40, large = 1 << 40,
  shrink_runs = 10000000 }
local function check_opts(opts)
  if type(opts) ~= "table" then
    raise("cupola.conformance: bad argument #2 (options table expected, got " .. typed(opts) .. ")")
  end
  for k, v in pairs(opts) do
    local least = count_opts[k]
    if least ~= nil then
      if math.type(v) ~= "integer" or (least and v < least) then
        raise(("cupola.conformance: option '%s' must be an integer%s, not %s"):format(
          k, least and (" >= " .. least) or "", shown(v)))
      end
      if count_max[k] and v > count_max[k] then
        raise(("cupola.conformance: option '%s' must be at most %d, not %s"):format(
          k, count_max[k], shown(v)))
      end
    elseif k == "checks" or k == "reuse" then
      if type(v) ~= "table" then
        raise(("cupola.conformance: option '%s' must be a list, not %s"):format(k, typed(v)))
      end
    elseif k == "no_data" or k == "nonblocking" then
      if type(v) ~= "boolean" then
        raise(("cupola.conformance: option '%s' must be a boolean, not %s"):format(k, typed(v)))
      end
    else
      raise("cupola.conformance: unknown option " .. shown(k))
    end
  end
end

--- Runs the battery; see the header comment for make_pool and opts.
function M.run(make_pool, opts)
  if type(make_pool) ~= "function" then
    raise("bad argument #1 to 'cupola.conformance' (make_pool must be a function, not " .. typed(make_pool) .. ")")
  end
  opts = opts or {}
  check_opts(opts)
  local report = { ok = true, violations = {}, skipped = {}, checks = {} }
  local streams = { cupola.stream(), cupola.stream() }
  for _, name in ipairs(opts.checks or ALL) do
    local fn = checks[name]
    if not fn then raise("cupola.conformance: unknown check " .. shown(name)) end
    local ok, r, why = pcall(fn, make_pool, streams, opts)
    if not ok then
      local v = as_violation(r)
      r = { class = v.class, message = v.message, ops = {}, reproducer = "" }
    end
    report.checks[#report.checks + 1] = name
    if r == "skip" then
      report.skipped[#report.skipped + 1] = name .. ": " .. tostring(why)
    elseif r then
      r.check = name
      report.ok = false
      report.violations[#report.violations + 1] = r
    end
  end
  for _, s in ipairs(streams) do s:close() end
  local first = report.violations[1]
  if first then
    report.ops = first.ops
    report.reproducer = first.reproducer
  else
    report.ops = {}
    report.reproducer = nil
  end
  return report
end

--- A report as text: the first violation, its check and its reproducer.
function M.describe(report)
  if report.ok then return "conforming (" .. table.concat(report.checks, ", ") .. ")" end
  local v = report.violations[1]
  local out = { fmt("%d violation%s; first, in check '%s' (%s): %s", #report.violations,
    #report.violations == 1 and "" or "s", v.check, v.class, v.message) }
  if v.reproducer and v.reproducer ~= "" then
    out[#out + 1] = "reproduced by (" .. #v.ops .. " operations):"
    out[#out + 1] = v.reproducer
  end
  for i = 2, #report.violations do
    local w = report.violations[i]
    out[#out + 1] = fmt("also, in check '%s': %s", w.check, w.message)
  end
  return table.concat(out, "\n")
end

return M
