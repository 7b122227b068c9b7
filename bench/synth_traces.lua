-- bench/synth_traces.lua: synthetic allocation traces (PyTorch-snapshot CSV,
-- the format cupola.trace.load reads) for sanity checks of pool policies on
-- workloads no pool was shaped on: a rule that helps only the
-- shipped traces should show here.
--   lua5.4 bench/synth_traces.lua [dir] [events] [seed ...]
-- Writes <dir>/{loguniform,growing,mixed}<seed>.csv (default dir /tmp,
-- 20000 allocations, seeds 1 and 2):
--   loguniform  sizes log-uniform 4 KiB .. 64 MiB, lifetimes exponential
--               (mean 50 allocations)
--   growing     sequences that grow by 256 KiB a step (KV-cache-like), most
--               freed after 2-3 steps, some kept 400
--   mixed       90 % small (512 B .. 2 MiB, 1-20 steps), 10 % large
--               (8 .. 200 MiB, 50-500 steps)
local dir = arg[1] or "/tmp"
local N = tonumber(arg[2]) or 20000
local seeds = {}
for i = 3, #arg do seeds[#seeds + 1] = tonumber(arg[i]) end
if #seeds == 0 then seeds = { 1, 2 } end

local function gen(path, seed, kind)
  math.randomseed(seed)
  local r = math.random
  local heap = {} -- binary heap of {free_at, ptr, size}
  local function push(x)
    heap[#heap + 1] = x
    local i = #heap
    while i > 1 do
      local p = i // 2
      if heap[p][1] <= heap[i][1] then break end
      heap[p], heap[i] = heap[i], heap[p]
      i = p
    end
  end
  local function pop()
    local top = heap[1]
    heap[1] = heap[#heap]
    heap[#heap] = nil
    local i = 1
    while true do
      local l, m = 2 * i, i
      if heap[l] and heap[l][1] < heap[m][1] then m = l end
      if heap[l + 1] and heap[l + 1][1] < heap[m][1] then m = l + 1 end
      if m == i then break end
      heap[m], heap[i] = heap[i], heap[m]
      i = m
    end
    return top
  end
  local f = assert(io.open(path, "w"))
  f:write "Thread,Time,Action,Pointer,Size,Stream\n"
  local t, ptr = 0, 0x1000
  local function row(action, p, s) f:write(string.format("0,%d.000,%s,0x%x,%d,0x0\n", t, action, p, s)) end
  for i = 0, N - 1 do
    t = t + 1
    while heap[1] and heap[1][1] <= t do
      local x = pop()
      row("free", x[2], x[3])
    end
    local s, life
    if kind == "loguniform" then
      s = math.floor(math.exp(math.log(4096) + (math.log(64 << 20) - math.log(4096)) * r()))
      life = math.floor(-50 * math.log(1 - r())) + 1
    elseif kind == "growing" then
      s = (i % 400 + 1) * 256 * 1024 + r(0, 4096)
      local c = { 2, 3, 400 }
      life = c[r(1, 3)]
    elseif r() < 0.9 then
      s, life = r(512, 2 << 20), r(1, 20)
    else
      s, life = r(8 << 20, 200 << 20), r(50, 500)
    end
    s = s // 256 * 256
    if s == 0 then s = 256 end
    row("allocate", ptr, s)
    push { t + life, ptr, s }
    ptr = ptr + 0x100000
  end
  while heap[1] do
    local x = pop()
    t = t + 1
    row("free", x[2], x[3])
  end
  f:close()
end

for _, seed in ipairs(seeds) do
  for _, kind in ipairs { "loguniform", "growing", "mixed" } do
    local path = string.format("%s/%s%d.csv", dir, kind, seed)
    gen(path, seed, kind)
    print(path)
  end
end
