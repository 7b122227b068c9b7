/*
 * test_models.c: the registry of pool kinds (pool/model.h) and a model
 * that exists only in the tests (model_bump.c, "bump"), linked in here and
 * registered when it loads.  TAP output.
 *
 *  - the registry: the shipped rows and bump's are well formed (names of
 *    options unique across kinds, each inside its struct), a row is refused
 *    when malformed or taken, the traits read as the replay and advise need;
 *  - one descriptor, two parsers' worth of checks: bump's option through a
 *    spec string (defaults, a bad value, another kind's option), torch's conf
 *    in double quotes, and random specs that must parse or be refused with a
 *    message, never crash;
 *  - bump held to the pools' battery: random alloc/free over two streams and
 *    the default one (no overlap, aligned, stats conserved), out of memory at
 *    max and recovered from, trim, invalid frees, and stream-ordered reuse
 *    under each policy on the fake backend (stream completion under the
 *    test's control), then on the host backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "pool/bfc.h"
#include "pool/model.h"
#include "pool/resource.h"
#include "pool/torch.h"
#include "tap.h"

#define ok tap_ok
#define MiB (UINT64_C(1) << 20)

/* ---- the registry ---- */

static cp_status create_nothing(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    (void)o;
    cp_resource_destroy(up);
    *out = NULL;
    return cp_error_set(CP_ERR_INVALID, "never made");
}

static const char *no_names(int i)
{
    (void)i;
    return NULL;
}

static void test_rows(void)
{
    const cp_model *m, *x;
    const cp_opt *d, *e;
    int i, k, good = 1, n = 0;
    char why[200] = "";

    for (i = 0; (m = cp_model_at(i)) != NULL; i++, n++) {
        if (!m->name || !m->create || m->opts_size > CP_MODEL_OPTS_MAX)
            good = 0, snprintf(why, sizeof why, "row %d", i);
        for (d = m->opts; d && d->name; d++) {
            if (!(d->flags & CP_OPT_BINDING) && d->offset + 8 > m->opts_size &&
                !(d->type == CP_OPT_BOOL || d->type == CP_OPT_CHOICE))
                good = 0, snprintf(why, sizeof why, "%s.%s outside its struct", m->name, d->name);
            if (cp_model_opt(NULL, d->name))
                good = 0, snprintf(why, sizeof why, "%s.%s is a common name", m->name, d->name);
            for (k = 0; (x = cp_model_at(k)) != NULL; k++)
                for (e = x->opts; x != m && e && e->name; e++)
                    if (strcmp(e->name, d->name) == 0)
                        good = 0, snprintf(why, sizeof why, "%s and %s both take '%s'", m->name,
                                           x->name, d->name);
        }
    }
    ok(good, "every row names its constructor; its options fit its struct, each name one "
       "kind's (%s)", why);
    m = cp_model_find("bump");
    ok(m && cp_model_at(n - 1) == m && strcmp(cp_pool_kind_name(n - 1), "bump") == 0,
       "bump, from the tests alone, is registered: the last of %d kinds", n);
    ok(cp_pool_opt_owner("chunk") == m && cp_pool_opt_known("chunk") &&
           !cp_pool_opt_known("chunks"),
       "its option is known by name, and whose it is");
    ok(cp_model_register(m) == CP_ERR_INVALID && strstr(cp_error_msg(), "registered already"),
       "registering it again is refused (%s)", cp_error_msg());
    {
        static const cp_opt taken[] = {{.name = "max", .type = CP_OPT_SIZE}, {.name = NULL}};
        static const cp_opt outside[] = {{.name = "far", .type = CP_OPT_SIZE, .offset = 60},
                                         {.name = NULL}};
        static const cp_opt nameless[] = {{.name = "pick", .type = CP_OPT_CHOICE,
                                           .choice = no_names},
                                          {.name = NULL}};
        static const char *const bad_foreign[] = {"colour", NULL};
        const cp_model rows[] = {
            {.name = "x1"},
            {.name = "x2", .create = create_nothing, .opts = taken, .opts_size = 8},
            {.name = "x3", .create = create_nothing, .opts = outside, .opts_size = 64},
            {.name = "x4", .create = create_nothing, .opts_size = CP_MODEL_OPTS_MAX + 1},
            {.name = "x5", .create = create_nothing, .opts = nameless, .opts_size = 8},
            {.name = "x6", .create = create_nothing, .foreign = bad_foreign},
            {.name = "tlsf", .create = create_nothing},
        };
        const char *says[] = {"a name and a constructor", "another option's name", "no room",
                              "more than", "no names", "no common option", "registered already"};
        size_t j;
        good = 1;
        for (j = 0; j < sizeof rows / sizeof rows[0]; j++)
            if (cp_model_register(&rows[j]) != CP_ERR_INVALID || !strstr(cp_error_msg(), says[j]))
                good = 0, snprintf(why, sizeof why, "%s: %s", rows[j].name, cp_error_msg());
        ok(good && cp_model_at(n) == NULL, "malformed rows are refused, saying why, and not "
           "added (%s)", why);
    }
}

