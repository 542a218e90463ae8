/* SPDX-License-Identifier: Apache-2.0 */
/* Ctrl-C while the main thread waits in ef_pipeline_next().
 *
 * The wait runs with the GIL released, in C, where Python's own SIGINT
 * handler only sets a flag that nobody reads until the wait ends, which
 * may be never on a stalled source. So a handler of ours stands in front
 * of Python's: it runs Python's handler (the flag, the wakeup fd), then
 * posts a semaphore. A watcher thread waiting on the semaphore calls
 * ef_pipeline_stop() on the pipeline the main thread is waiting on, if
 * any, and stops its Python source's feed, which the library's stop
 * cannot reach: that wakes the wait at once. Only async-signal-safe calls
 * happen in the handler.
 *
 * Ours stays installed between waits: a system call per wait would cost
 * more than the rest of next() here. Whoever sets a handler later (Python's
 * signal.signal() does) replaces ours; each wait on the main thread looks
 * again, at most every CHECK_NS, and puts ours back in front of a Python
 * handler, never in front of SIG_DFL or SIG_IGN.
 *
 * Lock rules: `mu` guards `current` and `current_feed`, so the watcher
 * never stops a pipeline that is being destroyed (the wait clears
 * `current` under `mu` before it returns). `sigints` counts signals; the
 * waiting thread compares it before and after, so a signal that came
 * before `current` was set still stops the wait. `python_action` and
 * `installed` belong to the main thread, and python_action changes only
 * while ours is not installed. */
#include "pyef.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static ef_pipeline *current;
static PyObject *current_feed; /* its Python source's feed, or NULL */
static sem_t wake;
static int watcher_started;
static struct sigaction python_action; /* the handler ours stands in front of */
static volatile sig_atomic_t sigints;

static void on_sigint(int sig, siginfo_t *info, void *uctx)
{
    int saved_errno = errno;
    sigints++;
    if (python_action.sa_flags & SA_SIGINFO)
        python_action.sa_sigaction(sig, info, uctx);
    else if (python_action.sa_handler != SIG_DFL &&
             python_action.sa_handler != SIG_IGN)
        python_action.sa_handler(sig);
    sem_post(&wake);
    errno = saved_errno;
}

/* Stops the wait of next() on p, whose Python source's feed is `feed`
 * (or NULL). Takes no GIL. */
static void stop(ef_pipeline *p, PyObject *feed)
{
    ef_pipeline_stop(p);
    if (feed)
        pyef_feed_stop(feed);
}

static void *watcher(void *unused)
{
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        while (sem_wait(&wake) != 0)
            ; /* EINTR */
        pthread_mutex_lock(&mu);
        if (current)
            stop(current, current_feed);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* Starts the watcher once per process; 0 when it cannot run. */
static int watcher_ready(void)
{
    if (watcher_started)
        return 1;
    pthread_t t;
    if (sem_init(&wake, 0, 0) != 0)
        return 0;
    if (pthread_create(&t, NULL, watcher, NULL) != 0) {
        sem_destroy(&wake);
        return 0;
    }
    pthread_detach(t);
    watcher_started = 1;
    return 1;
}

void pyef_interrupt_after_fork(void)
{
    /* the child has no watcher thread: start a new one when needed */
    pthread_mutex_init(&mu, NULL);
    current = NULL;
    current_feed = NULL;
    watcher_started = 0;
}

static unsigned long main_thread;

static int on_main_thread(void)
{
    if (!main_thread) {
        PyObject *threading = PyImport_ImportModule("threading");
        PyObject *t = threading ? PyObject_CallMethod(threading,
                                                      "main_thread", NULL)
                                : NULL;
        PyObject *ident = t ? PyObject_GetAttrString(t, "ident") : NULL;
        main_thread = ident ? PyLong_AsUnsignedLong(ident) : 0;
        Py_XDECREF(ident);
        Py_XDECREF(t);
        Py_XDECREF(threading);
        PyErr_Clear();
    }
    return main_thread && PyThread_get_thread_ident() == main_thread;
}

#define CHECK_NS 100000000 /* 0.1 s */
static int installed;
static uint64_t checked_ns;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether our handler stands in front of Python's; puts it there when a
 * Python handler is installed. */
static int handler_ready(void)
{
    uint64_t now = now_ns();
    if (installed && now - checked_ns < CHECK_NS)
        return 1;
    checked_ns = now;
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0)
        return installed = 0;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigint)
        return installed = 1;
    if (!(cur.sa_flags & SA_SIGINFO) &&
        (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN))
        return installed = 0; /* no Python handler to stand in front of */
    python_action = cur;
    struct sigaction ours = {0};
    ours.sa_sigaction = on_sigint;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    installed = sigaction(SIGINT, &ours, NULL) == 0;
    return installed;
}

int pyef_next_interruptible(ef_pipeline *p, PyObject *feed, ef_sample **out,
                            int *interrupted)
{
    int rc, guard = on_main_thread() && watcher_ready() && handler_ready();
    sig_atomic_t before = sigints;
    Py_BEGIN_ALLOW_THREADS
    if (guard) {
        pthread_mutex_lock(&mu);
        current = p;
        current_feed = feed;
        pthread_mutex_unlock(&mu);
        if (sigints != before)
            stop(p, feed);
    }
    rc = ef_pipeline_next(p, out);
    if (guard) {
        pthread_mutex_lock(&mu);
        current = NULL;
        current_feed = NULL;
        pthread_mutex_unlock(&mu);
    }
    Py_END_ALLOW_THREADS
    *interrupted = sigints != before;
    return rc;
}
