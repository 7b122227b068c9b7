/*
 * trace/jax_xspace.c: JAX's memory events (jax.h) from the profile itself,
 * read streaming; where jax.profiler.trace put it in its folder.
 *
 * The profile is an XSpace (xla/tsl/profiler/protobuf/xplane.proto):
 *   XSpace       planes = 1
 *   XPlane       name = 2, lines = 3, event_metadata = 4 (map<int64,
 *                XEventMetadata>), stat_metadata = 5 (map<int64, XStatMetadata>)
 *   XLine        timestamp_ns = 3, events = 4
 *   XEvent       metadata_id = 1, offset_ps = 2, stats = 4
 *   XStat        metadata_id = 1, double = 2, uint64 = 3, int64 = 4,
 *                str = 5, bytes = 6, ref = 7 (the name of a stat metadata)
 *   XEventMetadata / XStatMetadata   id = 1, name = 2
 * A plane's metadata come after its lines in the file, so it is read twice:
 * the first pass keeps each plane's ids of the names that matter (the two
 * event names, the six stats, allocator names used by reference), skipping
 * the lines; the second decodes only the events of those ids.  Nothing but
 * those events is kept, whatever the profile's size.
 */
#include "jax.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct pb {
    gzFile gz;
    const char *path;
    unsigned char buf[1 << 16];
    size_t pos, len;
    uint64_t off; /* bytes consumed */
    int eof;
} pb;

static int pb_byte(pb *b)
{
    if (b->pos == b->len) {
        int got = gzread(b->gz, b->buf, sizeof b->buf);
        if (got <= 0)
            return -1;
        b->len = (size_t)got;
        b->pos = 0;
    }
    b->off++;
    return b->buf[b->pos++];
}

static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t x = 0;
    int shift = 0, c;
    do {
        if ((c = pb_byte(b)) < 0)
            return -1;
        if (shift > 63)
            return -2;
        x |= (uint64_t)(c & 0x7f) << shift;
        shift += 7;
    } while (c & 0x80);
    *v = x;
    return 0;
}

static int pb_skip(pb *b, uint64_t n)
{
    while (n) {
        size_t have = b->len - b->pos;
        if (!have) {
            if (pb_byte(b) < 0)
                return -1;
            n--;
            continue;
        }
        if (have > n)
            have = (size_t)n;
        b->pos += have;
        b->off += have;
        n -= have;
    }
    return 0;
}

static int pb_read(pb *b, void *dst, size_t n)
{
    unsigned char *d = dst;
    while (n--) {
        int c = pb_byte(b);
        if (c < 0)
            return -1;
        *d++ = (unsigned char)c;
    }
    return 0;
}

static cp_status pb_trunc(pb *b)
{
    return cp_error_set(CP_ERR_INVALID, "%s: truncated profile (the file ends inside a message, "
                        "at byte %llu)", b->path, (unsigned long long)b->off);
}

static cp_status pb_garbage(pb *b)
{
    return cp_error_set(CP_ERR_INVALID, "%s: not a profile (XSpace protobuf): bad field at "
                        "byte %llu", b->path, (unsigned long long)b->off);
}

/* The next field of the message ending at end: its number and wire type;
 * 0 at the end, 1 a field, <0 error (st set). */
static int pb_field(pb *b, uint64_t end, uint32_t *num, int *wt, cp_status *st)
{
    uint64_t key;
    int rc;
    if (b->off >= end)
        return 0;
    if (end == UINT64_MAX) {
        /* the XSpace itself ends where the file does, between fields */
        int c = pb_byte(b);
        if (c < 0)
            return 0;
        b->pos--;
        b->off--;
    }
    if ((rc = pb_varint(b, &key)) != 0) {
        *st = rc == -1 ? pb_trunc(b) : pb_garbage(b);
        return -1;
    }
    *wt = (int)(key & 7);
    *num = (uint32_t)(key >> 3);
    if (*num == 0 || *wt == 3 || *wt == 4 || *wt > 5) {
        *st = pb_garbage(b);
        return -1;
    }
    return 1;
}

/* Skips a field's value; reads a varint into *v (wire type 0) or a
 * length-delimited field's length into *len (wire type 2, not skipped). */
