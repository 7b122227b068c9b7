-- spec/support/cupy_sim.lua: CuPy 14.2's SingleDeviceMemoryPool stated a
-- second time, in Lua, from cupy/cuda/memory.pyx (not from pool/cupy.c),
-- driving a random workload and writing the log CuPy's hooks would write
-- (DebugPrintHook's lines, plus stream, malloc_preprocess, free_all_blocks
-- and total_bytes as docs/API.md's recording hook writes them).  The specs
-- replay its logs through kind "cupy" and hold the C model to its figures.
--
-- Ties between equal free chunks are broken by a random "object address"
-- given to each chunk when it is made (CuPy's _Chunk objects), so a replay
-- with the recorded addresses must follow the log, and one without shows
-- what the address rule changes.
local M = {}

local UNIT = 512
local function round(n) return (n + UNIT - 1) // UNIT * UNIT end

-- sim(o): o.seed, o.ops, o.limit (0: none), o.device (bytes the device
-- has: cudaMalloc refuses past it; nil: no end), o.sizes (request sizes to
-- draw from), o.streams (stream pointers), o.garbage (chance a drop waits
-- for gc.collect()), o.user_free_all (chance of a free_all_blocks call).
-- Returns {lines = {...}, figures = {device_allocs, device_failures,
-- peak_total, ooms, mallocs}}.
function M.run(o)
  local rng = o.seed or 1
  local function rand(n) -- deterministic LCG: the same log on every Lua
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % n + 1
  end
  local limit = o.limit or 0
  local sizes = o.sizes or { 100, 512, 1000, 1536, 4096, 5000, 20000 }
  local streams = o.streams or { 0 }
  local lines, live, garbage = {}, {}, {}
  local arenas, arena_order = {}, {}
  local total, used, dev_held, peak = 0, 0, 0, 0
  local next_addr, next_obj, next_pmem = 0x7f0000000000, 0x1000, 0x7f3920000000
  local fig = { device_allocs = 0, device_failures = 0, ooms = 0, mallocs = 0 }
  local cur_stream = streams[1]

  local function emit(fmt, ...)
    lines[#lines + 1] = string.format(fmt, ...)
  end
  local function arena_of(id)
    local a = arenas[id]
    if not a then
      a = { id = id, free = {} }
      arenas[id] = a
      arena_order[#arena_order + 1] = a
    end
    return a
  end
  local function new_chunk(ptr, size, arena)
    next_obj = next_obj + 64
    -- a Python object's address: unrelated to the device address
    return { ptr = ptr, size = size, arena = arena, obj = rand(1 << 30) * 64 + next_obj % 64 }
  end
  local function index_remove(c)
    local f = c.arena.free
    for i = 1, #f do if f[i] == c then table.remove(f, i); c.is_free = false; return true end end
    return false
  end
  local function index_insert(c)
    local f = c.arena.free
    f[#f + 1] = c
    c.is_free = true
  end
  -- get_chunk: lower_bound((size, 0)) in an index ordered by (size, obj)
  local function get_chunk(a, size)
    local best
    for _, c in ipairs(a.free) do
      if c.size >= size and (not best or c.size < best.size or (c.size == best.size and c.obj < best.obj)) then
        best = c
      end
    end
    if not best then return nil end
    index_remove(best)
    if best.size > size then
      local rem = new_chunk(best.ptr + size, best.size - size, a)
      rem.prev, rem.next = best, best.next
      if best.next then best.next.prev = rem end
      best.next = rem
      best.size = size
      index_insert(rem) -- merge = False
    end
    return best
  end
  local function insert_merged(c)
    while c.next and c.next.is_free and index_remove(c.next) do
      local n = c.next
      c.size = c.size + n.size
      c.next = n.next
      if c.next then c.next.prev = c end
    end
    while c.prev and c.prev.is_free and index_remove(c.prev) do
      local p = c.prev
      p.size = p.size + c.size
      p.next = c.next
      if p.next then p.next.prev = p end
      c = p
    end
    index_insert(c)
  end
  local function free_all_blocks()
    local freed = 0
    for _, a in ipairs(arena_order) do
      -- in index order: (size, obj)
      table.sort(a.free, function(x, y) return x.size < y.size or (x.size == y.size and x.obj < y.obj) end)
      local keep = {}
      for _, c in ipairs(a.free) do
        if c.prev or c.next then keep[#keep + 1] = c else freed = freed + c.size; dev_held = dev_held - c.size end
      end
      a.free = keep
    end
    total = total - freed
  end
  local function pfree(x, inside)
    -- PooledMemory.free, logged after
    used = used - x.chunk.size
    insert_merged(x.chunk)
    emit('{"hook":"free","device_id":0,"mem_size":%d,"mem_ptr":%d,"pmem_id":"0x%x","stream":%d,"total_bytes":%d}',
      x.mem_size, x.ptr, x.pmem, cur_stream, total)
    live[x.key] = nil
  end
  local function gc_collect()
    for _, x in ipairs(garbage) do pfree(x) end
    garbage = {}
  end
  local function block(size)
    local lim = limit > 0 and limit or math.maxinteger
    if total > lim - size then return false end
    total = total + size
    return true
  end
  local function cuda_malloc(size)
    if o.device and dev_held + size > o.device then
      emit('{"hook":"alloc","device_id":0,"mem_size":%d,"mem_ptr":0,"stream":%d}', size, cur_stream)
      fig.device_failures = fig.device_failures + 1
      return nil
    end
    next_addr = next_addr + size + 512 * rand(4) -- a gap or not: blocks never merge anyway
    local p = next_addr
    next_addr = next_addr + size
    dev_held = dev_held + size
    fig.device_allocs = fig.device_allocs + 1
    emit('{"hook":"alloc","device_id":0,"mem_size":%d,"mem_ptr":%d,"stream":%d}', size, p, cur_stream)
    return p
  end
  local function try_malloc(size)
    if limit > 0 and size > limit then return nil end
    local ok = block(size)
    if not ok then free_all_blocks(); ok = block(size) end
    if not ok then gc_collect(); free_all_blocks(); ok = block(size) end
    if not ok then return nil end
    local p = cuda_malloc(size)
    if not p then
      free_all_blocks()
      p = cuda_malloc(size)
      if not p then
        gc_collect(); free_all_blocks()
        p = cuda_malloc(size)
      end
    end
    if not p then total = total - size; return nil end
    if total > peak then peak = total end
    return p
  end
  local function malloc(size)
    local ms = round(size)
    emit('{"hook":"malloc_preprocess","device_id":0,"size":%d,"mem_size":%d,"stream":%d}', size, ms, cur_stream)
    fig.mallocs = fig.mallocs + 1
    local a = arena_of(cur_stream)
    local c = get_chunk(a, ms)
    if not c then
      local p = try_malloc(ms)
      if p then c = new_chunk(p, ms, a) end
    end
    if not c then
      fig.ooms = fig.ooms + 1
      emit('{"hook":"malloc","device_id":0,"size":%d,"mem_size":%d,"mem_ptr":0,"pmem_id":"0x0","stream":%d,"total_bytes":%d}',
        size, ms, cur_stream, total)
      return nil
    end
    used = used + ms
    next_pmem = next_pmem + 0x40
    local x = { chunk = c, ptr = c.ptr, mem_size = ms, pmem = next_pmem, key = c.ptr }
    live[x.key] = x
    emit('{"hook":"malloc","device_id":0,"size":%d,"mem_size":%d,"mem_ptr":%d,"pmem_id":"0x%x","stream":%d,"total_bytes":%d}',
      size, ms, c.ptr, x.pmem, cur_stream, total)
    return x
  end

  local held = {}
  for _ = 1, o.ops or 500 do
    cur_stream = streams[rand(#streams)]
    local r = rand(100)
    if r <= 50 or #held == 0 then
      local x = malloc(sizes[rand(#sizes)])
      if x then held[#held + 1] = x end
    elseif r <= 90 then
      local i = rand(#held)
      local x = table.remove(held, i)
      if rand(100) <= (o.garbage or 0) then
        garbage[#garbage + 1] = x -- unreachable, freed by the next gc.collect()
      else
        pfree(x)
      end
    elseif rand(100) <= (o.user_free_all or 0) then
      free_all_blocks()
      emit('{"hook":"free_all_blocks","device_id":0,"stream":%d,"total_bytes":%d}', cur_stream, total)
    end
  end
  fig.peak_total = peak
  fig.final_total = total
  return { lines = lines, figures = fig }
end

function M.write(path, lines)
  local f = assert(io.open(path, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end

return M
