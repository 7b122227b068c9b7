--- cupola.advise.text: the report as text (what bin/cupola advise prints,
-- and tostring of cupola.advise's result): the answer first, then the
-- table, the columns defined, the warnings and how to read the figures,
-- every line within the width.  Also the table's cells as the HTML page
-- shows them (text.columns).  A framework's words come from its module
-- (advise/modules.lua: summary, terms, aside_title).
local report = require "cupola.report"
local modules = require "cupola.advise.modules"

local text = {}

local bytes = report.bytes

local SAME = 1                     -- a change under 1 % is none

-- A change against the recorded run, as a cell: "same" under 1 %.
local function pct(x)
  if not x then return "" end
  if math.abs(x) < SAME then return "same" end
  return ("%+.1f %%"):format(x)
end

--- text.width() -> the width advise's text fits: $COLUMNS where it is a
-- number, else the terminal's where the output goes to one (a shell sets
-- COLUMNS without exporting it), else 100; at least 40.
function text.width()
  local c = math.tointeger(tonumber(os.getenv "COLUMNS" or ""))
  if not (c and c > 0) then
    local ok, core = pcall(require, "cupola.core")
    c = ok and core._columns and core._columns() or nil
  end
  if c and c >= 40 then return c end
  if c and c > 0 then return 40 end
  return 100
end

local function len(s) return utf8.len(s) or #s end

