-- check_timeline.lua: cupola.timeline pages in a real browser (make
-- test-browser).  Builds pages from the shipped snapshot, the largest shipped
-- trace (gpt2_beam_search), three pools on one trace, a pool's log,
-- cupola.advise's page (its table and two timelines) and a synthetic trace
-- of a million events; renders each in headless Chromium;
-- checks the peak label is in the DOM and that the plot areas of the
-- screenshot are drawn (pixels that are not background, several colours);
-- reports each page's load+draw time, which the page writes into its DOM.
--   lua5.4 tests/browser/check_timeline.lua BUILD_DIR PNGCHECK
local cupola = require "cupola"

local out = arg[1] or "build/browser"
local pngcheck = arg[2] or "build/browser/pngcheck"
local browser = os.getenv "CHROMIUM" or "chromium"
os.execute("mkdir -p '" .. out .. "'")

local passed, failed = 0, 0
local function check(cond, what)
  if cond then passed = passed + 1 else failed = failed + 1 end
  print((cond and "ok " or "not ok ") .. (passed + failed) .. " - " .. what)
  return cond
end

local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>/dev/null"))
  local s = p:read "a"
  p:close()
  return s
end

-- A synthetic trace of n events (RMM CSV): a stack-like workload with bursts
-- and long-lived blocks, deterministic.
local function synthetic(path, n)
  local f = assert(io.open(path, "w"))
  f:write "Thread,Time,Action,Pointer,Size,Stream\n"
  local seed = 12345
  local function rnd(m)
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed % m
  end
  local live, nlive, next_ptr, rows, buf = {}, 0, 0x10000000, 0, {}
  local sizes = {}
  while rows < n do
    local alloc = nlive == 0 or (rows + nlive < n and rnd(100) < 52)
    rows = rows + 1
    if alloc then
      local size = (1 + rnd(64)) * 4096 * (rnd(20) == 0 and 64 or 1)
      next_ptr = next_ptr + size + 256
      nlive = nlive + 1
      live[nlive], sizes[nlive] = next_ptr, size
      buf[#buf + 1] = string.format("0,%d,allocate,0x%x,%d,0x0\n", rows, next_ptr, size)
    else
      local i = nlive - rnd(math.min(nlive, 8))
      buf[#buf + 1] = string.format("0,%d,free,0x%x,%d,0x0\n", rows, live[i], sizes[i])
      live[i], sizes[i] = live[nlive], sizes[nlive]
      live[nlive], sizes[nlive] = nil, nil
      nlive = nlive - 1
    end
    if #buf >= 4096 then f:write(table.concat(buf)); buf = {} end
  end
  f:write(table.concat(buf))
  f:close()
end

local pages = {}
local function page(name, build)
  local path = out .. "/" .. name .. ".html"
  local t0 = cupola.clock()
  local _, info = build(path)
  pages[#pages + 1] = { name = name, path = path, info = info, gen = cupola.clock() - t0 }
end

page("snapshot", function(path)
  return cupola.timeline(cupola.trace.load(cupola.trace.find "torch_snapshot_mlp"), path)
end)
page("gpt2_beam_search", function(path)
  return cupola.timeline(cupola.trace.load(cupola.trace.find "gpt2_beam_search"), path)
end)
page("three_pools", function(path)
  return cupola.timeline(cupola.trace.load(cupola.trace.find "gpt2_train"), path,
    { pools = { { kind = "tlsf" }, { kind = "caching" }, { kind = "freelist" } } })
end)
page("pool_log", function(path)
  local log = out .. "/pool_log.csv"
  do
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", log = log }
    local bufs = {}
    for i = 1, 400 do
      bufs[#bufs + 1] = p:alloc((i % 17 + 1) * 4096)
      if i % 3 == 0 then table.remove(bufs, 1):free() end
    end
    for _, b in ipairs(bufs) do b:free() end
  end
  return cupola.timeline(nil, path, { log = log })
end)
-- cupola.advise's page: its table and the recorded and recommended
-- settings' timelines side by side.
page("advise", function(path)
  local advise = require "cupola.advise"
  local snap = "examples/traces/torch/varlen.default.cpsnap.gz"
  local res = cupola.advise(snap, { progress = false })
  return advise.html(res, snap, path)
end)
page("synthetic_1m", function(path)
  local csv = out .. "/synthetic_1m.csv"
  synthetic(csv, 1000000)
  local t <close> = cupola.trace.load(csv)
  local r = table.pack(cupola.timeline(t, path))
  os.remove(csv)
  return table.unpack(r)
end)

for _, pg in ipairs(pages) do
  local url = "file://" .. run("realpath '" .. pg.path .. "'"):gsub("%s+$", "")
  local flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1"
  local t0 = cupola.clock()
  local dom = run(string.format("timeout 120 %s %s --window-size=1400,900 --dump-dom '%s'", browser, flags, url))
  local wall = cupola.clock() - t0
  local draw_ms = tonumber(dom:match 'data%-draw%-ms="([%d%.]+)"')
  local peak = dom:match 'class="peak%-label" id="peak%-label%-1"[^>]*>([^<]*)<'
  check(draw_ms ~= nil, string.format("%s: drawn (%d events, %d blocks, %.1f MB of HTML, written in %.2f s); "
    .. "load+draw %s ms in the page, %.1f s for the browser run", pg.name, pg.info.events, pg.info.blocks,
    pg.info.bytes / 1e6, pg.gen, tostring(draw_ms), wall))
  check(peak and peak:match "^peak live [%d%.]+ %a+ at event %d+$", pg.name .. ": peak label in the DOM: "
    .. tostring(peak))
  if pg.name == "advise" then
    local rows = 0
    for _ in dom:gmatch "<tr>" do rows = rows + 1 end
    check(dom:find('<table class="figures">', 1, true) and rows >= 10 and
      dom:find("expandable_segments:True", 1, true) and dom:find('id="peak-label-2"', 1, true),
      string.format("advise: the table (%d rows) and two panels, the recorded and the recommended setting", rows))
  end
  -- Screenshot tall enough for every panel, then the plot areas' pixels.
  local rects = {}
  local height = 900
  for tag in dom:gmatch '<section class="panel"[^>]*>' do
    for _, k in ipairs { "lines", "blocks" } do
      local v = tag:match('data%-' .. k .. '="([%d,%-]+)"')
      if v then rects[#rects + 1] = { k, v } end
    end
  end
  for _, r in ipairs(rects) do
    local x, y, w, h = r[2]:match "(%-?%d+),(%-?%d+),(%d+),(%d+)"
    height = math.max(height, tonumber(y) + tonumber(h) + 20)
  end
  local png = out .. "/" .. pg.name .. ".png"
  run(string.format("timeout 120 %s %s --window-size=1400,%d --screenshot='%s' '%s'", browser, flags, height, png, url))
  check(#rects >= 2, pg.name .. ": plot areas reported (" .. #rects .. ")")
  for _, r in ipairs(rects) do
    local x, y, w, h = r[2]:match "(%-?%d+),(%-?%d+),(%d+),(%d+)"
    local res = run(string.format("%s '%s' %s %s %s %s", pngcheck, png, x, y, w, h))
    local _, _, drawn, colours = res:match "(%d+) (%d+) (%d+) (%d+)"
    drawn, colours = tonumber(drawn), tonumber(colours)
    local area = tonumber(w) * tonumber(h)
    check(drawn and drawn > area * 0.02 and colours >= 2, string.format(
      "%s: %s plot at %s has %s drawn pixels of %d, %s colours", pg.name, r[1], r[2], tostring(drawn), area,
      tostring(colours)))
  end
end
-- A zoomed view (the page reads it from the fragment): the bands and the
-- line are redrawn at that level of detail.
do
  local pg = pages[2]
  local url = "file://" .. run("realpath '" .. pg.path .. "'"):gsub("%s+$", "") .. "#events=200000-200400&addresses=0.5-0.75"
  local png = out .. "/" .. pg.name .. "_zoom.png"
  run(string.format("timeout 120 %s --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 "
    .. "--window-size=1400,900 --screenshot='%s' '%s'", browser, png, url))
  local res = run(string.format("%s '%s' 18 333 1366 262", pngcheck, png))
  local _, _, drawn, colours = res:match "(%d+) (%d+) (%d+) (%d+)"
  check(tonumber(drawn) and tonumber(drawn) > 1366 * 262 * 0.02 and tonumber(colours) >= 2,
    string.format("%s zoomed to events 200000-200400, addresses 50-75%%: %s drawn pixels, %s colours", pg.name,
      tostring(drawn), tostring(colours)))
end
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