static void test_traits(void)
{
    char buf[200];
    cp_pool_opts o;
    cp_resource *r = NULL;
    ok(strcmp(cp_model_names(buf, sizeof buf, CP_MODEL_RECORDED, '"', " or "),
              "\"torch\", \"bfc\" or \"cupy\"") == 0,
       "the kinds that take recorded addresses: %s", buf);
    ok(strcmp(cp_model_names(buf, sizeof buf, CP_MODEL_OWN_CLOCK, '\'', " and "),
              "'torch', 'bfc' and 'cupy'") == 0,
       "the kinds on their own clock: %s", buf);
    ok(strcmp(cp_model_names(buf, sizeof buf, CP_MODEL_KEEPS_IDLE, '\'', " and "),
              "'freelist', 'tlsf' and 'caching'") == 0,
       "the kinds that keep idle chunks serving: %s", buf);
    cp_pool_opts_init(&o, "bump");
    o.upstream = CP_UP_VIRTUAL;
    cp_pool_spec_serve(&o);
    ok(o.release_threshold == 0, "the serving policy leaves bump alone (no trait)");
    ok(cp_pool_create(&r, &o) == CP_OK && cp_model_traits_of(r) == 0 &&
           strcmp(cp_resource_kind(r), "bump") == 0,
       "a bump pool's traits: none");
    cp_resource_destroy(r);
    cp_pool_opts_init(&o, "bfc");
    o.upstream = CP_UP_VIRTUAL;
    ((cp_bfc_opts *)cp_pool_own(&o))->memory_limit = 64 * MiB;
    ok(cp_pool_create(&r, &o) == CP_OK &&
           cp_model_traits_of(r) == (CP_MODEL_OWN_CLOCK | CP_MODEL_RECORDED),
       "a bfc pool's traits, read from the resource");
    cp_resource_destroy(r);
}

/* ---- one descriptor: the spec string ---- */

static const char *spec_error(const char *spec)
{
    cp_pool_opts o;
    char buf[256];
    return cp_pool_spec_parse(spec, &o, buf, sizeof buf) == CP_ERR_INVALID ? cp_error_msg() : "";
}

