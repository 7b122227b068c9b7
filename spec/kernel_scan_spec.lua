-- The kernel source scanner (src/core/kernel/scan.c) on inputs found by
-- fuzz-scan: line numbers it reports must be the source's.
local cupola = require "cupola"
local HOST = cupola.backend() == "host"
local it_host = HOST and it or function(name) pending(name .. " (host backend only)") end

describe("the kernel source scanner", function()
  -- bug: a string literal continued with backslash-newline (or an
  -- unterminated one) swallowed its line ending, so every later line number
  -- was one short
  it_host("counts the lines of continued string literals (a nested launch's line)", function()
    local src = 'const char *s = "a\\\nb";\nchar c = \'x\nint y;\n' ..
      "__global__ void child(int *x) { x[0] = 1; }\n" ..
      "__global__ void parent(int *x) {\n  child<<<1, 1>>>(x);\n}\n"
    local ok, err = pcall(cupola.module, { name = "lines.cu", source = src })
    assert.is_false(ok)
    -- the launch is on line 7
    assert.matches("lines%.cu:7: ", err)
  end)
end)
