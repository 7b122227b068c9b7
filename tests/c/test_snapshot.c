/*
 * test_snapshot.c: the pickle reader and PyTorch snapshots, TAP.
 *
 *  - hand-made pickles, byte by byte, at protocols 2 and 4: each opcode the
 *    two PyTorch writers use gives the value it should;
 *  - hostile input: every prefix of a valid pickle fails with an offset and
 *    never crashes; code opcodes (GLOBAL, STACK_GLOBAL, REDUCE, BUILD) are
 *    refused by name; huge memo indices, integers wider than 64 bits,
 *    cycles, deep nesting and strings past the end are errors or harmless;
 *  - the real snapshot (examples/traces/torch_snapshot_mlp.pickle) and the
 *    seed snapshots at protocols 2, 4 and 5 (tests/fuzz/corpus) load with the
 *    counts Python's own pickle module gives for them, and replay;
 *  - a refused pool allocation explains itself (figures in the message and
 *    from cp_resource_last_oom).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "pool/resource.h"
#include "tap.h"
#include "trace/pickle.h"
#include "trace/trace.h"

#define ok tap_ok

static cp_status parse(const char *bytes, size_t n, cp_pickle **pk, cp_pk_value **root)
{
    return cp_pickle_parse((const unsigned char *)bytes, n, pk, root);
}

#define P(s) s, sizeof(s) - 1

static void handmade(void)
{
    cp_pickle *pk;
    cp_pk_value *root;
    const cp_pk_value *v;

    /* Protocol 2 as C++'s write_pickle: {'a': [1, -2, 2**64-1, 1.5, None, True, 'xy'],
     * 'b': <memo ref to the list>} with BINPUT / LONG_BINPUT / BINGET / LONG_BINGET. */
    static const char p2[] =
        "\x80\x02}q\x00(X\x01\x00\x00\x00" "aq\x01]r\x02\x00\x00\x00(K\x01J\xfe\xff\xff\xff"
        "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00" "G\x3f\xf8\x00\x00\x00\x00\x00\x00"
        "N\x88X\x02\x00\x00\x00xyeX\x01\x00\x00\x00" "bj\x02\x00\x00\x00u.";
    ok(parse(P(p2), &pk, &root) == CP_OK && root && root->type == CP_PK_DICT && root->n == 2,
       "protocol 2: a dict of two items");
    v = cp_pk_get(root, "a");
    ok(v && v->type == CP_PK_LIST && v->n == 7, "protocol 2: LONG_BINPUT list of 7");
    ok(v && v->v.items[0]->v.i == 1 && v->v.items[1]->v.i == -2, "BININT1 1, BININT -2");
    ok(v && v->v.items[2]->is_u64 && v->v.items[2]->v.u == UINT64_MAX,
       "LONG1 of 9 bytes: 2^64-1 as an unsigned 64-bit value");
    ok(v && v->v.items[3]->type == CP_PK_FLOAT && v->v.items[3]->v.f == 1.5, "BINFLOAT 1.5");
    ok(v && v->v.items[4]->type == CP_PK_NONE && v->v.items[5]->type == CP_PK_BOOL &&
           v->v.items[5]->v.i == 1 && cp_pk_streq(v->v.items[6], "xy"),
       "None, True, BINUNICODE");
    ok(cp_pk_get(root, "b") == v, "LONG_BINGET gives the same list back");
    cp_pickle_free(pk);

    /* Protocol 4 as Python's _dump_snapshot: FRAME, MEMOIZE, SHORT_BINUNICODE,
     * BININT2, LONG1 (negative), TUPLE2, EMPTY_TUPLE, BINGET of a memoized string. */
    static const char p4[] =
        "\x80\x04\x95\x21\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01k\x94M\x34\x12\x8c\x01t\x94"
        "K\x07)\x86\x94\x8c\x01n\x94\x8a\x02\x00\x80h\x01\x86\x94u.";
    ok(parse(P(p4), &pk, &root) == CP_OK && root && root->type == CP_PK_DICT && root->n == 3,
       "protocol 4: FRAME, MEMOIZE, a dict of three items");
    ok(cp_pk_u64(cp_pk_get(root, "k")) == 0x1234, "BININT2 0x1234");
    v = cp_pk_get(root, "t");
    ok(v && v->type == CP_PK_TUPLE && v->n == 2 && v->v.items[1]->type == CP_PK_TUPLE &&
           v->v.items[1]->n == 0, "TUPLE2 of (7, ())");
    v = cp_pk_get(root, "n");
    ok(v && v->n == 2 && v->v.items[0]->v.i == -32768 && cp_pk_streq(v->v.items[1], "k"),
       "LONG1 -32768 and BINGET of a memoized string");
    cp_pickle_free(pk);

    /* Protocol 5 accepts the same; BINUNICODE8 and SHORT_BINBYTES. */
    static const char p5[] = "\x80\x05]\x94(\x8d\x02\x00\x00\x00\x00\x00\x00\x00hiC\x01\x00" "e.";
    ok(parse(P(p5), &pk, &root) == CP_OK && root->n == 2 && cp_pk_streq(root->v.items[0], "hi") &&
           root->v.items[1]->type == CP_PK_BYTES,
       "protocol 5: BINUNICODE8, SHORT_BINBYTES");
    cp_pickle_free(pk);
}

