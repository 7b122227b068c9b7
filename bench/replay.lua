-- bench/replay.lua: every shipped trace on every allocator, replayed in C.
-- Reports reserved/live (peak reserved over peak live bytes) and ns per
-- event beside PyTorch's caching allocator on the same work.
--   bin/cupola bench/replay.lua [traces-folder]
local cupola = cupola or require "cupola"

-- PyTorch's peak reserved over peak live, from examples/traces/README.md:
-- default settings, and expandable segments.
local pytorch = { resnet50_train = 1.21, gpt2_train = 1.10, t5_train_varlen = 1.14, mixtral_moe_train = 1.53,
  convnext_multires_train = 1.21, gpt2_beam_search = 1.09 }
local expandable = { resnet50_train = 1.017, gpt2_train = 1.089, t5_train_varlen = 1.040,
  mixtral_moe_train = 1.087, convnext_multires_train = 1.010, gpt2_beam_search = 1.047 }

-- An optional folder argument overrides where the traces are looked up.
local function trace_path(name)
  if arg and arg[1] then return arg[1] .. "/" .. name .. ".csv.gz" end
  return assert(cupola.trace.find(name))
end
local upstreams = { "virtual" }
if cupola.backend() == "cuda" then upstreams[2] = "device" end
local rows = {}
for _, name in ipairs { "resnet50_train", "gpt2_train", "t5_train_varlen", "mixtral_moe_train",
  "convnext_multires_train", "gpt2_beam_search" } do
  local t <close> = cupola.trace.load(trace_path(name))
  for _, up in ipairs(upstreams) do
    for _, kind in ipairs { "tlsf", "freelist", "caching", "vmm" } do
      local p <close> = cupola.pool { kind = kind, upstream = up }
      local first = cupola.trace.replay(t, p)
      -- ns/event: the median of further replays on the warm pool.
      local ns = {}
      for i = 1, 5 do ns[i] = cupola.trace.replay(t, p).ns_per_event end
      rows[#rows + 1] = { name, kind, up, first.events, string.format("%.3f", first.reserved_over_live),
        string.format("%.2f", pytorch[name]), string.format("%.3f", expandable[name]),
        string.format("%.1f", cupola.bench.median(ns)), first.maps, first.failed }
    end
  end
end
print(string.format("trace replay, backend %s (%s)", cupola.backend(), cupola.device().name))
print(cupola.report.table({ "trace", "pool", "upstream", "events", "reserved/live", "pytorch", "expandable",
  "ns/event", "maps", "failed" },
  rows))
return rows
