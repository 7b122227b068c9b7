-- A second statement of XLA's BFC allocator (src/core/pool/bfc.c states the
-- rules), written plainly in Lua, and writers of the two files a JAX user has
-- (JSON lines of memory events, an XSpace profile) for the events it makes:
-- spec/bfc_spec.lua compares the C model with it, and reads back what it
-- wrote.  Plain and slow on purpose: lists, linear searches.
local M = {}

local MIN = 256
local function rounded(n) return (n + MIN - 1) // MIN * MIN end
M.rounded = rounded

-- float32 of x, as C's (float)x (kBackpedalFactor's product is a float)
local function f32(x) return (string.unpack("f", string.pack("f", x))) end
M.f32 = f32

--- new{limit=, growth=, frag=, gc=, spatial=, up=function(bytes) -> base|nil}
-- up: where a region of bytes goes (nil: the device refuses); by default
-- regions are placed at 2^40 + k * 2^36.  spatial: the central gap of a
-- partitioned pool (default: without growth, as jaxlib 0.11.2).
function M.new(o)
  local m = { limit = o.limit, growth = o.growth, gc = o.gc, regions = {}, in_use = 0, peak = 0,
    pool = 0, peak_pool = 0, nregions = 0, by_addr = {} }
  if o.spatial == nil then m.spatial = not o.growth else m.spatial = o.spatial end
  local lim2 = o.limit < 2 * 1024 * 1024 and o.limit or 2 * 1024 * 1024
  m.curr = o.growth and rounded(lim2) or rounded(o.limit)
  m.maxfrag = (o.frag and o.frag > 0) and math.floor(o.frag * o.limit) or 128 * 1024 * 1024
  local nextbase = 1 << 40
  m.up = o.up or function(bytes)
    local b = nextbase
    nextbase = nextbase + (1 << 36)
    return b
  end
  return setmetatable(m, { __index = M })
end

-- the free chunk best fit picks: least size >= rb, then least address,
-- among the holes; then (spatial) the gap if it is large enough
function M:best(rb)
  local best, gap
  for _, r in ipairs(self.regions) do
    for _, c in ipairs(r.chunks) do
      c.region = r
      if not c.used and c.gap then
        gap = c
      elseif not c.used and c.size >= rb and
          (not best or c.size < best.size or (c.size == best.size and c.ptr < best.ptr)) then
        best = c
      end
    end
  end
  if not best and gap and gap.size >= rb then return gap end
  return best
end

