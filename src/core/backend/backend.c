/*
 * backend.c: choosing the backend once per process.
 *
 * The choice is process-wide because the device is: two Lua states in one
 * process share one CUDA context, so they must agree on the backend.
 */
#include "backend.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

const cp_backend *cp_be = NULL;

int cp_forked;
static pid_t parent_pid;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    cp_forked = 1;
}

static void atfork_register(void)
{
    parent_pid = getpid();
    pthread_atfork(NULL, NULL, fork_child);
}

cp_status cp_fork_error(void)
{
    return cp_error_set(CP_ERR_BACKEND,
                        "cupola cannot be used in a child process created by fork() after "
                        "cupola started (this process %ld, its parent %ld): the child has none "
                        "of the %s backend's %s; use cupola in the parent, or exec a new "
                        "program in the child",
                        (long)getpid(), (long)parent_pid, cp_be ? cp_be->name : "selected",
                        cp_be && strcmp(cp_be->name, "cuda") == 0 ? "CUDA context"
                                                                   : "stream worker threads");
}

static pthread_mutex_t select_lock = PTHREAD_MUTEX_INITIALIZER;

cp_status cp_backend_select(const char *force)
{
    cp_status st = CP_OK;
    char why[256] = "";
    const cp_backend *want = NULL;

    if (force && *force && strcmp(force, "cuda") != 0 && strcmp(force, "host") != 0)
        return cp_error_set(CP_ERR_INVALID,
                            "CUPOLA_BACKEND must be 'cuda' or 'host', not '%s'", force);

    if (cp_forked)
        return cp_fork_error();
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&select_lock);
    if (cp_be) {
        if (force && *force && strcmp(force, cp_be->name) != 0)
            st = cp_error_set(CP_ERR_INVALID,
                              "backend '%s' requested, but this process already uses '%s'",
                              force, cp_be->name);
        pthread_mutex_unlock(&select_lock);
        return st;
    }
    if (force && strcmp(force, "host") == 0) {
        want = &cp_backend_host;
    } else if (cp_backend_cuda_probe(why, sizeof why)) {
        want = &cp_backend_cuda;
    } else if (force && strcmp(force, "cuda") == 0) {
        st = cp_error_set(CP_ERR_UNSUPPORTED,
                          "CUPOLA_BACKEND=cuda, but no CUDA device is usable: %s", why);
    } else {
        want = &cp_backend_host;
    }
    cp_be = want;
    pthread_mutex_unlock(&select_lock);
    return st;
}
