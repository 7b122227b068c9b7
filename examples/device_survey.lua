-- In-kernel allocators measured as the field measures them: cupola's heap,
-- your own allocator as a plugin (examples/plugins/stackalloc.cu) and
-- CUDA's malloc, first checked by dp:run (the claim map, alignment, data
-- intact, NULL when exhausted), then through the benchmarks of "Are dynamic
-- memory managers on GPUs slow?" (Winter et al., PPoPP 2021), side by side.
--   bin/cupola examples/device_survey.lua [page.html]
-- CUPOLA_ITERS sets the survey's iterations (default 3).  On the host backend
-- the kernels run on the CPU and the times are the CPU's.
local cupola = cupola or require "cupola"
local survey = require "cupola.survey"

local GPU = cupola.backend() == "cuda"
local here = (arg and arg[0] or "examples/device_survey.lua"):match "^(.*)[/\\]" or "."
local plugin = here .. "/plugins/stackalloc.cu"
local page = arg and arg[1]
local MiB = 1024 * 1024
local N = GPU and 1000000 or 20000

-- 1. The checks every pool passes: a heap and the plugin, sizes from 16 B
-- to 1 MiB (the plugin's 16-byte headers show in what it can serve).
local heap <close> = cupola.device_pool { kind = "heap", capacity = GPU and "4GiB" or "256MiB" }
local mine <close> = cupola.device_pool { kind = "plugin", path = plugin, capacity = GPU and "4GiB" or "256MiB" }
print(string.format("backend %s; %s and %s", cupola.backend(), tostring(heap), tostring(mine)))
for _, dp in ipairs { heap, mine } do
  for _, bytes in ipairs { 16, { 16, 4096 }, 65536, MiB } do
    local n = type(bytes) ~= "number" and N or bytes >= MiB and (GPU and 2000 or 200) or bytes >= 65536 and 2000 or N
    -- each size on a fresh pool: the plugin keeps freed blocks in lists of
    -- their class (a class never serves another), so without the reset
    -- the mixed sizes' blocks would hold the memory the 1 MiB row needs
    -- (2000 blocks of 2 MiB with their headers, in 4 GiB)
    dp:reset()
    local r = dp:run { threads = n, bytes = bytes, free = true }
    local label = type(bytes) == "table" and (bytes[1] .. ".." .. bytes[2]) or tostring(bytes)
    print(string.format("%-8s %-9s B  %8d threads  ok %8d  failed %d  overlaps %d  misaligned %d  %.3f ms",
      dp.kind, label, n, r.ok, r.failed, r.overlaps, r.misaligned, r.ms))
  end
end

-- 2. The survey, small: every test, each allocator beside CUDA's malloc.
local iters = tonumber(os.getenv "CUPOLA_ITERS") or 3
local res = survey.run {
  allocators = { "heap", { kind = "plugin", path = plugin, name = "stackalloc" }, "malloc" },
  capacity = GPU and "4GiB" or "64MiB", frag_capacity = GPU and "1GiB" or "64MiB", oom_capacity = "16MiB",
  iterations = math.min(iters, 3), threads = GPU and 100000 or 2000, warps = GPU and 10000 or 200,
  sizes = { 16, 256, 4096 }, mixed_ranges = { 4096 }, scaling_sizes = { 64 },
  scaling_threads = GPU and { 1, 1024, 65536, 1048576 } or { 1, 64, 1024 },
  pair_sizes = { 16, 1024, 65536 }, pair_threads = GPU and 100000 or 5000,
  frag_sizes = { 16, 1024 }, oom_sizes = { 64, 65536 }, oom_threads = GPU and 100000 or 2000,
  synth_ranges = { 64 }, synth_threads = GPU and { 1024, 1048576 } or { 1024 }, synth_writes = 3,
}
print(survey.markdown(res))
if page then
  survey.html(res, page)
  print("wrote " .. page)
end
