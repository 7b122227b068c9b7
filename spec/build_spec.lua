-- The build's output (issue 43, polish): a line per file it makes, the
-- whole command with V=1 (it printed every compiler command in full, a
-- screen each).
describe("make's output", function()
  local function make(args)
    local dir = os.tmpname()
    os.remove(dir)
    -- make is not built with the sanitizers: under make test-asan the
    -- preloaded runtime would report make's own reads (LD_PRELOAD unset);
    -- and a parent make -j's jobserver is not this make's (MAKEFLAGS unset)
    local p = assert(io.popen(("env -u LD_PRELOAD -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory BUILD=%s %s %s/obj/core/size.o 2>&1; rm -rf %s")
      :format(dir, args, dir, dir)))
    local out = p:read "a"
    p:close()
    return out, dir
  end

  it("is one line per file made", function()
    local out, dir = make ""
    assert.equals(("  CC      %s/obj/core/size.o\n"):format(dir), out)
  end)

  it("is each command whole with V=1", function()
    local out, dir = make "V=1"
    assert.matches("^%S+ .* %-c %-o " .. dir:gsub("%p", "%%%0") .. "/obj/core/size%.o src/core/size%.c\n$", out)
  end)
end)
