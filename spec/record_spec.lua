-- `cupola record`: its files as cupola.trace.load reads them (whole, cut,
-- plain, gzip) and bin/cupola record's command line, on the host.  The
-- recording itself (CUPTI, on a GPU) is checked by bench/record_check.sh.
local cupola = require "cupola"

local HEAD = "# cupola record 1: pid 42, device 0, start_unix_ns 1, flush_ms 50, cupti 130000\n" ..
  "Thread,Time,Action,Pointer,Size,Stream,Device,Kind,Pool,Call\n"
local ROWS = {
  "42,1.000,allocate,0x7f0000000000,4194304,0x0,0,device,0x0,cudaMalloc",
  "42,2.000,allocate,0x7f0000400000,1024,0x5a,0,device,0x0,cudaMallocAsync",
  "42,3.000,allocate,0x7e0000000000,1048576,0x0,0,managed,0x0,cudaMallocManaged",
  "42,4.000,allocate,0x600000,4096,0x0,0,pinned,0x0,cudaHostAlloc",
  "42,5.000,allocate failure,0x0,1099511627776,0x0,0,device,0x0,cudaMalloc",
  "42,6.000,allocate,0x5555000,2097152,0x0,0,vmm,0x0,cuMemCreate",
  "42,7.000,map,0x7d0000000000,2097152,0x0,0,vmm,0x5555000,cuMemMap",
  "42,8.000,free,0x7f0000000000,4194304,0x0,0,device,0x0,cudaFree",
  "42,9.000,free,0x7f0000400000,1024,0x5a,0,device,0x0,cudaFreeAsync",
  "42,10.000,free,0x7e0000000000,1048576,0x0,0,managed,0x0,cudaFree",
}

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

local function write(name, text)
  local path = tmp .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read "a"
  p:close()
  local rc = tonumber(out:match "rc=(%d+)%s*$")
  return out:gsub("rc=%d+%s*$", ""), rc
end

