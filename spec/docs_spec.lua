-- The documentation runs as written: every ```lua block of README.md and
-- docs/API.md is a script, run on its own by bin/cupola on the host backend
-- in an empty directory.  A block that truly cannot run alone starts with
-- the line `-- fragment: <why>`; it must still compile.  Where a block quotes
-- what it prints, as `print(...)  --> text`, the output must show that text
-- (quotes in order; "..." in a quote stands for any text; spacing is free).

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read "a"
  f:close()
  return s
end

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

-- The texts a block quotes: `--> text` after code on the same line.
local function quotes(code)
  local q = {}
  for line in code:gmatch "[^\n]+" do
    local want = line:match "^%s*[^%-%s].-%-%->%s*(.-)%s*$"
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
