/*
 * ipc.c: file descriptors passed between processes (ipc.h).  Not a backend:
 * an OS service the binding passes the backends' exported fds through.
 *
 * Protocol, one connection per transfer: the client connects; the server
 * checks the peer's uid, then sends one message whose payload is the length
 * (4 bytes, little endian) followed by the message bytes, with the fd in an
 * SCM_RIGHTS control message; then it closes the connection.
 */
#include "ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct cp_ipc_server {
    int listen_fd;
    int stop_pipe[2];
    int fd; /* what is served */
    unsigned char msg[CP_IPC_MSG_MAX + 4];
    size_t len;
    pthread_t thread;
    char name[CP_IPC_NAME_MAX];
};

const char *cp_ipc_server_name(const cp_ipc_server *srv)
{
    return srv ? srv->name : "";
}

static socklen_t make_addr(struct sockaddr_un *a, const char *name)
{
    size_t n = strlen(name);
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* abstract namespace: a leading NUL, no file */
    memcpy(a->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void serve_one(cp_ipc_server *srv, int conn)
{
    struct ucred cred;
    socklen_t cl = sizeof cred;
    struct msghdr mh;
    struct iovec iov;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct cmsghdr *c;

    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid())
        return; /* another user's process: nothing for it */
    memset(&mh, 0, sizeof mh);
    memset(&ctl, 0, sizeof ctl);
    iov.iov_base = srv->msg;
    iov.iov_len = srv->len + 4;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &srv->fd, sizeof(int));
    while (sendmsg(conn, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

static void *server_main(void *arg)
{
    cp_ipc_server *srv = arg;
    for (;;) {
        struct pollfd pf[2] = {{srv->listen_fd, POLLIN, 0}, {srv->stop_pipe[0], POLLIN, 0}};
        int conn;
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents)
            break;
        if (!(pf[0].revents & POLLIN))
            continue;
        conn = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0)
            continue;
        serve_one(srv, conn);
        close(conn);
    }
    return NULL;
}

static void random_part(char *out, size_t n)
{
    static _Atomic unsigned counter;
    struct timespec ts;
    uint64_t x;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)ts.tv_sec ^
        ((uint64_t)atomic_fetch_add(&counter, 1) << 48);
    snprintf(out, n, "%016llx", (unsigned long long)x);
}

cp_status cp_ipc_serve(int fd, const void *msg, size_t len, cp_ipc_server **out,
                       char name[CP_IPC_NAME_MAX])
{
    cp_ipc_server *srv;
    struct sockaddr_un a;
    char rnd[24];
    socklen_t al;
    int rc;

    *out = NULL;
    if (len > CP_IPC_MSG_MAX)
        return cp_error_set(CP_ERR_INVALID, "ipc: message of %zu bytes is too long", len);
    if (!(srv = calloc(1, sizeof *srv)))
        return cp_error_set(CP_ERR_OOM, "ipc: out of host memory");
    srv->listen_fd = srv->fd = srv->stop_pipe[0] = srv->stop_pipe[1] = -1;
    srv->msg[0] = (unsigned char)(len & 0xff);
    srv->msg[1] = (unsigned char)((len >> 8) & 0xff);
    srv->msg[2] = srv->msg[3] = 0;
    memcpy(srv->msg + 4, msg, len);
    srv->len = len;
    random_part(rnd, sizeof rnd);
    snprintf(name, CP_IPC_NAME_MAX, "cupola-%ld-%s", (long)getpid(), rnd);
    al = make_addr(&a, name);
    if ((srv->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0 || pipe2(srv->stop_pipe, O_CLOEXEC) != 0 ||
        (srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(srv->listen_fd, (struct sockaddr *)&a, al) != 0 || listen(srv->listen_fd, 16) != 0) {
        cp_status st = cp_error_set(CP_ERR_BACKEND, "ipc: cannot serve the export: %s",
                                    strerror(errno));
        cp_ipc_server_stop(srv);
        return st;
    }
    if ((rc = pthread_create(&srv->thread, NULL, server_main, srv)) != 0) {
        srv->thread = 0;
        cp_ipc_server_stop(srv);
        return cp_error_set(CP_ERR_BACKEND, "ipc: cannot start the server thread: %s",
                            strerror(rc));
    }
    memcpy(srv->name, name, CP_IPC_NAME_MAX);
    *out = srv;
    return CP_OK;
}

void cp_ipc_server_stop(cp_ipc_server *srv)
{
    if (!srv)
        return;
    if (srv->thread) {
        char c = 1;
        while (write(srv->stop_pipe[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(srv->thread, NULL);
    }
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    if (srv->stop_pipe[0] >= 0)
        close(srv->stop_pipe[0]);
    if (srv->stop_pipe[1] >= 0)
        close(srv->stop_pipe[1]);
    if (srv->fd >= 0)
        close(srv->fd);
    free(srv);
}

cp_status cp_ipc_receive(const char *name, int *fd, void *msg, size_t cap, size_t *len,
                         int timeout_ms)
{
    struct sockaddr_un a;
    struct msghdr mh;
    struct iovec iov;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    unsigned char buf[CP_IPC_MSG_MAX + 4];
    struct pollfd pf;
    struct cmsghdr *c;
    socklen_t al;
    ssize_t n;
    size_t want;
    int s, got = -1;

    *fd = -1;
    *len = 0;
    if (!name || strlen(name) >= CP_IPC_NAME_MAX || strncmp(name, "cupola-", 7) != 0)
        return cp_error_set(CP_ERR_INVALID, "ipc: '%s' is not a cupola export's socket name",
                            name ? name : "(null)");
    al = make_addr(&a, name);
    if ((s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return cp_error_set(CP_ERR_BACKEND, "ipc: socket: %s", strerror(errno));
    if (connect(s, (struct sockaddr *)&a, al) != 0) {
        int e = errno;
        close(s);
        return cp_error_set(CP_ERR_INVALID,
                            "ipc: the export is stale: nobody serves it any more (%s; the "
                            "exporting pool or buffer was closed, or its process exited)",
                            strerror(e));
    }
    pf.fd = s;
    pf.events = POLLIN;
    pf.revents = 0;
    if (poll(&pf, 1, timeout_ms) <= 0) {
        close(s);
        return cp_error_set(CP_ERR_BACKEND, "ipc: no answer from the exporting process within %d ms",
                            timeout_ms);
    }
    memset(&mh, 0, sizeof mh);
    memset(&ctl, 0, sizeof ctl);
    iov.iov_base = buf;
    iov.iov_len = sizeof buf;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    while ((n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    close(s);
    for (c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(&got, CMSG_DATA(c), sizeof(int));
    want = n >= 4 ? (size_t)buf[0] | ((size_t)buf[1] << 8) : 0;
    if (n < 4 || got < 0 || (size_t)n != want + 4 || want > cap || (mh.msg_flags & MSG_CTRUNC)) {
        if (got >= 0)
            close(got);
        return cp_error_set(CP_ERR_INVALID,
                            "ipc: malformed answer from '%s' (not a cupola export)", name);
    }
    memcpy(msg, buf + 4, want);
    *len = want;
    *fd = got;
    return CP_OK;
}
