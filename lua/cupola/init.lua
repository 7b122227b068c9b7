--- cupola: GPU memory allocation experiments from Lua 5.4.
-- The C core (cupola.core) does every allocation, copy and kernel; this file
-- only gathers it with the Lua helpers into one module table.
local core = require "cupola.core"

local cupola = {}
for k, v in pairs(core) do cupola[k] = v end

cupola.version = "0.1.0"
cupola.trace = require "cupola.trace"
cupola.bench = require "cupola.bench"
cupola.report = require "cupola.report"
cupola.timeline = require "cupola.timeline"

--- Bytes as a short human string: 4194304 -> "4.00 MiB".
cupola.format_bytes = cupola.report.bytes

return cupola
