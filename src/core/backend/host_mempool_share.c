/*
 * host_mempool_share.c: the host's emulated native pools across devices and
 * processes (policy in host_mempool.c): access of other devices, the export
 * of a shareable pool's memfd and of its blocks, and the import of both.
 */
#include "host_mempool_impl.h"
#include "host_account.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- several devices and processes (multigpu) ------------------------------ */

int cp_host_pool_device(const cp_mempool *p)
{
    return p ? p->props.device : 0;
}

cp_status cp_host_pool_set_access(cp_mempool *p, int dev, cp_access a)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_access: pool is NULL");
    if (dev < 0 || dev >= cp_host_account_devices())
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             dev, cp_host_account_devices());
    if ((unsigned)a > CP_ACCESS_READWRITE)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "unknown access %d", (int)a);
    if (dev == p->props.device && a != CP_ACCESS_READWRITE)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the pool's own device (%d) always has read-write "
                             "access",
                             dev);
    S->lock();
    p->access[dev] = (unsigned char)a;
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_get_access(cp_mempool *p, int dev, cp_access *a)
{
    CP_GUARD();
    if (!p || !a)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_access: NULL argument");
    if (dev < 0 || dev >= cp_host_account_devices())
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             dev, cp_host_account_devices());
    S->lock();
    *a = (cp_access)p->access[dev];
    S->unlock();
    return CP_OK;
}

cp_status cp_host_pool_check_access(const void *ptr, int dev, int write)
{
    CP_GUARD();
    cp_status st = CP_OK;
    hblock *b;
    if (cp_host_account_devices() == 1 || !ptr)
        return CP_OK;
    S->lock();
    b = cp_host_pool_map_find(ptr);
    if (b) {
        cp_mempool *p = b->chunk->pool;
        cp_access a = p->props.device == dev ? CP_ACCESS_READWRITE : (cp_access)p->access[dev];
        if (a == CP_ACCESS_NONE || (write && a == CP_ACCESS_READ))
            st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_ILLEGAL_ADDRESS,
                               "device %d has %s access to this block of a pool of device %d "
                               "(mp:set_access(%d, \"rw\") grants it)",
                               dev, a == CP_ACCESS_NONE ? "no" : "read-only", p->props.device, dev);
    }
    S->unlock();
    return st;
}

cp_status cp_host_pool_export(cp_mempool *p, int *fd)
{
    CP_GUARD();
    if (!p || !fd)
        return cp_error_set(CP_ERR_INVALID, "mempool_export: NULL argument");
    *fd = -1;
    if (p->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "an imported pool cannot be exported "
                             "again");
    if (p->memfd < 0)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the pool was not created shareable "
                             "(cupola.mempool{handle=\"posix_fd\"})");
    *fd = fcntl(p->memfd, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0)
        return cp_error_set(CP_ERR_BACKEND, "dup: %s (exporting a pool)", strerror(errno));
    return CP_OK;
}

cp_status cp_host_pool_import(int fd, int dev, cp_mempool **out)
{
    CP_GUARD();
    struct stat st;
    cp_mempool_props props;
    int mine;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import: out is NULL");
    *out = NULL;
    if (dev < 0 || dev >= cp_host_account_devices())
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE, "%d (the host emulates %d)",
                             dev, cp_host_account_devices());
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the file descriptor is not a shareable pool's memory");
    if ((mine = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return cp_error_set(CP_ERR_BACKEND, "dup: %s (importing a pool)", strerror(errno));
    memset(&props, 0, sizeof props);
    props.device = dev;
    props.handle_posix_fd = 1;
    S->lock();
    *out = cp_host_pool_new(&props);
    if (*out) {
        (*out)->memfd = mine;
        (*out)->imported = 1;
    }
    S->unlock();
    if (!*out) {
        close(mine);
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a pool");
    }
    return CP_OK;
}

/* What a block of a shareable pool exports: where it lies in the file. */
#define HOST_PTR_MAGIC "cpHstPt1"
typedef struct host_ptr_data {
    char magic[8];
    uint64_t off, size;
} host_ptr_data;

cp_status cp_host_pool_export_ptr(void *ptr, cp_ipc_data *out)
{
    CP_GUARD();
    host_ptr_data d;
    cp_status st = CP_OK;
    hblock *b;
    if (!ptr || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_export_ptr: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&d, 0, sizeof d);
    S->lock();
    b = cp_host_pool_map_find(ptr);
    if (!b)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "%p is not a live block of a stream-ordered pool", ptr);
    else if (b->chunk->pool->memfd < 0 || b->chunk->pool->imported)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "the block's pool was not created shareable "
                           "(cupola.mempool{handle=\"posix_fd\"})");
    else {
        memcpy(d.magic, HOST_PTR_MAGIC, sizeof d.magic);
        d.off = b->chunk->off + (uint64_t)(b->ptr - b->chunk->base);
        d.size = b->size;
        memcpy(out->bytes, &d, sizeof d);
    }
    S->unlock();
    return st;
}

