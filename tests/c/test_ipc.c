/*
 * test_ipc.c: file descriptors handed over a Unix socket (ipc.h),
 * and the host backend's shareable pools and legacy IPC within one process
 * (the cross-process cases are spec/ipc_spec.lua's).
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "ipc.h"
#include "tap.h"

int main(void)
{
    char name[CP_IPC_NAME_MAX], msg[64];
    cp_ipc_server *srv = NULL;
    size_t len = 0;
    int fd, got = -1;
    char buf[8] = "";

    /* a memfd with bytes in it travels and still holds them */
    fd = memfd_create("test", 0);
    tap_ok(fd >= 0 && write(fd, "abc", 3) == 3, "memfd");
    tap_ok(cp_ipc_serve(fd, "hello", 5, &srv, name) == CP_OK && srv, "serve");
    tap_ok(strncmp(name, "cupola-", 7) == 0 && strcmp(cp_ipc_server_name(srv), name) == 0,
           "the name is printable and kept");
    close(fd); /* the server holds its own */
    tap_ok(cp_ipc_receive(name, &got, msg, sizeof msg, &len, 2000) == CP_OK, "receive");
    tap_ok(len == 5 && memcmp(msg, "hello", 5) == 0, "the message arrives");
    tap_ok(got >= 0 && pread(got, buf, 3, 0) == 3 && memcmp(buf, "abc", 3) == 0,
           "the fd names the same file");
    if (got >= 0)
        close(got);
    tap_ok(cp_ipc_receive(name, &got, msg, 2, &len, 2000) == CP_ERR_INVALID && got == -1,
           "a message larger than the caller's room is refused");
    cp_ipc_server_stop(srv);
    tap_ok(cp_ipc_receive(name, &got, msg, sizeof msg, &len, 2000) == CP_ERR_INVALID &&
               strstr(cp_error_msg(), "stale") != NULL,
           "a stopped server's name is stale");
    tap_ok(cp_ipc_receive("elsewhere", &got, msg, sizeof msg, &len, 10) == CP_ERR_INVALID,
           "a name that is not cupola's is refused");
    tap_ok(cp_ipc_receive(NULL, &got, msg, sizeof msg, &len, 10) == CP_ERR_INVALID, "NULL name");
    cp_ipc_server_stop(NULL);
    tap_ok(1, "stopping NULL is fine");

    /* the host backend: a shareable pool exports an fd, a block its place */
    {
        const cp_backend *be = &cp_backend_host;
        cp_mempool_props props = {0, 1, 0, 0};
        cp_mempool *p = NULL, *imp = NULL;
        cp_ipc_data d;
        void *a = NULL, *b = NULL, *m = NULL, *mo = NULL;
        int pfd = -1, mfd = -1;
        cp_access acc = CP_ACCESS_NONE;

        tap_ok(be->mempool_create(&p, &props) == CP_OK, "shareable pool");
        tap_ok(be->mempool_alloc(p, &a, 4096, NULL) == CP_OK && a, "alloc");
        memset(a, 0x5a, 4096);
        tap_ok(be->mempool_export(p, &pfd) == CP_OK && pfd >= 0, "export the pool");
        tap_ok(be->mempool_export_ptr(a, &d) == CP_OK, "export a block");
        tap_ok(be->mempool_import(pfd, 0, &imp) == CP_OK, "import the pool");
        tap_ok(be->mempool_alloc(imp, &b, 16, NULL) == CP_ERR_INVALID, "an import cannot allocate");
        tap_ok(be->mempool_import_ptr(imp, &d, 4096, &b) == CP_OK && b && b != a,
               "import the block: another mapping");
        tap_ok(b && ((unsigned char *)b)[4095] == 0x5a, "of the same bytes");
        if (b)
            ((unsigned char *)b)[0] = 0x11;
        tap_ok(((unsigned char *)a)[0] == 0x11, "written through either");
        tap_ok(be->mempool_import_ptr(imp, &d, 8192, &b) == CP_ERR_INVALID,
               "a size larger than the export is refused");
        memset(d.bytes, 0, 8);
        tap_ok(be->mempool_import_ptr(imp, &d, 16, &mo) == CP_ERR_INVALID, "foreign data refused");
        tap_ok(be->mempool_get_access(p, 0, &acc) == CP_OK && acc == CP_ACCESS_READWRITE,
               "the owner has access");
        tap_ok(be->mem_free_async(b, NULL) == CP_OK, "free the imported block");
        tap_ok(be->mem_free_async(a, NULL) == CP_OK, "free the block");
        tap_ok(be->device_synchronize() == CP_OK, "synchronize (unmaps)");
        tap_ok(be->mempool_destroy(imp) == CP_OK && be->mempool_destroy(p) == CP_OK, "destroy both");
        close(pfd);
        props.handle_posix_fd = 0;
        tap_ok(be->mempool_create(&p, &props) == CP_OK && be->mempool_export(p, &pfd) ==
                                                              CP_ERR_INVALID,
               "a pool not made shareable cannot be exported");
        be->mempool_destroy(p);

        tap_ok(be->mem_alloc(&m, 5000, CP_MEM_DEVICE) == CP_OK, "mem_alloc");
        memset(m, 7, 5000);
        tap_ok(be->ipc_get_handle(m, 5000, &d, &mfd) == CP_OK && mfd >= 0, "legacy handle");
        tap_ok(((unsigned char *)m)[4999] == 7, "the bytes survive the move into a memfd");
        tap_ok(be->ipc_open_handle(0, &d, mfd, 5000, &mo) == CP_OK && mo, "open it");
        tap_ok(mo && ((unsigned char *)mo)[4999] == 7, "the same bytes");
        tap_ok(be->ipc_open_handle(0, &d, mfd, 1 << 20, &b) == CP_ERR_INVALID, "too large");
        tap_ok(be->ipc_close_handle(mo, 5000) == CP_OK, "close it");
        tap_ok(be->ipc_close_handle(m, 5000) == CP_ERR_INVALID, "closing what was not opened");
        tap_ok(be->mem_free(m, CP_MEM_DEVICE) == CP_OK, "free");
    }
    return tap_finish();
}
