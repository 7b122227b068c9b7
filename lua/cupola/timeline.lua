--- cupola.timeline: one self-contained HTML page (inline script and style, no
-- network) drawing live and reserved bytes over a trace, and every block as a
-- band by address, the view PyTorch's memory_viz made familiar.
--
--   cupola.timeline(trace, "t.html")                      the trace's own addresses
--   cupola.timeline(replay_result, "r.html")              a replay with record=true
--   cupola.timeline({r1, r2, r3}, "cmp.html")             several allocators, one page
--   cupola.timeline(trace, "cmp.html", {pools = {{kind="tlsf"}, {kind="caching"}}})
--   cupola.timeline(nil, "log.html", {log = "pool.csv"})  a pool's log (pool{log=...})
--
-- The numbers are computed in C (cupola.core.trace.timeline_data) and
-- embedded as base64 typed arrays; the page keeps a min/max pyramid of the
-- live bytes and draws one column per pixel from the level that fits, so a
-- million events draw in a few hundred milliseconds and zooming refines.
local core = require "cupola.core"
local util = require "cupola.util"
local at_caller, raise = util.at_caller, util.raise

local timeline = {}

-- Replay results remember their trace here (weak keys), so that a result
-- table stays plain data (for report.json) and still draws; trace.replay
-- (C) fills it.
timeline.sources = core.trace.sources

local function jstr(s)
  s = tostring(s):gsub('[%c"\\<>&\127-\255]', function(c)
    if c == "\n" then return "\\n" end
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    local b = c:byte()
    if b >= 128 then return c end -- UTF-8 bytes pass as they are
    return string.format("\\u%04x", b)
  end)
  return '"' .. s .. '"'
end

