-- The argument fuzz of the later surfaces: random calls of
-- modules, kernels and launches, devices, IPC, trace files, timelines, NVTX,
-- reports, the conformance battery and help, and raw allocation (alloc_raw,
-- free_raw, buffer, raw addresses as kernel arguments: live, freed, inside
-- a block, of another pool, or no address at all), with hostile values.  It must
-- not crash or hang; it ends by printing "calls=N ok=N errors=N".
--
--   lua5.4 spec/support/argfuzz_round2.lua SEED CALLS DIR   (DIR: a private
--                                                            scratch folder)
--   CUPOLA_NO_CDP=1  leaves out the module with nested launches (for the
--                    compute-sanitizer tools that do not support them)
--
-- spec/fuzz_spec.lua runs it in a child process.  On the GPU machine
-- bench/gpu-check.sh also runs it alone under each compute-sanitizer tool:
-- inside the suite under the tool it is pending, because there the tool
-- follows the busted process and this child at once, and the child hung in
-- the driver (cuCtxGetCurrent, called by cupola.module, never returned; the
-- same script alone under the same tool finishes in a second, clean).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local seed, calls, dir = tonumber(arg[1]), tonumber(arg[2]), arg[3]
local x = seed ~ 0x5851F42D4C957F2D
if x == 0 then x = 1 end
local function rnd(n)
  x = x ~ (x << 13); x = x ~ (x >> 7); x = x ~ (x << 17)
  return 1 + ((x >> 1) % n)
