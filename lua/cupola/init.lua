--- cupola: GPU memory allocation experiments from Lua 5.4.
-- The C core (cupola.core) does every allocation, copy and kernel; this file
-- only gathers it with the Lua helpers into one module table.
local core = require "cupola.core"

local cupola = {}
for k, v in pairs(core) do cupola[k] = v end

cupola.version = "0.1.0"

-- Where <cupola/device.h> and the host prelude are, for cupola.module:
-- $CUPOLA_INCLUDE (folders separated by ':'), else beside this file once
-- installed (<LUADIR>/cupola/include), else the source tree's cuda/include
-- and src/include (this file is lua/cupola/init.lua there).  Relative
-- folders are made absolute by the core (realpath), against the current
-- directory now, so a later chdir does not lose them.
do
  local dirs = {}
  local env = os.getenv "CUPOLA_INCLUDE"
  if env and env ~= "" then
    for d in env:gmatch "[^:]+" do dirs[#dirs + 1] = d end
  else
    local src = debug.getinfo(1, "S").source
    local here = src:sub(1, 1) == "@" and src:sub(2):match "^(.*)/[^/]*$" or "."
    local function exists(p)
      local f = io.open(p, "r")
      if f then f:close() return true end
      return false
    end
    if exists(here .. "/include/cupola/device.h") then
      dirs[#dirs + 1] = here .. "/include"
    end
    local root = here .. "/../.."
    if exists(root .. "/cuda/include/cupola/device.h") then
      dirs[#dirs + 1] = root .. "/cuda/include"
      if exists(root .. "/src/include/cupola/allocator.h") then dirs[#dirs + 1] = root .. "/src/include" end
    end
  end
  core._set_include_path(dirs)
end
cupola.trace = require "cupola.trace"
cupola.bench = require "cupola.bench"
cupola.report = require "cupola.report"

--- Bytes as a short human string: 4194304 -> "4.00 MiB".
cupola.format_bytes = cupola.report.bytes

return cupola
