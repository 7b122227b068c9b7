-- Seeing what happened: a PyTorch memory snapshot replayed through PyTorch's
-- own caching allocator (kind "torch", modelled rule for rule), cupola's vmm
-- pool and its tlsf pool, on the trace's own clock; the figures side by side,
-- one HTML page drawing the three (live and reserved bytes over time, every
-- block as a band by address, the peak marked), and the figures as CSV and JSON.
--   bin/cupola examples/timeline.lua [snapshot.pickle or trace.csv.gz] [out.html]
-- Open the page in any browser: it is one file, with no network access.
local cupola = cupola or require "cupola"
local R = cupola.report

local src = arg and arg[1] or "torch_snapshot_mlp" -- examples/traces/torch_snapshot_mlp.pickle
local out = arg and arg[2] or (os.getenv "TMPDIR" or "/tmp") .. "/cupola_timeline.html"
if not (arg and arg[2]) then
  -- where the files go, said before anything is written (and where to say otherwise)
  print(string.format("no out.html given: the page goes to %s, its figures beside it (.csv, .json)", out))
  print("(bin/cupola examples/timeline.lua [snapshot or trace] [out.html] writes them elsewhere)")
end
local t <close> = cupola.trace.load(src)
print(string.format("%s (%s): %d events, %d allocations, peak live %s", t.path:match "[^/]*$", t.format, #t,
  t.allocs, R.bytes(t.peak_live)))
if t.torch_peak_reserved then
  print(string.format("PyTorch's own peak reserved, as the snapshot recorded it: %s", R.bytes(t.torch_peak_reserved)))
end

-- One replay per pool, recording where each block went (the timeline draws
-- it); the pools have no memory behind them (upstream "virtual"), so any
-- snapshot replays on any machine.  kind "torch" gets the settings the
-- snapshot was recorded under (PyTorch's defaults when it does not say).
local rows = cupola.trace.compare(t, {
  { kind = "torch", upstream = "virtual", conf = t.torch_conf, name = "torch" },
  { kind = "vmm", upstream = "virtual", name = "vmm" },
  { kind = "tlsf", upstream = "virtual", name = "tlsf" },
}, { record = true, clock = "trace" })

local what = {
  torch = "PyTorch's caching allocator" .. (t.torch_conf and t.torch_conf ~= "" and " (" .. t.torch_conf .. ")" or ""),
  vmm = "pages mapped under live blocks only",
  tlsf = "two-level segregated fit, growing by chunks",
}
local lines = {}
for i, r in ipairs(rows) do
  lines[i] = { r.name, R.bytes(r.peak_reserved), string.format("%.3f", r.reserved_over_live), r.device_allocs,
    r.failed, what[r.name] }
end
print()
print(R.table({ "pool", "peak reserved", "reserved/live", "device calls", "failed", "what it is" }, lines))
for _, r in ipairs(rows) do
  if r.warning then print("warning: " .. r.name .. ": " .. r.warning) end
end

-- What the figures say.
print()
if t.torch_peak_reserved then
  print(string.format("kind \"torch\" reserves %s at its peak; PyTorch recorded %s%s.", R.bytes(rows[1].peak_reserved),
    R.bytes(t.torch_peak_reserved), rows[1].peak_reserved == t.torch_peak_reserved and ": the model is exact here"
      or " (the model replays the snapshot's requests; see docs/API.md on addresses = \"recorded\")"))
end
print(string.format("vmm maps a page only under live blocks: %d maps and %d unmaps over the run, %s at its peak;",
  rows[2].maps, rows[2].unmaps, R.bytes(rows[2].peak_reserved)))
print(string.format("tlsf takes %d chunks from its upstream and gives %d back, %s at its peak.", rows[3].device_allocs,
  rows[3].device_frees, R.bytes(rows[3].peak_reserved)))
-- cupola advise's "cupola tlsf inside PyTorch" row is the pool as
-- libcupola_torch.so makes it, which keeps every idle chunk (the serving
-- policy); this one has cupola.pool's default and returns them as it grows
do
  local served <close> = cupola.pool { kind = "tlsf", upstream = "virtual", release_threshold = math.maxinteger }
  local r = t:replay(served, { clock = "trace" })
  print("Serving PyTorch (libcupola_torch.so: cupola advise's row cupola tlsf inside PyTorch), tlsf keeps every")
  print(string.format("idle chunk (release_threshold = 2^63 - 1) and reserves %s at its peak; this one returns idle",
    R.bytes(r.peak_reserved)))
  print("chunks as it grows (release_threshold 0, cupola.pool's default), and lays its blocks out otherwise.")
end

-- The pools that grow by chunks often agree on a small workload: say why
-- when they do, from the trace itself.
local peaks = {}
for _, kind in ipairs { "tlsf", "freelist", "caching" } do
  local p <close> = cupola.pool { kind = kind, upstream = "virtual" }
  peaks[#peaks + 1] = t:replay(p).peak_reserved
end
if peaks[1] == peaks[2] and peaks[2] == peaks[3] then
  local whole, all = 0, 0
  for i = 1, #t do
    local e = t:event(i)
    if e.action == "allocate" then
      all = all + e.size
      if e.size % (2 << 20) == 0 then whole = whole + e.size end
    end
  end
  print(string.format("tlsf, freelist and caching all reserve %s here: %.0f%% of the bytes this program allocates are in",
    R.bytes(peaks[1]), 100 * whole / all))
  print("blocks of whole 2 MiB multiples, the unit these pools grow by, and each takes a freed block of the")
  print("right size back whole, so at the peak all three hold the same blocks in the same chunks. Traces of")
  print("more varied sizes set them apart (bin/cupola examples/replay.lua: gpt2_train).")
end

local path, info = cupola.timeline(rows, out, { title = "cupola timeline: " .. t.path:match "[^/]*$" })
print()
print(string.format("timeline: %s (%d panels, %d blocks, %.1f KB)", path, info.panels, info.blocks, info.bytes / 1e3))
local base = out:gsub("%.html$", "")
R.csv(rows, base .. ".csv")
R.json(rows, base .. ".json")
print("figures: " .. base .. ".csv, " .. base .. ".json")
return rows
