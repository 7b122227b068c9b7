-- examples/vmm_pool.lua: the vmm pool (physical pages mapped only under live
-- blocks) beside a chunked pool, on a shipped trace and on a few blocks.
--   bin/cupola examples/vmm_pool.lua [trace-name]
local cupola = cupola or require "cupola"
local MiB = 1024 * 1024

-- A trace over the virtual upstream: what each pool would reserve on the GPU,
-- and the pages the vmm pool would map and unmap.
local name = arg and arg[1] or "gpt2_beam_search"
local t <close> = cupola.trace.load(cupola.trace.find(name))
local rows = {}
for _, kind in ipairs { "tlsf", "vmm" } do
  for _, thr in ipairs { 0, math.maxinteger } do
    local p <close> = cupola.pool { kind = kind, upstream = "virtual", release_threshold = thr }
    local first = cupola.trace.replay(t, p)
    local again = cupola.trace.replay(t, p) -- a second pass: the steady state
    rows[#rows + 1] = { kind, thr == 0 and "0" or "max", string.format("%.4f", first.reserved_over_live),
      first.maps, again.maps, again.unmaps }
  end
end
print(string.format("%s, replayed over the virtual upstream", name))
print(cupola.report.table({ "pool", "release_threshold", "reserved/live", "maps (1st pass)",
  "maps (2nd)", "unmaps (2nd)" }, rows))

-- Real pages (the backend's virtual memory: the GPU, or mprotect'ed host pages).
local p <close> = cupola.pool { kind = "vmm", upstream = "device" }
local a = p:alloc(6 * MiB)
local keep = p:alloc "4KiB"
a:free()
local b = p:alloc(10 * MiB) -- larger than a's hole: a's idle pages move under it
b:write("end", 10 * MiB - 3)
local st = p:stats()
print(string.format("pages of %s: %d mapped (%s), %d maps, %d unmaps", cupola.report.bytes(st.page_bytes),
  st.pages_mapped, cupola.report.bytes(st.reserved), st.maps, st.unmaps))
b:free(); keep:free()
return rows
