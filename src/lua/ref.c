/*
 * ref.c: the owners a Buffer shares with its pool's handle.  A pool (native
 * or custom) lives until its handle is closed and its last buffer freed;
 * whichever goes last releases it here.  Its own file so that buffer.c (which
 * drops a reference when a buffer is freed) and mempool.c / pool.c (which
 * make buffers) never call each other.
 */
#include "ipc.h"
#include "binding.h"

#include <stdlib.h>

void l_mempoolref_release(l_mempoolref *r)
{
    if (r && --r->refs == 0) {
        cp_ipc_server_stop(r->server); /* importing it later is a stale export */
        if (!r->is_default)
            cp_be->mempool_destroy(r->p);
        free(r);
    }
}

void l_poolref_release(l_poolref *r)
{
    if (r && --r->refs == 0) {
        cp_resource_destroy(r->r);
        free(r);
    }
}