-- s in lines of at most width characters, the first after lead, the others
-- after as many spaces; a word longer than a line is cut.
local function wrap(lead, s, width, indent)
  local lines, line = {}, lead
  indent = indent or string.rep(" ", len(lead))
  local room = math.max(width - len(indent), 10)
  local words = {}
  -- a size stays on one line with its unit ("678.00 MiB")
  s = s:gsub("(%d) ([KMGT]?i?B%f[^%w])", "%1\1%2")
  for word in s:gmatch "%S+" do
    word = word:gsub("\1", " ")
    while len(word) > room do
      words[#words + 1] = word:sub(1, room)
      word = word:sub(room + 1)
    end
    words[#words + 1] = word
  end
  local fresh = true
  for _, word in ipairs(words) do
    if not fresh and len(line) + 1 + len(word) > width then
      lines[#lines + 1] = line
      line = indent .. word
    elseif fresh then
      line = line .. word
    else
      line = line .. " " .. word
    end
    fresh = false
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end
text.wrap = wrap

-- A command line in lines of at most width characters, continued with
-- " \\" as a shell reads it; where it cannot fit after lead, at column 0;
-- a word longer than a line is cut after a comma with a backslash at the
-- end of the line and goes on at column 0, which a POSIX shell reads as
-- one word (the line must still run when pasted).  Its note (the module's
-- paste's second value) goes above it as a shell comment: a backslash in
-- a comment continues nothing, so a note beside it could not wrap.
local function command_lines(lead, s, width, note)
  if note then
    return wrap(lead .. "# ", note, width, lead .. "# ") .. "\n" .. command_lines(lead, s, width)
  end
  local words = {}
  for word in s:gmatch "%S+" do words[#words + 1] = word end
  for _, w in ipairs(words) do
    if len(lead) + len(w) + 2 > width then lead = "" end
  end
  local lines, line = {}, lead
  local fresh = true
  for _, word in ipairs(words) do
    if not fresh and len(line) + 1 + len(word) + 2 > width then
      lines[#lines + 1] = line .. " \\"
      line = lead .. "  " .. word
    else
      line = fresh and line .. word or line .. " " .. word
    end
    fresh = false
    while len(line) + 2 > width do
      local cut = line:sub(1, width - 2):match "^.*,()"
      if not cut or cut <= len(lead) + 1 then break end
      lines[#lines + 1] = line:sub(1, cut - 1) .. "\\"
      line = line:sub(cut)
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

-- A setting's name in lines of at most w characters: cut after its commas
-- where it can be, else anywhere.
local function name_lines(name, w)
  if len(name) <= w then return { name } end
  local out, line = {}, ""
  for part in name:gmatch "[^,]+,?" do
    if line ~= "" and len(line) + len(part) > w then
      out[#out + 1] = line
      line = ""
    end
    line = line .. part
    while len(line) > w do
      out[#out + 1] = line:sub(1, w)
      line = line:sub(w + 1)
    end
  end
  if line ~= "" then out[#out + 1] = line end
  return out
end

-- What "vs" compares with: the recorded run where the result has a row of
-- the setting it was recorded under, else the module's baseline (an RMM
-- log says nothing of its setting: PyTorch's defaults, replayed).
local function recorded_row(res)
  for _, r in ipairs(res.rows) do if r.recorded then return r end end
end
local function versus(res)
  if recorded_row(res) then return "recorded", "the recorded run" end
  return "baseline", res.baseline_from or "the baseline"
end

-- One unit for a column of byte counts, so its figures compare at a
-- glance ("59.38 GiB" over "266.00 MiB" reads as the smaller): the unit
-- report.bytes gives the column's least figure (none shows below 1), one
-- up where the largest would need more than five digits before the point.
local UNITS = { "B", "KiB", "MiB", "GiB", "TiB" }
local function unit_of(values)
  local lo, hi
  for _, v in pairs(values) do
    if v > 0 then lo, hi = math.min(lo or v, v), math.max(hi or v, v) end
  end
  if not lo then return function(v) return bytes(v) end end
  local k = 1
  while lo >= 1024 and k < #UNITS do lo, k = lo / 1024, k + 1 end
  while hi / 1024 ^ (k - 1) >= 100000 and k < #UNITS do k = k + 1 end
  if k == 1 then return function(v) return bytes(v) end end
  return function(v) return ("%.2f %s"):format(v / 1024 ^ (k - 1), UNITS[k]) end
end

-- The columns: key, header lines, right-aligned, and the cell of a row.
local function column_set(res)
  local limited = res.limit ~= nil
  -- the figures of each byte column, for its unit
  local least_v, reserved_v, overhead_v = {}, {}, {}
  for i, r in ipairs(res.rows) do
    least_v[i] = r.min_memory
    if not r.error and not r.reserved_text and (not limited or r.fits) then reserved_v[i] = r.peak_reserved end
    if not r.error and not r.reserved_text and not limited then overhead_v[i] = r.overhead end
  end
  local least_b, reserved_b, overhead_b = unit_of(least_v), unit_of(reserved_v), unit_of(overhead_v)
  local searched = false
  for _, r in ipairs(res.rows) do if r.min_memory or r.search_steps then searched = true end end
  -- "vs recorded" where there is a recorded run to compare with (where the
  -- module has no baseline, a column of blanks)
  local compared = false
  for _, r in ipairs(res.rows) do if r.change_pct then compared = true end end
  -- under a limit, the figures of a run that stopped say nothing
  local function stopped(r) return r.error or (limited and not r.fits) end
  local cols = {}
  local function col(key, head, f) cols[#cols + 1] = { key = key, head = head, right = true, cell = f } end
  if res.largest_search then
    col("largest", { "largest", "size" }, function(r) return r.largest and tostring(r.largest) or "none" end)
  end
  if limited then
    if searched then
      col("least", { "least", "memory" }, function(r) return r.min_memory and least_b(r.min_memory) or "-" end)
    end
    col("fits", { "fits" }, function(r) return r.error and "error" or r.fits and "yes" or "no" end)
    local any = false
    for _, r in ipairs(res.rows) do if r.fits then any = true end end
    -- where nothing fits, no run has figures to show
    if any then
      col("retries", { "retries" }, function(r) return stopped(r) and "-" or tostring(r.retries) end)
      col("reserved", { "peak", "reserved" }, function(r)
        return stopped(r) and "-" or r.reserved_text or reserved_b(r.peak_reserved)
      end)
      if compared then
        col("change", { "vs", (versus(res)) }, function(r) return stopped(r) and "-" or pct(r.change_pct) end)
      end
    end
  else
    col("reserved", { "peak", "reserved" }, function(r)
      return r.error and "error" or r.reserved_text or reserved_b(r.peak_reserved) .. (r.complete and "" or "*")
    end)
    col("overhead", { "overhead" }, function(r)
      return r.error and "-" or r.reserved_text and "" or overhead_b(r.overhead or 0)
    end)
    col("calls", { "device", "calls" }, function(r) return r.error and "-" or tostring(r.device_allocs) end)
    if compared then
      col("change", { "vs", (versus(res)) }, function(r) return r.error and "-" or pct(r.change_pct) end)
    end
    if searched then
      col("least", { "least", "memory" }, function(r) return r.min_memory and least_b(r.min_memory) or "-" end)
    end
  end
  return cols
end

--- text.columns(result) -> headers, rows of strings, right-aligned columns:
-- the table as the HTML page shows it (one line a header and a row).
function text.columns(res)
  local cols = column_set(res)
  local head, right = { "setting" }, { false }
  for _, c in ipairs(cols) do head[#head + 1] = table.concat(c.head, " "); right[#right + 1] = true end
  local rows = {}
  for _, r in ipairs(res.rows) do
    local row = { (r.recommended and "-> " or "   ") .. r.description .. (r.recorded and " (recorded)" or "") }
    for _, c in ipairs(cols) do row[#row + 1] = c.cell(r) end
    rows[#rows + 1] = row
  end
  return head, rows, right
end

-- The table as text, lines of at most width characters.
local function table_lines(res, width, mod)
  local cols = column_set(res)
  local cells = {}
  local w = {}
  for i, c in ipairs(cols) do
    w[i] = 0
    for _, h in ipairs(c.head) do w[i] = math.max(w[i], len(h)) end
  end
  for k, r in ipairs(res.rows) do
    cells[k] = {}
    for i, c in ipairs(cols) do
      cells[k][i] = c.cell(r)
      w[i] = math.max(w[i], len(cells[k][i]))
    end
  end
  local figures = 0
  for i = 1, #cols do figures = figures + 2 + w[i] end
  -- a terminal too narrow for every column: the last ones are left out
  local dropped = {}
  while #cols > 2 and 5 + 16 + figures > width do
    figures = figures - 2 - w[#cols]
    table.insert(dropped, 1, table.concat(cols[#cols].head, " "))
    cols[#cols], w[#cols] = nil, nil
  end
  local names = {}
  local longest = len "setting"
  for k, r in ipairs(res.rows) do
    names[k] = r.description .. (r.recorded and " (recorded)" or "")
    longest = math.max(longest, len(names[k]))
  end
  -- "  " indent, "-> " marker, the name, the figures
  local nw = math.max(math.min(longest, width - 5 - figures), 12)
  local out = {}
  local function line(name, mark, row)
    local parts = { "  " .. mark .. name .. string.rep(" ", nw - len(name)) }
    for i = 1, #cols do
      local s = row and row[i] or ""
      parts[#parts + 1] = string.rep(" ", w[i] - len(s) + 2) .. s
    end
    out[#out + 1] = (table.concat(parts):gsub("%s+$", ""))
  end
  local hl = 0
  for _, c in ipairs(cols) do hl = math.max(hl, #c.head) end
  for j = 1, hl do
    local row = {}
    for i, c in ipairs(cols) do
      -- headers of fewer lines sit on the last
      row[i] = c.head[j - (hl - #c.head)] or ""
    end
    line(j == hl and "setting" or "", "   ", row)
  end
  local dash = {}
  for i = 1, #cols do dash[i] = string.rep("-", w[i]) end
  line(string.rep("-", math.min(nw, 7)), "   ", dash)
  local aside_done = false
  for k, r in ipairs(res.rows) do
    if r.aside and not aside_done then
      aside_done = true
      if mod and mod.aside_title then out[#out + 1] = wrap("  ", mod.aside_title, width) end
    end
    local nl = name_lines(names[k], nw)
    local cut = false
    for _, l in ipairs(nl) do if not l:find(",$") and l ~= nl[#nl] then cut = true end end
    if cut then
      -- a name that would be cut mid-word: on lines of its own, the figures below
      local whole = name_lines(names[k], width - 5)
      for j, l in ipairs(whole) do
        out[#out + 1] = "  " .. (j == 1 and (r.recommended and "-> " or "   ") or "     ") .. l
      end
      line("", "   ", cells[k])
    else
      line(nl[1], r.recommended and "-> " or "   ", cells[k])
      for j = 2, #nl do line("  " .. nl[j], "   ") end
    end
  end
  if #dropped > 0 then
    out[#out + 1] = wrap("  ", ("(left out to fit %d columns: %s)"):format(width, table.concat(dropped, ", ")), width)
  end
  return out, cols
end

-- The definitions of the columns shown, as sentences.
local function column_notes(res, cols, mod)
  local terms = mod and mod.terms or {}
  local def = {
    least = terms.least or "least memory: the smallest limit (to 2 MiB) under which the setting serves every " ..
      "recorded request, found by replaying under limits",
    fits = ("fits: whether it serves every recorded request within the limit, %s"):format(
      res.recorded_limit and ("the least the recorded run's can have been, %s"):format(bytes(res.limit))
      or res.limit and bytes(res.limit) or ""),
    retries = "retries: how often the allocator ran out under the limit, freed what it had cached and " ..
      "tried again (each costs time)",
    reserved = "peak reserved: the most device memory the allocator held at once: what the GPU must have " ..
      "for it" .. (res.limit and "" or " (* the replay stopped early)"),
    overhead = ("overhead: peak reserved less the most the program had in use at once (%s): memory held " ..
      "but not in use then, from rounding, split blocks and the cache"):format(
      res.peak_live and bytes(res.peak_live) or "?"),
    calls = terms.calls or "device calls: how many times the allocator asked the device for memory",
    largest = ("largest size: the largest size from 1 up whose prediction fits in %s (\"none\": not even 1); " ..
      "the other columns are at size %s"):format(res.limit and bytes(res.limit) or "the limit",
      res.predicted and tostring(res.predicted.at) or "?"),
    change = ("vs %s: peak reserved against %s (%s); \"same\": less than 1 %% apart"):format((versus(res)),
      res.baseline_from or "the recorded run", res.baseline and bytes(res.baseline) or "unknown"),
  }
  local out = {}
  for _, c in ipairs(cols) do out[#out + 1] = def[c.key] end
  -- what a "-" means, where the table shows one
  local dash = {}
  for _, c in ipairs(cols) do
    for _, r in ipairs(res.rows) do if c.cell(r) == "-" then dash[c.key] = true end end
  end
  if dash.least then
    out[#out + 1] = "a \"-\" under least memory: no limit the search tried served every recorded request"
  end
  if dash.retries or dash.reserved or dash.change or dash.overhead or dash.calls then
    out[#out + 1] = res.limit and "a \"-\": the run stopped when it ran out, so its figures are not the setting's"
      or "a \"-\": the replay failed (see the warnings)"
  end
  return out
end

-- Where a location in the program reads: its frame, and the innermost
-- Python frame where that is another.
local function frame_text(f)
  if not f or not f.label then return nil end
  if f.python_frame then return f.label .. " (in " .. f.python_frame .. ")" end
  return f.label
end

-- Where a row ran out, in a few words.
local function ran_out(f)
  local where = f.allocation and ("allocation %d (%s)"):format(f.allocation, bytes(f.size or 0))
    or ("a request of %s"):format(bytes(f.size or 0))
  if f.trace_event then where = where .. (", event %d"):format(f.trace_event) end
  if f.line then where = where .. (", line %d of the log"):format(f.line) end
  return where
end

-- "Least memory: X with the best row[; Y with the recommended one]" (nil
-- where the recommended row was not searched), and the best row.
local function least_memory(d, rec)
  local best
  for _, r in ipairs(d.rows) do
    if r.min_memory and (not best or r.min_memory < best.min_memory) then best = r end
  end
  if not rec.min_memory then return nil, best end
  if best and best ~= rec and best.min_memory < rec.min_memory then
    return ("Least memory: %s with %s; %s with %s"):format(bytes(best.min_memory), best.description,
      bytes(rec.min_memory), rec.description), best
  end
  return ("Least memory: %s with %s"):format(bytes(rec.min_memory), rec.description), best
end

-- "With X or more, run:" and the recommended command.
local function run_with(d, rec, put, para, width)
  put("")
  para("  ", ("With %s or more, run:"):format(bytes(rec.min_memory)))
  put(command_lines("    ", d.paste, width, d.paste_note))
end

-- The answer: what to run, or that nothing fits and what it needs.
local function verdict(d, put, para, width)
  local rec = d.recommended
  if not rec or rec.error then
    para("  ", "no setting could be replayed: see the warnings below")
    return
  end
  local limit = d.limit
  -- the limit as the sentences name it: read from the recording, the run's
  -- own (the advice is made at the least value it can have been)
  local lname = limit and (d.recorded_limit and d.recorded_limit.high > d.recorded_limit.low and
    ("%s (the least the recorded run's limit can have been)"):format(bytes(limit)) or bytes(limit))
  if limit and not rec.fits then
    -- a row set aside (never recommended) may fit where no setting does
    -- (one without a caveat first, then the least memory)
    local aside
    for _, r in ipairs(d.rows) do
      if r.aside and r.fits then
        if not aside or (aside.caveat and not r.caveat)
          or (not aside.caveat == not r.caveat and (r.min_memory or 0) < (aside.min_memory or 0)) then
          aside = r
        end
      end
    end
    if aside then
      para("  ", ("No setting runs the recorded requests in %s; %s does%s:"):format(lname,
        aside.description, aside.min_memory and (" (it needs %s)"):format(bytes(aside.min_memory)) or ""))
      put(command_lines("    ", aside.paste, width, aside.paste_note))
      if aside.caveat then para("    ", "but: " .. aside.caveat) end
      put("")
    else
      para("  ", ("Nothing fits: no setting runs the recorded requests in %s."):format(lname))
    end
    if d.peak_live and limit < d.peak_live then
      para("  ", ("The program had %s in use at once as it ran: no allocator runs it in less, whatever its "
        .. "setting."):format(bytes(d.peak_live)))
    end
    -- the least memory: the best of all rows, and the recommended one
    local s, best = least_memory(d, rec)
    if s then
      -- and the setting it ran under (or the defaults, where that is unknown)
      local ref
      for _, r in ipairs(d.rows) do if r.recorded then ref = r end end
      if not ref then for _, r in ipairs(d.rows) do if r.family == "default" then ref = r end end end
      if ref and ref ~= rec and ref ~= best and ref.min_memory then
        s = s .. (" (%s%s: %s)"):format(ref.description, ref.recorded and ", as recorded" or "",
          bytes(ref.min_memory))
      end
      para("  ", s .. ".")
    end
    local f = rec.fails_at
    if f then
      local where = frame_text(f)
      para("  ", ("In %s, %s runs out at %s%s."):format(lname, rec.description, ran_out(f),
        where and (": " .. where) or ""))
      if f.message then para("    ", f.message) end
    end
    if rec.min_memory then run_with(d, rec, put, para, width) end
    return
  end
  if not limit and not rec.complete then
    -- every replay stopped (a device too small for the program): nothing to recommend
    para("  ", "Nothing runs: no setting served every recorded request (each replay was refused memory and " ..
      "stopped: see the warnings below).")
    return
  end
  para("  ", "recommended: " .. rec.description)
  local facts = {}
  -- a prediction has no run of its own: its recorded setting's row is the comparison
  local run = d.predicted and "the recorded setting at this size" or select(2, versus(d))
  if rec.change_pct and d.baseline then
    if math.abs(rec.change_pct) < SAME then
      facts[#facts + 1] = ("peak reserved %s, the same as %s (%s): no setting reserves 1 %% less")
        :format(bytes(rec.peak_reserved), run, bytes(d.baseline))
    else
      facts[#facts + 1] = ("peak reserved %s, %.1f %% %s than %s (%s)"):format(
        bytes(rec.peak_reserved), math.abs(rec.change_pct), rec.change_pct < 0 and "less" or "more", run,
        bytes(d.baseline))
    end
  else
    facts[#facts + 1] = ("peak reserved %s"):format(bytes(rec.peak_reserved))
  end
  if limit then facts[#facts + 1] = ("fits in %s"):format(lname) end
  if rec.min_memory then facts[#facts + 1] = ("runs in %s or more"):format(bytes(rec.min_memory)) end
  para("    ", table.concat(facts, "; "))
  put(command_lines("    ", d.paste, width, d.paste_note))
  -- under a limit, the settings that do not fit, and where they run out, once
  if limit then
    local groups, order, n = {}, {}, 0
    for _, r in ipairs(d.rows) do
      local f = r.fails_at
      if f then
        n = n + 1
        local key = f.allocation or f.size or 0
        if not groups[key] then groups[key] = { f = f, rows = {} }; order[#order + 1] = key end
        table.insert(groups[key].rows, r.description)
      end
    end
    if n > 0 then
      put("")
      para("  ", ("%d of %d settings %s not fit in %s; where %s out:"):format(n, #d.rows,
        n == 1 and "does" or "do", lname, n == 1 and "it runs" or "they run"))
      for i, key in ipairs(order) do
        if i > 3 then
          para("    ", ("(and %d more places)"):format(#order - 3))
          break
        end
        local g = groups[key]
        local where = frame_text(g.f)
        para("    - ", ("%s%s: %s"):format(ran_out(g.f), where and (", " .. where) or "",
          #g.rows <= 2 and table.concat(g.rows, ", ") or ("%s and %d more"):format(g.rows[1], #g.rows - 1)))
      end
    end
  end
end

-- The answer of a search for the largest size that fits: the largest, the
-- setting that reaches it, the recorded setting's beside it.
local function largest_lines(d, para)
  local lim = bytes(d.limit)
  if not d.largest_size then
    para("  ", ("No size from 1 up fits in %s with any setting: the advice below is at size %d, the smallest " ..
      "recorded."):format(lim, d.predicted and d.predicted.at or 0))
    return
  end
  local ref
  for _, r in ipairs(d.rows) do if r.recorded then ref = r end end
  local also = ""
  if ref and ref.description ~= d.largest_row then
    also = (" (%s, as recorded: %s)"):format(ref.description, ref.largest and tostring(ref.largest) or "none")
  end
  para("  ", ("The largest size that fits in %s: %d, with %s%s. The advice below is at size %d."):format(lim,
    d.largest_size, d.largest_row, also, d.largest_size))
end

-- What a prediction at another size was made from, in a line.
local function predicted_line(p)
  local from = {}
  for i, v in ipairs(p.from) do from[i] = tostring(v) end
  for _, v in ipairs(p.from) do
    if v == p.at then
      return ("at size %d, one of the recordings (%s): its own requests, replayed"):format(p.at,
        table.concat(from, ", "))
    end
  end
  return ("predicted at size %d from the recordings at %s (no run at %d: every figure below is a prediction)")
    :format(p.at, table.concat(from, ", "), p.at)
end

-- A path as people read it: "dir/../" taken out, and relative to the
-- working directory where it lies under it.
local function display_path(p)
  if type(p) ~= "string" then return tostring(p) end
  local n
  repeat p, n = p:gsub("/[^/]+/%.%./", "/", 1) until n == 0 or p:find("/../", 1, true) == nil
  p = p:gsub("/%./", "/")
  local cwd = os.getenv "PWD"
  if cwd and cwd ~= "" and p:sub(1, #cwd + 1) == cwd .. "/" then p = p:sub(#cwd + 2) end
  return p
end
text.display_path = display_path

-- The report's head (what was recorded, the limit) and its answer.
local function answer(d, put, para, width, several)
  local mod = modules.module(d.framework)
  para("", ("cupola advise: %s%s"):format(display_path(d.trace), several and (" (device %d)"):format(d.device) or ""))
  para("  ", ("%s: %d events (%d allocations), %d stream%s%s"):format(
    d.title, d.events, d.allocations, d.streams,
    d.streams == 1 and "" or "s", d.devices and d.devices > 1 and (", %d devices"):format(d.devices) or ""))
  if d.predicted then put(wrap("  ", predicted_line(d.predicted), width, "    ")) end
  if mod and mod.summary then
    for _, l in ipairs(mod.summary(d)) do put(wrap("  ", l, width, "    ")) end
  end
  if d.limit then put(wrap("  ", "limit: " .. (d.limit_read or bytes(d.limit)), width, "    ")) end
  put("")
  if d.largest_search then
    largest_lines(d, para)
    put("")
  end
  verdict(d, put, para, width)
end

--- text.answer(result [, width]) -> the report's head and its answer (what
-- to run, or that nothing fits, the least memory, where the run runs out),
-- as the text prints them above the table: what the HTML page says first.
function text.answer(res, width)
  width = width or text.width()
  local out = {}
  local function put(s) out[#out + 1] = s end
  local function para(lead, s) put(wrap(lead, s, width)) end
  answer(res, put, para, width)
  return table.concat(out, "\n") .. "\n"
end

--- text.text(result [, width [, {brief = true}]]) -> the report as text
-- (what bin/cupola advise prints), every line at most width characters
-- (text.width()); brief: the answer and the table only (--brief).
function text.text(res, width, opts)
  width = width or text.width()
  local brief = opts and opts.brief
  local out = {}
  local function put(s) out[#out + 1] = s end
  local function para(lead, s) put(wrap(lead, s, width)) end
  local results = res.per_device or { res }
  for di, d in ipairs(results) do
    if di > 1 then put("") end
    local mod = modules.module(d.framework)
    answer(d, put, para, width, #results > 1)
    put("")
    local lines, cols = table_lines(d, width, mod)
    for _, l in ipairs(lines) do put(l) end
    if brief then
      -- the answer and the table; what is left out, counted
      if #d.warnings > 0 then
        put("")
        para("  ", ("(%d warning%s, the columns defined and how to read them: without --brief)"):format(
          #d.warnings, #d.warnings > 1 and "s" or ""))
      end
      goto continue
    end
    put("")
    put("  columns:")
    for _, n in ipairs(column_notes(d, cols, mod)) do para("    - ", n) end
    if #d.warnings > 0 then
      put("")
      put("  warnings:")
      for _, w in ipairs(d.warnings) do para("    - ", w) end
    end
    if #d.notes > 0 then
      put("")
      put("  how to read it:")
      for _, n in ipairs(d.notes) do para("    - ", n) end
    end
    ::continue::
  end
  return table.concat(out, "\n") .. "\n"
end

return text
