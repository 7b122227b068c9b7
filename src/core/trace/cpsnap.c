/*
 * cpsnap.c: cupola's compact snapshot, a second format of the same events
 * (what tests/torch/compact.py writes; snapshot.h): decoded into the raw
 * entries a pickle's decode makes, so everything after is shared.
 */
#include "snapshot_impl.h"

#include <stdlib.h>
#include <string.h>

#include "pool/torch.h"

/* The layout:
 *   "CPSNAP1\n", then unsigned LEB128 varints:
 *   version (1); the stream values: count, each; PyTorch's env string and
 *   the settings conf string (allocator_settings; empty when absent), each
 *   as length + bytes, with a flag (0/1) for whether the snapshot had
 *   settings before them; the segments: count, each address, total_size,
 *   stream index; the entries: count, each a byte action | stream << 3
 *   (action 0 alloc, 1 free_requested, 2 free_completed, 3 segment_alloc,
 *   4 segment_free, 5 segment_map, 6 segment_unmap, 7 oom; stream index 31:
 *   a varint index follows), then for alloc and segment entries the size and
 *   the address as a zigzag difference from the previous entry's address,
 *   for frees the address difference alone (the size is the allocation's),
 *   for oom the size. */
static const unsigned char compact_magic[8] = {'C', 'P', 'S', 'N', 'A', 'P', '1', '\n'};

int cp_snapshot_is_compact(const unsigned char *buf, size_t len)
{
    return len >= 8 && memcmp(buf, compact_magic, 8) == 0;
}

typedef struct cbuf {
    const unsigned char *p, *end;
} cbuf;

static int cvar(cbuf *b, uint64_t *out)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (b->p < b->end) {
        unsigned char c = *b->p++;
        if (shift == 63 && (c & 0x7e))
            return -1; /* beyond 64 bits */
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
        if (shift > 63)
            return -1;
    }
    return -1;
}

static cp_status cbad(const cbuf *b, const unsigned char *start, const char *why)
{
    return cp_error_set(CP_ERR_INVALID, "compact snapshot: offset %zu: %s",
                        (size_t)(b->p - start), why);
}

/* The settings: the flag, PyTorch's env string, the settings' conf string
 * (kept only when it is one this parser reads); -1 when malformed. */
static int settings(cp_snapshot *s, cbuf *b)
{
    uint64_t has, l1, l2;
    size_t i, k;
    cp_torch_conf c, e;
    char tmp[512];
    if (cvar(b, &has) != 0 || has > 1 || cvar(b, &l1) != 0 || l1 > (uint64_t)(b->end - b->p))
        return -1;
    s->has_settings = (int)has;
    k = l1 < sizeof s->torch_env ? (size_t)l1 : sizeof s->torch_env - 1;
    memcpy(s->torch_env, b->p, k);
    s->torch_env[k] = '\0';
    for (i = 0; i < k; i++) /* a NUL inside would cut the string */
        if (!s->torch_env[i])
            s->torch_env[i] = ' ';
    b->p += l1;
    if (cvar(b, &l2) != 0 || l2 > (uint64_t)(b->end - b->p))
        return -1;
    k = l2 < sizeof tmp ? (size_t)l2 : sizeof tmp - 1;
    memcpy(tmp, b->p, k);
    tmp[k] = '\0';
    /* the env string has what the settings leave out */
    if (memchr(tmp, '\0', k) == NULL && cp_torch_conf_parse(tmp, k, &c) == CP_OK) {
        if (cp_torch_conf_parse(s->torch_env, strlen(s->torch_env), &e) == CP_OK) {
            c.large_segment_size = e.large_segment_size;
            c.max_non_split_rounding = e.max_non_split_rounding;
        }
        cp_torch_conf_format(&c, s->torch_settings, sizeof s->torch_settings);
    }
    b->p += l2;
    return 0;
}