static void test_spec(void)
{
    cp_pool_opts o;
    char buf[256];
    const cp_torch_opts *to;
    ok(cp_pool_spec_parse("bump", &o, buf, sizeof buf) == CP_OK &&
           *(const uint64_t *)cp_pool_own_const(&o) == MiB && o.alignment == 256,
       "bump alone: its chunk's default, 1 MiB, from its descriptor");
    ok(cp_pool_spec_parse(" bump , chunk = 64KiB, max=8MiB", &o, buf, sizeof buf) == CP_OK &&
           *(const uint64_t *)cp_pool_own_const(&o) == 64 * 1024 && o.max == 8 * MiB,
       "bump,chunk=64KiB: read as a size");
    ok(strstr(spec_error("bump,chunk=lots"), "option 'chunk' must be a size (4096, 64KiB, "
                                                 "1.5GiB), not 'lots'") != NULL,
       "a bad size names the option and the value (%s)", cp_error_msg());
    ok(strstr(spec_error("bump,chunk=100"), "option 'chunk' must be at least 4096 bytes, "
                                               "not 100") != NULL,
       "its descriptor's check speaks (%s)", cp_error_msg());
    ok(strstr(spec_error("tlsf,chunk=1MiB"), "option 'chunk' is for kind 'bump', not 'tlsf'") != 0,
       "another kind's option is named as such (%s)", cp_error_msg());
    ok(strstr(spec_error("bump,foo=1"), "unknown option 'foo' (upstream, initial, max, "
                                           "alignment, release_threshold, grow, fallback, reuse, "
                                           "chunk)") != NULL,
       "an unknown option lists the kind's (%s)", cp_error_msg());
    ok(cp_pool_spec_parse("torch,upstream=virtual,conf=\"expandable_segments:True, "
                          "max_split_size_mb:128\"", &o, buf, sizeof buf) == CP_OK &&
           (to = (const cp_torch_opts *)cp_pool_own_const(&o)) != NULL && to->conf &&
           strcmp(to->conf, "expandable_segments:True, max_split_size_mb:128") == 0,
       "torch's conf in double quotes, commas and blanks kept");
    ok(strstr(spec_error("torch,conf=\"expandable_segments:True"), "has no closing one") &&
           strstr(spec_error("torch,conf=a\"b\""), "may only enclose the whole value") &&
           strstr(spec_error("torch,conf=\"expandable:True\""), "option 'conf': unknown key "
                                                                "'expandable'"),
       "an unclosed quote, a quote inside, a bad conf: refused, naming conf");
    /* issue 43's polish: a misspelt kind or choice gets the one it most likely meant */
    ok(strstr(spec_error("tlfs,max=1GiB"), "unknown pool kind 'tlfs' (") &&
           strstr(spec_error("tlfs,max=1GiB"), "; did you mean 'tlsf'?") &&
           strstr(spec_error("tlsf,upstream=virtal"), "not 'virtal'; did you mean 'virtual'?") &&
           !strstr(spec_error("nothing"), "did you mean"),
       "a misspelt kind or choice: did you mean the nearest (%s)", cp_error_msg());
    ok(cp_nearest_name("tlfs", cp_model_name) && strcmp(cp_nearest_name("tlfs", cp_model_name), "tlsf") == 0 &&
           cp_nearest_name("vm", cp_model_name) == NULL && cp_nearest_name("tlsf", cp_model_name) == NULL,
       "cp_nearest_name: a swap is one edit; too short a word or an exact one gets none");
    ok(strstr(spec_error("torch,reuse=stream"), "option 'reuse' does not apply to kind 'torch'") &&
           strstr(spec_error("bfc,max=1GiB"), "option 'max' does not apply to kind 'bfc'") &&
           strstr(spec_error("torch,upstream=async"), "kind 'torch' takes upstream"),
       "what a model refuses, as cupola.pool refuses it");
    {
        char small[8];
        ok(cp_pool_spec_parse("torch,conf=\"expandable_segments:True\"", &o, small,
                              sizeof small) == CP_ERR_INVALID &&
               strstr(cp_error_msg(), "too long"),
           "a string value that does not fit the caller's buffer is refused");
    }
}

/* Random specs from the spec's own characters and words: each parses, or is
 * refused with a message that names the spec; nothing crashes or reads past
 * a buffer (make test-asan). */
static void test_spec_random(void)
{
    static const char *const words[] = {"tlsf", "bump", "torch", "bfc", "cub", "chunk", "conf",
                                        "max", "reuse", "stream", "1MiB", "true", "=", ",",
                                        "\"", " ", "memory_limit", "0.5", "fragmentation_fraction",
                                        "expandable_segments:True", "x", "4294967296", "-1", ""};
    uint64_t x = 0x9E3779B97F4A7C15u;
    int i, good = 1;
    char spec[160], why[300] = "";
    for (i = 0; i < 20000 && good; i++) {
        size_t n = 0;
        int w;
        cp_pool_opts o;
        char buf[64];
        cp_status st;
        spec[0] = '\0';
        for (w = 0; w < 12; w++) {
            const char *word;
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            word = words[x % (sizeof words / sizeof words[0])];
            if (n + strlen(word) + 1 >= sizeof spec)
                break;
            memcpy(spec + n, word, strlen(word) + 1);
            n += strlen(word);
        }
        st = cp_pool_spec_parse(spec, &o, buf, sizeof buf);
        if (st != CP_OK && (st != CP_ERR_INVALID || strncmp(cp_error_msg(), "pool spec \"", 11)))
            good = 0, snprintf(why, sizeof why, "[%s]: %d %s", spec, (int)st, cp_error_msg());
        if (st == CP_OK && (!o.kind || strcmp(o.kind, buf) != 0))
            good = 0, snprintf(why, sizeof why, "[%s]: kind not in the buffer", spec);
    }
    ok(good, "20000 random specs: parsed or refused with a message (%s)", why);
}