/* Imported pointers: page-aligned windows onto another process's pool. */
typedef struct hmap {
    struct hmap *next;
    void *ptr;   /* what the importer was given */
    void *base;  /* the mapping */
    size_t len;
    uint64_t fsid, fticket; /* the free's marker, once freed */
} hmap;
static hmap *imported_live, *imported_freed;

cp_status cp_host_pool_import_ptr(cp_mempool *p, const cp_ipc_data *data, size_t bytes,
                                  void **out)
{
    CP_GUARD();
    host_ptr_data d;
    struct stat st;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t start, end;
    void *base;
    hmap *m;

    if (!p || !data || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import_ptr: NULL argument");
    *out = NULL;
    if (!p->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "buffers are imported into a pool imported with "
                             "cupola.mempool.import");
    memcpy(&d, data->bytes, sizeof d);
    if (memcmp(d.magic, HOST_PTR_MAGIC, sizeof d.magic) != 0)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the export data is not a host backend block");
    if (d.size == 0 || bytes == 0 || bytes > d.size)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the export describes %llu bytes, the buffer %zu",
                             (unsigned long long)d.size, bytes);
    if (fstat(p->memfd, &st) != 0 || d.off > (uint64_t)st.st_size ||
        d.size > (uint64_t)st.st_size - d.off)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the block lies outside the pool's memory (a stale or "
                             "foreign export)");
    start = d.off / (uint64_t)pg * (uint64_t)pg;
    end = (d.off + d.size + (uint64_t)pg - 1) / (uint64_t)pg * (uint64_t)pg;
    base = mmap(NULL, (size_t)(end - start), PROT_READ | PROT_WRITE, MAP_SHARED, p->memfd,
                (off_t)start);
    if (base == MAP_FAILED)
        return cp_error_set(CP_ERR_OOM, "out of memory: mmap of an imported block: %s",
                            strerror(errno));
    m = calloc(1, sizeof *m);
    if (!m) {
        munmap(base, (size_t)(end - start));
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory");
    }
    m->base = base;
    m->len = (size_t)(end - start);
    m->ptr = (char *)base + (d.off - start);
    S->lock();
    m->next = imported_live;
    imported_live = m;
    S->unlock();
    *out = m->ptr;
    return CP_OK;
}

/* mem_free_async of an imported pointer: unmapped once the marker has run. */
int cp_host_pool_imported_free_locked(void *ptr, cp_stream *s, cp_status *st)
{
    hmap **pp, *m;
    for (pp = &imported_live; *pp && (*pp)->ptr != ptr; pp = &(*pp)->next)
        ;
    if (!(m = *pp))
        return 0;
    *st = S->enqueue_mark_locked(s, &m->fsid, &m->fticket);
    if (*st != CP_OK)
        return 1;
    *pp = m->next;
    m->next = imported_freed;
    imported_freed = m;
    return 1;
}

void cp_host_pool_reap_unmaps_locked(int force)
{
    hmap **pp = &imported_freed;
    while (*pp) {
        hmap *m = *pp;
        if (force || S->done_locked(m->fsid, m->fticket)) {
            *pp = m->next;
            munmap(m->base, m->len);
            free(m);
        } else {
            pp = &m->next;
        }
    }
}
