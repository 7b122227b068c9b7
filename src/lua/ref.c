/*
 * ref.c: the owners a Buffer shares with its pool's handle.  A pool (native
 * or custom) lives until its handle is closed and its last buffer freed;
 * whichever goes last releases it here.  buffer.c takes and drops a
 * buffer's references (l_buffer_own*, its release); mempool.c, pool.c and
 * ipc.c make the handles and drop theirs.  Both end here, so neither side
 * calls the other.
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
        l_rawmap_fini(&r->raw); /* its live blocks went when the handle closed */
        free(r);
    }
}
