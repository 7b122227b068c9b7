/*
 * pool/plugin.h: the options of a pool of kind "plugin" (pool/plugin.c: an
 * allocator of the user's own, <cupola/allocator.h>), as cp_pool_own holds
 * them.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_POOL_PLUGIN_H
#define CUPOLA_POOL_PLUGIN_H

#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A shared object exporting a const cupola_allocator named symbol, and the
 * string its create() is given (NULL: "").  (cupola.pool's `source` is the
 * binding's: it compiles the source into path.) */
typedef struct cp_plugin_opts {
    const char *path;
    const char *symbol;
    const char *options;
} cp_plugin_opts;

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_POOL_PLUGIN_H */