static void expect_refused(const char *name, const char *bytes, size_t n, const char *needle)
{
    cp_pickle *pk = (cp_pickle *)1;
    cp_pk_value *root = (cp_pk_value *)1;
    cp_status st = parse(bytes, n, &pk, &root);
    ok(st == CP_ERR_INVALID && !pk && !root && strstr(cp_error_msg(), "offset ") &&
           strstr(cp_error_msg(), needle),
       "%s: %s", name, cp_error_msg());
}

static void hostile(void)
{
    static const char good[] =
        "\x80\x02}q\x00(X\x01\x00\x00\x00" "aq\x01]r\x02\x00\x00\x00(K\x01J\xfe\xff\xff\xff"
        "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00" "G\x3f\xf8\x00\x00\x00\x00\x00\x00"
        "N\x88X\x02\x00\x00\x00xyeX\x01\x00\x00\x00" "bj\x02\x00\x00\x00u.";
    size_t i, bad = 0;
    char deep[20002];

    for (i = 0; i < sizeof good - 1; i++) {
        cp_pickle *pk;
        cp_pk_value *root;
        if (parse(good, i, &pk, &root) != CP_ERR_INVALID || pk ||
            !strstr(cp_error_msg(), "offset "))
            bad++;
    }
    ok(bad == 0, "every one of the %zu prefixes of a valid pickle fails with an offset",
       sizeof good - 1);
    expect_refused("GLOBAL", P("\x80\x02" "cos\nsystem\nX\x02\x00\x00\x00lsR."), "opcode GLOBAL");
    expect_refused("GLOBAL at its offset", P("\x80\x02" "cos\nsystem\n."), "offset 2:");
    expect_refused("STACK_GLOBAL", P("\x80\x04\x8c\x02os\x8c\x06system\x93."), "STACK_GLOBAL");
    expect_refused("REDUCE", P("\x80\x02)\x85R."), "opcode REDUCE");
    expect_refused("BUILD", P("\x80\x02}}b."), "opcode BUILD");
    expect_refused("NEWOBJ", P("\x80\x02))\x81."), "NEWOBJ");
    expect_refused("protocol 0 text", P("\x80\x02I1\n."), "INT (text");
    expect_refused("protocol 1", P("\x80\x01N."), "unsupported pickle protocol");
    expect_refused("unknown opcode", P("\x80\x02\xff."), "unknown opcode 0xff");
    expect_refused("no PROTO", P("N."), "no PROTO");
    expect_refused("memo index past the data", P("\x80\x02Nr\xff\xff\xff\x7f."),
                   "memo index larger");
    expect_refused("BINGET of nothing", P("\x80\x02h\x05."), "memo index not defined");
    expect_refused("LONG1 of 10 bytes", P("\x80\x02\x8a\x0a\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01."),
                   "wider than 64 bits");
    expect_refused("9-byte LONG1 with a bad sign byte",
                   P("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."), "wider than 64 bits");
    expect_refused("string past the end", P("\x80\x02X\xff\xff\xff\x7f" "abc."), "past the end");
    expect_refused("BINUNICODE8 of 2^64-1 bytes",
                   P("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff" "a."), "past the end");
    expect_refused("FRAME past the end", P("\x80\x04\x95\xff\xff\x00\x00\x00\x00\x00\x00N."),
                   "FRAME runs past");
    expect_refused("APPEND to a dict", P("\x80\x02}Na."), "not a list");
    expect_refused("SETITEMS on a list", P("\x80\x02](NNu."), "not a dict");
    expect_refused("odd SETITEMS", P("\x80\x02}(Nu."), "odd number");
    expect_refused("STOP with two values", P("\x80\x02NN."), "more than one value");
    expect_refused("POP of nothing", P("\x80\x02" "0."), "empty stack");
    expect_refused("TUPLE without MARK", P("\x80\x02Nt."), "no MARK");
    expect_refused("TUPLE2 across a MARK", P("\x80\x02N(N\x86."), "too few values");
    expect_refused("buffers", P("\x80\x05\x97."), "NEXT_BUFFER");

    /* A list holding itself: parses; freeing it must not loop. */
    {
        cp_pickle *pk;
        cp_pk_value *root;
        ok(parse(P("\x80\x04]\x94h\x00" "a."), &pk, &root) == CP_OK && root->n == 1 &&
               root->v.items[0] == root,
           "a list that contains itself parses and frees");
        cp_pickle_free(pk);
    }
    /* 10000 nested MARK/EMPTY_LIST levels: explicit stacks, no recursion. */
    {
        cp_pickle *pk;
        cp_pk_value *root;
        deep[0] = '\x80';
        deep[1] = '\x02';
        for (i = 0; i < 10000; i++)
            deep[2 + i] = '(';
        ok(parse(deep, 10002, &pk, &root) == CP_ERR_INVALID, "10000 open MARKs: an error");
        for (i = 0; i < 9999; i++) {
            deep[2 + 2 * i] = ']';
            deep[3 + 2 * i] = '(';
        }
        ok(parse(deep, 20000, &pk, &root) == CP_ERR_INVALID,
           "deep unfinished nesting: an error, no crash");
    }
}

