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

  -- Bug fixed with this spec: Lua's own REPL printed p:stats() as
  -- "table: 0x55d4...".
  it_repl("prints tables readably, byte counts also in MiB", function()
    local ok, out = repl('p = cupola.pool { kind = "tlsf" }\nb = p:alloc(1000)\np:stats()\n' ..
      '{ 1, 2, { a = 1, ["x y"] = "s" } }\n= 3\nreturn 4, 5\n')
    assert(ok, out)
    assert.not_matches("table: 0x", out, 1, true)
    assert.matches("\n  reserved = 2097152,  -- 2.00 MiB\n", out, 1, true)
    assert.matches("\n  used = 1000,\n", out, 1, true)
    assert.matches('\n{ 1, 2, { a = 1, ["x y"] = "s" } }\n', out, 1, true)
    assert.matches("\n3\n4\t5\n", out, 1, true)
  end)

  -- Bug fixed with this spec: help "nonexistent" named bin/cupola's own
  -- chunk ("(command line):1:") and cupola.trace.load of a missing file no
  -- line at all (the REPL ran each line as `return expr`, a tail call that
  -- took the user's line off the stack), both with cupola's own frames under
  -- the message.
  it_repl("errors name the user's line, without cupola's own frames", function()
    local ok, out = repl('help "nonexistent"\ncupola.trace.load("/nonexistent/x.csv")\n' ..
      'p = cupola.pool { kind = "tlsf" } b = p:alloc(10) b:free()\nb:write "x"\n' ..
      'function f() error("boom") end\nf()\nprint("still here")\n')
    assert(ok, out)
    assert.matches("stdin:1: cupola.help: no topic 'nonexistent'", out, 1, true)
    assert.matches("stdin:1: [^\n]*/nonexistent/x%.csv[^\n]*cannot open", out)
    assert.matches("stdin:1: attempt to use a closed cupola.Buffer: it was freed", out, 1, true)
    assert.not_matches("(command line)", out, 1, true)
    assert.not_matches("lua/cupola/", out, 1, true)
    assert.not_matches("[C]:", out, 1, true)
    -- the user's own frames are shown where there are some
    assert.matches("stdin:1: boom\nstack traceback:\n\tstdin:1: in function 'f'\n", out, 1, true)
    assert.matches("still here", out, 1, true)
  end)
end)

describe("cupola.repl.show", function()
  local show = require("cupola.repl").show
  it("writes a table's fields sorted, list items first, on one line when short", function()
    assert.equals('{ 1, 2, a = 1, b = "x", [true] = false }', show { 1, 2, b = "x", a = 1, [true] = false })
    assert.equals("{}", show {})
    assert.equals("{ 1.0, 0.5 }", show { 1.0, 0.5 })
  end)
  it("writes a long table one field a line, byte counts also in KiB/MiB/GiB", function()
    local text = show { reserved = 64 * 1024 * 1024, used = 1000, allocs = 3, free_bytes = 1536,
      name = string.rep("n", 60) }
    assert.equals("{\n  allocs = 3,\n  free_bytes = 1536,  -- 1.50 KiB\n  name = \"" .. string.rep("n", 60)
      .. "\",\n  reserved = 67108864,  -- 64.0 MiB\n  used = 1000,\n}", text)
  end)
  it("names a table met again on the way down instead of looping", function()
    local t = { a = 1 }
    t.self = t
    assert.matches("self = <table: 0x%x+: seen above>", show(t))
  end)
  it("uses a table's __tostring, and a handle's", function()
    assert.equals("T", show(setmetatable({}, { __tostring = function() return "T" end })))
    local s <close> = cupola.stream()
    assert.equals(tostring(s), show(s))
    assert.equals("{ s = " .. tostring(s) .. " }", show { s = s })
  end)
end)

