-- Loaded by busted before every spec file.  GPU-only cases are declared with
-- gpu_it: on the CUDA backend they run (tagged #gpu); elsewhere they are
-- reported as pending, never silently skipped.
local cupola = require "cupola"

function _G.gpu_it(name, fn)
  local busted = require "busted"
  if cupola.backend() == "cuda" then
    busted.it(name .. " #gpu", fn)
  else
    busted.pending(name .. " #gpu (needs a CUDA device; backend is " .. cupola.backend() .. ")")
  end
end
