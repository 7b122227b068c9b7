-- The documentation runs as written: every ```lua block of README.md and
-- docs/API.md is a script, run on its own by bin/cupola on the host backend
-- in an empty directory.  A block that truly cannot run alone starts with
-- the line `-- fragment: <why>`; it must still compile.  Where a block quotes
-- what it prints, as `print(...)  --> text`, the output must show that text
-- (quotes in order; "..." in a quote stands for any text; spacing is free;
-- a line that is only `--> text` quotes what the line before printed next).
-- docs/API.md's contents list every `##` section, its links lead to headings
-- that exist, and its table of environment variables names every variable
-- that src/, lua/ and bin/ read.

local read = read_file

-- The ```lua blocks of a Markdown file: {line = first line of code, code =}.
local function lua_blocks(path)
  local blocks, cur, n = {}, nil, 0
  for line in (read(path) .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    if cur then
      if line:match "^```%s*$" then
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    elseif line:match "^```lua%s*$" then
      cur = { line = n + 1, lines = {} }
    end
  end
  assert(cur == nil, path .. ": a ```lua block is never closed")
  for _, b in ipairs(blocks) do b.code = table.concat(b.lines, "\n") .. "\n" end
  return blocks
end

-- The texts a block quotes: `--> text` after code on the same line, and
-- `--> text` on a line of its own (what the line before printed next).
local function quotes(code)
  local q = {}
  for line in code:gmatch "[^\n]+" do
    local want = line:match "^%s*[^%-%s].-%-%->%s*(.-)%s*$" or line:match "^%s*%-%->%s*(.-)%s*$"
    if want and want ~= "" then q[#q + 1] = want end
  end
  return q
end

local root = assert(io.popen "pwd"):read "l"

local function run(code)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir))
  local f = assert(io.open(dir .. "/block.lua", "w"))
  f:write(code)
  f:close()
  local cmd = string.format("cd %s && CUPOLA_BACKEND=host timeout 300 %s/bin/cupola block.lua 2>&1; echo \"exit=$?\"",
    dir, root)
  local p = assert(io.popen(cmd))
  local out = p:read "a"
  p:close()
  os.execute("rm -rf " .. dir)
  local status = tonumber(out:match "exit=(%d+)%s*$")
  return status, (out:gsub("exit=%d+%s*$", ""))
end

