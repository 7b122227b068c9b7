-- examples/torch_settings.lua: what would PyTorch's allocator have reserved
-- under another PYTORCH_CUDA_ALLOC_CONF, and would the run have fitted?
--
--   bin/cupola examples/torch_settings.lua [SNAPSHOT [LIMIT]]
--
-- A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot; default: the
-- shipped varlen.default, a transformer trained on batches of changing shape)
-- is replayed through cupola's model of PyTorch's caching allocator
-- (kind = "torch") under several settings, starting from the addresses the
-- recording itself got from CUDA.  With a LIMIT (bytes or "2GiB"), each
-- setting runs under that allowed maximum, as set_per_process_memory_fraction
-- would set it, and stops where PyTorch would raise OutOfMemoryError.
local path = arg[1] or cupola.trace.find "torch/varlen.default.cpsnap.gz"
local limit = arg[2] and cupola.bytes(arg[2]) or nil
local t <close> = cupola.trace.load(path)
local MiB = 1024 * 1024

-- the setting the snapshot was recorded under, when it says so
-- (t.torch_conf: PYTORCH_CUDA_ALLOC_CONF as PyTorch read it, "" when unset;
-- nil when the snapshot has no allocator_settings)
local recorded = t.torch_conf or ""
local under = t.torch_conf == nil and "a setting the snapshot does not record (PyTorch's defaults assumed)"
  or t.torch_conf == "" and "PyTorch's defaults"
  or "PYTORCH_CUDA_ALLOC_CONF=" .. t.torch_conf
print(string.format("%s: %d operations, peak in use %.0f MiB, recorded under %s",
  path:match "[^/]+$", #t, t.peak_live / MiB, under))

local settings = { recorded, "expandable_segments:True", "max_split_size_mb:128",
                   "roundup_power2_divisions:4", "garbage_collection_threshold:0.8" }
local rows = {}
for _, conf in ipairs(settings) do
  local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = conf, max = limit }
  local r = t:replay(p, { addresses = "recorded", stop_at_oom = limit ~= nil })
  local row = { conf == "" and "(PyTorch's defaults)" or conf, string.format("%.0f MiB", r.peak_reserved / MiB),
    string.format("%.0f MiB", r.peak_allocated / MiB), r.device_allocs, r.retries }
  if limit then
    row[#row + 1] = r.stopped and string.format("no (at #%d, %.0f MiB)",
      r.stopped.allocation or 0, r.stopped.size / MiB) or "yes"
  end
  rows[#rows + 1] = row
end
local headers = { "setting", "peak reserved", "peak allocated", "cudaMallocs", "retries" }
if limit then headers[#headers + 1] = "fits " .. cupola.report.bytes(limit) .. "?" end
print(cupola.report.table(headers, rows))
if limit then
  print("no (at #N, size): out of memory at the snapshot's Nth allocation, of that size")
end