static cp_status pb_value(pb *b, int wt, uint64_t end, uint64_t *v, int skip)
{
    int rc;
    uint64_t n = 0;
    switch (wt) {
    case 0:
        rc = pb_varint(b, v);
        return rc == 0 ? CP_OK : rc == -1 ? pb_trunc(b) : pb_garbage(b);
    case 1:
        n = 8;
        break;
    case 5:
        n = 4;
        break;
    case 2:
        rc = pb_varint(b, &n);
        if (rc)
            return rc == -1 ? pb_trunc(b) : pb_garbage(b);
        if (n > end - b->off)
            return end == UINT64_MAX ? pb_trunc(b) : pb_garbage(b);
        *v = n;
        if (!skip)
            return CP_OK;
        break;
    }
    if (wt == 1 && !skip)
        return pb_read(b, v, 8) == 0 ? CP_OK : pb_trunc(b);
    return pb_skip(b, n) == 0 ? CP_OK : pb_trunc(b);
}

/* What the first pass keeps of one plane. */
typedef struct plane_ids {
    uint64_t ev_alloc, ev_free; /* event metadata ids (0: absent) */
    uint64_t stat[CP_JAX_K_N];
    /* the device's memory: the plane of /device:GPU:<gpu> has a stat of
     * the plane named memory_size (its metadata and value in either order) */
    long long gpu;              /* -1: not a GPU's plane */
    uint64_t memsize_id;        /* the stat metadata id of memory_size (0: none) */
    uint64_t *pstat;            /* the plane's own stats: id, value pairs */
    size_t npstat, cappstat;
    struct pref {
        uint64_t id;  /* a stat metadata id naming an allocator ... */
        int name;     /* ... the name's index */
        uint32_t seq; /* its order in the plane (the last of an id counts) */
    } *ref;           /* sorted by id once the plane is read */
    size_t nref, capref;
} plane_ids;