-- A Lua value as a JavaScript literal (tables with [1] are arrays).
local function js(v, out)
  local t = type(v)
  if t == "table" then
    if v[1] ~= nil or next(v) == nil then
      out[#out + 1] = "["
      for i, x in ipairs(v) do
        if i > 1 then out[#out + 1] = "," end
        js(x, out)
      end
      out[#out + 1] = "]"
    else
      out[#out + 1] = "{"
      local first = true
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      for _, k in ipairs(keys) do
        if not first then out[#out + 1] = "," end
        first = false
        out[#out + 1] = jstr(k) .. ":"
        js(v[k], out)
      end
      out[#out + 1] = "}"
    end
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      out[#out + 1] = "null"
    elseif math.type(v) == "integer" then
      out[#out + 1] = string.format("%d", v)
    else
      out[#out + 1] = string.format("%.17g", v)
    end
  elseif t == "boolean" then
    out[#out + 1] = tostring(v)
  elseif v == nil then
    out[#out + 1] = "null"
  else
    out[#out + 1] = jstr(v)
  end
end

local units = { "B", "KiB", "MiB", "GiB", "TiB" }
local function human(n)
  local i, v = 1, n
  while v >= 1024 and i < #units do v, i = v / 1024, i + 1 end
  if i == 1 then return string.format("%d B", n) end
  return string.format("%.2f %s", v, units[i])
end

local function is_trace(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "cupola.Trace"
end

local function panel_for_trace(t, name)
  local d = core.trace.timeline_data(t)
  local p = { name = name, data = d, subtitle = "addresses as the trace recorded them" }
  if d.torch_reserved then
    p.reserved = d.torch_reserved
    p.reserved_name = "PyTorch reserved"
    p.peak_reserved = t.torch_peak_reserved
  end
  return p
end

local function panel_for_result(r, t, name)
  if type(r.recording) ~= "table" then
    raise("cupola.timeline: a replay result must come from trace.replay(t, pool, {record = true})")
  end
  t = t or timeline.sources[r]
  if not is_trace(t) then
    raise("cupola.timeline: option 'trace' must give the replayed Trace")
  end
  local d = core.trace.timeline_data(t, r.recording.addresses)
  return {
    name = name or r.name or r.kind or "replay",
    data = d,
    reserved = { events = r.recording.events, reserved = r.recording.reserved },
    reserved_name = "pool reserved",
    peak_reserved = r.peak_reserved,
    subtitle = string.format("addresses the pool gave; reserved/live %.3f%s", r.reserved_over_live or 0,
      (r.failed or 0) > 0 and string.format(", %d allocations refused", r.failed) or ""),
    warning = r.warning,
  }
end

-- What a value is, in messages: its type and, for a string, a number or a
-- boolean, the value ("string 'x'"); a handle's class ("cupola.Pool").
local what = util.typed

-- A test: v is a table whose values are all of Lua type t.
local function list_of(t)
  return function(v)
    if type(v) ~= "table" then return false end
    for _, x in pairs(v) do
      if type(x) ~= t then return false end
    end
    return true
  end
end

local function is_pixels(v)
  return math.type(v) == "integer" and v >= 1 and v <= 100000
end

-- Each option: a test and what it must be (the message's words).
local option_checks = {
  title = { function(v) return type(v) == "string" end, "a string" },
  names = { list_of "string", "a list of strings", list = true },
  pools = { list_of "table", "a list of pool configuration tables", list = true },
  log = { function(v) return type(v) == "string" end, "a path (string)" },
  trace = { function(v) return is_trace(v) and v.path ~= nil end, "an open cupola.Trace" },
  chart_height = { is_pixels, "an integer number of CSS pixels in 1..100000" },
  band_height = { is_pixels, "an integer number of CSS pixels in 1..100000" },
  table = { function(v)
    if type(v) ~= "table" or not list_of "string"(v.headers or 0) or type(v.rows) ~= "table" then return false end
    for _, r in pairs(v.rows) do if not list_of "string"(r) then return false end end
    for k in pairs(v) do if k ~= "headers" and k ~= "rows" then return false end end
    return true
  end, "a table {headers = {strings}, rows = {{strings}, ...}}" },
  notes = { list_of "string", "a list of strings", list = true },
  text = { function(v) return type(v) == "string" end, "a string" },
}

-- Raises at the caller of timeline.write (level 3 from here) for any option
-- of the wrong kind: they used to fail deep inside ("attempt to index a
-- number value") or be written into the page as they were.
local function check_options(opts)
  for k, v in pairs(opts) do
    local c = option_checks[k]
    if not c then raise("cupola.timeline: unknown option " .. util.shown(k)) end
    if not c[1](v) then
      local got = type(v) == "number" and math.type(v) == "integer" and ("integer " .. v) or what(v)
      if c.list and type(v) == "table" then
        for _, x in pairs(v) do
          if not c[1]({ x }) then got = "a table holding a " .. util.typename(x) .. util.got(x) break end
        end
      end
      raise(("cupola.timeline: option '%s' must be %s, not %s"):format(k, c[2], got))
    end
  end
end


--- timeline.write(src, path, opts) -> path, {panels=, events=, blocks=, bytes=}
function timeline.write(src, path, opts)
  opts = opts or {}
  if type(opts) ~= "table" then raise("bad argument #3 to 'timeline' (table expected, got " .. what(opts) .. ")") end
  check_options(opts)
  if type(path) ~= "string" then raise("bad argument #2 to 'timeline' (path expected, got " .. what(path) .. ")") end
  if path:find("\0", 1, true) then
    raise("bad argument #2 to 'timeline' (path contains a NUL byte, got " .. util.shown(path) .. ")")
  end
  -- a closed Trace used to fail inside (attempt to index a nil value)
  if is_trace(src) and src.path == nil then
    raise("bad argument #1 to 'timeline' (attempt to use a closed cupola.Trace)")
  end
  if opts.pools and not is_trace(src) then
    raise("cupola.timeline: option 'pools' replays a Trace: the source must be a cupola.Trace, not " .. what(src))
  end
  local panels = {}
  local names = opts.names or {}
  if opts.log then
    local t <close> = at_caller(core.trace.load, opts.log)
    local p = panel_for_trace(t, names[1] or ("pool log " .. opts.log))
    p.subtitle = "the pool's own addresses, from its log"
    panels[1] = p
  elseif type(src) == "string" then
    local t <close> = at_caller(core.trace.load, src)
    panels[1] = panel_for_trace(t, names[1] or (src:match "[^/\\]*$"))
  elseif is_trace(src) then
    if opts.pools then
      for i, cfg in ipairs(opts.pools) do
        local c = util.pool_config(cfg)
        if c.upstream == nil then c.upstream = "virtual" end
        local pool <close> = at_caller(core.pool, c)
        local r = at_caller(core.trace.replay, src, pool, { record = true })
        r.name = cfg.name or pool.kind
        panels[i] = panel_for_result(r, src, names[i] or r.name)
      end
    else
      panels[1] = panel_for_trace(src, names[1] or (src.path:match "[^/\\]*$"))
    end
  elseif type(src) == "table" and (src.recording or src.ns_per_event) then
    panels[1] = panel_for_result(src, opts.trace, names[1])
  elseif type(src) == "table" and src[1] then
    for i, r in ipairs(src) do
      if type(r) ~= "table" then
        raise(("bad argument #1 to 'timeline' (entry %d is a %s, not a replay result%s)"):format(i, util.typename(r), util.got(r)))
      end
      panels[i] = panel_for_result(r, opts.trace, names[i])
    end
  else
    raise("bad argument #1 to 'timeline' (a Trace, a replay result, a list of them or a "
      .. "path expected, got " .. what(src) .. ")")
  end

  local title = opts.title
    or ("cupola timeline: " .. (is_trace(src) and opts.pools and (src.path:match "[^/\\]*$") .. " on "
      .. #panels .. " pools" or panels[1].name))
  local events, blocks = 0, 0
  local html = {}
  local function w(s) html[#html + 1] = s end
  w("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>")
  w((title:gsub("&", "&amp;"):gsub("<", "&lt;")))
  w("</title>\n<style>\n" .. timeline.css .. "</style></head>\n<body>\n")
  w("<header><h1>" .. (title:gsub("&", "&amp;"):gsub("<", "&lt;")) .. "</h1>")
  w("<p class=\"help\">Wheel: zoom on time; shift+wheel on the bands: zoom on addresses; drag: pan; double-click: everything. "
    .. "Hover a band for its block. x: event index (every allocation and free is one step).</p>")
  w("<p class=\"status\">drawn in <span id=\"draw-ms\">?</span> ms</p></header>\n")
  local function esc(x) return (tostring(x):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;")) end
  if opts.text then
    -- text shown as it is, first (cupola.advise's answer, as the terminal says it)
    w("<pre class=\"text\">" .. esc(opts.text) .. "</pre>\n")
  end
  if opts.table then
    -- a table of text above the panels (cupola.advise's rows)
    w("<table class=\"figures\"><thead><tr>")
    for _, h in ipairs(opts.table.headers) do w("<th>" .. esc(h) .. "</th>") end
    w("</tr></thead><tbody>\n")
    for _, row in ipairs(opts.table.rows) do
      w("<tr>")
      for c, v in ipairs(row) do w((c == 1 and "<td>" or "<td class=\"n\">") .. esc(v) .. "</td>") end
      w("</tr>\n")
    end
    w("</tbody></table>\n")
  end
  if opts.notes then
    w("<ul class=\"notes\">")
    for _, n in ipairs(opts.notes) do w("<li>" .. esc(n) .. "</li>") end
    w("</ul>\n")
  end
  local data = {}
  for i, p in ipairs(panels) do
    local d = p.data
    events, blocks = math.max(events, d.n), blocks + d.blocks
    local peak = string.format("peak live %s at event %d", human(d.peak_live), d.peak_event)
    w(string.format("<section class=\"panel\" id=\"panel-%d\"><h2>%s</h2><p class=\"sub\">%s</p>\n", i,
      (tostring(p.name):gsub("&", "&amp;"):gsub("<", "&lt;")), (p.subtitle:gsub("<", "&lt;"))))
    if p.warning then
      w(string.format("<p class=\"warning\">warning: %s</p>\n", (tostring(p.warning):gsub("&", "&amp;"):gsub("<", "&lt;"))))
    end
    w(string.format("<div class=\"chart\"><canvas class=\"lines\"></canvas>"
      .. "<div class=\"peak-label\" id=\"peak-label-%d\">%s</div></div>\n", i, peak))
    w("<div class=\"legend\"><span class=\"k live\"></span>live"
      .. (p.reserved and ("<span class=\"k reserved\"></span>" .. p.reserved_name) or "")
      .. string.format(" &middot; %d events, %d blocks, %d address regions%s</div>\n", d.n, d.blocks,
        d.regions, p.peak_reserved and (", peak reserved " .. human(p.peak_reserved)) or ""))
    w("<div class=\"bands\"><canvas class=\"blocks\"></canvas></div></section>\n")
    data[i] = {
      name = p.name, n = d.n, nb = d.blocks, peak = d.peak_live, peak_event = d.peak_event,
      height = d.height, t0 = d.t0_us, time = d.time, live = d.live, b_start = d.b_start,
      b_end = d.b_end, b_y = d.b_y, b_size = d.b_size, b_addr = d.b_addr, b_stream = d.b_stream,
      b_label = d.b_label or "", labels = d.labels, streams = d.streams,
      reserved = p.reserved and { p.reserved.events, p.reserved.reserved } or false,
      reserved_name = p.reserved_name or "",
    }
  end
  w("<div id=\"tip\"></div>\n<script>\nconst D = ")
  local out = {}
  js(data, out)
  w(table.concat(out))
  w(";\nconst OPT = ")
  out = {}
  js({ chart = opts.chart_height or 170, band = opts.band_height or 260 }, out)
  w(table.concat(out))
  w(";\n" .. timeline.script .. "</script>\n</body></html>\n")
  local f, err = io.open(path, "wb")
  if not f then raise("cupola.timeline: cannot write " .. path .. ": " .. util.os_reason(err, path)) end
  local body = table.concat(html)
  f:write(body)
  f:close()
  return path, { panels = #panels, events = events, blocks = blocks, bytes = #body }
end

timeline.css = [[
body { font: 13px/1.4 system-ui, sans-serif; margin: 12px 18px; color: #222; background: #fff; }
h1 { font-size: 17px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 10px 0 0; }
.help, .sub, .status, .legend { color: #666; margin: 2px 0; }
.warning { color: #b00; font-weight: 600; margin: 2px 0; }
.panel { border-top: 1px solid #ddd; padding-top: 4px; }
table.figures { border-collapse: collapse; margin: 8px 0; font: 12px/1.4 ui-monospace, monospace; }
table.figures th, table.figures td { padding: 1px 8px; border-bottom: 1px solid #eee; white-space: pre; }
table.figures th { text-align: left; color: #444; } table.figures td.n { text-align: right; }
ul.notes { color: #444; margin: 4px 0 8px; padding-left: 18px; max-width: 70em; }
pre.text { margin: 8px 0; font: 12px/1.4 ui-monospace, monospace; }
.chart, .bands { position: relative; }
canvas { display: block; width: 100%; border: 1px solid #ccc; cursor: crosshair; }
.peak-label { position: absolute; top: 2px; left: 0; font-weight: 600; color: #b00;
  background: rgba(255,255,255,.85); padding: 0 4px; pointer-events: none; white-space: nowrap; }
.k { display: inline-block; width: 14px; height: 8px; margin: 0 4px 0 10px; }
.k.live { background: #3a7bd5; } .k.reserved { background: #e07b00; }
#tip { position: fixed; display: none; pointer-events: none; background: #fffff4; border: 1px solid #999;
  padding: 4px 6px; font: 12px/1.35 ui-monospace, monospace; white-space: pre; z-index: 9;
  max-height: 96vh; overflow: hidden; }
]]

timeline.script = [==[
"use strict";
const T0 = performance.now();
function b64(s, T) {
  if (!s) return new T(0);
  const bin = atob(s), n = bin.length, u8 = new Uint8Array(n);
  for (let i = 0; i < n; i++) u8[i] = bin.charCodeAt(i);
  return new T(u8.buffer);
}
function human(v) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (v >= 1024 && i < 4) { v /= 1024; i++; }
  return i ? v.toFixed(2) + " " + u[i] : Math.round(v) + " B";
}
function secs(us) { return us >= 1e6 ? (us / 1e6).toFixed(3) + " s" : us >= 1e3 ? (us / 1e3).toFixed(3) + " ms" : us.toFixed(1) + " us"; }
const PALETTE = [0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f, 0xedc948, 0xb07aa1, 0xff9da7,
                 0x9c755f, 0xbab0ac, 0x2f6690, 0x8cd17d];
const PAL32 = PALETTE.map(c => (0xff << 24 | (c & 0xff) << 16 | (c & 0xff00) | (c >> 16)) >>> 0);
const panels = D.map((d, k) => {
  const p = { d, el: document.getElementById("panel-" + (k + 1)) };
  p.time = b64(d.time, Float32Array); p.live = b64(d.live, Float32Array);
  p.bs = b64(d.b_start, Uint32Array); p.be = b64(d.b_end, Uint32Array);
  p.by = b64(d.b_y, Float32Array); p.bz = b64(d.b_size, Float64Array);
  p.ba = b64(d.b_addr, Float64Array); p.bst = b64(d.b_stream, Uint16Array);
  p.bl = d.b_label ? b64(d.b_label, Uint32Array) : null;
  // Min/max pyramid of the live bytes: level k holds buckets of 2^k events.
  p.lv = [{ min: p.live, max: p.live }];
  while (p.lv[p.lv.length - 1].min.length > 1) {
    const a = p.lv[p.lv.length - 1], n = Math.ceil(a.min.length / 2);
    const mn = new Float32Array(n), mx = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const j = 2 * i, j2 = Math.min(j + 1, a.min.length - 1);
      mn[i] = Math.min(a.min[j], a.min[j2]); mx[i] = Math.max(a.max[j], a.max[j2]);
    }
    p.lv.push({ min: mn, max: mx });
  }
  p.ymax = d.peak;
  if (d.reserved) for (const r of d.reserved[1]) p.ymax = Math.max(p.ymax, r);
  p.ymax = Math.max(1, p.ymax * 1.06);
  p.lines = p.el.querySelector("canvas.lines"); p.blocks = p.el.querySelector("canvas.blocks");
  p.peakLabel = p.el.querySelector(".peak-label");
  p.ya0 = 0; p.ya1 = Math.max(1, d.height);   // the address axis shown (shift+wheel zooms it)
  return p;
});
const N = Math.max(1, ...D.map(d => d.n));
let x0 = 0, x1 = N;
const dpr = window.devicePixelRatio || 1;
function size(c, h) {
  const w = Math.max(200, Math.floor(c.clientWidth || c.parentNode.clientWidth || 1000));
  c.style.height = h + "px"; c.width = Math.floor(w * dpr); c.height = Math.floor(h * dpr);
  return [c.width, c.height];
}
function range(p, a, b) { // min and max live over events [a, b)
  a = Math.max(0, Math.floor(a)); b = Math.min(p.live.length, Math.ceil(b));
  if (b <= a) return null;
  let k = Math.max(0, Math.floor(Math.log2(b - a)) - 1);
  if (k >= p.lv.length) k = p.lv.length - 1;
  const L = p.lv[k], i0 = a >> k, i1 = (b - 1) >> k;
  let mn = Infinity, mx = -Infinity;
  for (let i = i0; i <= i1; i++) { if (L.min[i] < mn) mn = L.min[i]; if (L.max[i] > mx) mx = L.max[i]; }
  return [mn, mx];
}
function drawLines(p) {
  const [W, H] = size(p.lines, OPT.chart), g = p.lines.getContext("2d");
  g.clearRect(0, 0, W, H);
  const sx = W / (x1 - x0), sy = (H - 4) / p.ymax, Y = v => H - 1 - v * sy;
  g.fillStyle = "rgba(58,123,213,0.35)"; g.strokeStyle = "#3a7bd5";
  g.beginPath();
  for (let px = 0; px < W; px++) {
    const r = range(p, x0 + px / sx, x0 + (px + 1) / sx);
    if (!r) continue;
    g.fillRect(px, Y(r[1]), 1, H - Y(r[1]));
    g.moveTo(px + 0.5, Y(r[1])); g.lineTo(px + 0.5, Y(r[0]) + 1);
  }
  g.stroke();
  if (p.d.reserved) {
    const ev = p.d.reserved[0], rv = p.d.reserved[1];
    g.strokeStyle = "#e07b00"; g.lineWidth = 2 * dpr; g.beginPath();
    let started = false;
    for (let i = 0; i < ev.length; i++) {
      const xa = (ev[i] - 1 - x0) * sx, xb = i + 1 < ev.length ? (ev[i + 1] - 1 - x0) * sx : W;
      if (xb < 0 || xa > W) continue;
      const y = Y(rv[i]);
      if (!started) { g.moveTo(Math.max(0, xa), y); started = true; } else g.lineTo(Math.max(0, xa), y);
      g.lineTo(Math.min(W, xb), y);
    }
    g.stroke(); g.lineWidth = 1;
  }
  // The peak: a marker line and the label beside it.
  const xp = (p.d.peak_event - 1 - x0) * sx;
  g.strokeStyle = "#b00"; g.setLineDash([4 * dpr, 3 * dpr]); g.beginPath();
  g.moveTo(xp, 0); g.lineTo(xp, H); g.stroke(); g.setLineDash([]);
  const css = xp / dpr;
  p.peakLabel.style.left = Math.max(0, Math.min(css + 4, p.lines.clientWidth - p.peakLabel.offsetWidth - 2)) + "px";
  p.peakLabel.style.opacity = xp >= 0 && xp <= W ? 1 : 0.45;
  g.fillStyle = "#444"; g.font = (11 * dpr) + "px sans-serif";
  g.fillText(human(p.ymax / 1.06), 4, 12 * dpr + 14 * dpr);
}
function drawBlocks(p) {
  const [W, H] = size(p.blocks, OPT.band), g = p.blocks.getContext("2d");
  const img = g.createImageData(W, H), px = new Uint32Array(img.data.buffer);
  px.fill(0xfff8f8f8);
  const sx = W / (x1 - x0), sy = H / (p.ya1 - p.ya0), ya0 = p.ya0;
  const bs = p.bs, be = p.be, by = p.by, bz = p.bz, bl = p.bl, n = bs.length;
  for (let i = 0; i < n; i++) {
    const s = bs[i], e = be[i];
    if (e <= x0 || s >= x1 || by[i] + bz[i] <= ya0 || by[i] >= p.ya1) continue;
    let a = Math.floor((s - x0) * sx), b = Math.floor((e - x0) * sx);
    if (a < 0) a = 0; if (b > W) b = W; if (b <= a) b = a + 1; if (a >= W) continue;
    let top = H - Math.ceil((by[i] + bz[i] - ya0) * sy), bot = H - Math.floor((by[i] - ya0) * sy);
    if (top < 0) top = 0; if (bot > H) bot = H; if (bot <= top) { bot = top + 1; if (bot > H) { bot = H; top = H - 1; } }
    const c = PAL32[(i * 5) % 12];
    for (let y = top; y < bot; y++) { const row = y * W; for (let x = a; x < b; x++) px[row + x] = c; }
  }
  g.putImageData(img, 0, 0);
}
function draw() {
  for (const p of panels) { drawLines(p); drawBlocks(p); }
}
const tip = document.getElementById("tip");
function hit(p, ev) {
  const r = p.blocks.getBoundingClientRect();
  const W = p.blocks.width, H = p.blocks.height;
  const mx = (ev.clientX - r.left) * dpr, my = (ev.clientY - r.top) * dpr;
  const sx = W / (x1 - x0), sy = H / (p.ya1 - p.ya0), ya0 = p.ya0;
  const bs = p.bs, be = p.be, by = p.by, bz = p.bz;
  for (let i = 0; i < bs.length; i++) {
    let a = Math.floor((bs[i] - x0) * sx), b = Math.floor((be[i] - x0) * sx); if (b <= a) b = a + 1;
    if (mx < a || mx >= b) continue;
    let top = H - Math.ceil((by[i] + bz[i] - ya0) * sy), bot = H - Math.floor((by[i] - ya0) * sy); if (bot <= top) bot = top + 1;
    if (my >= top && my < bot) return i;
  }
  return -1;
}
function showTip(ev, text) {
  tip.textContent = text; tip.style.display = "block";
  tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4) + "px";
  tip.style.top = (ev.clientY + 14) + "px";
}
for (const p of panels) {
  p.blocks.addEventListener("mousemove", ev => {
    if (drag) return;
    const i = hit(p, ev);
    if (i < 0) { tip.style.display = "none"; return; }
    const d = p.d, s = p.bs[i], e = p.be[i];
    // a snapshot's label: the frame people recognise, the innermost Python
    // frame where it is another, then the whole stack (snapshot.h)
    let lab = "";
    if (p.bl && p.bl[i]) {
      const l = d.labels[p.bl[i] - 1].split("\n");
      lab = "\nframe    " + l[0] + (l[1] ? "\nin       " + l[1] : "") +
        (l.length > 2 ? "\nstack\n  " + l.slice(2).join("\n  ") : "");
    }
    showTip(ev, "size     " + human(p.bz[i]) + " (" + p.bz[i] + " B)\naddress  0x" + p.ba[i].toString(16) +
      "\nstream   " + d.streams[p.bst[i]] + "\nallocated event " + (s + 1) + " at " + secs(p.time[s]) +
      "\n" + (e < d.n ? "freed     event " + (e + 1) + " at " + secs(p.time[e]) : "never freed") + lab);
  });
  p.lines.addEventListener("mousemove", ev => {
    if (drag) return;
    const r = p.lines.getBoundingClientRect();
    const e = Math.floor(x0 + (ev.clientX - r.left) / r.width * (x1 - x0));
    if (e < 0 || e >= p.d.n) { tip.style.display = "none"; return; }
    let res = "";
    if (p.d.reserved) {
      const ev2 = p.d.reserved[0]; let j = -1;
      for (let k = 0; k < ev2.length && ev2[k] - 1 <= e; k++) j = k;
      if (j >= 0) res = "\n" + p.d.reserved_name + "  " + human(p.d.reserved[1][j]);
    }
    showTip(ev, "event " + (e + 1) + " at " + secs(p.time[e]) + "\nlive  " + human(p.live[e]) + res);
  });
  for (const c of [p.lines, p.blocks]) {
    c.addEventListener("mouseleave", () => { tip.style.display = "none"; });
    c.addEventListener("wheel", ev => {
      ev.preventDefault();
      const r = c.getBoundingClientRect(), f = (ev.clientX - r.left) / r.width;
      if (ev.shiftKey && c === p.blocks) { // the address axis, around the pointer
        const full = Math.max(1, p.d.height), g = 1 - (ev.clientY - r.top) / r.height;
        const at = p.ya0 + g * (p.ya1 - p.ya0), z = ev.deltaY > 0 ? 1.25 : 0.8;
        const span = Math.min(full, Math.max(full / 1e6, (p.ya1 - p.ya0) * z));
        p.ya0 = Math.max(0, Math.min(full - span, at - g * span)); p.ya1 = p.ya0 + span;
        schedule();
        return;
      }
      const at = x0 + f * (x1 - x0), z = ev.deltaY > 0 ? 1.25 : 0.8;
      let span = Math.min(N, Math.max(8, (x1 - x0) * z));
      x0 = Math.max(0, Math.min(N - span, at - f * span)); x1 = x0 + span;
      schedule();
    }, { passive: false });
    c.addEventListener("mousedown", ev => { drag = { x: ev.clientX, x0, x1, w: c.getBoundingClientRect().width }; });
    c.addEventListener("dblclick", () => {
      x0 = 0; x1 = N;
      for (const q of panels) { q.ya0 = 0; q.ya1 = Math.max(1, q.d.height); }
      schedule();
    });
  }
}
let drag = null, pending = false;
// A view in the address's fragment: #events=A-B (1-based, inclusive) and
// #addresses=F0-F1 (fractions of the address axis), so a zoom can be shared.
(function () {
  const h = new URLSearchParams(location.hash.slice(1));
  const ev = (h.get("events") || "").split("-").map(Number);
  if (ev.length === 2 && ev[0] >= 1 && ev[1] > ev[0]) { x0 = Math.min(N - 1, ev[0] - 1); x1 = Math.min(N, ev[1]); }
  const ad = (h.get("addresses") || "").split("-").map(Number);
  if (ad.length === 2 && ad[0] >= 0 && ad[1] > ad[0] && ad[1] <= 1)
    for (const p of panels) { const f = Math.max(1, p.d.height); p.ya0 = ad[0] * f; p.ya1 = ad[1] * f; }
})();
window.addEventListener("mousemove", ev => {
  if (!drag) return;
  const dx = (ev.clientX - drag.x) / drag.w * (drag.x1 - drag.x0);
  x0 = Math.max(0, Math.min(N - (drag.x1 - drag.x0), drag.x0 - dx)); x1 = x0 + (drag.x1 - drag.x0);
  schedule();
});
window.addEventListener("mouseup", () => { drag = null; });
window.addEventListener("resize", () => schedule());
function schedule() { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; draw(); }); } }
draw();
// Where the plots are (CSS pixels of the page), for the headless check.
for (const p of panels) {
  for (const [k, c] of [["lines", p.lines], ["blocks", p.blocks]]) {
    const r = c.getBoundingClientRect();
    p.el.dataset[k] = [r.left + scrollX, r.top + scrollY, r.width, r.height].map(Math.round).join(",");
  }
}
const ms = performance.now();
document.getElementById("draw-ms").textContent = ms.toFixed(0);
document.body.dataset.drawMs = ms.toFixed(1);
document.body.dataset.scriptMs = (ms - T0).toFixed(1);
]==]

return setmetatable(timeline, { __call = function(_, ...) return timeline.write(...) end })
