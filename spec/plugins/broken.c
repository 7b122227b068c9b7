/*
 * spec/plugins/broken.c: plugins that break cupola's rules on purpose, for
 * spec/plugin_spec.lua.  The allocator itself is plain: every block is an
 * upstream allocation of its own.  options (any of them):
 *   overlap_after=N   from the N-th allocation on, hand out the newest block
 *                     that is still live again (an overlap)
 *   misalign_after=N  from the N-th allocation on, hand out a block 8 bytes
 *                     past what the upstream gave (misaligned)
 *   null_after=N      from the N-th allocation on, return NULL
 *   wild_after=N      from the N-th allocation on, return 0x100000, an address
 *                     it never got from the upstream
 *   past_end_after=N  from the N-th allocation on, hand out a block 256 bytes
 *                     past the start of an upstream block of only the bytes
 *                     asked for (its end lies outside the plugin's memory)
 *   free_foreign      give the upstream, before each real deallocate, a
 *                     pointer it never handed out (and one inside a block)
 *   drop_after=N      at the N-th allocation, give the newest live block's
 *                     upstream memory back while the block is still live
 *   leak              keep whatever is live at destroy (cupola returns it)
 * Other symbols: broken_v2 (interface version 2), broken_nocreate (create
 * NULL), broken_failcreate (create returns NULL), broken_function (a function).
 */
#include <cupola/allocator.h>

#include <stdlib.h>
#include <string.h>

#define MAX_LIVE 4096

typedef struct st {
    cupola_upstream *up;
    long overlap_after, misalign_after, null_after, wild_after, past_end_after, drop_after, n;
    int leak, free_foreign;
    void *live[MAX_LIVE], *given[MAX_LIVE];
    size_t bytes[MAX_LIVE];
    int nlive;
} st;

static long opt(const char *options, const char *key)
{
    const char *p = strstr(options, key);
    return p ? strtol(p + strlen(key), NULL, 10) : 0;
}

static void *create(cupola_upstream *up, const char *options)
{
    st *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->up = up;
    s->overlap_after = opt(options, "overlap_after=");
    s->misalign_after = opt(options, "misalign_after=");
    s->null_after = opt(options, "null_after=");
    s->wild_after = opt(options, "wild_after=");
    s->past_end_after = opt(options, "past_end_after=");
    s->drop_after = opt(options, "drop_after=");
    s->free_foreign = strstr(options, "free_foreign") != NULL;
    s->leak = strstr(options, "leak") != NULL;
    return s;
}

static void destroy(void *state)
{
    st *s = state;
    int i;
    if (!s->leak)
        for (i = 0; i < s->nlive; i++)
            s->up->deallocate(s->up, s->live[i], s->bytes[i], NULL);
    free(s);
}

static void *allocate(void *state, size_t bytes, void *stream)
{
    st *s = state;
    void *p;
    s->n++;
    if (s->null_after && s->n >= s->null_after)
        return NULL;
    if (s->wild_after && s->n >= s->wild_after)
        return (void *)0x100000;
    if (s->drop_after && s->n == s->drop_after && s->nlive > 0)
        s->up->deallocate(s->up, s->live[s->nlive - 1], s->bytes[s->nlive - 1], stream);
    if (s->past_end_after && s->n >= s->past_end_after && s->nlive < MAX_LIVE) {
        p = s->up->allocate(s->up, bytes, stream);
        if (!p)
            return NULL;
        s->live[s->nlive] = p;
        s->given[s->nlive] = (char *)p + 256;
        s->bytes[s->nlive] = bytes;
        return s->given[s->nlive++];
    }
    if (s->overlap_after && s->n >= s->overlap_after && s->nlive > 0)
        return s->given[s->nlive - 1];
    if (s->nlive == MAX_LIVE)
        return NULL;
    p = s->up->allocate(s->up, bytes + 8, stream);
    if (!p)
        return NULL;
    s->live[s->nlive] = p;
    s->given[s->nlive] = (char *)p + (s->misalign_after && s->n >= s->misalign_after ? 8 : 0);
    s->bytes[s->nlive] = bytes + 8;
    return s->given[s->nlive++];
}

static void deallocate(void *state, void *ptr, size_t bytes, void *stream)
{
    st *s = state;
    int i;
    (void)bytes;
    for (i = 0; i < s->nlive; i++)
        if (s->given[i] == ptr) {
            if (s->free_foreign) {
                static char foreign[64];
                s->up->deallocate(s->up, foreign, sizeof foreign, stream);
                s->up->deallocate(s->up, (char *)s->live[i] + 64, s->bytes[i], stream);
            }
            s->up->deallocate(s->up, s->live[i], s->bytes[i], stream);
            s->nlive--;
            s->live[i] = s->live[s->nlive];
            s->given[i] = s->given[s->nlive];
            s->bytes[i] = s->bytes[s->nlive];
            return;
        }
}

static void *fail_create(cupola_upstream *up, const char *options)
{
    (void)up;
    (void)options;
    return NULL;
}

const cupola_allocator broken_allocator = {CUPOLA_ALLOCATOR_VERSION, create, destroy, allocate,
                                           deallocate, 0, NULL};
const cupola_allocator broken_v2 = {2, create, destroy, allocate, deallocate, 0, NULL};
const cupola_allocator broken_nocreate = {CUPOLA_ALLOCATOR_VERSION, NULL, destroy, allocate,
                                          deallocate, 0, NULL};
const cupola_allocator broken_failcreate = {CUPOLA_ALLOCATOR_VERSION, fail_create, destroy,
                                            allocate, deallocate, 0, NULL};
/* the plugin orders frees itself (it does not, really: a plain pass-through
 * is safe with any stream order since each block is its own allocation) */
const cupola_allocator broken_ordered = {CUPOLA_ALLOCATOR_VERSION, create, destroy, allocate,
                                         deallocate, CUPOLA_ALLOCATOR_STREAM_ORDERED, NULL};

int broken_function(void);
int broken_function(void)
{
    return 0;
}