cp_status cp_snap_decode_compact(dec *d, const unsigned char *buf, size_t len)
{
    cp_snapshot *s = d->s;
    cbuf b;
    uint64_t ver, nstreams, n, i, v, prev = 0, nsegs;
    uint64_t *streams = NULL;
    cp_status st = CP_OK;

    b.p = buf + 8;
    b.end = buf + len;
    if (cvar(&b, &ver) != 0 || ver != 1)
        return cbad(&b, buf, "not version 1");
    if (cvar(&b, &nstreams) != 0 || nstreams > (uint64_t)(b.end - b.p))
        return cbad(&b, buf, "bad stream count");
    streams = (uint64_t *)malloc((nstreams ? nstreams : 1) * sizeof *streams);
    if (!streams)
        return cp_snap_oom();
    for (i = 0; i < nstreams; i++)
        if (cvar(&b, &streams[i]) != 0) {
            free(streams);
            return cbad(&b, buf, "truncated stream list");
        }
    if (settings(s, &b) != 0) {
        free(streams);
        return cbad(&b, buf, "bad settings");
    }
    if (cvar(&b, &nsegs) != 0 || nsegs > (uint64_t)(b.end - b.p)) {
        free(streams);
        return cbad(&b, buf, "bad segment count");
    }
    s->has_segments = 1;
    for (i = 0; i < nsegs; i++) {
        uint64_t addr, size, si;
        if (cvar(&b, &addr) != 0 || cvar(&b, &size) != 0 || cvar(&b, &si) != 0 ||
            si >= nstreams || size > (uint64_t)INT64_MAX - s->reserved_end) {
            free(streams);
            return cbad(&b, buf, "bad segment");
        }
        s->reserved_end += size;
    }
    if (cvar(&b, &n) != 0 || n > (uint64_t)(b.end - b.p)) {
        free(streams);
        return cbad(&b, buf, "bad entry count");
    }
    s->devices = 1;
    d->raw = (raw_event *)calloc(n ? (size_t)n : 1, sizeof *d->raw);
    if (!d->raw) {
        free(streams);
        return cp_snap_oom();
    }
    d->cap = (size_t)(n ? n : 1);
    for (i = 0; i < n && st == CP_OK; i++) {
        raw_event *r = &d->raw[d->n];
        unsigned char h;
        uint64_t si, size = 0, dz;
        int a;
        if (b.p >= b.end) {
            st = cbad(&b, buf, "truncated entries");
            break;
        }
        h = *b.p++;
        a = h & 7;
        si = h >> 3;
        if (si == 31 && cvar(&b, &si) != 0) {
            st = cbad(&b, buf, "truncated entry");
            break;
        }
        if (si >= nstreams) {
            st = cbad(&b, buf, "stream index out of range");
            break;
        }
        if ((a == 0 || a >= 3) && cvar(&b, &size) != 0) {
            st = cbad(&b, buf, "truncated entry");
            break;
        }
        if (size > (uint64_t)INT64_MAX || ((a == 0 || a == 7) && size == 0)) {
            st = cbad(&b, buf, "bad size");
            break;
        }
        memset(r, 0, sizeof *r);
        r->size = size;
        r->stream = streams[si];
        r->time_us = (double)i;
        r->order = d->n;
        r->entry = (size_t)i;
        if (a != 7) {
            if (cvar(&b, &dz) != 0) {
                st = cbad(&b, buf, "truncated entry");
                break;
            }
            v = prev + ((dz & 1) ? ~(dz >> 1) : dz >> 1); /* wraps like the writer's */
            prev = v;
            r->addr = v;
        }
        switch (a) {
        case 0: r->action = A_ALLOC; break;
        case 1: r->action = A_FREE_REQ; break;
        case 2: r->action = A_FREE_DONE; break;
        case 3: r->action = A_SEG_UP; r->call = CP_TORCH_MALLOC; break;
        case 4: r->action = A_SEG_DOWN; r->call = CP_TORCH_FREE; break;
        case 5: r->action = A_SEG_UP; r->call = CP_TORCH_MAP; break;
        case 6: r->action = A_SEG_DOWN; r->call = CP_TORCH_UNMAP; break;
        default: r->action = A_OOM; s->ooms++; break;
        }
        if (a != 7 && r->addr == 0) {
            s->ignored++;
            r->action = A_OTHER;
        }
        d->n++;
    }
    if (st == CP_OK && b.p != b.end)
        st = cbad(&b, buf, "trailing bytes");
    free(streams);
    return st;
}