end
local function pick(t) return t[rnd(#t)] end

local SRC = [[
extern "C" __global__ void k1(int *p, int a) { if (p == nullptr && a == 12345) __trap(); }
extern "C" __global__ void k2(const float *p, float f, unsigned long long u, double d) {
  __syncthreads();
  if (f != f && u == 7 && p == nullptr && d > 1e300) __trap();
}
]]
local m = cupola.module { name = "fuzz2.cu", source = SRC }
local m2 = cupola.module { name = "fuzz2b.cu", source = "extern \"C\" __global__ void k0() {}\n" }
local k1 = m:kernel("k1", { "ptr", "i32" })
local k2 = m:kernel("k2", { "ptr", "f32", "u64", "f64" })
local k0 = m2:kernel("k0", {})
local s = cupola.stream()
local cs = cupola.stream(); cs:close()
local b = cupola.malloc(256)
local fb = cupola.malloc(64); fb:free()
local mp = cupola.mempool()
local mb = mp:alloc(1024, s)
local cmp = cupola.mempool(); cmp:close()
local pool = cupola.pool { kind = "freelist" }
local rpools = { pool, cupola.pool { kind = "arena" }, cupola.pool { kind = "vmm", upstream = "virtual" } }
local cpool = cupola.pool { kind = "tlsf" }; cpool:alloc_raw(64); cpool:close()
local m3 = cupola.module { name = "fuzz2c.cu", source = SRC }; m3:close()
local ck = m3.kernel and pcall(m3.kernel, m3, "k1", { "ptr", "i32" })
local tpath = dir .. "/t.csv"
local f = io.open(tpath, "w")
f:write("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x100,256,0x0\n0,2,free,0x100,256,0x0\n")
f:close()
local trace = cupola.trace.load(tpath)
local replay = cupola.trace.replay(trace, cupola.pool { kind = "arena", upstream = "virtual" })
local mp_export = select(2, pcall(mp.export, mp))
local b_export = select(2, pcall(mb.export, mb))

local plain = { nil, true, false, 0, 1, -1, 2, 31, 32, 1024, 1025, 65535, 65536, 1 << 31, (1 << 31) - 1,
  (1 << 32), -(1 << 31) - 1, math.maxinteger, math.mininteger, 1.5, -0.0, 0 / 0, 1 / 0, -1 / 0, 1e300,
  "", "x", "ptr", "i32", "u64", "f16", "k1", "k2", "rw", "r", "none", "bogus", ("z"):rep(5000), "\0",
  {}, { 1 }, print, coroutine.create(function() end) }
local handles = { m, m2, k1, k2, k0, s, cs, b, fb, mp, mb, cmp, pool, m3, trace, cupola.default_stream }
local function value()
  local c = rnd(10)
  if c <= 3 then return pick(handles) end
  return plain[rnd(#plain + 1)] -- sometimes nil
end
local function str_mangle(v)
  if type(v) ~= "string" then return v end
  local c = rnd(5)
  if c == 1 then return v:sub(1, rnd(#v + 1) - 1) end
  if c == 2 then return v .. pick { "x", "\0", "00", ":" } end
  if c == 3 and #v > 0 then
    local i = rnd(#v)
    return v:sub(1, i - 1) .. string.char(rnd(256) - 1) .. v:sub(i + 1)
  end
  if c == 4 then return v:upper() end
  return v
end

local module_descs = {
  function() return {} end,
  function() return { source = value() } end,
  function() return { source = SRC, path = tpath } end,
  function() return { path = dir .. "/missing.cu" } end,
  function() return { path = dir } end,
  function() return { path = value() } end,
  function() return { source = SRC, options = value() } end,
  function() return { source = SRC, options = { value(), value() } } end,
  function() return { source = SRC, options = { pick { "-fplugin=x.so", "-Wl,-rpath,/tmp", "@opts", "-DX=1 -fno",
    "-include/etc/passwd", "-B/tmp", "-specs=x", "--compiler-bindir=/tmp", "-I", "-std=c++17;rm" } } } end,
  function() return { source = SRC, name = value() } end,
  function() return { source = SRC, bogus = 1 } end,
  function() return { source = SRC, name = "fuzz2.cu" } end, -- cached
  function() return { source = str_mangle(SRC), name = "mangled.cu" } end,
  function() return { source = "extern \"C\" __global__ void bad( { }", name = "bad.cu" } end,
  function()
    -- nested launches: left out where the tool cannot follow them (CUPOLA_NO_CDP)
    if (os.getenv "CUPOLA_NO_CDP" or "") ~= "" then return { source = "__global__ void a(int*p){ p[0] = 1; }", name = "nocdp.cu" } end
    return { source = "__global__ void a(int*p){ p[0] = 1; } __global__ void b(int *p) { a<<<1,1>>>(p); }" }
  end,
  function() return value() end,
}
local types_list = {
  { "ptr", "i32" }, { "ptr", "f32", "u64", "f64" }, {}, { "ptr" }, { "ptr", "i32", "i32" }, { "f16", "i32" },
  { "PTR", "i32" }, { 1, 2 }, { "ptr", nil, "i32" }, "ptr", function() end,
}
do local t = {} for i = 1, 200 do t[i] = "ptr" end types_list[#types_list + 1] = t end
local launch_opts = {
  { grid = 1, block = 1 }, { grid = 2, block = 32, stream = s }, { grid = 0, block = 1 }, { grid = -1, block = 1 },
  { grid = 0 / 0, block = 1 }, { grid = 1 / 0, block = 1 }, { grid = 1.5, block = 1 }, { grid = { 1, 2, 3, 4 }, block = 1 },
  { grid = { 0, 1, 1 }, block = 1 }, { grid = { 2 ^ 31, 1, 1 }, block = 1 }, { grid = { 1, 65536, 1 }, block = 1 },
  { grid = { 1, 1, 65536 }, block = 1 }, { grid = { 65536 * 65536 + 1, 1, 1 }, block = 1 },
  { grid = { (1 << 31) - 1, 65535, 65535 }, block = 1025 }, { grid = 1, block = 1025 }, { grid = 1, block = { 1024, 2 } },
  { grid = 1, block = { 0 } }, { grid = 1, block = { 1, 1, 65 } }, { grid = 1, block = -32 }, { grid = 1, block = 1, shared = -1 },
  { grid = 1, block = 1, shared = 1 << 40 }, { grid = 1, block = 1, shared = 232449 }, { grid = 1, block = 1, shared = 4096 },
  { grid = 1, block = 1, stream = "x" }, { grid = 1, block = 1, stream = cs }, { grid = 1, block = 1, stream = b },
  { grid = 1, block = 1, bogus = 1 }, { grid = "2", block = 1 }, { grid = { "1" }, block = 1 }, { grid = 1 }, { block = 1 },
  { grid = { 2, 2 }, block = { 8, 8 } }, { grid = { 1, 1, 1 }, block = { 32, 1, 1 }, stream = cupola.default_stream },
  {}, "grid", 5,
}
local function args_for()
  local n = rnd(6) - 1
  local t = {}
  for i = 1, n do t[i] = rnd(3) == 1 and pick { b, mb, fb, 0, 2 ^ 53, -1.5, 1e300, 0 / 0 } or value() end
  return t, n
end
local paths = { dir .. "/out.html", dir .. "/out.csv", dir .. "/out.json", dir, "/", "/nonexistent/dir/x.html",
  "", dir .. "/sub/../out2.html" }
local hostile_files = {
  "", "\0\0\0", "Thread,Time,Action,Pointer,Size,Stream\n", "Thread,Time\n1,2\n",
  "Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x100,-5,0x0\n",
  "Thread,Time,Action,Pointer,Size,Stream\n0,1,free,0x100,256,0x0\n",
  "\x1f\x8b\x08\0\0\0\0\0\0\3garbage", "\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f", "\x80\x02}q\0.",
  ("a,"):rep(10000), "Thread,Time,Action,Pointer,Size,Stream\n" .. ("0,1,allocate,0x1,18446744073709551615,0x0\n"):rep(3),
}

-- raw addresses the pools gave (live, freed, handed to a Buffer or reset
-- away), and addresses near them
local raws = {}
local function raw_addr()
  if #raws == 0 or rnd(5) == 1 then return value() end
  return pick(raws) + pick { 0, 0, 0, 1, 255, 256, -256, 1 << 40 }
end
local raw_pool = function() return rnd(8) == 1 and pick { cpool, s, b, value() } or pick(rpools) end

local calls_t = {
  function() return "cupola.module", pcall(cupola.module, pick(module_descs)()) end,
  function() return "m:kernel", pcall(m.kernel, pick { m, m2, m3, value() }, str_mangle(pick { "k1", "k2", "k0", "nope", "" , value() }), pick(types_list)) end,
  function()
    local a, n = args_for()
    return "k:launch", pcall(pick { k1, k2, k0 }.launch, rnd(10) == 1 and value() or pick { k1, k2, k0 }, pick(launch_opts), table.unpack(a, 1, n))
  end,
  function() return "k1:launch", pcall(k1.launch, k1, pick(launch_opts), pick { b, mb, fb, 0, value() }, pick { 0, 1, 1 << 31, -(1 << 31) - 1, 1.5, 0 / 0, "7", value() }) end,
  function() return "k2:launch", pcall(k2.launch, k2, pick(launch_opts), pick { b, mb, value() }, pick { 1e39, -1e39, 0 / 0, 1.5, value() }, pick { -1, 2 ^ 64, math.mininteger, value() }, value()) end,
  function() return "m:close", pcall(pick { m3, cmp }.close, pick { m3, cmp }) end,
  function() return "device_count", pcall(cupola.device_count, value()) end,
  function() return "device", pcall(cupola.device, value()) end,
  function() return "set_device", pcall(cupola.set_device, pick { 0, value() }) end,
  function() return "can_access_peer", pcall(cupola.can_access_peer, value(), value()) end,
  function() return "enable_peer_access", pcall(cupola.enable_peer_access, value(), value()) end,
  function() return "mp:set_access", pcall(mp.set_access, pick { mp, cmp, value() }, value(), value()) end,
  function() return "mp:access", pcall(mp.access, pick { mp, cmp, value() }, value()) end,
  function() return "mp:export", pcall(mp.export, pick { mp, cmp, value() }) end,
  function() return "mempool.import", pcall(cupola.mempool.import, str_mangle(pick { mp_export, value() }), value()) end,
  function() return "buffer.import", pcall(cupola.buffer.import, str_mangle(pick { b_export, value() }), value()) end,
  function() return "b:export", pcall(b.export, pick { b, mb, fb, value() }) end,
  function()
    local p = dir .. "/h" .. rnd(4)
    local hf = io.open(p, "wb"); hf:write(str_mangle(pick(hostile_files))); hf:close()
    return "trace.load", pcall(cupola.trace.load, rnd(5) == 1 and value() or p, value())
  end,
  function() return "timeline", pcall(cupola.timeline, pick { trace, replay, pool, value() }, pick(paths), value()) end,
  function() return "nvtx.push", pcall(cupola.nvtx.push, value()) end,
  function() return "nvtx.pop", pcall(cupola.nvtx.pop, value()) end,
  function() return "nvtx.mark", pcall(cupola.nvtx.mark, value()) end,
  function() return "nvtx.range", pcall(cupola.nvtx.range, value(), pick { function() return 1 end, function() error("x") end, value() }) end,
  function() return "nvtx.depth", pcall(cupola.nvtx.depth, value()) end,
  function() return "report.csv", pcall(cupola.report.csv, pick { { replay }, { { a = 1 } }, {}, value() }, pick(paths), value()) end,
  function() return "report.json", pcall(cupola.report.json, pick { { replay }, { { a = 1, b = { 1, 2 } } }, {}, value() }, pick(paths)) end,
  function() return "report.table", pcall(cupola.report.table, value(), value()) end,
  function() return "report.records", pcall(cupola.report.records, value(), value()) end,
  function() return "report.columns", pcall(cupola.report.columns, value()) end,
  function() return "report.bytes", pcall(cupola.report.bytes, value()) end,
  function()
    return "conformance", pcall(cupola.conformance, pick {
      function() return nil end, function() return 5 end, function() error("no pool") end,
      function() return cmp end, function() return s end, value() },
      pick { { ops = -1 }, { ops = 0 }, { ops = "x" }, { ops = 0 / 0 }, { ops = 1e18 }, { ops = math.huge },
             { seed = 0 / 0, ops = 3 }, { checks = { "bogus" } }, { checks = "random" }, { checks = {} },
             { max_live = -5, ops = 3, checks = { "random" } }, { bogus = 1, checks = {} }, 5, "x" })
  end,
  function() return "help", pcall(cupola.help, value()) end,
  function()
    local p = dir .. "/a" .. rnd(3)
    local hf = io.open(p, "wb"); hf:write(str_mangle(pick(hostile_files))); hf:close()
    local opts = pick {
      { progress = false }, { progress = false, limit = pick { "1MiB", "0", -1, "x", 1 << 62, value() } },
      { progress = false, conf = { str_mangle(pick { "expandable_segments:True", "max_split_size_mb:64",
        "roundup_power2_divisions:[1:4,>:8]", "garbage_collection_threshold:0.5", value() }) } },
      { progress = false, recorded = str_mangle(pick { "", "max_split_size_mb:20", value() }) },
      { progress = false, pools = { str_mangle(pick { "tlsf", "vmm,release_threshold=0", "cub,max_bin=9", "plugin" }) } },
      { progress = false, threads = pick { 0, 1, 3, 257, -1, 1.5, value() }, search = pick { true, false, value() } },
      { progress = false, device = pick { 0, 1, -1, 70000, value() } }, { bogus = 1 }, value() }
    return "advise", pcall(cupola.advise, pick { trace, p, tpath, value() }, opts)
  end,
  function()
    -- the command line, in this process, its output into files
    local argv = {}
    for i = 1, rnd(6) - 1 do
      argv[i] = str_mangle(pick { tpath, "--limit", "1GiB", "--conf", "max_split_size_mb:64", "--recorded", "",
        "--pool", "vmm", "--no-pools", "--search", "--device", "0", "--threads", "2", "--json", "--html",
        dir .. "/p.html", "--help", "-h", "--limit=2MiB", "--", "-", value() })
      if type(argv[i]) ~= "string" then argv[i] = tostring(argv[i]) end
    end
    local out, errf = io.stdout, io.stderr
    io.stdout = io.open(dir .. "/stdout", "w")
    io.stderr = io.open(dir .. "/stderr", "w")
    local ok, rc = pcall(require("cupola.advise").main, argv)
    io.stdout:close(); io.stderr:close()
    io.stdout, io.stderr = out, errf
    if ok and rc ~= 0 and rc ~= 1 and rc ~= 2 then return "advise.main", false, "exit status " .. tostring(rc) end
    return "advise.main", ok, rc
  end,
  function()
    local p = raw_pool()
    local r = table.pack(pcall(pool.alloc_raw, p, pick { 1, 64, 4096, 1 << 20, 1 << 62, 0, value() },
      pick { nil, s, cs, cupola.default_stream, value() }))
    if r[1] and math.type(r[2]) == "integer" and #raws < 128 then raws[#raws + 1] = r[2] end
    return "p:alloc_raw", r[1], r[2]
  end,
  function() return "p:free_raw", pcall(pool.free_raw, raw_pool(), raw_addr(), pick { nil, nil, s, cs, value() }) end,
  function()
    local ok, bb = pcall(pool.buffer, raw_pool(), raw_addr())
    -- a Buffer made of a raw block: used, freed, closed or left to the collector
    if ok and rnd(2) == 1 then pcall(pick { bb.free, bb.close, bb.memset }, bb, value()) end
    return "p:buffer", ok, ok or bb
  end,
  function() return "k1:launch(raw)", pcall(k1.launch, k1, pick(launch_opts), raw_addr(), 1) end,
  function() return "p:reset", pcall(pool.reset, pick(rpools)) end,
}

local ok_n, err_n = 0, 0
for i = 1, calls do
  local ci = rnd(#calls_t)
  if os.getenv "CUPOLA_FUZZ_TRACE" then io.stderr:write(i, " call ", ci, "\n") end
  local name, ok, err = calls_t[ci]()
  if ok then ok_n = ok_n + 1
  else
    err_n = err_n + 1
    if type(err) ~= "string" or err == "" then
      io.stderr:write(name, ": error value is a ", type(err), "\n")
      os.exit(2)
    end
  end
  if os.getenv "CUPOLA_FUZZ_TRACE" then io.stderr:write(i, " ", name, " ", tostring(ok), " ", tostring(err), "\n") end
  if i % 50 == 0 then collectgarbage() end
end
-- nothing the calls did may keep the process from finishing its work
pcall(cupola.synchronize)
handles, plain = nil, nil
collectgarbage()
collectgarbage()
io.write(string.format("calls=%d ok=%d errors=%d\n", calls, ok_n, err_n))
os.exit(0, true)
