-- spec/run.lua: the test driver behind `make test`.
--   lua5.4 spec/run.lua [C test programs...]
-- Runs each C test program (TAP lines "ok"/"not ok"), then the busted suite,
-- and ends with one plain line: "N passed, N failed" (", N skipped" for the
-- pending #gpu cases when no device is present).
--
-- CUPOLA_SPEC_JOBS=N (N > 1): the C programs and the spec files run as
-- separate jobs, N at a time, one busted process per spec file (busted's
-- arguments from BUSTED_ARGS, the files from BUSTED_FILES or spec/*_spec.lua).
-- Each job's output is shown whole when it ends, in the order they started.
-- It is for the runs under valgrind, a single thread each: one process per
-- core.  CUPOLA_SPEC_FIRST names jobs to start before the rest (each name
-- the end of a job's command: a C program, a spec file): the longest, so
-- that the last to end is a short one.
-- CUPOLA_SPEC_ALONE names jobs (the same way) to run after the others, one
-- at a time: the specs that measure the whole device (its free memory),
-- which other jobs on the same GPU would disturb.
-- CUPOLA_SPEC_TIMEOUT=S stops a job after S seconds and counts it failed.
local passed, failed, skipped = 0, 0, 0

-- /usr/bin/busted starts with "#!/usr/bin/env lua", which may be Lua 5.1 or
-- missing: run it with this interpreter (Lua 5.4) instead.
local function busted_cmd()
  if os.getenv "BUSTED" then return os.getenv "BUSTED" end
  local w = io.popen "command -v busted 2>/dev/null"
  local path = w:read "l"
  w:close()
  local interp = arg[-1] or "lua5.4"
  return string.format("%s %s", interp, path or "busted")
end
local busted = busted_cmd()

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- A C test program's TAP output: its counts, what to show.
local function count_tap(lines, code)
  local ok_n, bad_n = 0, 0
  for _, line in ipairs(lines) do
    if line:match "^not ok" then
      bad_n = bad_n + 1
      io.write(line, "\n")
    elseif line:match "^ok" then
      ok_n = ok_n + 1
    elseif line:match "^#" or line:match "^%s" then
      io.write(line, "\n")
    end
  end
  if code ~= 0 and bad_n == 0 then bad_n = 1 end
  io.write(string.format("   %d passed, %d failed\n", ok_n, bad_n))
  passed, failed = passed + ok_n, failed + bad_n
end

-- A busted run's counts, from the file its output handler wrote.
local function count_busted(summary, ran, what)
  local f = io.open(summary, "r")
  local line = f and f:read "l"
  if f then f:close() end
  os.remove(summary)
  local s, fl, e, p = (line or ""):match "^(%d+) (%d+) (%d+) (%d+)"
  if not s then
    io.write(what, " did not report its counts (it crashed, could not start or was stopped)\n")
    failed = failed + 1
    return
  end
  passed = passed + tonumber(s)
  failed = failed + tonumber(fl) + tonumber(e)
  skipped = skipped + tonumber(p)
  if not ran and tonumber(fl) + tonumber(e) == 0 then failed = failed + 1 end
end

local jobs = tonumber(os.getenv "CUPOLA_SPEC_JOBS" or "")
if not jobs or jobs < 2 then
  for _, prog in ipairs(arg) do
    io.write("== ", prog, "\n")
    io.flush()
    local p = assert(io.popen(prog .. " 2>&1", "r"))
    local lines = {}
    for line in p:lines() do lines[#lines + 1] = line end
    local _, _, code = p:close()
    count_tap(lines, code)
  end
  local summary = os.tmpname()
  io.write("== busted\n")
  io.flush()
  local ran = os.execute(string.format("CUPOLA_SUMMARY=%q %s %s", summary, busted,
    os.getenv "BUSTED_ARGS" or ""))
  count_busted(summary, ran, "busted")
else
  local list = {}
  local files = os.getenv "BUSTED_FILES"
  if files then
    for f in files:gmatch "%S+" do list[#list + 1] = { spec = f } end
  else
    local ls = assert(io.popen "ls spec/*_spec.lua")
    for f in ls:lines() do list[#list + 1] = { spec = f } end
    ls:close()
  end
  for i, prog in ipairs(arg) do table.insert(list, i, { prog = prog }) end
  -- a name in CUPOLA_SPEC_FIRST matches the jobs whose command ends with it
  local function names(var)
    local t = {}
    for w in (os.getenv(var) or ""):gmatch "%S+" do t[#t + 1] = w end
    return t
  end
  -- the place in t of the first name that ends `name`, or nil
  local function place(t, name)
    for r, w in ipairs(t) do
      if name:sub(-#w) == w then return r end
    end
  end
  local firsts, alone = names "CUPOLA_SPEC_FIRST", names "CUPOLA_SPEC_ALONE"
  for i, job in ipairs(list) do
    local name = job.prog or job.spec
    job.n, job.rank = i, place(firsts, name) or math.huge
    job.alone = place(alone, name) ~= nil
  end
  table.sort(list, function(a, b)
    if a.rank ~= b.rank then return a.rank < b.rank end
    return a.n < b.n
  end)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -m 700 " .. sh_quote(dir)))
  local limit = tonumber(os.getenv "CUPOLA_SPEC_TIMEOUT" or "")
  local stop = limit and string.format("timeout -k 10 %d ", limit) or ""
  local scripts, after = {}, {}
  for i, job in ipairs(list) do
    local base = string.format("%s/%03d", dir, i)
    job.log, job.summary, job.rc = base .. ".log", base .. ".sum", base .. ".rc"
    local cmd
    if job.prog then
      cmd = stop .. job.prog
    else
      cmd = string.format("CUPOLA_SUMMARY=%s %s%s %s %s", sh_quote(job.summary), stop, busted,
        os.getenv "BUSTED_ARGS" or "", sh_quote(job.spec))
    end
    local f = assert(io.open(base .. ".sh", "w"))
    f:write(string.format("%s >%s 2>&1 </dev/null\necho $? >%s\n", cmd, sh_quote(job.log), sh_quote(job.rc)))
    f:close()
    local into = job.alone and after or scripts
    into[#into + 1] = base .. ".sh"
  end
  local function run_all(t, name, n)
    if #t == 0 then return end
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(table.concat(t, "\n"), "\n")
    f:close()
    os.execute(string.format("xargs -P %d -n 1 sh <%s", n, sh_quote(dir .. "/" .. name)))
  end
  io.write(string.format("== %d jobs, %d at a time%s%s\n", #list, jobs,
    #after > 0 and string.format(" (%d after them, alone)", #after) or "",
    limit and string.format(", each stopped after %d s", limit) or ""))
  io.flush()
  run_all(scripts, "jobs", jobs)
  run_all(after, "alone", 1)
  for _, job in ipairs(list) do
    local f = io.open(job.rc, "r")
    local code = f and tonumber(f:read "l") or -1
    if f then f:close() end
    local lines = {}
    local lf = io.open(job.log, "r")
    if lf then
      for line in lf:lines() do lines[#lines + 1] = line end
      lf:close()
    end
    if code == 124 or code == 137 then
      lines[#lines + 1] = string.format("not ok - stopped after %d s", limit or 0)
    end
    if job.prog then
      io.write("== ", job.prog, "\n")
      count_tap(lines, code)
    else
      io.write("== busted ", job.spec, "\n", table.concat(lines, "\n"), "\n")
      count_busted(job.summary, code == 0, "busted " .. job.spec)
    end
    os.remove(job.log)
    os.remove(job.rc)
  end
  os.execute("rm -rf " .. sh_quote(dir))
end

io.write("\n")
if skipped > 0 then
  io.write(string.format("%d passed, %d failed, %d skipped\n", passed, failed, skipped))
else
  io.write(string.format("%d passed, %d failed\n", passed, failed))
end
os.exit(failed == 0 and 0 or 1)