describe("cupola record files", function()
  it("load as a trace of device memory, the rest kept apart", function()
    local path = write("whole.csv", HEAD .. table.concat(ROWS, "\n") .. "\n# end\n")
    local t <close> = cupola.trace.load(path)
    assert.equals("cupola_record", t.format)
    assert.equals(2, t.allocs)
    assert.equals(2, t.frees)
    assert.equals(4194304 + 1024, t.peak_live)
    assert.equals(6, t.ignored) -- managed (2), pinned, failure, vmm create and map
    assert.equals(2, t.streams)
    assert.is_false(t.cut)
    assert.is_nil(t.warning)
    local e = t:event(2)
    assert.equals(0x5a, e.stream)
  end)

  it("replay through a pool like any trace", function()
    local path = write("replay.csv", HEAD .. table.concat(ROWS, "\n") .. "\n# end\n")
    local t <close> = cupola.trace.load(path)
    local p <close> = cupola.pool {kind = "torch"}
    local r = cupola.trace.replay(t, p)
    assert.equals(0, r.failed)
    assert.is_true(r.peak_reserved >= 4194304 + 1024)
  end)

  it("cut by a killed program: what is whole loads, with a warning", function()
    -- no end line, and a last line without its newline (a prefix of a longer one)
    local text = HEAD .. table.concat(ROWS, "\n", 1, 8) .. "\n" .. ROWS[9]:sub(1, 20)
    local t <close> = cupola.trace.load(write("cut.csv", text))
    assert.is_true(t.cut)
    assert.matches("cut here", t.warning, 1, true)
    assert.equals(2, t.allocs)
    assert.equals(1, t.frees)
    -- cut between two lines: no end line says so
    local t2 <close> = cupola.trace.load(write("cut2.csv", HEAD .. ROWS[1] .. "\n"))
    assert.is_true(t2.cut)
    assert.matches("no '# end' line", t2.warning, 1, true)
    assert.equals(1, t2.leaked)
  end)

  it("cut inside a gzip block: what is whole loads, with a warning", function()
    local path = write("g.csv", HEAD .. table.concat(ROWS, "\n") .. "\n# end\n")
    assert.is_true(os.execute("gzip -f " .. path))
    local f = assert(io.open(path .. ".gz", "rb"))
    local gz = f:read "a"
    f:close()
    local whole <close> = cupola.trace.load(path .. ".gz")
    assert.is_false(whole.cut)
    local cut = write("gcut.csv.gz", gz:sub(1, #gz - 12))
    local t <close> = cupola.trace.load(cut)
    assert.is_true(t.cut)
    assert.is_true(t.allocs <= 2)
  end)

  it("refuse what is not a recording, naming the line", function()
    local bad = write("bad.csv", HEAD .. "42,1.0,allocate,0x10,8,0x0,0,gpu,0x0,cudaMalloc\n")
    local ok, err = pcall(cupola.trace.load, bad)
    assert.is_false(ok)
    assert.matches("bad.csv:3: kind must be", err, 1, true)
    local nohead = write("nohead.csv", "# cupola record 1: pid 1\n42,1.0\n")
    ok, err = pcall(cupola.trace.load, nohead)
    assert.is_false(ok)
    assert.matches("nohead.csv:2: expected the column line", err, 1, true)
  end)
end)

describe("bin/cupola record", function()
  it("prints its usage and fails without a command", function()
    local out, rc = run "bin/cupola record"
    assert.equals(2, rc)
    assert.matches("usage: cupola record", out, 1, true)
    out, rc = run "bin/cupola record -o x.csv.gz --"
    assert.equals(2, rc)
    assert.matches("usage: cupola record", out, 1, true)
  end)

  it("says a bad option in one line", function()
    local out, rc = run "bin/cupola record --frob -- true"
    assert.equals(2, rc)
    assert.equals("cupola record: unknown option --frob (cupola record --help for the usage)\n", out)
    out, rc = run "bin/cupola record --flush-ms 0 -- true"
    assert.equals(2, rc)
    assert.matches("^cupola record: %-%-flush%-ms needs", out)
  end)

  it("says in one line that the host backend has nothing to record", function()
    local lib = write("fake.so", "")
    local out, rc = run("CUPOLA_RECORD_LIB=" .. lib .. " CUPOLA_BACKEND=host bin/cupola record -- true")
    assert.equals(1, rc)
    assert.equals("cupola record: cupola runs on its host backend here (no usable CUDA device): " ..
      "there is nothing to record\n", out)
  end)

  -- Bug fixed with this spec (issue 43, item 9): on a host without a GPU,
  -- and without the library, it first asked to `make record`, which could
  -- not help there.
  it("on the host backend says that first, before the library it lacks", function()
    local out, rc = run "CUPOLA_RECORD_LIB=/nonexistent/lib.so CUPOLA_BACKEND=host bin/cupola record -- true"
    assert.equals(1, rc)
    assert.equals("cupola record: cupola runs on its host backend here (no usable CUDA device): " ..
      "there is nothing to record\n", out)
    out, rc = run "CUPOLA_BIN_LIBDIR=/nonexistent CUPOLA_BACKEND=host bin/cupola record -- true"
    assert.equals(1, rc)
    assert.is_nil(out:find("make record", 1, true))
  end)

  it("says in one line that the output's folder cannot be written", function()
    local lib = write("fake.so", "")
    local out, rc = run("CUPOLA_RECORD_LIB=" .. lib ..
      " CUPOLA_RECORD_ASSUME_DEVICE=1 bin/cupola record -o /nonexistent/dir/t.csv.gz -- true")
    assert.equals(2, rc)
    assert.equals("cupola record: -o /nonexistent/dir/t.csv.gz: /nonexistent/dir is not a folder this " ..
      "user can write to\n", out)
  end)

  it("says in one line that the library is missing", function()
    local out, rc = run "CUPOLA_RECORD_LIB=/nonexistent/lib.so CUPOLA_RECORD_ASSUME_DEVICE=1 bin/cupola record -- true"
    assert.equals(1, rc)
    assert.equals("cupola record: CUPOLA_RECORD_LIB names /nonexistent/lib.so, which is not a file\n", out)
  end)

  -- The run itself, with a command that writes a recording as the injected
  -- library would (its path in CUPOLA_RECORD_LIST): names, the summary, the
  -- command's status.
  local function fake(script, o)
    local lib = write("fake.so", "")
    local sh = write("fake.sh", script)
    return run(("CUPOLA_RECORD_LIB=%s CUPOLA_RECORD_ASSUME_DEVICE=1 bin/cupola record -o %s -- sh %s")
      :format(lib, o, sh))
  end

  it("runs the command with the injection set and summarises the one file", function()
    local o = tmp .. "/one.csv"
    local script = ([[
[ -n "$CUDA_INJECTION64_PATH" ] || exit 9
f="${CUPOLA_RECORD_OUT%%.csv}.p$$.d0.csv"
printf '%%s' '%s' > "$f"
echo "$f" >> "$CUPOLA_RECORD_LIST"
exit 3
]]):format(HEAD .. table.concat(ROWS, "\n") .. "\n# end\n")
    local out, rc = fake(script, o)
    assert.equals(3, rc) -- the command's own status
    assert.matches("cupola record: 2 device allocations, peak 4.00 MiB live", out, 1, true)
    assert.matches(o .. ": 2 device allocations, 2 frees", out, 1, true)
    local t <close> = cupola.trace.load(o) -- renamed to -o's name
    assert.equals(2, t.allocs)
  end)

  it("keeps a file per process and reports a killed command's status and its cut file", function()
    local o = tmp .. "/two.csv"
    local script = ([[
for i in 1 2; do
  f="${CUPOLA_RECORD_OUT%%.csv}.p$$$i.d0.csv"
  printf '%%s' '%s' > "$f"
  echo "$f" >> "$CUPOLA_RECORD_LIST"
done
kill -9 $$
]]):format(HEAD .. ROWS[1] .. "\n")
    local out, rc = fake(script, o)
    assert.equals(137, rc)
    assert.matches("2 files:", out, 1, true)
    assert.matches("warning: .-no '# end' line", out)
  end)

  it("says so when nothing was recorded", function()
    local out, rc = fake("exit 0\n", tmp .. "/none.csv")
    assert.equals(0, rc)
    assert.matches("^cupola record: no allocation was recorded", out)
  end)
end)

-- On a GPU (make gpu-check builds the library): the recorder against a
-- program whose allocations are known; bench/record_check.sh does the
-- rest (a killed program, the cost, the frameworks).
describe("cupola record on the GPU", function()
  local lib = io.open("build/libcupola_record.so", "rb")
  if lib then lib:close() end
  local nvcc = (os.getenv "CUDA_HOME" or "/usr/local/cuda") .. "/bin/nvcc"
  if cupola.backend() ~= "cuda" or not lib then
    pending("records every event of a program whose allocations are known #gpu (needs a CUDA device and make record)")
    return
  end
  it("records every event of a program whose allocations are known #gpu", function()
    local prog = tmp .. "/record_known"
    local _, rc = run(("%s -O2 -arch=sm_90 -o %s bench/record_known.cu -lcuda"):format(nvcc, prog))
    assert.equals(0, rc)
    local out
    out, rc = run(("bin/cupola record -o %s/known.csv -- %s known %s/known.log"):format(tmp, prog, tmp))
    assert.equals(0, rc, out)
    assert.matches("device allocations", out, 1, true)
    out, rc = run(("bin/cupola bench/record_check.lua known %s/known.csv %s/known.log"):format(tmp, tmp))
    assert.equals(0, rc, out)
    assert.matches("PASS known program", out, 1, true)
  end)
end)


-- libcupola_record_preload.so (src/record/preload.c) on the host, against a
-- stand-in libcupti.so.13 that refuses as CUPTI does when another subscriber
-- holds the process (FAKE_HOLDER names it): a program's profiler refused
-- because the recorder holds CUPTI is told in one line, once; anything else
-- passes through unchanged.
describe("a profiler of the program under cupola record (the preload library)", function()
  local pre = "build/libcupola_record_preload.so"
  local cuda = os.getenv "CUDA_HOME" or "/usr/local/cuda"
  local f = io.open(pre, "rb")
  local h = io.open(cuda .. "/include/cupti.h", "rb")
  local _, cc_rc = run "cc --version"
  if f then f:close() end
  if h then h:close() end
  if not f or not h or cc_rc ~= 0 then
    pending("says in one line that the recorder holds CUPTI (needs make record, cupti.h and cc)")
    return
  end
  local dir = tmp .. "/preload"
  os.execute("mkdir -p " .. dir)
  local fake = write("preload/fakecupti.c", [[
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *ud,
                                       CUpti_SubscriberParams *p)
{
    const char *holder = getenv("FAKE_HOLDER");
    (void)cb; (void)ud;
    *s = NULL;
    if (!holder)
        return CUPTI_SUCCESS;
    if (p && p->oldSubscriberName && p->oldSubscriberSize)
        snprintf(p->oldSubscriberName, p->oldSubscriberSize, "%s", holder);
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
}
CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *ud)
{
    return cuptiSubscribe_v2(s, cb, ud, NULL);
}
]])
  local user = write("preload/user.c", [[
#include <cupti.h>
#include <stdio.h>
#include <string.h>
/* how: 1 the plain call, 2 _v2 with a name buffer, 3 _v2 as the recorder */
int user_subscribe(int how)
{
    CUpti_SubscriberHandle s;
    CUpti_SubscriberParams p;
    char old[256] = "";
    CUptiResult r;
    memset(&p, 0, sizeof p);
    p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    p.subscriberName = how == 3 ? "cupola record" : "a profiler";
    p.oldSubscriberName = old;
    p.oldSubscriberSize = sizeof old;
    r = how == 1 ? cuptiSubscribe(&s, NULL, NULL) : cuptiSubscribe_v2(&s, NULL, NULL, &p);
    printf("result %d old '%s'\n", (int)r, old);
    return (int)r;
}
]])
  local prog = write("preload/prog.c", [[
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    /* argv[1]: local or global (how libuser.so and its libcupti are opened);
       then the ways to call, as user_subscribe takes them */
    void *h = dlopen("libuser.so", RTLD_NOW | (argv[1][0] == 'l' ? RTLD_LOCAL : RTLD_GLOBAL));
    int (*sub)(int), i;
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    *(void **)&sub = dlsym(h, "user_subscribe");
    for (i = 2; i < argc; i++)
        sub(atoi(argv[i]));
    return 0;
}
]])
  local inc = "-I" .. cuda .. "/include"
  local _, rc = run(("cc -shared -fPIC %s -Wl,-soname,libcupti.so.13 -o %s/libcupti.so.13 %s")
    :format(inc, dir, fake))
  assert.equals(0, rc)
  _, rc = run(("cc -shared -fPIC %s -o %s/libuser.so %s %s/libcupti.so.13 -Wl,-rpath,%s")
    :format(inc, dir, user, dir, dir))
  assert.equals(0, rc)
  _, rc = run(("cc -o %s/prog %s -ldl -Wl,-rpath,%s"):format(dir, prog, dir))
  assert.equals(0, rc)

  -- stdout and stderr apart: the line is the only thing on stderr
  local function go(holder, args)
    local errf = dir .. "/err.txt"
    local p = io.popen(("%sLD_PRELOAD=%s LD_LIBRARY_PATH=%s %s/prog %s 2>%s"):format(
      holder and ("FAKE_HOLDER='" .. holder .. "' ") or "", pre, dir, dir, args, errf))
    local out = p:read "a"
    p:close()
    local e = io.open(errf):read "a"
    return out, e
  end
  local LINE = "^cupola record: process %d+: libuser%.so asked for CUPTI %(a profiler%?%) and was " ..
    "refused: cupola record holds it, so that profiler sees no CUDA activity; profile without " ..
    "cupola record\n$"

  it("says it once, for a library opened with RTLD_LOCAL (libcupti outside the global scope)", function()
    local out, err = go("CUPTI for cupola record", "local 1 1 2")
    assert.equals("result 39 old ''\nresult 39 old ''\nresult 39 old 'CUPTI for cupola record'\n", out)
    assert.matches(LINE, err)
  end)

  it("says it for the call with parameters, and fills the caller's buffer as CUPTI would", function()
    local out, err = go("cupola record", "global 2")
    assert.equals("result 39 old 'cupola record'\n", out)
    assert.matches(LINE, err)
  end)

  it("says nothing when another tool holds CUPTI, or when nobody does", function()
    local out, err = go("Nsight Systems", "local 1 2")
    assert.equals("result 39 old ''\nresult 39 old 'Nsight Systems'\n", out)
    assert.equals("", err)
    out, err = go(nil, "global 1 2")
    assert.equals("result 0 old ''\nresult 0 old ''\n", out)
    assert.equals("", err)
  end)

  it("passes the recorder's own subscribe through untouched", function()
    local out, err = go("CUPTI for cupola record", "local 3")
    assert.equals("result 39 old 'CUPTI for cupola record'\n", out)
    assert.equals("", err)
  end)

  it("is what the launcher preloads: the library beside the recorder's, when there", function()
    local record = require "cupola.record"
    assert.equals("build/libcupola_record_preload.so", record.preload "build/libcupola_record.so")
    assert.is_nil(record.preload(tmp .. "/nowhere/libcupola_record.so"))
  end)
