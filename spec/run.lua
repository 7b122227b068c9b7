-- spec/run.lua: the test driver behind `make test`.
--   lua5.4 spec/run.lua [C test programs...]
-- Runs each C test program (TAP lines "ok"/"not ok"), then the busted suite,
-- and ends with one plain line: "N passed, N failed" (", N skipped" for the
-- pending #gpu cases when no device is present).
local passed, failed, skipped = 0, 0, 0

for _, prog in ipairs(arg) do
  io.write("== ", prog, "\n")
  io.flush()
  local p = assert(io.popen(prog .. " 2>&1", "r"))
  local ok_n, bad_n = 0, 0
  for line in p:lines() do
    if line:match "^not ok" then
      bad_n = bad_n + 1
      io.write(line, "\n")
    elseif line:match "^ok" then
      ok_n = ok_n + 1
    elseif line:match "^#" or line:match "^%s" then
      io.write(line, "\n")
    end
  end
  local _, _, code = p:close()
  if code ~= 0 and bad_n == 0 then bad_n = 1 end
  io.write(string.format("   %d passed, %d failed\n", ok_n, bad_n))
  passed, failed = passed + ok_n, failed + bad_n
end

local summary = os.tmpname()
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
local cmd = string.format("CUPOLA_SUMMARY=%q %s %s", summary, busted, os.getenv "BUSTED_ARGS" or "")
io.write("== busted\n")
io.flush()
local ran = os.execute(cmd)
local f = io.open(summary, "r")
local line = f and f:read "l"
if f then f:close() end
os.remove(summary)
local s, fl, e, p = (line or ""):match "^(%d+) (%d+) (%d+) (%d+)"
if not s then
  io.write("busted did not report its counts (it crashed or could not start)\n")
  failed = failed + 1
else
  passed = passed + tonumber(s)
  failed = failed + tonumber(fl) + tonumber(e)
  skipped = skipped + tonumber(p)
  if not ran and tonumber(fl) + tonumber(e) == 0 then failed = failed + 1 end
end

io.write("\n")
if skipped > 0 then
  io.write(string.format("%d passed, %d failed, %d skipped\n", passed, failed, skipped))
else
  io.write(string.format("%d passed, %d failed\n", passed, failed))
end
os.exit(failed == 0 and 0 or 1)
