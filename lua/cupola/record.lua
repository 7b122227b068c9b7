--- cupola.record: `bin/cupola record [-o FILE] -- COMMAND...`, the device
-- allocations of any CUDA program as a trace.  Starts COMMAND with CUDA's
-- injection variable set to libcupola_record.so (src/record/: CUPTI's
-- callbacks on the allocation calls), waits for it, and prints what was
-- recorded.  This launcher never loads cupola's CUDA backend before the
-- command ends (a context of its own would hold device memory while the
-- program runs); the backend is checked in a separate process first.
local record = {}

record.usage = [[
usage: cupola record [-o FILE] [--flush-ms N] [--] COMMAND [ARGS...]

Runs COMMAND with every CUDA allocation and free of it, and of its children,
recorded by CUPTI (cudaMalloc*, cudaFree*, cudaMallocAsync/FreeAsync with
their stream and pool, managed and pinned memory flagged apart, the driver's
cuMem* calls), then prints the allocations, the peak and the file(s).

  -o FILE        where to write (default cupola-record.csv.gz; gzip when
                 FILE ends in .gz, else plain text).  Each process writes one
                 file per device, FILE's stem + .pPID.dDEV + its extension;
                 when the run wrote exactly one, it is renamed to FILE.
  --flush-ms N   how often the files are flushed (default 50): a program
                 killed or crashing keeps every event older than that.

cupola.trace.load(FILE) reads the result (format "cupola_record").
]]

local function bytes(n)
  local units = {"B", "KiB", "MiB", "GiB", "TiB"}
  local i, v = 1, n
  while v >= 1024 and i < #units do v, i = v / 1024, i + 1 end
  return i == 1 and ("%d B"):format(n) or ("%.2f %s"):format(v, units[i])
end

-- One word of a shell command line, quoted so that nothing in it is
-- interpreted.
local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- record.parse_args(argv) -> {out=, flush_ms=, help=, command={...}} or nil, message
function record.parse_args(argv)
  local o = {out = "cupola-record.csv.gz", command = {}}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--" then
      i = i + 1
      break
    elseif a == "-h" or a == "--help" then
      o.help = true
      return o
    elseif a == "-o" or a == "--output" then
      if not argv[i + 1] or argv[i + 1] == "" then return nil, a .. " needs a file name" end
      o.out = argv[i + 1]
      i = i + 2
    elseif a == "--flush-ms" then
      local n = tonumber(argv[i + 1] or "")
      if not n or n ~= math.floor(n) or n < 1 or n > 60000 then
        return nil, "--flush-ms needs a whole number of milliseconds in 1..60000"
      end
      o.flush_ms = math.floor(n)
      i = i + 2
    elseif a:sub(1, 1) == "-" then
      return nil, "unknown option " .. a
    else
      break
    end
  end
  for k = i, #argv do o.command[#o.command + 1] = argv[k] end
  return o
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

--- record.library() -> path or nil, one-line reason
function record.library()
  local env = os.getenv "CUPOLA_RECORD_LIB"
  if env and env ~= "" then
    if exists(env) then return env end
    return nil, "CUPOLA_RECORD_LIB names " .. env .. ", which is not a file"
  end
  local dir = os.getenv "CUPOLA_BIN_LIBDIR" or ""
  for _, p in ipairs {dir .. "/libcupola_record.so", dir .. "/cupola/libcupola_record.so"} do
    if dir ~= "" and exists(p) then return p end
  end
  return nil, "the recorder library (libcupola_record.so) is not built: run `make record` " ..
    "where the CUDA Toolkit with CUPTI is installed"
end

--- record.preload(lib) -> the LD_PRELOAD the command runs with, or nil:
-- libcupola_record_preload.so beside the recorder library (it says in one
-- line when a profiler of the program is refused CUPTI because the recorder
-- holds it: src/record/preload.c), ahead of the environment's LD_PRELOAD.
-- nil when it is not there (an older build): the recording is the same.
function record.preload(lib)
  local dir = lib:match "^(.*)/[^/]*$" or "."
  local pre = dir .. "/libcupola_record_preload.so"
  if not exists(pre) then return nil end
  local have = os.getenv "LD_PRELOAD"
  if have and have ~= "" then return pre .. " " .. have end
  return pre
end