function M:extend(rb, hint)
  local avail = (self.limit - self.pool) // MIN * MIN
  if rb > avail then return false end
  local inc = false
  while rb > self.curr do self.curr = self.curr * 2; inc = true end
  local bytes = math.min(self.curr, avail)
  local base
  if hint then
    base = hint
  else
    base = self.up(bytes)
    while not base do
      local back = rounded(math.floor(f32(f32(bytes) * f32(0.9))))
      if back >= bytes then back = bytes - MIN end
      bytes = back
      if bytes < rb then return false end
      base = self.up(bytes)
    end
  end
  if not inc then self.curr = self.curr * 2 end
  local r = { base = base, size = bytes,
    chunks = { { ptr = base, size = bytes, used = false, gap = self.spatial or nil } } }
  self.regions[#self.regions + 1] = r
  self.nregions = self.nregions + 1
  self.pool = self.pool + bytes
  if self.pool > self.peak_pool then self.peak_pool = self.pool end
  self.extended = true
  return true
end

local function index_of(r, c)
  for i, x in ipairs(r.chunks) do if x == c then return i end end
end

function M:take(c, rb, n)
  local r = c.region
  if c.size >= 2 * rb or c.size - rb >= self.maxfrag then
    local i = index_of(r, c)
    table.insert(r.chunks, i + 1, { ptr = c.ptr + rb, size = c.size - rb, used = false, gap = c.gap })
    c.size = rb
  end
  c.gap = nil
  c.used = true
  c.req = n
  self.in_use = self.in_use + c.size
  if self.in_use > self.peak then self.peak = self.in_use end
  self.by_addr[c.ptr] = c
  return c.ptr, c.size
end

function M:gc_regions(rb)
  if not self.gc then return false end
  local free = 0
  for _, r in ipairs(self.regions) do
    if #r.chunks == 1 and not r.chunks[1].used then free = free + r.size end
  end
  if free == 0 or rb > self.limit - self.pool + free then return false end
  local keep = {}
  for _, r in ipairs(self.regions) do
    if #r.chunks == 1 and not r.chunks[1].used then
      self.pool = self.pool - r.size
      if self.down then self.down(r.base, r.size) end
    else
      keep[#keep + 1] = r
    end
  end
  self.regions = keep
  return true
end

--- alloc(n[, hint]) -> address, chunk size (nil when refused); self.extended
-- says whether the request made a region.
function M:alloc(n, hint)
  local rb = rounded(n == 0 and 1 or n)
  self.extended = false
  local c = self:best(rb)
  if not c and self:extend(rb, hint) then c = self:best(rb) end
  if not c and self:gc_regions(rb) and self:extend(rb, hint) then c = self:best(rb) end
  if not c then return nil end
  return self:take(c, rb, n)
end

function M:free(addr)
  local c = self.by_addr[addr]
  self.by_addr[addr] = nil
  c.used = false
  self.in_use = self.in_use - c.size
  local r = c.region
  for _, x in ipairs(self.regions) do
    if index_of(x, c) then r = x end
  end
  local i = index_of(r, c)
  local nx = r.chunks[i + 1]
  -- the lower end's last chunk rejoins the gap
  if self.spatial and (not nx or nx.gap) then c.gap = true end
  if nx and not nx.used then
    c.size = c.size + nx.size
    c.gap = (c.gap or nx.gap) or nil
    table.remove(r.chunks, i + 1)
  end
  local pv = r.chunks[i - 1]
  if pv and not pv.used then
    pv.size = pv.size + c.size
    pv.gap = (pv.gap or c.gap) or nil
    table.remove(r.chunks, i)
  end
  return c
end

--- A workload: n operations of a seeded generator; sizes from a few
-- shapes (small tensors, activations, a few large buffers), about as many
-- frees as allocations.  -> list of {op="a", size=} / {op="f", k=alloc index}
function M.workload(seed, n, scale)
  local rng = seed
  local function rnd(k)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % k
  end
  scale = scale or 1
  local ops, live = {}, {}
  local na = 0
  for _ = 1, n do
    if #live > 0 and rnd(100) < 45 then
      local j = rnd(#live) + 1
      ops[#ops + 1] = { op = "f", k = live[j] }
      table.remove(live, j)
    else
      local kind = rnd(10)
      local size
      if kind < 5 then size = 1 + rnd(4096)
      elseif kind < 9 then size = (1 + rnd(256)) * 4096 * scale
      else size = (1 + rnd(64)) * 1024 * 1024 * scale end
      na = na + 1
      ops[#ops + 1] = { op = "a", size = size }
      live[#live + 1] = na
    end
  end
  return ops
end

--- Runs ops on a reference model: the events JAX would write (with the
-- stats), and the model's figures.
function M.events(ops, o)
  local m = M.new(o)
  local evs, addr = {}, {}
  local na, t = 0, 1000000
  for _, op in ipairs(ops) do
    t = t + 1000
    if op.op == "a" then
      na = na + 1
      local a, chunk = m:alloc(op.size)
      if a then
        addr[na] = a
        evs[#evs + 1] = { event = "MemoryAllocation", addr = a, requested_bytes = op.size,
          allocation_bytes = chunk, bytes_allocated = m.in_use, peak_bytes_in_use = m.peak, ts = t }
      end
    elseif addr[op.k] then
      local c = m.by_addr[addr[op.k]]
      local size, req = c.size, c.req -- before the free merges the chunk
      m:free(addr[op.k])
      evs[#evs + 1] = { event = "MemoryDeallocation", addr = addr[op.k], requested_bytes = req,
        allocation_bytes = size, bytes_allocated = m.in_use, peak_bytes_in_use = m.peak, ts = t }
      addr[op.k] = nil
    end
  end
  return evs, m
end

local keys = { "event", "allocator_name", "addr", "requested_bytes", "allocation_bytes",
  "bytes_allocated", "peak_bytes_in_use", "ts" }

--- JSON lines of the events (allocator GPU_0_bfc unless given), one object
-- a line, as docs/API.md's Python writes them.
function M.jsonl(evs, allocator)
  local out = {}
  for _, e in ipairs(evs) do
    local parts = {}
    for _, k in ipairs(keys) do
      local v = e[k]
      if k == "allocator_name" then v = e.allocator_name or allocator or "GPU_0_bfc" end
      if v ~= nil then
        parts[#parts + 1] = string.format("%q: %s", k,
          type(v) == "string" and string.format("%q", v) or string.format("%d", v))
      end
    end
    out[#out + 1] = "{" .. table.concat(parts, ", ") .. "}"
  end
  return table.concat(out, "\n") .. "\n"
end

-- ---- protobuf, as much as an XSpace needs ---------------------------------
local function varint(v)
  local b = {}
  repeat
    local byte = v & 0x7f
    v = v >> 7
    if v ~= 0 then byte = byte | 0x80 end
    b[#b + 1] = string.char(byte)
  until v == 0
  return table.concat(b)
end
local function key(num, wt) return varint(num << 3 | wt) end
local function vfield(num, v) return key(num, 0) .. varint(v) end
local function lfield(num, s) return key(num, 2) .. varint(#s) .. s end
M.varint, M.lfield, M.vfield = varint, lfield, vfield

--- An XSpace holding the events on one host plane (in two lines, as two
-- threads would write them: allocations on one, frees on the other, both
-- in time order; an event's own `line`, 1 or 2, where it has one), the
-- allocator name by reference (as XPlaneBuilder interns it: an event's own
-- allocator_name where it has one), the numbers as int64 and uint64 stats;
-- plus a device plane with an unrelated event.  Metadata come after the
-- lines, as protobuf writes them.  o.names: more allocator names to intern
-- (no event of theirs); o.nameless: a stat metadata entry without its name.
function M.xplane(evs, allocator, o)
  allocator = allocator or "GPU_0_bfc"
  o = o or {}
  local stat_ids = { allocator_name = 1, addr = 2, requested_bytes = 3, allocation_bytes = 4,
    bytes_allocated = 5, peak_bytes_in_use = 6, tf_op = 7 }
  local EV_A, EV_F = 10, 11
  local refs, nrefs = {}, 0
  local function ref_of(name)
    if not refs[name] then nrefs = nrefs + 1; refs[name] = 49 + nrefs end
    return refs[name]
  end
  ref_of(allocator)
  for _, name in ipairs(o.names or {}) do ref_of(name) end
  local base = math.huge
  for _, e in ipairs(evs) do base = math.min(base, e.ts) end
  local line_ts = 1700000000000000000 -- ns since 1970: offsets carry the rest
  local lines = { {}, {} }
  for _, e in ipairs(evs) do
    local stats = {
      lfield(4, vfield(1, stat_ids.allocator_name) .. vfield(7, ref_of(e.allocator_name or allocator))),
      lfield(4, vfield(1, stat_ids.addr) .. vfield(3, e.addr)),
      lfield(4, vfield(1, stat_ids.requested_bytes) .. vfield(4, e.requested_bytes)),
      lfield(4, vfield(1, stat_ids.allocation_bytes) .. vfield(4, e.allocation_bytes)),
      lfield(4, vfield(1, stat_ids.bytes_allocated) .. vfield(4, e.bytes_allocated)),
      lfield(4, vfield(1, stat_ids.peak_bytes_in_use) .. vfield(4, e.peak_bytes_in_use)),
      lfield(4, vfield(1, stat_ids.tf_op) .. lfield(5, "jit(train_step)/dot_general")),
    }
    local ps = math.floor((e.ts - base) * 1000)
    local ev = lfield(4, vfield(1, e.event == "MemoryAllocation" and EV_A or EV_F) .. vfield(2, ps) ..
      table.concat(stats))
    local l = lines[e.line or (e.event == "MemoryAllocation" and 1 or 2)]
    l[#l + 1] = ev
  end
  local plane = { vfield(1, 7), lfield(2, "/host:CPU") }
  for i, l in ipairs(lines) do
    plane[#plane + 1] = lfield(3, vfield(1, i) .. lfield(2, "thread" .. i) .. vfield(3, line_ts) ..
      table.concat(l))
  end
  local function meta(num, id, name)
    return lfield(num, vfield(1, id) .. lfield(2, vfield(1, id) .. lfield(2, name)))
  end
  plane[#plane + 1] = meta(4, EV_A, "MemoryAllocation")
  plane[#plane + 1] = meta(4, EV_F, "MemoryDeallocation")
  if o.nameless then plane[#plane + 1] = lfield(5, vfield(1, 98) .. lfield(2, vfield(1, 98))) end
  for name, id in pairs(stat_ids) do plane[#plane + 1] = meta(5, id, name) end
  for name, id in pairs(refs) do plane[#plane + 1] = meta(5, id, name) end
  local dev = { vfield(1, 1), lfield(2, "/device:GPU:0"),
    lfield(3, vfield(1, 1) .. vfield(3, line_ts) .. lfield(4, vfield(1, 1) .. vfield(2, 5))),
    meta(4, 1, "fusion.1") }
  return lfield(1, table.concat(dev)) .. lfield(1, table.concat(plane)) .. lfield(4, "host0")
end

function M.write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
  return path
end

function M.gzip(path, data)
  M.write(path .. ".tmp", data)
  assert(os.execute("gzip -c " .. path .. ".tmp > " .. path))
  os.remove(path .. ".tmp")
  return path
end

return M