static void load_counts(const char *path, size_t events, size_t allocs, size_t frees,
                        uint64_t peak, size_t devices, uint64_t torch_peak)
{
    cp_trace *t = NULL;
    cp_trace_info in;
    cp_status st = cp_trace_load(path, &t);
    if (st != CP_OK) {
        ok(0, "%s loads: %s", path, cp_error_msg());
        return;
    }
    cp_trace_info_get(t, &in);
    ok(in.events == events && in.allocs == allocs && in.frees == frees && in.peak_live == peak &&
           in.devices == devices && in.torch_reserved && in.torch_peak_reserved == torch_peak &&
           strcmp(cp_trace_format(t), "torch_snapshot") == 0,
       "%s: %zu events (%zu allocs, %zu frees), peak live %llu, %zu devices, torch peak "
       "reserved %llu",
       path, in.events, in.allocs, in.frees, (unsigned long long)in.peak_live, in.devices,
       (unsigned long long)in.torch_peak_reserved);
    {
        cp_pool_opts o;
        cp_resource *r = NULL;
        cp_replay_result res;
        memset(&o, 0, sizeof o);
        o.kind = "caching";
        o.upstream = CP_UP_VIRTUAL;
        o.grow = 1;
        o.alignment = 256;
        ok(cp_pool_create(&r, &o) == CP_OK && cp_trace_replay(t, r, NULL, &res) == CP_OK &&
               res.events == events && res.peak_live == peak && res.failed == 0,
           "%s replays on a caching pool", path);
        cp_resource_destroy(r);
    }
    cp_trace_free(t);
}

