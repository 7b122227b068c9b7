-- tests/torch/pluggable_replay.lua: the prediction beside the measurement.
-- Replays the snapshot PyTorch's own allocator recorded for each workload
-- (tests/torch/pluggable.py, run "native") through the cupola pool of each
-- spec, over the virtual upstream (cupola.trace.replay: no memory, the
-- pool's accounting only), and puts its peak reserved beside the peak the
-- same pool reserved serving PyTorch for real (the library's stats), with
-- the error; also the replay over the device upstream (real cudaMalloc
-- through cupola, no PyTorch), which separates what the upstream changes
-- from what the program did differently.  Markdown on stdout.
--
--   lua5.4 tests/torch/pluggable_replay.lua DIR [COMMIT]     (DIR: pluggable.py's)
local cupola = require "cupola"

local dir, commit = arg[1], arg[2] or "unknown"
assert(dir, "usage: pluggable_replay.lua DIR [COMMIT]")

-- A pool spec ("tlsf,initial=1GiB,reuse=wait": CUPOLA_TORCH_POOL's syntax)
-- as cupola.pool options over the given upstream.
local function pool_options(spec, upstream)
  local o = require("cupola.util").pool_spec(spec)
  o.upstream = upstream
  -- as libcupola_torch.so makes it: the serving policy (src/core/pool/spec.c)
  return require("cupola.core").trace.serving(o)
end

-- measured.tsv: workload, tag, spec, rc, losses_equal, max_rel_diff,
-- reserved_peak, allocated_peak, seconds
local runs, order = {}, {}
for line in io.lines(dir .. "/measured.tsv") do
  local c = {}
  for v in (line .. "\t"):gmatch "([^\t]*)\t" do c[#c + 1] = v end
  if c[1] ~= "workload" then
    local r = { workload = c[1], tag = c[2], spec = c[3], rc = tonumber(c[4]), equal = c[5] == "1",
      diff = tonumber(c[6]), reserved = tonumber(c[7]), allocated = tonumber(c[8]) }
    runs[#runs + 1] = r
    if not order[r.workload] then order[r.workload] = {}; order[#order + 1] = r.workload end
    order[r.workload][r.tag] = r
  end
end

local function mib(n) return n and n >= 0 and ("%.1f MiB"):format(n / 2 ^ 20) or "-" end
local out = {
  "# cupola's pools inside PyTorch: measured and predicted peak reserved",
  "",
  ("Device: %s (%s backend for the replays). Commit %s, %s."):format(cupola.device().name, cupola.backend(),
    commit, os.date "!%Y-%m-%d %H:%MZ"),
  "",
  "| workload | allocator | losses vs native | peak reserved, measured | replay (virtual) | error | replay (device) | peak allocated |",
  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
}
local worst = 0
for _, w in ipairs(order) do
  local t = cupola.trace.load(dir .. "/" .. w .. ".native.pickle.gz")
  for _, r in ipairs(runs) do
    if r.workload == w then
      local losses = r.rc ~= 0 and ("run failed (rc " .. r.rc .. ")") or r.equal and "identical"
        or ("differ (max rel %.2g)"):format(r.diff or -1)
      local pred, dpred, err = "-", "-", "-"
      if r.spec ~= "" and r.rc == 0 then
        local p <close> = cupola.pool(pool_options(r.spec, "virtual"))
        local res = cupola.trace.replay(t, p)
        pred = mib(res.peak_reserved)
        local e = (res.peak_reserved - r.reserved) / r.reserved
        if math.abs(e) > worst then worst = math.abs(e) end
        err = ("%+.3f %%"):format(100 * e)
        local ok, dres = pcall(function()
          local q <close> = cupola.pool(pool_options(r.spec, "device"))
          return cupola.trace.replay(t, q, { synchronize = true })
        end)
        dpred = ok and mib(dres.peak_reserved) or ("failed: " .. tostring(dres):sub(1, 60))
      end
      local name = r.spec ~= "" and ("cupola `" .. r.spec .. "`") or
        (r.tag == "native" and "PyTorch (recorded)" or "PyTorch (again)")
      out[#out + 1] = ("| %s | %s | %s | %s | %s | %s | %s | %s |"):format(w, name, losses, mib(r.reserved),
        pred, err, dpred, mib(r.allocated))
    end
  end
end
out[#out + 1] = ""
out[#out + 1] = ("Largest prediction error: %.3f %% (aim: within 1 %%)."):format(100 * worst)
print(table.concat(out, "\n"))
