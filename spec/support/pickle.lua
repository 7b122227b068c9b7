-- Snapshot pickles written by hand, for specs: protocol 2 as PyTorch's C++
-- writer writes it (BINUNICODE strings, LONG1 integers of eight bytes,
-- dicts and lists built after a MARK).
--   local pickle = require "spec.support.pickle"
--   pickle.dict { "key", value, ... }   a dict; number values become ints
--   pickle.list { item, ... }, pickle.str(s), pickle.int(n)
-- A whole file is "\128\2" .. object .. ".".
local M = {}

function M.str(s) return "X" .. string.pack("<I4", #s) .. s end

function M.int(n) return "\138\8" .. string.pack("<i8", n) end

function M.dict(kv)
  local out = { "}(" }
  for i = 1, #kv, 2 do
    out[#out + 1] = M.str(kv[i])
    out[#out + 1] = type(kv[i + 1]) == "number" and M.int(kv[i + 1]) or kv[i + 1]
  end
  return table.concat(out) .. "u"
end

function M.list(items) return "](" .. table.concat(items) .. "e" end

return M