static void snapshots(void)
{
    const char *dir = getenv("CUPOLA_TRACES");
    char path[1024];
    cp_trace *t = NULL;
    cp_trace_row row;
    if (!dir || !*dir)
        dir = "examples/traces";
    snprintf(path, sizeof path, "%s/torch_snapshot_mlp.pickle", dir);
    /* Figures from Python's pickle module over the same file. */
    load_counts(path, 563, 283, 280, 238129156ull, 1, 264241152ull);
    if (cp_trace_load(path, &t) == CP_OK) {
        cp_status rs = cp_trace_event(t, 0, &row); /* before ok(): arguments have no order */
        /* lines (snapshot.h): the user's frame, the innermost Python frame
         * (the library's), then the whole stack with full paths */
        static const char want[] =
            "gen_snapshots.py:9 mlp_train\n"
            "torch/nn/modules/module.py:1370 convert\n"
            "/usr/lib/python3/site-packages/torch/nn/modules/module.py:1370 convert\n"
            "/usr/lib/python3/site-packages/torch/nn/modules/module.py:965 _apply\n"
            "/usr/lib/python3/site-packages/torch/nn/modules/module.py:934 _apply\n"
            "/usr/lib/python3/site-packages/torch/nn/modules/module.py:1384 to\n"
            "gen_snapshots.py:9 mlp_train\n"
            "gen_snapshots.py:28 <module>";
        ok(rs == CP_OK && row.label && strcmp(row.label, want) == 0,
           "the first allocation's label: its own frame, the innermost Python one, the stack: %s",
           row.label ? row.label : "(none)");
        cp_trace_free(t);
    }
    /* make_pickles.py: two devices, four allocations each, three freed, one
     * "snapshot" action ignored per device, an address above 2^63. */
    load_counts("tests/fuzz/corpus/snapshot_p2.pickle", 14, 8, 6, 4006 + 4006, 2, 4u << 20);
    load_counts("tests/fuzz/corpus/snapshot_p4.pickle", 14, 8, 6, 4006 + 4006, 2, 4u << 20);
    load_counts("tests/fuzz/corpus/snapshot_p5.pickle", 14, 8, 6, 4006 + 4006, 2, 4u << 20);
    if (cp_trace_load("tests/fuzz/corpus/snapshot_p4.pickle", &t) == CP_OK) {
        cp_trace_info in;
        size_t i, high = 0;
        cp_trace_info_get(t, &in);
        for (i = 0; i < cp_trace_events(t); i++)
            if (cp_trace_event(t, i, &row) == CP_OK && row.pointer >= (UINT64_C(1) << 63))
                high++;
        ok(in.ignored == 2 && high == 7 && in.streams == 2,
           "ignored 'snapshot' actions counted (%zu), unsigned addresses kept (%zu rows), "
           "%zu streams", in.ignored, high, in.streams);
        cp_trace_free(t);
    }
    load_counts("tests/fuzz/corpus/snapshot_p2_long_memo.pickle", 139, 70, 69, 70 * 1000 + 69 * 70 / 2,
                1, 2u << 20);
    /* One dict as a segment, two entries and its own frame (a memo
     * reference each time): decoded in each role, no stale reuse. */
    if (cp_trace_load("tests/fuzz/corpus/hostile_shared_roles.pickle", &t) == CP_OK) {
        cp_trace_info in;
        cp_trace_info_get(t, &in);
        ok(in.allocs == 1 && in.unmatched == 1 && in.torch_reserved_end == 100 &&
               cp_trace_event(t, 0, &row) == CP_OK,
           "a dict in every role: 1 allocation, 1 unmatched, reserved 100 (%zu, %zu, %llu)",
           in.allocs, in.unmatched, (unsigned long long)in.torch_reserved_end);
        cp_trace_free(t);
    } else {
        ok(0, "hostile_shared_roles.pickle loads: %s", cp_error_msg());
    }
    ok(cp_trace_load("tests/fuzz/corpus/refused_global_p2.pickle", &t) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "GLOBAL") && strstr(cp_error_msg(), "refused_global_p2"),
       "a snapshot with code is refused: %s", cp_error_msg());
    ok(cp_trace_load("tests/fuzz/corpus/truncated_p4.pickle", &t) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "offset"),
       "a truncated snapshot: %s", cp_error_msg());
}

static void oom_explained(void)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    cp_oom_figures f;
    memset(&o, 0, sizeof o);
    o.kind = "tlsf";
    o.upstream = CP_UP_VIRTUAL;
    o.initial = 1 << 20;
    o.grow = 0;
    o.alignment = 256;
    if (cp_pool_create(&r, &o) != CP_OK) {
        ok(0, "pool: %s", cp_error_msg());
        return;
    }
    cp_resource_alloc(r, 256 << 10, NULL, &a);
    cp_resource_alloc(r, 256 << 10, NULL, &b);
    cp_resource_alloc(r, 256 << 10, NULL, &c);
    cp_resource_free(r, b, 256 << 10, NULL);
    ok(cp_resource_alloc(r, 600 << 10, NULL, &d) == CP_ERR_OOM && !d &&
           strstr(cp_error_msg(), "requested 600.00 KiB") &&
           strstr(cp_error_msg(), "free in pool 512.00 KiB") &&
           strstr(cp_error_msg(), "largest free block 256.00 KiB") &&
           strstr(cp_error_msg(), "fragmentation 0.50") &&
           strstr(cp_error_msg(), "reserved 1.00 MiB") && strstr(cp_error_msg(), "used 512.00 KiB"),
       "the refusal explains itself: %s", cp_error_msg());
    cp_resource_last_oom(&f);
    ok(f.requested == 600 << 10 && f.free == 512 << 10 && f.largest_free == 256 << 10 &&
           f.reserved == 1 << 20 && f.used == 512 << 10 && f.fragmentation == 0.5 &&
           strcmp(f.kind, "tlsf") == 0,
       "the same figures from cp_resource_last_oom");
    cp_resource_free(r, a, 256 << 10, NULL);
    cp_resource_free(r, c, 256 << 10, NULL);
    cp_resource_destroy(r);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    cp_be = &fake_backend;
    handmade();
    hostile();
    snapshots();
    oom_explained();
    return tap_finish();
}
