--- cupola: GPU memory allocation experiments from Lua 5.4.
-- The C core (cupola.core) does every allocation, copy and kernel; this file
-- only gathers it with the Lua helpers into one module table.
local core = require "cupola.core"

local cupola = {}
-- (private functions of the core, named with a leading "_", stay there)
for k, v in pairs(core) do
  if k:sub(1, 1) ~= "_" then cupola[k] = v end
end

cupola.version = "0.1.0"

-- cupola's C headers: <cupola/device.h> and the host prelude (cupola.module)
-- and <cupola/allocator.h> (plugins).  Installed, they all sit beside this
-- file (<LUADIR>/cupola/include); in the source tree (this file is
-- lua/cupola/init.lua there) in cuda/include and src/include.
--   cupola.include_dir: the folder of <cupola/allocator.h>, absolute (the
--     include path of plugins compiled from source, and of a user's Makefile).
--   The kernels' include path: $CUPOLA_INCLUDE (folders separated by ':'),
--     else the folders of both headers; the core makes them absolute
--     (realpath) against the current directory now, so a later chdir does
--     not lose them.
-- Both go down to the core, which never looks them up here.
do
  local src = debug.getinfo(1, "S").source
  local here = src:sub(1, 1) == "@" and src:sub(2):match "^(.*)[/\\][^/\\]*$" or "."
  local function holding(header)
    for _, d in ipairs { here .. "/include", here .. "/../../cuda/include", here .. "/../../src/include" } do
      local f = io.open(d .. "/cupola/" .. header)
      if f then
        f:close()
        return d
      end
    end
  end
  local kernels, plugins = holding "device.h", holding "allocator.h"
  if plugins and plugins:sub(1, 1) ~= "/" then
    local pwd = os.getenv "PWD"
    cupola.include_dir = pwd and pwd .. "/" .. plugins or plugins
  else
    cupola.include_dir = plugins
  end
  local dirs = {}
  local env = os.getenv "CUPOLA_INCLUDE"
  if env and env ~= "" then
    for d in env:gmatch "[^:]+" do dirs[#dirs + 1] = d end
  else
    dirs[#dirs + 1] = kernels
    if plugins ~= kernels then dirs[#dirs + 1] = plugins end
  end
  core._set_include_path(dirs, cupola.include_dir)
end
cupola.trace = require "cupola.trace"
cupola.bench = require "cupola.bench"
cupola.report = require "cupola.report"
cupola.timeline = require "cupola.timeline"

--- cupola.conformance(make_pool, opts): the conformance battery as a
-- function returning a report (lua/cupola/conformance.lua, loaded lazily).
function cupola.conformance(make_pool, opts)
  return require("cupola.conformance").run(make_pool, opts)
end

--- cupola.advise(trace_or_path, opts) -> {rows = {...}, recommended = row, ...}:
-- the PYTORCH_CUDA_ALLOC_CONF setting to use for a PyTorch snapshot
-- (lua/cupola/advise.lua, loaded lazily).
function cupola.advise(src, opts)
  return require("cupola.advise").run(src, opts)
end

--- cupola.help(topic) -> string: the API in one screen, or one topic's page.
cupola.help = (require "cupola.help").text

--- Bytes as a short human string: 4194304 -> "4.00 MiB".
cupola.format_bytes = cupola.report.bytes

return cupola
