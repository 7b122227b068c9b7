-- cupola.survey_page: the survey's HTML page (cupola.survey.html): one
-- self-contained page, its data the results' JSON inline, a plot per test
-- drawn by its own script (no network).
return function(json)
  return [==[<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>cupola survey</title>
<style>
body { font: 13px sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin: 18px 0 4px; }
.plot { display: inline-block; margin: 4px 12px 12px 0; vertical-align: top; }
.plot svg { border: 1px solid #ddd; background: #fff; }
.legend span { margin-right: 10px; white-space: nowrap; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 3px; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
</style></head><body>
<h1>In-kernel allocators: the survey's benchmarks</h1>
<div id="meta"></div><div id="out"></div>
<script id="data" type="application/json">]==] .. json .. [==[</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"];
const allocs = [...new Set(D.rows.map(r => r.allocator))];
const color = a => COLORS[allocs.indexOf(a) % COLORS.length];
const m = D.meta;
document.getElementById("meta").textContent =
  `${m.device} (${m.backend} backend), ${m.date}, commit ${m.commit || "unknown"}; timing: ${m.timing}`;
const out = document.getElementById("out");
function el(tag, attrs, text) {
  const e = document.createElementNS(tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const k in attrs) if (k !== "svg") e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmtv(v) { if (v === 0) return "0"; const a = Math.abs(v); return a >= 1e4 || a < 1e-2 ? v.toExponential(1) : +v.toPrecision(3) + ""; }
// One plot: series per allocator of rows, x and y from functions, log axes.
function plot(title, rows, fx, fy, xlab, ylab, logy = true) {
  const W = 420, H = 260, L = 60, R = 10, T = 24, B = 36;
  const pts = rows.map(r => [fx(r), fy(r), r.allocator]).filter(p => p[0] > 0 && p[1] !== undefined && p[1] !== null && (!logy || p[1] > 0));
  const box = el("div", { class: "plot" });
  if (!pts.length) return box;
  const lx = v => Math.log2(v), ly = v => logy ? Math.log10(v) : v;
  let x0 = Math.min(...pts.map(p => lx(p[0]))), x1 = Math.max(...pts.map(p => lx(p[0])));
  let y0 = Math.min(...pts.map(p => ly(p[1]))), y1 = Math.max(...pts.map(p => ly(p[1])));
  if (!logy) y0 = Math.min(0, y0);
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const X = v => L + (lx(v) - x0) / (x1 - x0) * (W - L - R), Y = v => H - B - (ly(v) - y0) / (y1 - y0) * (H - T - B);
  const svg = el("svg", { width: W, height: H });
  svg.appendChild(el("text", { svg: 1, x: L, y: 14, "font-weight": "bold" }, title));
  for (let i = 0; i <= 4; i++) {
    const yv = y0 + (y1 - y0) * i / 4, yy = H - B - (H - T - B) * i / 4;
    svg.appendChild(el("line", { svg: 1, x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#eee" }));
    svg.appendChild(el("text", { svg: 1, x: L - 4, y: yy + 4, "text-anchor": "end", "font-size": 10 }, fmtv(logy ? 10 ** yv : yv)));
  }
  const xs = [...new Set(pts.map(p => p[0]))].sort((a, b) => a - b);
  const step = Math.ceil(xs.length / 8);
  xs.forEach((v, i) => { if (i % step === 0) svg.appendChild(el("text", { svg: 1, x: X(v), y: H - B + 14, "text-anchor": "middle", "font-size": 10 }, fmtv(v))); });
  svg.appendChild(el("text", { svg: 1, x: (L + W) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11 }, xlab));
  svg.appendChild(el("text", { svg: 1, x: 12, y: (T + H - B) / 2, "font-size": 11, transform: `rotate(-90 12 ${(T + H - B) / 2})`, "text-anchor": "middle" }, ylab));
  for (const a of allocs) {
    const s = pts.filter(p => p[2] === a).sort((p, q) => p[0] - q[0]);
    if (!s.length) continue;
    svg.appendChild(el("polyline", { svg: 1, fill: "none", stroke: color(a), "stroke-width": 1.5, points: s.map(p => `${X(p[0])},${Y(p[1])}`).join(" ") }));
    for (const p of s) {
      const c = el("circle", { svg: 1, cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: color(a) });
      c.appendChild(el("title", { svg: 1 }, `${a}: ${xlab} ${p[0]}, ${fmtv(p[1])}`));
      svg.appendChild(c);
    }
  }
  box.appendChild(svg);
  return box;
}
function section(name, plots) {
  if (!plots.some(p => p.childNodes.length)) return;
  out.appendChild(el("h2", {}, name));
  const lg = el("div", { class: "legend" });
  for (const a of allocs) { const s = el("span", {}); const i = el("i", {}); i.style.background = color(a); s.appendChild(i); s.appendChild(document.createTextNode(a)); lg.appendChild(s); }
  out.appendChild(lg);
  for (const p of plots) out.appendChild(p);
}
const rows = t => D.rows.filter(r => r.test === t);
for (const [t, name] of [["thread", "Allocation per thread"], ["warp", "Allocation per warp"], ["mixed", "Mixed sizes in [4, size]"]]) {
  const r = rows(t);
  section(`${name} (${r.length ? r[0].threads : 0} allocations)`, [
    plot("alloc", r, x => x.size, x => x.alloc_ms, "bytes", "ms"),
    plot("free", r, x => x.free_ms !== undefined ? x.size : 0, x => x.free_ms, "bytes", "ms")]);
}
{
  const r = rows("scaling");
  const sizes = [...new Set(r.map(x => x.size))];
  section("Scaling over threads", sizes.flatMap(s => [
    plot(`alloc, ${s} B`, r.filter(x => x.size === s), x => x.threads, x => x.alloc_ms, "threads", "ms"),
    plot(`free, ${s} B`, r.filter(x => x.size === s), x => x.threads, x => x.free_ms, "threads", "ms")]));
}
section("Alloc+free pairs in one kernel", [plot("pairs per second", rows("pairs"), x => x.size, x => x.per_second, "bytes", "pairs/s")]);
section("Fragmentation", [plot("address range / bytes live", rows("frag"), x => x.size, x => x.ratio, "bytes", "ratio"),
  plot("address range (max over rounds)", rows("frag"), x => x.size, x => x.range_max, "bytes", "bytes")]);
section("Out of memory", [plot("served / capacity", rows("oom"), x => x.size, x => x.fraction, "bytes", "fraction", false)]);
{
  for (const t of ["synth", "synth_write"]) {
    const r = rows(t);
    const sizes = [...new Set(r.map(x => x.size))];
    section(t === "synth" ? "Synthetic workload: allocation" : "Synthetic workload: writes (per launch)",
      sizes.map(s => plot(`sizes in [4, ${s}]`, r.filter(x => x.size === s), x => x.threads, x => x.ms, "threads", "ms")));
  }
}
{
  const t = el("table", {}), r = D.rows.filter(x => x.test === "init" || x.test === "registers");
  if (r.length) {
    out.appendChild(el("h2", {}, "Initialisation and registers"));
    t.innerHTML = "<tr><th>allocator</th><th>init ms</th><th>alloc registers</th><th>free registers</th></tr>";
    for (const a of allocs) {
      const i = r.find(x => x.allocator === a && x.test === "init"), g = r.find(x => x.allocator === a && x.test === "registers");
      const tr = el("tr", {});
      for (const v of [a, i ? i.ms.toFixed(3) : "", g && g.alloc_registers !== undefined ? g.alloc_registers : "n/a", g && g.free_registers !== undefined ? g.free_registers : "n/a"])
        tr.appendChild(el("td", {}, String(v)));
      t.appendChild(tr);
    }
    out.appendChild(t);
  }
}
</script></body></html>
]==]
end