for _, doc in ipairs { "README.md", "docs/API.md" } do
  describe(doc, function()
    for _, b in ipairs(lua_blocks(doc)) do
      local where = doc .. ":" .. b.line
      local why = b.code:match "^%-%- fragment:%s*([^\n]*)"
      if why then
        it("has a fragment at " .. where .. " that compiles and says why it cannot run alone", function()
          assert.is_true(#why > 8, where .. ": a fragment must say why it cannot run alone")
          local fn, err = load(b.code, "=" .. where)
          assert(fn, err)
        end)
      else
        it("runs its block at " .. where .. " as written", function()
          local status, out = run(b.code)
          assert(status == 0, where .. " failed:\n" .. out)
          -- Spacing is not compared: print separates values with tabs, the
          -- text may quote them with spaces.
          local flat, pos = out:gsub("[ \t]+", " "), 1
          for _, want in ipairs(quotes(b.code)) do
            -- "..." in a quote stands for any text.
            for piece in (want:gsub("[ \t]+", " ") .. "..."):gmatch "(.-)%.%.%." do
              piece = piece:match "^%s*(.-)%s*$"
              if piece ~= "" then
                local s, e = flat:find(piece, pos, true)
                assert(s, string.format("%s quotes %q, which its output does not show (after what was matched):\n%s",
                  where, want, out))
                pos = e + 1
              end
            end
          end
        end)
      end
    end
  end)
end

-- GitHub's anchor for a heading: lower case, punctuation dropped but - and _,
-- spaces to hyphens; a repeated anchor gets -1, -2, ...
local function anchor(heading)
  return (heading:lower():gsub("[^%w%-_ ]", ""):gsub(" ", "-"))
end

-- The headings of a Markdown file outside its code blocks: {level =, text =}.
local function headings(path)
  local out, fenced = {}, false
  for line in (read(path) .. "\n"):gmatch "(.-)\n" do
    if line:match "^```" then
      fenced = not fenced
    elseif not fenced then
      local hashes, text = line:match "^(#+) (.-)%s*$"
      if hashes then out[#out + 1] = { level = #hashes, text = text } end
    end
  end
  return out
end

describe("docs/API.md as a reference", function()
  local text = read "docs/API.md"

  it("lists every section, in order, in its contents, and nothing else", function()
    local sections = {}
    for _, h in ipairs(headings "docs/API.md") do
      if h.level == 2 then sections[#sections + 1] = h.text end
    end
    local contents = text:match "\nContents:\n\n(.-)\n\n"
    assert.is_truthy(contents, "docs/API.md has no 'Contents:' list")
    -- a section at the left, a subsection of it indented under it (each a
    -- heading of level 3 of that section)
    local listed, under, section = {}, {}, nil
    for _, h in ipairs(headings "docs/API.md") do
      if h.level == 2 then section = h.text elseif h.level == 3 then under[h.text] = section end
    end
    for line in (contents .. "\n"):gmatch "(.-)\n" do
      local indent, label, target = line:match "^(%s*)%- %[(.-)%]%(#(.-)%)$"
      assert.is_truthy(label, "a line of the contents that is no link: " .. line)
      assert.equals(anchor(label), target, "the contents' link for " .. label)
      if indent == "" then
        listed[#listed + 1] = label
      else
        assert.equals(listed[#listed], under[label], "the contents list " .. label .. " under a section it is not in")
      end
    end
    assert.same(sections, listed)
    -- the frameworks' advice and recordings, under their own headings (issue 43, polish)
    for _, sub in ipairs { "Advice for JAX users", "Advice for CuPy users", "JAX's memory profiles", "CuPy's logs" } do
      assert.is_truthy(contents:find("  - [" .. sub .. "]", 1, true), sub)
    end
  end)

  it("links only to headings that exist (README's links into it too)", function()
    local anchors = {}
    for _, h in ipairs(headings "docs/API.md") do
      local a = anchor(h.text)
      local n = anchors[a]
      anchors[a] = (n or -1) + 1
      if n then anchors[a .. "-" .. (n + 1)] = 0 end
    end
    for target in text:gmatch "%]%(#(.-)%)" do
      assert.is_truthy(anchors[target], "docs/API.md links to #" .. target .. ", which no heading has")
    end
    for target in read("README.md"):gmatch "%]%(docs/API%.md#(.-)%)" do
      assert.is_truthy(anchors[target], "README.md links to docs/API.md#" .. target .. ", which no heading has")
    end
  end)

  it("has every environment variable that src/, lua/ and bin/ read in its table", function()
    local section = text:match "\n## Environment variables\n(.-)\n## "
    assert.is_truthy(section, "no section 'Environment variables'")
    local p = assert(io.popen [[grep -rhoE 'getenv *\(? *"[A-Za-z_0-9]+"' src lua bin; grep -hoE '\$\{?CUPOLA_[A-Z_0-9]+' bin/cupola]])
    local found = {}
    for name in p:read("a"):gmatch "[A-Z][A-Za-z_0-9]+" do
      if name ~= "getenv" then found[name] = true end
    end
    p:close()
    local n = 0
    for name in pairs(found) do
      n = n + 1
      assert.is_truthy(section:find("`" .. name .. "`", 1, true),
        "docs/API.md's environment variables do not list " .. name)
    end
    assert.is_true(n >= 8, "found only " .. n .. " variables read by the code")
  end)
end)

-- Polish of issue 43: examples/traces/README.md described the CSV files and
-- jax/ only.
describe("examples/traces/README.md", function()
  it("describes every folder of examples/traces, and the compact form", function()
    local text = read "examples/traces/README.md"
    local p = assert(io.popen "find examples/traces -mindepth 1 -maxdepth 1 -type d")
    for dir in p:lines() do
      local name = dir:match "[^/]+$"
      assert.is_truthy(text:find("\n- `" .. name .. "/`: ", 1, true), name)
      assert.is_truthy(io.open(dir .. "/README.md"), dir .. " has no README.md")
    end
    p:close()
    assert.matches("**The compact form** (`*.cpsnap.gz`)", text, 1, true)
  end)
end)