/* ---- bump held to the battery ---- */

typedef struct live_blk {
    uintptr_t p;
    size_t n;
    cp_stream *s;
} live_blk;

static int disjoint(const live_blk *v, size_t n, uintptr_t p, size_t len)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (p < v[i].p + v[i].n && v[i].p < p + len)
            return 0;
    return 1;
}

static cp_resource *bump_pool(cp_upstream_kind up, cp_reuse reuse, uint64_t max)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    cp_pool_opts_init(&o, "bump");
    o.upstream = up;
    o.reuse = reuse;
    o.max = max;
    if (cp_pool_create(&r, &o) != CP_OK)
        return NULL;
    return r;
}

static void test_random(const char *backend, cp_upstream_kind up)
{
    cp_resource *r = bump_pool(up, CP_REUSE_WAIT, 0);
    cp_stream *sv[3] = {NULL, NULL, NULL};
    live_blk v[256];
    size_t n = 0, i, k;
    uint64_t x = 88172645463325252u, sum;
    int good = 1;
    char why[200] = "";
    cp_stats st;

    snprintf(tap_group, sizeof tap_group, "%s bump/%s", backend, cp_upstream_name(up));
    if (!r) {
        ok(0, "create: %s", cp_error_msg());
        return;
    }
    cp_be->stream_create(&sv[1], 0, 0);
    cp_be->stream_create(&sv[2], 0, 0);
    for (i = 0; i < 3000 && good; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n < 256 && (n == 0 || x % 3 != 0)) {
            size_t len = 1 + (size_t)(x >> 20) % (x % 7 == 0 ? 3 * MiB : 64 * 1024);
            cp_stream *s = sv[(x >> 8) % 3];
            void *p = NULL;
            if (cp_resource_alloc(r, len, s, &p) != CP_OK) {
                good = 0, snprintf(why, sizeof why, "alloc %zu: %s", len, cp_error_msg());
                break;
            }
            if ((uintptr_t)p % 256 || !disjoint(v, n, (uintptr_t)p, len))
                good = 0, snprintf(why, sizeof why, "block %p of %zu misaligned or overlapping",
                                   p, len);
            v[n].p = (uintptr_t)p, v[n].n = len, v[n].s = s, n++;
        } else {
            k = (size_t)(x >> 16) % n;
            cp_resource_free(r, (void *)v[k].p, v[k].n, sv[(x >> 4) % 3]);
            v[k] = v[--n];
        }
        cp_resource_stats(r, &st);
        for (sum = 0, k = 0; k < n; k++)
            sum += v[k].n;
        if (st.used != sum || st.reserved < st.used || st.allocs - st.frees != n ||
            st.largest_free > st.free_bytes || st.free_bytes > st.reserved)
            good = 0, snprintf(why, sizeof why, "stats: used %llu (live %llu), reserved %llu",
                               (unsigned long long)st.used, (unsigned long long)sum,
                               (unsigned long long)st.reserved);
    }
    ok(good, "3000 random allocs and frees on three streams: aligned, disjoint, stats kept (%s)",
       why);
    for (i = 0; i < n; i++)
        cp_resource_free(r, (void *)v[i].p, v[i].n, v[i].s);
    cp_be->device_synchronize();
    cp_resource_trim(r, 0);
    cp_resource_stats(r, &st);
    ok(st.used == 0 && st.reserved == 0 && st.allocs == st.frees,
       "all freed, trim(0): nothing reserved (%llu)", (unsigned long long)st.reserved);
    cp_resource_destroy(r);
    cp_be->stream_destroy(sv[1]);
    cp_be->stream_destroy(sv[2]);
    tap_group[0] = '\0';
}

