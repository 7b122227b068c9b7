/*
 * ipc.h: handing a file descriptor to another process over a Unix domain
 * socket (SCM_RIGHTS), as CUDA's IPC samples pass the POSIX fd of an exported
 * memory pool.  Backend-neutral: the CUDA backend exports a pool as an fd
 * (cudaMemPoolExportToShareableHandle), the host backend a memfd; both travel
 * the same way.
 *
 * A server owns a dup of the fd and a message (a few hundred bytes that say
 * what the fd is) and serves them from its own thread to every process that
 * connects, until it is stopped.  Sockets live in Linux's abstract namespace
 * (no file to clean up when a process dies) under a name that embeds the
 * pid and a random part; only processes of the same user are served
 * (SO_PEERCRED).  A client connects by name, receives the message and a new
 * fd, and gives up after timeout_ms.
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_IPC_H
#define CUPOLA_IPC_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CP_IPC_NAME_MAX 64 /* a name, NUL included */
#define CP_IPC_MSG_MAX 1024

typedef struct cp_ipc_server cp_ipc_server;

/* Starts serving fd (dup'ed; the caller keeps its own) with msg; name gets
 * the printable socket name (letters, digits, '-') to pass to clients. */
cp_status cp_ipc_serve(int fd, const void *msg, size_t len, cp_ipc_server **out,
                       char name[CP_IPC_NAME_MAX]);
/* Stops the thread, closes the socket and the fd; NULL is fine.  After it,
 * connecting to the name fails (a stale export). */
void cp_ipc_server_stop(cp_ipc_server *srv);

/* The name clients connect to. */
const char *cp_ipc_server_name(const cp_ipc_server *srv);

/* Connects to name, receives the message (at most cap bytes: *len) and the
 * fd (*fd, the caller's to close). */
cp_status cp_ipc_receive(const char *name, int *fd, void *msg, size_t cap, size_t *len,
                         int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_IPC_H */
