-- examples/vmm_pool.lua: the vmm pool (physical pages mapped only under live
-- blocks) beside a chunked pool, on a shipped trace and on a few blocks.
--   bin/cupola examples/vmm_pool.lua [trace-name]
local cupola = cupola or require "cupola"
local MiB = 1024 * 1024

-- A trace over the virtual upstream: what each pool would reserve on the GPU,
-- and the pages the vmm pool would map and unmap.  The pools' clocks read the
-- trace's timestamps (clock = "trace"), so the vmm pool's budget and window
-- are the workload's seconds.
local name = arg and arg[1] or "gpt2_beam_search"
local t <close> = cupola.trace.load(cupola.trace.find(name))
local rows = {}
for _, kind in ipairs { "tlsf", "vmm" } do
  for _, thr in ipairs { false, 0, math.maxinteger } do
    if kind == "vmm" or thr ~= false then
      local p <close> = cupola.pool { kind = kind, upstream = "virtual", clock = "manual",
        release_threshold = thr or nil }
      local first = cupola.trace.replay(t, p, { clock = "trace" })
      -- a second pass: the steady state
      local again = cupola.trace.replay(t, p, { clock = "trace" })
      rows[#rows + 1] = { kind, thr == false and "(by time)" or thr == 0 and "0" or "max",
        string.format("%.4f", first.reserved_over_live), first.maps, again.maps, again.unmaps,
        string.format("%.3f", first.reserved_byte_seconds / first.live_byte_seconds) }
    end
  end
end
print(string.format("%s (%.2f s), replayed over the virtual upstream on the trace's clock", name,
  t:info().duration_us / 1e6))
-- (in 100 columns: "byte-s" are byte-seconds, reserved over live)
print(cupola.report.table({ "pool", "release_threshold", "reserved/live", "maps (1st)",
  "maps (2nd)", "unmaps (2nd)", "byte-s reserved/live" }, rows))

-- Real pages (the backend's virtual memory: the GPU, or mprotect'ed host pages).
-- With release_threshold = 0 idle pages move at once to where a new block needs them.
local p <close> = cupola.pool { kind = "vmm", upstream = "device", release_threshold = 0 }
local a = p:alloc(6 * MiB)
local keep = p:alloc "4KiB"
a:free()
cupola.synchronize() -- a's frees are complete: its pages may move
local b = p:alloc(10 * MiB) -- larger than a's hole: a's idle pages move under it
b:write("end", 10 * MiB - 3)
local st = p:stats()
print(string.format("pages of %s: %d mapped (%s), %d maps, %d unmaps",
  cupola.report.bytes(st.page_bytes), st.pages_mapped, cupola.report.bytes(st.reserved), st.maps,
  st.unmaps))
b:free(); keep:free()
return rows