static void test_oom(const char *backend)
{
    cp_resource *r = bump_pool(CP_UP_DEVICE, CP_REUSE_EVENT, 8 * MiB);
    void *p[16], *q = NULL;
    int n = 0, i;
    cp_status st = CP_OK;
    cp_stats s;
    snprintf(tap_group, sizeof tap_group, "%s bump/device", backend);
    if (!r) {
        ok(0, "create with max: %s", cp_error_msg());
        return;
    }
    while (n < 16 && (st = cp_resource_alloc(r, MiB, NULL, &p[n])) == CP_OK)
        n++;
    cp_resource_stats(r, &s);
    ok(st == CP_ERR_OOM && n == 8 && s.failed == 1 && s.reserved <= 8 * MiB &&
           strstr(cp_error_msg(), "out of memory"),
       "max=8MiB: %d x 1 MiB served, then out of memory (%s)", n, cp_error_msg());
    ok(cp_resource_alloc(r, (size_t)1 << 60, NULL, &q) == CP_ERR_OOM &&
           cp_resource_alloc(r, SIZE_MAX, NULL, &q) == CP_ERR_OOM,
       "2^60 bytes and SIZE_MAX: out of memory");
    ok(cp_resource_free(r, (char *)p[0] + 256, MiB, NULL) == CP_ERR_INVALID,
       "a free inside a block is refused (%s)", cp_error_msg());
    for (i = 0; i < n; i++)
        cp_resource_free(r, p[i], MiB, NULL);
    ok(cp_resource_free(r, p[0], MiB, NULL) == CP_ERR_INVALID, "a double free is refused");
    st = cp_resource_alloc(r, 4 * MiB, NULL, &q);
    ok(st == CP_OK, "recovered: 4 MiB once the chunks are empty (%s)", cp_error_msg());
    if (st == CP_OK)
        cp_resource_free(r, q, 4 * MiB, NULL);
    cp_resource_stats(r, &s);
    ok(s.used == 0 && s.frees == s.allocs, "consistent after out of memory");
    cp_resource_destroy(r);
    tap_group[0] = '\0';
}

/* A block freed on A behind pending work, asked for on B: the fake
 * backend's streams complete when the test says. */
static void test_streams(void)
{
    static const cp_reuse policies[] = {CP_REUSE_STREAM, CP_REUSE_EVENT, CP_REUSE_WAIT};
    cp_stream *a = NULL, *b = NULL;
    size_t k;
    cp_be->stream_create(&a, 0, 0);
    cp_be->stream_create(&b, 0, 0);
    for (k = 0; k < 3; k++) {
        cp_resource *r = bump_pool(CP_UP_DEVICE, policies[k], 0);
        void *x = NULL, *y = NULL, *z = NULL;
        uint64_t waits = b->waits;
        snprintf(tap_group, sizeof tap_group, "fake bump, reuse=%s", cp_reuse_name(policies[k]));
        if (!r) {
            ok(0, "create: %s", cp_error_msg());
            continue;
        }
        cp_resource_alloc(r, MiB, a, &x); /* a whole chunk */
        cp_resource_alloc(r, 256, b, &z); /* the pool sees B; z keeps B's chunk busy */
        cp_be->k_spin(20000, a);
        cp_resource_free(r, x, MiB, a);
        cp_resource_alloc(r, MiB, b, &y);
        if (policies[k] == CP_REUSE_WAIT)
            ok(y == x && b->waits > waits && b->waited_on == a,
               "A's emptied chunk goes to B at once, B waiting on A");
        else
            ok(y != x, "A's emptied chunk is not B's while A's work is pending");
        cp_resource_free(r, y, MiB, b);
        cp_resource_free(r, z, 256, b);
        fake_complete(a);
        fake_complete(b);
        if (policies[k] == CP_REUSE_EVENT) {
            void *v[4];
            int hit = 0, i;
            for (i = 0; i < 4; i++)
                hit |= cp_resource_alloc(r, MiB, b, &v[i]) == CP_OK && v[i] == x;
            for (i = 0; i < 4; i++)
                cp_resource_free(r, v[i], MiB, b);
            ok(hit, "once A's work completed, B takes its chunk");
        }
        cp_be->device_synchronize();
        cp_resource_destroy(r);
    }
    cp_be->stream_destroy(a);
    cp_be->stream_destroy(b);
    tap_group[0] = '\0';
}

int main(void)
{
    int u;
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_rows();
    test_spec();
    test_spec_random();
    cp_be = &fake_backend;
    test_traits();
    test_streams();
    for (u = 0; u <= CP_UP_VIRTUAL; u++)
        test_random("fake", (cp_upstream_kind)u);
    test_oom("fake");
#ifndef TEST_NO_HOST
    cp_be = NULL;
    if (cp_backend_select("host") == CP_OK) {
        test_random("host", CP_UP_DEVICE);
        test_random("host", CP_UP_ASYNC);
        test_oom("host");
    } else {
        ok(0, "host backend: %s", cp_error_msg());
    }
#endif
    return tap_finish();
}
