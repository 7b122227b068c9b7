-- Every allocator on a trace recorded from a PyTorch training run, replayed
-- in C, stream-ordered; a table of the figures beside PyTorch's own.
--   bin/cupola examples/replay.lua [trace.csv.gz]
local cupola = cupola or require "cupola"
local R = cupola.report

local path = arg and arg[1] or assert(cupola.trace.find "gpt2_train")
local t <close> = cupola.trace.load(path)
-- a shipped trace by its name; a path of the user's as given
local shown = (arg and arg[1]) or path:match "[^/]+$"
print(string.format("trace %s: %d events, %d stream%s, peak live %s, on backend %s", shown, #t, t.streams,
  t.streams == 1 and "" or "s", R.bytes(t.peak_live), cupola.backend()))

local configs = {}
for _, kind in ipairs { "tlsf", "freelist", "caching" } do
  configs[#configs + 1] = { kind = kind, upstream = "virtual" }
end
local rows = {}
for i, r in ipairs(cupola.trace.compare(t, configs)) do
  rows[i] = { r.name, R.bytes(r.peak_reserved), string.format("%.3f", r.reserved_over_live),
    string.format("%.1f", r.ns_per_event), r.failed }
end
print(R.table({ "pool", "peak reserved", "reserved/live", "ns/event", "failed" }, rows))
local pytorch = { gpt2_train = 1.10, resnet50_train = 1.21, t5_train_varlen = 1.14 }
local base = path:match "([%w_]+)%.csv"
if pytorch[base] then
  print(string.format("PyTorch's caching allocator on the same run: %.2f (examples/traces/README.md)", pytorch[base]))
end
return rows
