/*
 * hold.h: a stream kept busy until the test lets it go (header-only: each
 * test is one program).
 *
 * A check that work is still pending (a stream not idle, an event not
 * complete, a free held back, a block not handed to another stream) holds
 * the stream instead of queueing a spin before it: on a machine busy with
 * other work a spin of 200 ms can be over before the next line runs, and the
 * check failed by load alone.  On the host backend a hold is a task that
 * waits for hold_release(); durations are checked from the release on, as
 * lower bounds.  A call that waited for held work would hang: the test's
 * alarm makes that a failure.  On CUDA (no host tasks) it is a spin of
 * spin_us, the best a device can do.
 */
#ifndef CUPOLA_TEST_HOLD_H
#define CUPOLA_TEST_HOLD_H

#include <pthread.h>
#include <string.h>

#include "backend/backend.h"

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static unsigned hold_epoch;

static int hold_task(void *data, char *err, size_t errlen)
{
    unsigned e;
    (void)errlen;
    if (!err) /* the stream is in error: run nothing */
        return 0;
    memcpy(&e, data, sizeof e);
    pthread_mutex_lock(&hold_mu);
    while (hold_epoch == e)
        pthread_cond_wait(&hold_cv, &hold_mu);
    pthread_mutex_unlock(&hold_mu);
    return 0;
}

/* Keeps s busy until hold_release() (host backend) or for spin_us (CUDA). */
static inline cp_status hold_stream(cp_stream *s, unsigned spin_us)
{
    unsigned e;
    if (!cp_be->host_task)
        return cp_be->k_spin(spin_us, s);
    pthread_mutex_lock(&hold_mu);
    e = hold_epoch;
    pthread_mutex_unlock(&hold_mu);
    return cp_be->host_task(s, hold_task, &e, sizeof e);
}

/* Lets every hold go. */
static inline void hold_release(void)
{
    pthread_mutex_lock(&hold_mu);
    hold_epoch++;
    pthread_cond_broadcast(&hold_cv);
    pthread_mutex_unlock(&hold_mu);
}

#endif