-- libcupti (and the rest) resolvable for the library, as the dynamic loader
-- would do it when CUDA loads it.
local function missing_libs(lib)
  local p = io.popen("ldd " .. quote(lib) .. " 2>/dev/null")
  if not p then return nil end
  local miss = {}
  for line in p:lines() do
    local name = line:match "^%s*(%S+) => not found"
    -- libcuda is the driver's: present wherever a program could run CUDA
    if name and not name:find "^libcuda%.so" then miss[#miss + 1] = name end
  end
  p:close()
  return #miss > 0 and table.concat(miss, ", ") or nil
end

-- The backend cupola would run on, asked of a process of its own (its CUDA
-- context ends with it).  nil when that could not be learnt.
local function backend()
  local forced = os.getenv "CUPOLA_BACKEND"
  if forced == "host" then return "host" end
  local lua = os.getenv "CUPOLA_BIN_LUA" or "lua5.4"
  local init = [[local d, c = os.getenv "CUPOLA_BIN_LUADIR", os.getenv "CUPOLA_BIN_LIBDIR"
if d and d ~= "" then package.path = d .. "/?.lua;" .. d .. "/?/init.lua;" .. package.path end
if c and c ~= "" then package.cpath = c .. "/?.so;" .. package.cpath end
local ok, cp = pcall(require, "cupola") io.write(ok and cp.backend() or "none")]]
  local p = io.popen(quote(lua) .. " -e " .. quote(init) .. " 2>/dev/null")
  if not p then return nil end
  local b = p:read "a"
  p:close()
  return b ~= "" and b or nil
end

--- record.summary(paths) -> lines: what each file holds, through cupola.trace.load
function record.summary(paths)
  local trace = require "cupola.trace"
  local lines = {}
  local total_allocs, total_peak = 0, 0
  for _, path in ipairs(paths) do
    local ok, t = pcall(trace.load, path)
    if not ok then
      lines[#lines + 1] = ("  %s: does not load: %s"):format(path, tostring(t):gsub("^[^\n]-%.lua:%d+: ", ""))
    else
      local i = t:info()
      total_allocs = total_allocs + i.allocs
      total_peak = math.max(total_peak, i.peak_live)
      lines[#lines + 1] = ("  %s: %d device allocations, %d frees, peak %s live, %d left live at the end; " ..
        "%d other events kept apart (managed, pinned, vmm, failures)"):format(
        path, i.allocs, i.frees, bytes(i.peak_live), i.leaked, i.ignored)
      if i.warning then lines[#lines + 1] = "    warning: " .. i.warning end
      t:close()
    end
  end
  return lines, total_allocs, total_peak
end

--- record.main(argv) -> exit status: bin/cupola record.  The command's own
-- status when it ran (128 + the signal that ended it); 2 for a bad command
-- line; 1 when nothing can be recorded here.  Every refusal is one line.
function record.main(argv)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local o, err = record.parse_args(args)
  if not o then
    io.stderr:write("cupola record: ", err, " (cupola record --help for the usage)\n")
    return 2
  end
  if o.help then
    io.stdout:write(record.usage)
    return 0
  end
  if #o.command == 0 then
    io.stderr:write(record.usage)
    return 2
  end
  -- The host first: without a CUDA device no build of the library would
  -- record anything, so asking for `make record` there sends the user to
  -- build what cannot help.  CUPOLA_RECORD_ASSUME_DEVICE=1: the specs run
  -- the launcher on the host with a command that writes a recording itself
  -- (no CUDA involved).
  local b = os.getenv "CUPOLA_RECORD_ASSUME_DEVICE" == "1" and "cuda" or backend()
  if b == "host" then
    io.stderr:write("cupola record: cupola runs on its host backend here (no usable CUDA device): " ..
      "there is nothing to record\n")
    return 1
  end
  local lib, why = record.library()
  if not lib then
    io.stderr:write("cupola record: ", why, "\n")
    return 1
  end
  local miss = missing_libs(lib)
  if miss then
    io.stderr:write("cupola record: CUPTI is missing here: ", lib, " needs ", miss, "\n")
    return 1
  end
  -- The out path as the processes will see it, from their own working folders.
  local out = o.out
  if out:sub(1, 1) ~= "/" then
    local p = io.popen "pwd"
    local cwd = p and p:read "l"
    if p then p:close() end
    if cwd then out = cwd .. "/" .. out end
  end
  local dir = out:match "^(.*)/[^/]*$"
  if dir and dir ~= "" and not os.execute("test -d " .. quote(dir) .. " && test -w " .. quote(dir)) then
    io.stderr:write("cupola record: -o ", o.out, ": ", dir, " is not a folder this user can write to\n")
    return 2
  end
  local list = os.tmpname()
  local env = {
    "CUDA_INJECTION64_PATH=" .. quote(lib),
    "CUPOLA_RECORD_OUT=" .. quote(out),
    "CUPOLA_RECORD_LIST=" .. quote(list),
  }
  local pre = record.preload(lib)
  if pre then env[#env + 1] = "LD_PRELOAD=" .. quote(pre) end
  if o.flush_ms then env[#env + 1] = "CUPOLA_RECORD_FLUSH_MS=" .. o.flush_ms end
  local words = {}
  for k, w in ipairs(o.command) do words[k] = quote(w) end
  local cmd = table.concat(env, " ") .. " exec " .. table.concat(words, " ")
  io.stdout:flush()
  local okx, how, code = os.execute(cmd)
  local status = okx and 0 or (how == "signal" and 128 + (code or 0) or (code or 1))
  -- the files the processes wrote, each once, in order
  local paths, seen = {}, {}
  local lf = io.open(list, "r")
  if lf then
    for line in lf:lines() do
      if line ~= "" and not seen[line] then seen[line] = true paths[#paths + 1] = line end
    end
    lf:close()
  end
  os.remove(list)
  if #paths == 0 then
    io.stderr:write("cupola record: no allocation was recorded (the command made none, or CUDA " ..
      "never loaded the recorder: another tool's injection, or a static CUDA without it)\n")
    return status
  end
  if #paths == 1 and paths[1] ~= out then
    local okr = os.rename(paths[1], out)
    if okr then paths[1] = out end
  end
  local lines, allocs, peak = record.summary(paths)
  io.stderr:write(("cupola record: %d device allocations, peak %s live%s; command exit %d; " ..
    "%d file%s:\n"):format(allocs, bytes(peak), #paths > 1 and " (the largest of one file)" or "",
    status, #paths, #paths == 1 and "" or "s"))
  for _, l in ipairs(lines) do io.stderr:write(l, "\n") end
  return status
end

return record
