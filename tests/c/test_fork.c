/*
 * test_fork.c: fork() while a host stream worker runs an item.  The child
 * has only the forking thread and inherits every lock as it was, so a lock
 * the item held at that moment (the C library's, a sanitizer allocator's,
 * cupola's own) would stay held in the child for ever.  Bug fixed with this
 * test: under `make test-asan` the child of spec/fork_spec.lua printed its
 * last line and then waited at exit until its 60 s alarm (LeakSanitizer's
 * exit check locks the allocator; a worker had been stopped by the fork
 * inside it).  Now the fork waits for the running items and starts no new
 * one until it is done (host_sched.c, fork_prepare).
 *
 * Here the item holds a mutex of the test's for 300 ms; the test forks once
 * the item has taken it.  The child must find the mutex free, the item
 * finished, the item queued behind it not started by a worker in the middle
 * of the fork, and cupola refusing at once; it then exits through exit()
 * (destructors, atexit) under a 60 s alarm.  The parent must see exit 0
 * and its stream run on afterwards.  Then the same with an item that
 * allocates and frees in a loop (under `make test-asan` the child's exit
 * check needs the allocator's locks).
 */
#include "backend/backend.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static atomic_int started, finished, second;

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static int hold_task(void *data, char *err, size_t errlen)
{
    (void)data, (void)err, (void)errlen;
    if (!err)
        return 0;
    pthread_mutex_lock(&held);
    atomic_store(&started, 1);
    sleep_ms(300);
    atomic_store(&finished, 1);
    pthread_mutex_unlock(&held);
    return 0;
}

static int second_task(void *data, char *err, size_t errlen)
{
    (void)data, (void)errlen;
    if (err)
        atomic_store(&second, 1);
    return 0;
}

/* An item that allocates and frees for 300 ms: the fork would otherwise
 * stop it inside the allocator, holding the allocator's locks (glibc's
 * malloc takes its own around fork; GCC 12's AddressSanitizer does not,
 * and its exit check in the child then waits for them for ever). */
static atomic_int churning;

static int churn_task(void *data, char *err, size_t errlen)
{
    struct timespec t0, t;
    (void)data, (void)errlen;
    if (!err)
        return 0;
    atomic_store(&churning, 1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 64; i++) {
            char *p = malloc((size_t)(i + 1) << 14);
            if (p)
                p[0] = 1;
            free(p);
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
    return 0;
}

/* In the child: 0 when all is as it must be, else which check failed. */
static int child_checks(cp_stream *s)
{
    alarm(60); /* a hang ends as SIGALRM, which the parent sees */
    if (pthread_mutex_trylock(&held) != 0)
        return 1; /* inherited held: the fork came in the middle of the item */
    pthread_mutex_unlock(&held);
    if (!atomic_load(&finished))
        return 2;
    if (cp_be->stream_synchronize(s) == CP_OK)
        return 3; /* cupola must refuse in the child */
    return 0;
}

int main(void)
{
    cp_stream *s = NULL;
    pid_t pid;
    int st = 0, waited;
    if (cp_backend_select("host") != CP_OK || !cp_be->host_task) {
        tap_skip("fork while a worker runs an item", "the host backend is not available");
        return tap_finish();
    }
    tap_ok(cp_be->stream_create(&s, 0, 0) == CP_OK, "a stream");
    tap_ok(cp_be->host_task(s, hold_task, NULL, 0) == CP_OK, "an item that holds a lock 300 ms");
    tap_ok(cp_be->host_task(s, second_task, NULL, 0) == CP_OK, "an item queued behind it");
    for (waited = 0; !atomic_load(&started) && waited < 60000; waited++)
        sleep_ms(1);
    tap_ok(atomic_load(&started), "the item started");
    fflush(stdout); /* the child must not repeat buffered lines */
    pid = fork();
    if (pid == 0)
        exit(child_checks(s)); /* through exit(): destructors and atexit run */
    tap_ok(pid > 0, "fork");
    if (pid <= 0)
        return tap_finish();
    tap_ok(waitpid(pid, &st, 0) == pid, "waitpid");
    if (WIFSIGNALED(st))
        printf("# the child died of signal %d (14: it hung)\n", WTERMSIG(st));
    else if (WEXITSTATUS(st) != 0)
        printf("# the child's check %d failed (1: the item's lock was inherited held; 2: the item "
               "was unfinished; 3: cupola did not refuse)\n", WEXITSTATUS(st));
    tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "the child found no lock held, the item done, cupola refusing, and exited");
    tap_ok(atomic_load(&finished), "the item finished in the parent");
    tap_ok(cp_be->stream_synchronize(s) == CP_OK && atomic_load(&second),
           "the parent's stream runs on after the fork");

    /* the same with an item inside the allocator at the fork */
    tap_ok(cp_be->host_task(s, churn_task, NULL, 0) == CP_OK, "an item that allocates 300 ms");
    for (waited = 0; !atomic_load(&churning) && waited < 60000; waited++)
        sleep_ms(1);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *p;
        alarm(60);
        p = malloc(1 << 20);
        free(p);
        exit(0); /* a sanitizer's exit check locks its allocator */
    }
    tap_ok(pid > 0 && waitpid(pid, &st, 0) == pid, "fork while an item allocates");
    if (WIFSIGNALED(st))
        printf("# the child died of signal %d (14: it hung)\n", WTERMSIG(st));
    tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "that child allocated and exited");
    tap_ok(cp_be->stream_synchronize(s) == CP_OK, "the parent's stream runs on");
    tap_ok(cp_be->stream_destroy(s) == CP_OK, "the stream destroyed");
    return tap_finish();
}