-- Every `##` section of docs/API.md is a topic, and each topic's page
-- mentions what its section documents: the functions, methods, kinds and
-- headers its headings name, and the names in the first column of its
-- tables; a section that names none of those is held to the words of its
-- headings.  The names a section's headings document lead to its topic.
describe("cupola.help and docs/API.md", function()
  local read = read_file

  -- The sections: {heading =, heads = {### headings}, cells = {first table cells}}.
  local function sections()
    local out, cur, fenced = {}, nil, false
    for line in (read "docs/API.md" .. "\n"):gmatch "(.-)\n" do
      if line:match "^```" then
        fenced = not fenced
      elseif not fenced then
        local h2 = line:match "^## (.-)%s*$"
        if h2 then
          cur = { heading = h2, heads = {}, cells = {} }
          out[#out + 1] = cur
        elseif cur then
          local h3 = line:match "^###+ (.-)%s*$"
          if h3 then cur.heads[#cur.heads + 1] = h3 end
          local cell = line:match "^| ([^|]+) |"
          if cell and not cell:match "^%-%-%-" then cur.cells[#cur.cells + 1] = cell end
        end
      end
    end
    return out
  end

  -- The API names a piece of Markdown documents, from its `code` spans:
  -- cupola.x.y, methods (:name), kinds, <headers>, make targets, variables.
  -- (In tables' first cells, only functions, methods and variables.)
  local function names(md, cells)
    local out = {}
    for code in md:gmatch "`([^`]+)`" do
      for n in code:gmatch "cupola%.[%a_][%w_%.]*" do out[#out + 1] = (n:gsub("%.$", "")) end
      for n in code:gmatch "%f[%w_][%a_][%w_]*:([%a_][%w_]*)" do out[#out + 1] = ":" .. n end
      for n in code:gmatch "%f[%w_.]([%a_][%w_]*%.[%a_][%w_]*)%(" do
        if not n:match "^cupola%." then out[#out + 1] = n end
      end
      if cells then
        if code:match "^[A-Z][A-Z0-9_]+$" and code:find "_" then out[#out + 1] = code end
      else
        for n in code:gmatch "kind%s*=%s*\"([%w_]+)\"" do out[#out + 1] = n end
        for n in code:gmatch "<(cupola/[%w_%.]+)>" do out[#out + 1] = n end
        if code:match "^make [%w%-]+$" then out[#out + 1] = code end
      end
    end
    return out
  end

  local function words(text)
    local out, skip = {}, { the = true, that = true, with = true, from = true, what = true, this = true,
      your = true, own = true, into = true, means = true, here = true }
    for w in text:lower():gsub("`", ""):gmatch "%a+" do
      if #w >= 4 and not skip[w] then out[#out + 1] = w end
    end
    return out
  end

  local topics = require("cupola.help").topics
  local by_section = {}
  for _, t in ipairs(topics) do
    if t.section then by_section[t.section] = t end
  end

  it("has a topic for every section of the reference, and every topic's section is there", function()
    local seen = {}
    for _, s in ipairs(sections()) do
      seen[s.heading] = true
      assert.is_truthy(by_section[s.heading], "docs/API.md's section '" .. s.heading .. "' has no help topic")
    end
    for _, t in ipairs(topics) do
      assert.is_truthy(t.section, "help topic '" .. t.name .. "' names no section of docs/API.md")
      assert.is_truthy(seen[t.section], "help topic '" .. t.name .. "': docs/API.md has no section '" .. t.section .. "'")
    end
  end)

  it("mentions on each topic's page what its section documents", function()
    for _, s in ipairs(sections()) do
      local t = by_section[s.heading]
      local page = cupola.help(t.name)
      local want = names(s.heading .. " " .. table.concat(s.heads, " "))
      for _, n in ipairs(names(table.concat(s.cells, " "), true)) do want[#want + 1] = n end
      if #want == 0 then want = words(s.heading .. " " .. table.concat(s.heads, " ")) end
      assert.is_true(#want > 0, s.heading)
      for _, n in ipairs(want) do
        local short = n:gsub("^cupola%.", "")
        assert.is_truthy(page:find(n, 1, true) or page:find(short, 1, true) or page:lower():find(n, 1, true),
          string.format("help \"%s\" does not mention %s, which docs/API.md's section '%s' documents", t.name, n, s.heading))
      end
    end
  end)

  it("leads the names a section's headings document to its topic", function()
    -- Functions of the module, kinds, and the methods a section is named
    -- after; a name documented by two sections, or a topic's own, is left.
    local owner, count, topic_names = {}, {}, {}
    for _, t in ipairs(topics) do topic_names[t.name] = true end
    for _, s in ipairs(sections()) do
      local seen, keys = {}, {}
      for _, n in ipairs(names(s.heading .. " " .. table.concat(s.heads, " "))) do
        if not n:match "^:" and not n:find "/" and not n:match "^make " then keys[#keys + 1] = n end
      end
      for _, n in ipairs(names(s.heading)) do
        if n:match "^:" then keys[#keys + 1] = n end
      end
      for _, n in ipairs(keys) do
        local key = n:match "([%w_]+)$"
        if key and not seen[key] and not topic_names[key] then
          seen[key] = true
          owner[key] = by_section[s.heading].name
          count[key] = (count[key] or 0) + 1
        end
      end
    end
    for key, topic in pairs(owner) do
      if count[key] == 1 then
        local ok, page = pcall(cupola.help, key)
        assert.is_true(ok, "cupola.help \"" .. key .. "\" is not a topic (docs/API.md documents it under help \"" .. topic .. "\")")
        assert.equals(cupola.help(topic), page, "cupola.help \"" .. key .. "\" should lead to help \"" .. topic .. "\"")
      end
    end
  end)
end)