end)

-- libcupola_record.so itself on the host: a stand-in libcupti.so.13 (and
-- libcuda.so.1) answers its subscribe as FAKE_SUB says, counts what it
-- enables, and keeps the callback, which a small program then calls as CUPTI
-- would at the exit of cuMemAlloc_v2 and cuMemFree_v2: the lines a refused
-- process gets, the callbacks each setting enables, the census's notes and
-- the callers' Call column, and the floor library's silence.
describe("the injection library on a stand-in CUPTI", function()
  local lib = "build/libcupola_record.so"
  local cuda = os.getenv "CUDA_HOME" or "/usr/local/cuda"
  local f = io.open(lib, "rb")
  local h = io.open(cuda .. "/include/cupti.h", "rb")
  local _, cc_rc = run "cc --version"
  if f then f:close() end
  if h then h:close() end
  if not f or not h or cc_rc ~= 0 then
    pending("says why a process is not recorded; census and callers (needs make record, cupti.h and cc)")
    return
  end
  local dir = tmp .. "/inject"
  os.execute("mkdir -p " .. dir)
  local fcupti = write("inject/fakecupti.c", [[
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
CUpti_CallbackFunc fake_cb;
CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *v) { *v = 999; return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult r, const char **s)
{ (void)r; *s = "CUPTI_ERROR_FAKE"; return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *ud,
                                       CUpti_SubscriberParams *p)
{
    const char *r = getenv("FAKE_SUB"), *old = getenv("FAKE_OLD");
    (void)ud;
    *s = (CUpti_SubscriberHandle)1;
    fake_cb = cb;
    if (old && p && p->oldSubscriberName)
        snprintf(p->oldSubscriberName, p->oldSubscriberSize, "%s", old);
    return r ? (CUptiResult)atoi(r) : CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle s) { (void)s; return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t e, CUpti_SubscriberHandle s, CUpti_CallbackDomain d,
                                         CUpti_CallbackId id)
{ (void)e; (void)s; (void)id; printf("callback %d\n", (int)d); return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t e, CUpti_SubscriberHandle s, CUpti_CallbackDomain d)
{ (void)e; (void)s; printf("domain %d\n", (int)d); return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext c, uint32_t *d) { (void)c; *d = 0; return CUPTI_SUCCESS; }
]])
  local fcuda = write("inject/fakecuda.c", [[
#include <cuda.h>
CUresult CUDAAPI cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
]])
  local drv = write("inject/drv.c", [[
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* argv[1]: the library; argv[2]: "fire" calls the kept callback for one
   allocation and its free, as CUPTI would at their exit */
int main(int argc, char **argv)
{
    void *h = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL), *c;
    int (*init)(void);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    *(void **)&init = dlsym(h, "InitializeInjection");
    init();
    fflush(stdout);
    if (argc > 2 && (c = dlopen("libcupti.so.13", RTLD_LAZY | RTLD_NOLOAD)) != NULL) {
        CUpti_CallbackFunc cb = *(CUpti_CallbackFunc *)dlsym(c, "fake_cb");
        CUdeviceptr p = 0x7f0000000000ull;
        CUresult ok = CUDA_SUCCESS;
        cuMemAlloc_v2_params a = {&p, 4096};
        cuMemFree_v2_params fr = {p};
        CUpti_CallbackData d;
        memset(&d, 0, sizeof d);
        d.callbackSite = CUPTI_API_EXIT;
        d.functionReturnValue = &ok;
        d.functionName = "cuMemAlloc_v2";
        d.functionParams = &a;
        if (cb) cb(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &d);
        d.functionName = "cuMemFree_v2";
        d.functionParams = &fr;
        if (cb) cb(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &d);
    }
    return 0;
}
]])
  local ver = write("inject/cupti.map", "libcupti.so.13 { global: *; };\n")
  local inc = "-I" .. cuda .. "/include"
  local _, rc = run(("cc -shared -fPIC %s -Wl,-soname,libcupti.so.13 -Wl,--version-script=%s -o %s/libcupti.so.13 %s")
    :format(inc, ver, dir, fcupti))
  assert.equals(0, rc)
  _, rc = run(("cc -shared -fPIC %s -Wl,-soname,libcuda.so.1 -o %s/libcuda.so.1 %s"):format(inc, dir, fcuda))
  assert.equals(0, rc)
  _, rc = run(("cc %s -o %s/drv %s -ldl"):format(inc, dir, drv))
  assert.equals(0, rc)

  -- stdout (what was enabled) and stderr apart
  local function go(env, which, fire)
    local errf = dir .. "/err.txt"
    local p = io.popen(("%s CUPOLA_RECORD_OUT=%s/out.csv LD_LIBRARY_PATH=%s %s/drv %s %s 2>%s"):format(
      env, dir, dir, dir, which or lib, fire and "fire" or "", errf))
    local out = p:read "a"
    p:close()
    return out, io.open(errf):read "a"
  end
  local function count(s, pat)
    local n = 0
    for _ in s:gmatch(pat) do n = n + 1 end
    return n
  end

  it("says in one line why a process is not recorded, naming the holder or what kind it is", function()
    local out, err = go("FAKE_SUB=39 FAKE_OLD='CUPTI for Nsight Systems'")
    assert.equals("", out) -- nothing enabled
    assert.matches("^cupola record: process %d+ is not recorded: another CUPTI user holds the process " ..
      "%(CUPTI for Nsight Systems%)\n$", err)
    _, err = go("FAKE_SUB=39 FAKE_OLD='<not provided>'")
    assert.matches("^cupola record: process %d+ is not recorded: another CUPTI user holds the process " ..
      "%(a tool that gave no name: Nsight, compute%-sanitizer, cuda%-gdb or a profiler the program " ..
      "started%)\n$", err)
    _, err = go("FAKE_SUB=1")
    assert.matches("^cupola record: process %d+ is not recorded: CUPTI did not start %(CUPTI_ERROR_FAKE%)\n$", err)
  end)

  it("enables the driver's allocation calls, the runtime's at level runtime, both domains for the census", function()
    local out, err = go("X=1")
    assert.equals("", err)
    assert.equals(17, count(out, "callback 1\n"))
    assert.equals(0, count(out, "callback 2\n") + count(out, "domain"))
    out = go("CUPOLA_RECORD_LEVEL=runtime")
    assert.equals(17, count(out, "callback 1\n"))
    assert.equals(13, count(out, "callback 2\n"))
    out = go("CUPOLA_RECORD_CENSUS=1")
    assert.equals(17, count(out, "callback 1\n"))
    assert.equals("domain 1\ndomain 2\n", out:gsub("callback 1\n", ""))
  end)

  it("writes the census as notes and the callers in the Call column", function()
    os.remove(dir .. "/out.csv")
    local _, err = go("CUPOLA_RECORD_CENSUS=1 CUPOLA_RECORD_CALLERS=1", nil, true)
    assert.equals("", err)
    local path = io.popen("ls " .. dir .. "/out.p*.d0.csv"):read "l"
    local text = io.open(path):read "a"
    os.remove(path)
    assert.matches("level driver, census, callers", text, 1, true)
    assert.matches("\n# census driver cuMemAlloc_v2 1\n", text, 1, true)
    assert.matches("\n# census driver cuMemFree_v2 1\n", text, 1, true)
    assert.matches(",allocate,0x7f0000000000,4096,0x0,0,device,0x0,cuMemAlloc_v2 < drv[^\n,]*\n", text)
    assert.matches(",free,0x7f0000000000,4096,0x0,0,device,0x0,cuMemFree_v2 < drv[^\n,]*\n", text)
    local t <close> = cupola.trace.load(write("inject/again.csv", text)) -- the reader takes it
    assert.equals(1, t.allocs)
  end)

  it("records under the launcher's preload too: its own subscribe passes through it", function()
    os.execute("rm -f " .. dir .. "/out.p*")
    local _, err = go("LD_PRELOAD=build/libcupola_record_preload.so", nil, true)
    assert.equals("", err)
    local path = io.popen("ls " .. dir .. "/out.p*.d0.csv"):read "l"
    local text = io.open(path):read "a"
    os.remove(path)
    assert.matches(",allocate,0x7f0000000000,4096,0x0,0,device,0x0,cuMemAlloc_v2\n", text, 1, true)
  end)

  it("the floor library: the same callbacks enabled, nothing written", function()
    local floor = "build/libcupola_record_floor.so"
    local fl = io.open(floor, "rb")
    if not fl then
      pending "make record-floor"
      return
    end
    fl:close()
    os.execute("rm -f " .. dir .. "/out.p*")
    local out, err = go("CUPOLA_RECORD_CENSUS=1", floor, true)
    assert.equals("", err)
    assert.equals(17, count(out, "callback 1\n"))
    assert.equals(0, count(out, "domain")) -- no census in the floor
    assert.is_nil(io.popen("ls " .. dir .. "/out.p* 2>/dev/null"):read "l")
  end)
end)
