-- cupola.help: the API in one screen, a page per topic, and the REPL that
-- shows them (bin/cupola with no script).
local cupola = require "cupola"
local child = require "spec.support.child"

local function lines(text)
  local out = {}
  for l in (text .. "\n"):gmatch "(.-)\n" do out[#out + 1] = l end
  return out
end

local function all_text()
  local parts = { cupola.help() }
  for _, t in ipairs(require("cupola.help").topics) do parts[#parts + 1] = cupola.help(t.name) end
  return table.concat(parts, "\n")
end

describe("cupola.help", function()
  it("lists the API in one screen: at most 50 lines of at most 100 columns", function()
    local ls = lines(cupola.help())
    assert.is_true(#ls <= 50, #ls .. " lines")
    for _, l in ipairs(ls) do
      assert.is_true(utf8.len(l) <= 100, "too wide: " .. l)
    end
  end)

  it("names every function of the module and of its tables", function()
    local text = all_text()
    for k, v in pairs(cupola) do
      if type(v) == "function" then
        assert.is_truthy(text:find("cupola." .. k, 1, true), "cupola.help does not mention cupola." .. k)
      end
    end
    for _, sub in ipairs { "kernels", "trace", "mempool", "bench", "report" } do
      for k, v in pairs(cupola[sub]) do
        if type(v) == "function" then
          assert.is_truthy(text:find(sub .. "." .. k, 1, true) or text:find("." .. k .. "(", 1, true),
            "cupola.help does not mention cupola." .. sub .. "." .. k)
        end
      end
    end
    for _, k in ipairs { "default_stream", "version" } do
      assert.is_truthy(text:find("cupola." .. k, 1, true), "cupola.help does not mention cupola." .. k)
    end
  end)

  it("names every method of every handle type on that type's page", function()
    local reg = debug.getregistry()
    for _, tname in ipairs { "cupola.Stream", "cupola.Event", "cupola.Buffer", "cupola.Mempool", "cupola.Pool",
      "cupola.Trace", "cupola.Module", "cupola.Kernel", "cupola.DevicePool" } do
      local methods = assert(reg[tname] and reg[tname].methods, tname)
      local page = cupola.help(tname)
      for m in pairs(methods) do
        assert.is_truthy(page:find(":" .. m .. "(", 1, true), tname .. ":" .. m .. " is not on its help page")
      end
    end
  end)

  it("gives a page for a topic name, a function or a handle", function()
    assert.matches('^cupola.help "pool"', cupola.help "pool")
    assert.matches("kind", cupola.help "pool")
    assert.equals(cupola.help "pool", cupola.help(cupola.pool))
    assert.equals(cupola.help "kernels", cupola.help(cupola.kernels.spin))
    assert.equals(cupola.help "trace", cupola.help(cupola.trace.load))
    assert.equals(cupola.help "mempool", cupola.help(cupola.mempool.default))
    local s <close> = cupola.stream()
    assert.equals(cupola.help "stream", cupola.help(s))
    local b <close> = cupola.malloc(16)
    assert.equals(cupola.help "buffer", cupola.help(b))
  end)

  it("raises naming the topic it does not know, and lists the topics", function()
    local ok, err = pcall(cupola.help, "nosuch")
    assert.is_false(ok)
    assert.matches("cupola.help: no topic 'nosuch' (topics: basics device", err, 1, true)
    ok, err = pcall(cupola.help, 42)
    assert.is_false(ok)
    assert.matches("no topic for this number", err, 1, true)
  end)

  it("never prints", function()
    local real = io.write
    local printed = false
    local saved_print = print
    _G.print = function() printed = true end
    io.write = function() printed = true end
    cupola.help()
    cupola.help "pool"
    require("cupola.help").banner()
    _G.print, io.write = saved_print, real
    assert.is_false(printed)
  end)
end)

describe("the REPL (bin/cupola with no script)", function()
  local built = io.open "build/cupola/core.so"
  if built then built:close() end
  local function it_repl(name, fn)
    if not child.available then
      pending(name .. " (no child processes under a preloaded libtsan)")
    elseif not built then
      pending(name .. " (bin/cupola runs the tree's build/cupola/core.so: run make)")
    else
      it(name, fn)
    end
  end

  -- Without this process's sanitizer preloads: bin/cupola uses build/.
  local function repl(input)
    local inp = tmpfile(input)
    local p = assert(io.popen(string.format(
      "env -u LD_PRELOAD -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 CUPOLA_BACKEND=%s bin/cupola < %s 2>&1",
      cupola.backend(), inp)))
    local out = p:read "a"
    local ok = p:close()
    os.remove(inp)
    return ok, out
  end

  it_repl("starts by naming the version, the backend and the device, and help() lists the API", function()
    local ok, out = repl 'help()\nhelp "stream"\nprint(cupola.bytes "1KiB")\n'
    assert(ok, out)
    local banner = out:match("(cupola %d+%.%d+%.%d+, backend [^\n]*)")
    assert.is_truthy(banner, out)
    assert.matches("backend " .. cupola.backend(), banner, 1, true)
    if cupola.backend() == "cuda" then
      assert.matches(cupola.device().name, banner, 1, true)
    else
      assert.matches("emulated on the CPU", banner, 1, true)
    end
    assert.matches("help() lists the API", out, 1, true)
    assert.matches(cupola.help(), out, 1, true)
    assert.matches(cupola.help "stream", out, 1, true)
    assert.matches("\n1024\n", out, 1, true)
  end)

  it_repl("shows what cupola.help returns, and errors without leaving", function()
    local ok, out = repl 'cupola.help "event"\ncupola.help "nosuch"\nprint("still here")\n'
    assert(ok, out)
    assert.matches(cupola.help "event", out, 1, true)
    assert.matches("no topic 'nosuch'", out, 1, true)
    assert.matches("still here", out, 1, true)
  end)
end)
