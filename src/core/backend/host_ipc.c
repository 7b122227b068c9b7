/*
 * host_ipc.c: the host backend's legacy IPC of mem_alloc memory (policy in
 * host.c): an exported allocation moves into a memfd mapped at the same
 * address, and the fd travels to the other process, which maps it.
 */
#include "host_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- legacy IPC (mem_alloc memory) ---------------------------------------- */

#define HOST_IPC_MAGIC "cpHstMm1"
typedef struct host_ipc_data {
    char magic[8];
    uint64_t len, uid;
} host_ipc_data;

static uint64_t new_uid(void)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    uint64_t x;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
        (atomic_fetch_add(&counter, 1) * UINT64_C(0x9E3779B97F4A7C15));
    return x ? x : 1;
}

/* Moves the bytes of a private mapping into a memfd mapped at the same
 * address, so the fd can travel; the device is idle meanwhile. */
static cp_status promote_locked(void *p, hmem *m)
{
    void *tmp, *at;
    int fd = memfd_create("cupola-malloc", MFD_CLOEXEC);
    if (fd < 0)
        return cp_error_set(CP_ERR_BACKEND, "memfd_create: %s (exporting a buffer)",
                            strerror(errno));
    if (ftruncate(fd, (off_t)m->len) != 0) {
        close(fd);
        return cp_error_set(CP_ERR_OOM, "out of memory: ftruncate of an exported buffer: %s",
                            strerror(errno));
    }
    tmp = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (tmp == MAP_FAILED) {
        close(fd);
        return cp_error_set(CP_ERR_OOM, "out of memory: mmap of an exported buffer: %s",
                            strerror(errno));
    }
    memcpy(tmp, p, m->len);
    munmap(tmp, m->len);
    at = mmap(p, m->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (at == MAP_FAILED) {
        close(fd); /* MAP_FIXED failing leaves the old mapping in place */
        return cp_error_set(CP_ERR_BACKEND, "mmap (MAP_FIXED) of an exported buffer: %s",
                            strerror(errno));
    }
    m->fd = fd;
    m->uid = new_uid();
    return CP_OK;
}

cp_status cp_host_ipc_get_handle(void *ptr, size_t bytes, cp_ipc_data *out, int *fd)
{
    CP_GUARD();
    host_ipc_data d;
    hmem *m;
    cp_status st = CP_OK;
    if (!ptr || !out || !fd)
        return cp_error_set(CP_ERR_INVALID, "ipc_get_handle: NULL argument");
    *fd = -1;
    memset(out, 0, sizeof *out);
    (void)cp_host_device_wait(0); /* nothing may write the bytes while they move */
    cp_host_mem_lock();
    m = cp_host_mem_get_locked(ptr);
    if (!m || m->imported)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "%p is not the start of a mem_alloc allocation", ptr);
    else if (bytes > m->len)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "%zu bytes exceed the allocation",
                           bytes);
    else if (m->fd < 0)
        st = promote_locked(ptr, m);
    if (st == CP_OK) {
        memset(&d, 0, sizeof d);
        memcpy(d.magic, HOST_IPC_MAGIC, sizeof d.magic);
        d.len = m->len;
        d.uid = m->uid;
        memcpy(out->bytes, &d, sizeof d);
        *fd = m->fd;
    }
    cp_host_mem_unlock();
    return st;
}

cp_status cp_host_ipc_open_handle(int dev, const cp_ipc_data *data, int fd, size_t bytes,
                                         void **out)
{
    CP_GUARD();
    host_ipc_data d;
    struct stat sb;
    hmem *m;
    void *p;
    cp_status st;
    if (!data || !out)
        return cp_error_set(CP_ERR_INVALID, "ipc_open_handle: NULL argument");
    *out = NULL;
    if ((st = cp_host_check_device(dev)) != CP_OK)
        return st;
    memcpy(&d, data->bytes, sizeof d);
    if (memcmp(d.magic, HOST_IPC_MAGIC, sizeof d.magic) != 0)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the handle is not a host backend allocation");
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != d.len ||
        bytes == 0 || bytes > d.len)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the received memory does not match the handle "
                             "(%zu bytes asked, %llu described)",
                             bytes, (unsigned long long)d.len);
    m = malloc(sizeof *m);
    p = m ? mmap(NULL, (size_t)d.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED || !cp_host_mem_register(p, m)) {
        if (p != MAP_FAILED)
            munmap(p, (size_t)d.len);
        free(m);
        return cp_error_set(CP_ERR_OOM, "out of memory: cannot map an imported buffer");
    }
    m->len = (size_t)d.len;
    m->dev = dev;
    m->kind = CP_MEM_DEVICE;
    m->fd = -1;
    m->imported = 1;
    m->uid = d.uid;
    *out = p;
    return CP_OK;
}

cp_status cp_host_ipc_close_handle(void *ptr, size_t bytes)
{
    CP_GUARD();
    hmem *m;
    (void)bytes;
    if (!ptr)
        return CP_OK;
    (void)cp_host_device_wait(0); /* as cudaIpcCloseMemHandle, nothing queued may still touch it */
    m = cp_host_mem_lookup(ptr, 0);
    if (!m || !m->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "%p was not opened from a handle", ptr);
    cp_host_mem_lookup(ptr, 1);
    munmap(ptr, m->len);
    free(m);
    return CP_OK;
}
