--- cupola.report: plain-text tables and units for experiment output.
local report = {}

local units = { "B", "KiB", "MiB", "GiB", "TiB" }

--- report.bytes(n) -> "4.00 MiB"
function report.bytes(n)
  local i, v = 1, n
  while v >= 1024 and i < #units do
    v, i = v / 1024, i + 1
  end
  if i == 1 then return string.format("%d B", n) end
  return string.format("%.2f %s", v, units[i])
end

--- report.table(headers, rows) -> string: columns aligned, numbers right.
-- rows are arrays of values (converted with tostring).
function report.table(headers, rows)
  local widths, cells = {}, {}
  local function measure(row)
    local out = {}
    for c, v in ipairs(row) do
      local s = type(v) == "number" and math.type(v) == "float" and string.format("%.3f", v) or tostring(v)
      out[c] = s
      widths[c] = math.max(widths[c] or 0, #s)
    end
    return out
  end
  local head = measure(headers)
  for r, row in ipairs(rows) do cells[r] = measure(row) end
  -- A column of numbers is right-aligned, its header too.
  local numeric_cols = {}
  for c = 1, #head do numeric_cols[c] = rows[1] and type(rows[1][c]) == "number" or nil end
  local function line(row, src)
    local parts = {}
    for c, s in ipairs(row) do
      local numeric = src and (src[c] == true or type(src[c]) == "number")
      parts[c] = numeric and string.rep(" ", widths[c] - #s) .. s or s .. string.rep(" ", widths[c] - #s)
    end
    return (table.concat(parts, "  "):gsub("%s+$", ""))
  end
  local out = { line(head, numeric_cols), (line((function()
    local d = {}
    for c = 1, #head do d[c] = string.rep("-", widths[c]) end
    return d
  end)())) }
  for r, row in ipairs(cells) do out[#out + 1] = line(row, rows[r]) end
  return table.concat(out, "\n")
end

return report
