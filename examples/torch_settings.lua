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
local recorded = t.torch_conf or ""
print(string.format("%s: %d operations, peak in use %.0f MiB, recorded under '%s'",
  path:match "[^/]+$", #t, t.peak_live / MiB, recorded))

local settings = { recorded, "expandable_segments:True", "max_split_size_mb:128",
                   "roundup_power2_divisions:4", "garbage_collection_threshold:0.8" }
print(string.format("%-36s %14s %14s %8s %8s  %s", "setting", "peak reserved", "peak allocated",
  "mallocs", "retries", limit and "fits?" or ""))
for _, conf in ipairs(settings) do
  local p <close> = cupola.pool { kind = "torch", upstream = "virtual", conf = conf, max = limit }
  local r = t:replay(p, { addresses = "recorded", stop_at_oom = limit ~= nil })
  local fits = ""
  if limit then
    fits = r.stopped and string.format("no: out of memory at allocation %d (%.0f MiB)",
      r.stopped.allocation or 0, r.stopped.size / MiB) or "yes"
  end
  print(string.format("%-36s %10.0f MiB %10.0f MiB %8d %8d  %s", conf == "" and "(PyTorch's defaults)" or conf,
    r.peak_reserved / MiB, r.peak_allocated / MiB, r.device_allocs, r.retries, fits))
end
