-- bench/steady_calls.lua: the upstream calls (cudaMalloc/cudaFree when a pool
-- serves PyTorch through libcupola_torch.so) each pool makes once warm, the
-- cause of a step-time gap that bench/torch_step.sh measures on the GPU.
-- Each shipped training trace is replayed twice through one pool over the
-- virtual upstream: the first pass warms it, the second is a run of the
-- same steps again, as every training step after the first is.  Counted in
-- the second pass: upstream allocations and frees, and the bytes they moved
-- (from the pool's reserved bytes after each event).  No GPU needed;
-- deterministic.  Markdown on stdout.
--
-- Each SPEC is a pool as CUPOLA_TORCH_POOL names it, made as the library
-- makes it when it serves PyTorch or CuPy (the serving policy,
-- src/core/pool/spec.c: tlsf and caching keep their idle chunks unless the
-- spec sets release_threshold); `tlsf,release_threshold=0` is tlsf as
-- cupola.pool{kind = "tlsf"} makes it, the pool before that policy.  Peak
-- reserved: of the first pass (what cupola advise reports for the row) and
-- the pool's over both (what the library holds after two steps' worth).
--
--   lua5.4 bench/steady_calls.lua [SPEC ...]
--   (default: tlsf vmm caching tlsf,release_threshold=0 caching,release_threshold=0)
local cupola = require "cupola"
local core = require "cupola.core"

-- the traces and their training steps (examples/traces/README.md)
local traces = {
  { "gpt2_train", 3 }, { "resnet50_train", 3 }, { "t5_train_varlen", 12 },
  { "mixtral_moe_train", 10 }, { "convnext_multires_train", 8 },
}
local specs = #arg > 0 and arg
  or { "tlsf", "vmm", "caching", "tlsf,release_threshold=0", "caching,release_threshold=0" }

local function pool_options(spec)
  local o, first = { upstream = "virtual" }, true
  for item in spec:gmatch "[^,]+" do
    item = item:match "^%s*(.-)%s*$"
    if first then o.kind, first = item, false
    else
      local k, v = item:match "^([%w_]+)%s*=%s*(.-)$"
      o[k] = v == "true" or (v ~= "false" and v)
    end
  end
  return core.trace.serving(o)
end

local out = {
  "| trace (steps) | CUPOLA_TORCH_POOL | peak reserved, one pass (advise's figure) | peak reserved, two passes | upstream calls per step, warm | MiB taken + given back per step |",
  "| --- | --- | ---: | ---: | ---: | ---: |",
}
for _, tr in ipairs(traces) do
  local t <close> = cupola.trace.load(tr[1])
  for _, spec in ipairs(specs) do
    local p <close> = cupola.pool(pool_options(spec))
    local first = t:replay(p, { clock = "trace", progress = false })
    local r = t:replay(p, { clock = "trace", progress = false, record = true })
    local res, moved = r.recording.reserved, 0
    for i = 2, #res do moved = moved + math.abs(res[i] - res[i - 1]) end
    out[#out + 1] = ("| %s (%d) | `%s` | %.0f MiB | %.0f MiB | %.1f | %.0f |"):format(tr[1], tr[2], spec,
      first.peak_reserved / 2 ^ 20, p:stats().reserved_peak / 2 ^ 20, (r.device_allocs + r.device_frees) / tr[2], moved / 2 ^ 20 / tr[2])
  end
end
print(table.concat(out, "\n"))
