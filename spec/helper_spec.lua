-- The spec helper (spec/support/helper.lua) as a spec writer meets it: a
-- GPU-only case declared with gpu_it and reported pending without a device
-- names the spec's own file and line, not the helper's.
local function busted_cmd()
  if os.getenv "BUSTED" then return os.getenv "BUSTED" end
  local w = io.popen "command -v busted 2>/dev/null"
  local path = w:read "l"
  w:close()
  return "lua5.4 " .. (path or "busted")
end

describe("gpu_it", function()
  it("reports a pending case at the spec's own line", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local spec = dir .. "/probe_spec.lua"
    local f = assert(io.open(spec, "w"))
    f:write 'describe("probe", function()\n  it("runs", function() end)\n  gpu_it("needs a GPU", function() end)\nend)\n'
    f:close()
    -- The child always runs on the host backend, where the case is pending.
    local cmd = string.format("CUPOLA_BACKEND=host %s --helper=spec/support/helper.lua %s 2>&1",
      busted_cmd(), spec)
    local p = assert(io.popen(cmd))
    local out = p:read "a"
    p:close()
    os.execute("rm -rf " .. dir)
    -- busted's default output: "Pending → FILE @ LINE"
    assert.matches("1 pending", out, 1, true)
    assert.matches("probe_spec.lua @ 3\n", out, 1, true)
    assert.not_matches("helper.lua @", out, 1, true)
  end)
end)
