-- Seeing what happened: a PyTorch memory snapshot replayed through three
-- pools, drawn on one page (live and reserved bytes over time, every block as
-- a band by address, the peak marked), and the figures written as CSV and JSON.
--   bin/cupola examples/timeline.lua [snapshot.pickle or trace.csv.gz] [out.html]
-- Open the page in any browser: it is one file, with no network access.
local cupola = cupola or require "cupola"

local src = arg and arg[1] or assert(cupola.trace.find "torch_snapshot_mlp")
local out = arg and arg[2] or (os.getenv "TMPDIR" or "/tmp") .. "/cupola_timeline.html"
local t <close> = cupola.trace.load(src)
print(string.format("%s (%s): %d events, %d allocations, peak live %s", src, t.format, #t, t.allocs,
  cupola.report.bytes(t.peak_live)))
if t.torch_peak_reserved then
  print(string.format("PyTorch's own peak reserved: %s", cupola.report.bytes(t.torch_peak_reserved)))
end

-- One line per pool: replay, recording where each block went.
local rows = cupola.trace.compare(t, {
  { kind = "tlsf", upstream = "virtual" },
  { kind = "caching", upstream = "virtual" },
  { kind = "arena", upstream = "virtual" },
}, { record = true })
print(cupola.report.records(rows, { "name", "peak_live", "peak_reserved", "reserved_over_live",
  t.torch_peak_reserved and "torch_reserved_over_live" or nil, "failed" }))

local path, info = cupola.timeline(rows, out, { title = "cupola timeline: " .. src:match "[^/]*$" })
print(string.format("timeline: %s (%d panels, %d blocks, %.1f KB)", path, info.panels, info.blocks, info.bytes / 1e3))
local base = out:gsub("%.html$", "")
cupola.report.csv(rows, base .. ".csv")
cupola.report.json(rows, base .. ".json")
print("figures: " .. base .. ".csv, " .. base .. ".json")
return rows