static int cmp_pref(const void *a, const void *b)
{
    const struct pref *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The allocator name a reference stat names (sorted refs, binary search), or -1. */
static int pref_name(const plane_ids *pi, uint64_t id)
{
    size_t lo = 0, hi = pi->nref;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pi->ref[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pi->nref && pi->ref[lo].id == id ? pi->ref[lo].name : -1;
}

/* A metadata map entry {1: key, 2: {1: id, 2: name}}: the id and the name
 * (up to 127 bytes, cut). */
static cp_status read_meta(pb *b, uint64_t end, uint64_t *id, char *name, size_t *nlen)
{
    uint32_t num;
    int wt, r;
    uint64_t v = 0;
    cp_status st = CP_OK;
    *id = 0;
    *nlen = 0;
    name[0] = '\0'; /* an entry without its name: the callers compare it */
    while ((r = pb_field(b, end, &num, &wt, &st)) > 0) {
        if (num == 2 && wt == 2) {
            uint64_t vend;
            if ((st = pb_value(b, 2, end, &v, 0)) != CP_OK)
                return st;
            vend = b->off + v;
            while ((r = pb_field(b, vend, &num, &wt, &st)) > 0) {
                if (num == 1 && wt == 0) {
                    if ((st = pb_value(b, 0, vend, id, 0)) != CP_OK)
                        return st;
                } else if (num == 2 && wt == 2) {
                    uint64_t n;
                    if ((st = pb_value(b, 2, vend, &n, 0)) != CP_OK)
                        return st;
                    *nlen = n > 127 ? 127 : (size_t)n;
                    if (pb_read(b, name, *nlen) != 0 || pb_skip(b, n - *nlen) != 0)
                        return pb_trunc(b);
                    name[*nlen] = '\0';
                } else if ((st = pb_value(b, wt, vend, &v, 1)) != CP_OK) {
                    return st;
                }
            }
            if (r < 0)
                return st;
        } else if ((st = pb_value(b, wt, end, &v, 1)) != CP_OK) {
            return st;
        }
    }
    return r < 0 ? st : CP_OK;
}

static int ref_allocator(const char *s)
{
    size_t n = strlen(s);
    return (n >= 3 && strcmp(s + n - 3, "bfc") == 0) || strncmp(s, "XLA_backend", 11) == 0;
}

/* A plane's own stat, XStat {1: metadata_id, 3: uint64, 4: int64}: kept
 * as an id, value pair (other values are not sizes). */
static cp_status plane_stat(pb *b, uint64_t end, plane_ids *pi)
{
    uint32_t num;
    int wt, r;
    uint64_t v = 0, id = 0, val = 0;
    int has = 0;
    cp_status st = CP_OK;
    while ((r = pb_field(b, end, &num, &wt, &st)) > 0) {
        if ((st = pb_value(b, wt, end, &v, !(wt == 0 && num <= 4))) != CP_OK)
            return st;
        if (num == 1 && wt == 0)
            id = v;
        else if ((num == 3 || num == 4) && wt == 0)
            val = v, has = 1;
    }
    if (r < 0)
        return st;
    if (!has || !id)
        return CP_OK;
    if (pi->npstat == pi->cappstat) {
        size_t nc = pi->cappstat ? 2 * pi->cappstat : 8;
        uint64_t *a = nc < SIZE_MAX / (2 * sizeof *a) ? realloc(pi->pstat, nc * 2 * sizeof *a) : NULL;
        if (!a)
            return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", b->path);
        pi->pstat = a;
        pi->cappstat = nc;
    }
    pi->pstat[2 * pi->npstat] = id;
    pi->pstat[2 * pi->npstat + 1] = val;
    pi->npstat++;
    return CP_OK;
}

/* The plane's name: the n of "/device:GPU:<n>", or -1. */
static cp_status plane_name(pb *b, uint64_t len, plane_ids *pi)
{
    static const char pre[] = "/device:GPU:";
    char name[64];
    size_t k = len < sizeof name - 1 ? (size_t)len : sizeof name - 1;
    if (pb_read(b, name, k) != 0 || pb_skip(b, len - k) != 0)
        return pb_trunc(b);
    name[k] = '\0';
    pi->gpu = -1;
    if (k == len && strncmp(name, pre, sizeof pre - 1) == 0) {
        const char *p = name + sizeof pre - 1;
        long long n = 0;
        while (*p >= '0' && *p <= '9' && n < 1000000)
            n = n * 10 + (*p++ - '0');
        if (!*p && p > name + sizeof pre - 1)
            pi->gpu = n;
    }
    return CP_OK;
}

/* The memory_size of the plane of GPU n (0: none says it). */
static uint64_t device_memory(const plane_ids *pl, size_t npl, long long n)
{
    size_t k, j;
    uint64_t m = 0;
    for (k = 0; n >= 0 && k < npl; k++)
        for (j = 0; pl[k].gpu == n && pl[k].memsize_id && j < pl[k].npstat; j++)
            if (pl[k].pstat[2 * j] == pl[k].memsize_id)
                m = pl[k].pstat[2 * j + 1];
    return m;
}

static cp_status pass1_plane(pb *b, uint64_t end, plane_ids *pi, cp_jax_names *nm)
{
    uint32_t num;
    int wt, r;
    uint64_t v = 0;
    cp_status st = CP_OK;
    pi->gpu = -1;
    while ((r = pb_field(b, end, &num, &wt, &st)) > 0) {
        if ((num == 2 || num == 6) && wt == 2) {
            if ((st = pb_value(b, 2, end, &v, 0)) != CP_OK)
                return st;
            st = num == 2 ? plane_name(b, v, pi) : plane_stat(b, b->off + v, pi);
            if (st != CP_OK)
                return st;
        } else if ((num == 4 || num == 5) && wt == 2) {
            uint64_t id;
            char name[128];
            size_t nlen;
            if ((st = pb_value(b, 2, end, &v, 0)) != CP_OK)
                return st;
            if ((st = read_meta(b, b->off + v, &id, name, &nlen)) != CP_OK)
                return st;
            if (num == 4) {
                if (strcmp(name, "MemoryAllocation") == 0)
                    pi->ev_alloc = id;
                else if (strcmp(name, "MemoryDeallocation") == 0)
                    pi->ev_free = id;
            } else {
                int k;
                for (k = 0; k < CP_JAX_K_N; k++)
                    if (strcmp(name, cp_jax_stat_names[k]) == 0)
                        pi->stat[k] = id;
                if (strcmp(name, "memory_size") == 0)
                    pi->memsize_id = id;
                if (nlen && ref_allocator(name)) {
                    int ix = cp_jax_name_index(nm, name, nlen);
                    if (ix >= 0 && pi->nref == pi->capref && pi->nref < UINT32_MAX) {
                        size_t nc = pi->capref ? 2 * pi->capref : 16;
                        void *a = realloc(pi->ref, nc * sizeof *pi->ref);
                        if (a) {
                            pi->ref = a;
                            pi->capref = nc;
                        }
                    }
                    if (ix < 0 || pi->nref == pi->capref)
                        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", b->path);
                    pi->ref[pi->nref].id = id;
                    pi->ref[pi->nref].name = ix;
                    pi->ref[pi->nref].seq = (uint32_t)pi->nref;
                    pi->nref++;
                }
            }
        } else if ((st = pb_value(b, wt, end, &v, 1)) != CP_OK) {
            return st;
        }
    }
    if (r < 0)
        return st;
    /* one entry an id, the last of the plane's (as a map keeps it) */
    if (pi->nref) {
        size_t i, k = 0;
        qsort(pi->ref, pi->nref, sizeof *pi->ref, cmp_pref);
        for (i = 0; i < pi->nref; i++) {
            if (k && pi->ref[k - 1].id == pi->ref[i].id)
                k--;
            pi->ref[k++] = pi->ref[i];
        }
        pi->nref = k;
    }
    return CP_OK;
}

static cp_status read_event(pb *b, uint64_t end, const plane_ids *pi, uint64_t line_ts, cp_jax_raw *r,
                            cp_jax_names *nm)
{
    uint32_t num;
    int wt, rc, alloc = -1;
    uint64_t v = 0, meta = 0, offset_ps = 0;
    cp_status st = CP_OK;
    cp_jax_event ev;
    memset(&ev, 0, sizeof ev);
    ev.addr = ev.requested = ev.chunk = ev.in_use = ev.peak = CP_JAX_NONE;
    while ((rc = pb_field(b, end, &num, &wt, &st)) > 0) {
        if (num == 1 && wt == 0) {
            if ((st = pb_value(b, 0, end, &meta, 0)) != CP_OK)
                return st;
            if (meta != pi->ev_alloc && meta != pi->ev_free)
                return pb_skip(b, end - b->off) == 0 ? CP_OK : pb_trunc(b);
        } else if (num == 2 && wt == 0) {
            if ((st = pb_value(b, 0, end, &offset_ps, 0)) != CP_OK)
                return st;
        } else if (num == 4 && wt == 2) {
            uint64_t send, sid = 0, val = CP_JAX_NONE;
            int k, sref = -1;
            if ((st = pb_value(b, 2, end, &v, 0)) != CP_OK)
                return st;
            send = b->off + v;
            while ((rc = pb_field(b, send, &num, &wt, &st)) > 0) {
                if (num == 1 && wt == 0) {
                    if ((st = pb_value(b, 0, send, &sid, 0)) != CP_OK)
                        return st;
                } else if ((num == 3 || num == 4 || num == 7) && wt == 0) {
                    if ((st = pb_value(b, 0, send, &val, 0)) != CP_OK)
                        return st;
                    if (num == 7)
                        sref = pref_name(pi, val);
                } else if (num == 5 && wt == 2) {
                    uint64_t n;
                    char s[128];
                    size_t cut;
                    if ((st = pb_value(b, 2, send, &n, 0)) != CP_OK)
                        return st;
                    cut = n > 127 ? 127 : (size_t)n;
                    if (pb_read(b, s, cut) != 0 || pb_skip(b, n - cut) != 0)
                        return pb_trunc(b);
                    if (sid && sid == pi->stat[CP_JAX_K_ALLOC_NAME] &&
                        (sref = cp_jax_name_index(nm, s, cut)) < 0)
                        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", b->path);
                } else if (num == 2 && wt == 1) {
                    double d;
                    if ((st = pb_value(b, 1, send, (uint64_t *)(void *)&v, 0)) != CP_OK)
                        return st;
                    memcpy(&d, &v, sizeof d);
                    val = d >= 0 && d < 1.8e19 ? (uint64_t)d : CP_JAX_NONE;
                } else if ((st = pb_value(b, wt, send, &v, 1)) != CP_OK) {
                    return st;
                }
            }
            if (rc < 0)
                return st;
            for (k = 0; k < CP_JAX_K_N; k++)
                if (sid && sid == pi->stat[k])
                    break;
            switch (k) {
            case CP_JAX_K_ALLOC_NAME: alloc = sref; break;
            case CP_JAX_K_ADDR: ev.addr = val; break;
            case CP_JAX_K_REQ: ev.requested = val; break;
            case CP_JAX_K_CHUNK: ev.chunk = val; break;
            case CP_JAX_K_INUSE: ev.in_use = val; break;
            case CP_JAX_K_PEAK: ev.peak = val; break;
            default: break;
            }
        } else if ((st = pb_value(b, wt, end, &v, 1)) != CP_OK) {
            return st;
        }
    }
    if (rc < 0)
        return st;
    if (!meta || (meta != pi->ev_alloc && meta != pi->ev_free))
        return CP_OK;
    if (ev.addr == CP_JAX_NONE || alloc < 0)
        return CP_OK; /* not one of BFC's (no allocator or address) */
    ev.is_free = meta == pi->ev_free;
    if (ev.requested == CP_JAX_NONE)
        ev.requested = ev.chunk;
    if (!ev.is_free && ev.requested == CP_JAX_NONE)
        return CP_OK;
    ev.ts = (long double)line_ts + (long double)offset_ps / 1000.0L;
    return cp_jax_raw_push(r, &ev, alloc, b->path);
}

static cp_status pass2_plane(pb *b, uint64_t end, const plane_ids *pi, cp_jax_raw *r, cp_jax_names *nm)
{
    uint32_t num;
    int wt, rc;
    uint64_t v = 0;
    cp_status st = CP_OK;
    while ((rc = pb_field(b, end, &num, &wt, &st)) > 0) {
        if (num == 3 && wt == 2 && (pi->ev_alloc || pi->ev_free)) {
            uint64_t lend, ts = 0;
            if ((st = pb_value(b, 2, end, &v, 0)) != CP_OK)
                return st;
            lend = b->off + v;
            while ((rc = pb_field(b, lend, &num, &wt, &st)) > 0) {
                if (num == 3 && wt == 0) {
                    if ((st = pb_value(b, 0, lend, &ts, 0)) != CP_OK)
                        return st;
                } else if (num == 4 && wt == 2) {
                    if ((st = pb_value(b, 2, lend, &v, 0)) != CP_OK)
                        return st;
                    if ((st = read_event(b, b->off + v, pi, ts, r, nm)) != CP_OK)
                        return st;
                } else if ((st = pb_value(b, wt, lend, &v, 1)) != CP_OK) {
                    return st;
                }
            }
            if (rc < 0)
                return st;
        } else if ((st = pb_value(b, wt, end, &v, 1)) != CP_OK) {
            return st;
        }
    }
    return rc < 0 ? st : CP_OK;
}

cp_status cp_jax_read_xspace(gzFile gz, const char *path, const char *allocator,
                             cp_jax_events *out)
{
    pb *b = calloc(1, sizeof *b);
    cp_jax_raw r;
    plane_ids *pl = NULL;
    size_t npl = 0, k;
    uint32_t num;
    int wt, rc, pass;
    uint64_t v = 0;
    cp_status st = CP_OK;

    memset(&r, 0, sizeof r);
    memset(out, 0, sizeof *out);
    out->has_ts = 1;
    r.e = out;
    if (!b)
        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
    b->gz = gz;
    b->path = path;
    for (pass = 0; pass < 2 && st == CP_OK; pass++) {
        if (pass == 1) {
            if (gzrewind(gz) != 0) {
                st = cp_error_set(CP_ERR_BACKEND, "%s: cannot rewind", path);
                break;
            }
            b->pos = b->len = 0;
            b->off = 0;
        }
        k = 0;
        while ((rc = pb_field(b, UINT64_MAX, &num, &wt, &st)) > 0) {
            if (num == 1 && wt == 2) {
                uint64_t pend;
                if ((st = pb_value(b, 2, UINT64_MAX, &v, 0)) != CP_OK)
                    break;
                pend = b->off + v;
                if (pass == 0) {
                    plane_ids *np = realloc(pl, (npl + 1) * sizeof *np);
                    if (!np) {
                        st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
                        break;
                    }
                    pl = np;
                    memset(&pl[npl], 0, sizeof pl[npl]);
                    st = pass1_plane(b, pend, &pl[npl++], &r.nm);
                } else if (k < npl) {
                    st = pass2_plane(b, pend, &pl[k++], &r, &r.nm);
                } else {
                    st = pb_skip(b, v) == 0 ? CP_OK : pb_trunc(b);
                }
                if (st != CP_OK)
                    break;
                if (b->off != pend) {
                    st = pb_garbage(b);
                    break;
                }
            } else if ((st = pb_value(b, wt, UINT64_MAX, &v, 1)) != CP_OK) {
                break;
            }
        }
        if (st == CP_OK && rc == 0 && b->off == 0)
            st = cp_error_set(CP_ERR_INVALID, "%s: an empty file (no profile)", path);
        if (st == CP_OK) {
            int err;
            gzerror(gz, &err);
            if (err != Z_OK && err != Z_STREAM_END && err != Z_BUF_ERROR)
                st = cp_error_set(CP_ERR_INVALID, "%s: truncated or corrupt gzip data", path);
        }
    }
    if (st == CP_OK && npl == 0)
        st = cp_error_set(CP_ERR_INVALID, "%s: not a profile: no planes", path);
    if (st == CP_OK)
        st = cp_jax_choose(&r, path, allocator);
    /* the chosen allocator's device: its plane's memory_size */
    if (st == CP_OK)
        out->device_memory = device_memory(pl, npl, cp_jax_gpu_number(out->allocator));
    for (k = 0; k < npl; k++) {
        free(pl[k].ref);
        free(pl[k].pstat);
    }
    free(pl);
    free(b);
    cp_jax_raw_fini(&r);
    if (st != CP_OK)
        cp_jax_events_free(out);
    return st;
}

int cp_jax_is_xspace(const unsigned char *head, size_t n, const char *path)
{
    size_t i = 0, pl = strlen(path);
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
        i++;
    /* JSON lines, whatever the name */
    if (i < n && head[i] == '{' && i + 1 < n && (head[i + 1] == '"' || head[i + 1] == ' '))
        return 0;
    if (pl >= 10 && (strcmp(path + pl - 10, ".xplane.pb") == 0 ||
                     (pl >= 13 && strcmp(path + pl - 13, ".xplane.pb.gz") == 0)))
        return 1;
    /* XSpace: planes (field 1, length-delimited), and the plane starts with
     * its id (field 1, varint) or its name (field 2) */
    if (n >= 3 && head[0] == 0x0a) {
        size_t j = 1;
        while (j < n && (head[j] & 0x80))
            j++;
        if (j + 1 < n && (head[j + 1] == 0x08 || head[j + 1] == 0x12))
            return 1;
    }
    return 0;
}

static int cmpname(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *cp_jax_find_profile(const char *dir)
{
    char *best = NULL, *base;
    DIR *d;
    struct dirent *de;
    size_t n = strlen(dir);
    struct stat sb;
    /* the directory given, or its plugins/profile/<run>/ */
    const char *tries[3] = {"", "/plugins/profile", NULL};
    int t;
    for (t = 0; tries[t] && !best; t++) {
        char **runs = NULL;
        size_t nr = 0, i;
        base = malloc(n + 32);
        if (!base)
            return NULL;
        snprintf(base, n + 32, "%s%s", dir, tries[t]);
        d = opendir(base);
        if (!d) {
            free(base);
            continue;
        }
        while ((de = readdir(d)) != NULL) {
            size_t l = strlen(de->d_name);
            char *full;
            if (de->d_name[0] == '.')
                continue;
            full = malloc(strlen(base) + l + 2);
            if (!full)
                break;
            sprintf(full, "%s/%s", base, de->d_name);
            if (t == 0 && l >= 10 && strcmp(de->d_name + l - 10, ".xplane.pb") == 0) {
                if (!best || strcmp(full, best) > 0) {
                    free(best);
                    best = full;
                } else {
                    free(full);
                }
                continue;
            }
            if (t == 1 && stat(full, &sb) == 0 && S_ISDIR(sb.st_mode)) {
                char **nr2 = realloc(runs, (nr + 1) * sizeof *runs);
                if (!nr2) {
                    free(full);
                    break;
                }
                runs = nr2;
                runs[nr++] = full;
            } else {
                free(full);
            }
        }
        closedir(d);
        if (nr) {
            qsort(runs, nr, sizeof *runs, cmpname);
            for (i = nr; i-- > 0 && !best;)
                best = cp_jax_find_profile(runs[i]);
            for (i = 0; i < nr; i++)
                free(runs[i]);
        }
        free(runs);
        free(base);
        if (t == 0 && best)
            break;
        if (t == 0 && !best)
            continue;
    }
    return best;
}
