-- bench/record_check.lua: the checks of bench/record_check.sh (run by
-- bin/cupola, so `cupola` is loaded).  Each prints key=value lines and a
-- verdict line "PASS ..." or "FAIL ...".
--   known REC LOG       every event record_known logged is in the recording
--                       REC (plain), with equal address, size, kind, stream, pool
--   killed REC N        a recording of a killed program loads, cut, with at
--                       least the N pairs made before it said "ready"
--   replay TRACE KIND   TRACE replayed through a fresh pool of KIND over
--                       the virtual upstream: its peak reserved (and live)
local cmd = arg[1]

local function split(line)
  local t = {}
  for f in (line .. ","):gmatch "([^,]*)," do t[#t + 1] = f end
  return t
end

local function read_recording(path)
  local rows = {}
  for line in io.lines(path) do
    if line:sub(1, 1) ~= "#" and not line:find "^Thread," and line ~= "" then
      local c = split(line)
      rows[#rows + 1] = {action = c[3], ptr = tonumber(c[4]), size = tonumber(c[5]),
        stream = tonumber(c[6]), device = tonumber(c[7]), kind = c[8], pool = tonumber(c[9]),
        call = c[10], line = line}
    end
  end
  return rows
end

local function read_log(path)
  local ev = {}
  for line in io.lines(path) do
    local w = {}
    for x in line:gmatch "%S+" do w[#w + 1] = x end
    if w[1] == "alloc" then
      ev[#ev + 1] = {action = "allocate", kind = w[2], ptr = tonumber(w[3]), size = tonumber(w[4]),
        stream = tonumber(w[5]), pool = tonumber(w[6]), call = w[7], line = line}
    elseif w[1] == "free" then
      ev[#ev + 1] = {action = "free", ptr = tonumber(w[2]), line = line}
    elseif w[1] == "map" then
      ev[#ev + 1] = {action = "map", ptr = tonumber(w[2]), size = tonumber(w[3]), pool = tonumber(w[4]),
        kind = "vmm", line = line}
    elseif w[1] == "unmap" then
      ev[#ev + 1] = {action = "unmap", ptr = tonumber(w[2]), size = tonumber(w[3]), kind = "vmm", line = line}
    elseif w[1] == "fail" then
      ev[#ev + 1] = {action = "allocate failure", ptr = 0, size = tonumber(w[2]), kind = "device", line = line}
    end
  end
  return ev
end

if cmd == "known" then
  local rows, ev = read_recording(arg[2]), read_log(arg[3])
  local pos, found, bad, used = 1, 0, {}, {}
  local live = {}
  for _, e in ipairs(ev) do
    local hit
    for i = pos, #rows do
      local r = rows[i]
      if r.action == e.action and r.ptr == e.ptr and (e.action ~= "allocate failure" or r.size == e.size) then
        hit = i
        break
      end
    end
    if not hit then
      bad[#bad + 1] = "missing: " .. e.line
    else
      local r = rows[hit]
      used[hit] = true
      pos = hit + 1
      found = found + 1
      local want = e
      if e.action == "free" then want = live[e.ptr] or {} end
      local diffs = {}
      if e.action ~= "free" or want.size then
        if want.size and r.size ~= want.size then diffs[#diffs + 1] = ("size %s"):format(r.size) end
        if want.kind and r.kind ~= want.kind then diffs[#diffs + 1] = "kind " .. r.kind end
      end
      if e.action == "allocate" then
        if r.stream ~= e.stream then diffs[#diffs + 1] = ("stream 0x%x"):format(r.stream) end
        if r.pool ~= e.pool then diffs[#diffs + 1] = ("pool 0x%x"):format(r.pool) end
        live[e.ptr] = e
      end
      if e.action == "map" and r.pool ~= e.pool then diffs[#diffs + 1] = ("handle 0x%x"):format(r.pool) end
      if #diffs > 0 then bad[#bad + 1] = "differs (" .. table.concat(diffs, ", ") .. "): " .. e.line .. " | " .. r.line end
    end
  end
  local extra = {}
  for i, r in ipairs(rows) do
    if not used[i] then extra[#extra + 1] = r.action .. " " .. r.kind .. " " .. r.size .. " " .. r.call end
  end
  print(("known_events=%d found=%d wrong=%d extra_rows=%d"):format(#ev, found, #bad - (#ev - found), #extra))
  for _, b in ipairs(bad) do print("  " .. b) end
  for k = 1, math.min(#extra, 10) do print("  extra (not made by the program itself): " .. extra[k]) end
  local t = cupola.trace.load(arg[2])
  print(("loaded: format=%s allocs=%d frees=%d ignored=%d leaked=%d peak_live=%d"):format(
    t.format, t.allocs, t.frees, t.ignored, t.leaked, t.peak_live))
  print((#bad == 0 and "PASS" or "FAIL") .. (" known program: %d of %d events present and equal"):format(
    found - (#bad - (#ev - found)), #ev))
  os.exit(#bad == 0 and 0 or 1)
elseif cmd == "killed" then
  local n = tonumber(arg[3])
  local ok, t = pcall(cupola.trace.load, arg[2])
  if not ok then
    print("FAIL killed program: the recording does not load: " .. tostring(t))
    os.exit(1)
  end
  print(("allocs=%d frees=%d leaked=%d cut=%s"):format(t.allocs, t.frees, t.leaked, tostring(t.cut)))
  print("warning=" .. tostring(t.warning))
  local pass = t.cut and t.allocs >= n and t.frees >= n
  print((pass and "PASS" or "FAIL") .. (" killed program: %d allocations loaded (%d made before 'ready'), cut=%s")
    :format(t.allocs, n, tostring(t.cut)))
  os.exit(pass and 0 or 1)
elseif cmd == "replay" then
  local t = cupola.trace.load(arg[2])
  local kind = arg[3]
  local opts = {kind = kind, upstream = "virtual"}
  if kind == "bfc" then
    -- as the caching run's JAX set it up: growing regions (its run had
    -- XLA_PYTHON_CLIENT_PREALLOCATE=false) under its bytes_limit (arg 4)
    opts.allow_growth = true
    opts.memory_limit = math.tointeger(tonumber(arg[4] or "")) or 64 * 2^30 // 1
  end
  local ok, p = pcall(cupola.pool, opts)
  if not ok then
    print(("replay_%s=unavailable (%s)"):format(kind, tostring(p):gsub("\n.*", "")))
    os.exit(0)
  end
  local r = cupola.trace.replay(t, p, {single_stream = true})
  print(("replay_%s_peak_reserved=%d"):format(kind, r.peak_reserved))
  print(("replay_%s_peak_live=%d"):format(kind, r.peak_live))
  print(("replay_%s_device_allocs=%d"):format(kind, r.device_allocs or 0))
  print(("replay_%s_failed=%d"):format(kind, r.failed))
  print(("trace_allocs=%d trace_ignored=%d"):format(t.allocs, t.ignored))
  p:close()
else
  io.stderr:write("usage: bin/cupola bench/record_check.lua known REC LOG | killed REC N | replay TRACE KIND\n")
  os.exit(2)
end
