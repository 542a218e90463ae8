/* SPDX-License-Identifier: Apache-2.0 */
/* The monitor thread (see monitor.h). */
#include "monitor.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report.h"

#define PROGRESS_EVERY_S 0.5

struct cli_monitor {
    ef_pipeline *p;
    FILE *out;
    int progress;
    double stats_every_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled by stop */
    int stopping;
    /* the previous progress line's figures, for rates over an interval */
    double last_t, last_fresh, last_echoed;
    uint64_t last_items;
};

long long cli_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double now_s(void)
{
    return (double)cli_now_ns() / 1e9;
}

/* The echo stage's figures, when the pipeline has one: 1 and *st. */
static int find_echo(const ef_pipeline *p, ef_stage_stats *st)
{
    for (int i = 0; i < ef_pipeline_stage_count(p); i++)
        if (ef_pipeline_stage_stats(p, i, st) == EF_OK &&
            !strcmp(st->name, "echo"))
            return 1;
    return 0;
}

static void progress_line(cli_monitor *m, double t)
{
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(m->p, &ps);
    double dt = t - m->last_t;
    double rate = dt > 0 ? (double)(ps.items - m->last_items) / dt : 0;
    fprintf(stderr, "\r\033[K%llu items  %.0f items/s",
            (unsigned long long)ps.items, rate);
    ef_stage_stats st;
    double fresh, echoed, r;
    if (find_echo(m->p, &st) && ef_stage_stats_extra(&st, "fresh", &fresh) &&
        ef_stage_stats_extra(&st, "echoed", &echoed)) {
        double df = fresh - m->last_fresh, de = echoed - m->last_echoed;
        if (df > 0)
            fprintf(stderr, "  echo factor %.2f", (df + de) / df);
        if (ef_stage_stats_extra(&st, "r_estimate", &r) && r > 0)
            fprintf(stderr, "  R %.2f", r);
        m->last_fresh = fresh;
        m->last_echoed = echoed;
    }
    fflush(stderr);
    m->last_t = t;
    m->last_items = ps.items;
}

static void *watch(void *arg)
{
    cli_monitor *m = arg;
    double start = now_s();
    double next_progress = start + PROGRESS_EVERY_S;
    double next_stats = start + m->stats_every_s;
    m->last_t = start;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping) {
        double due = m->progress ? next_progress : next_stats;
        if (m->stats_every_s > 0 && next_stats < due)
            due = next_stats;
        struct timespec ts = {.tv_sec = (time_t)due,
                              .tv_nsec = (long)((due - (double)(time_t)due) *
                                                1e9)};
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        if (m->stopping)
            break;
        double t = now_s();
        if (m->progress && t >= next_progress) {
            progress_line(m, t);
            next_progress = t + PROGRESS_EVERY_S;
        }
        if (m->stats_every_s > 0 && t >= next_stats) {
            report_stats_line(m->out, m->p, t - start);
            next_stats += m->stats_every_s;
            if (next_stats < t) /* fell behind: no burst to catch up */
                next_stats = t + m->stats_every_s;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

cli_monitor *cli_monitor_start(const char *prog, ef_pipeline *p, int progress,
                               double stats_every_s, FILE *out)
{
    if (!progress && stats_every_s <= 0)
        return NULL;
    cli_monitor *m = calloc(1, sizeof *m);
    pthread_condattr_t ca;
    int ok = m && pthread_condattr_init(&ca) == 0;
    if (ok) {
        m->p = p;
        m->out = out;
        m->progress = progress;
        m->stats_every_s = stats_every_s;
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        ok = pthread_cond_init(&m->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (ok && pthread_mutex_init(&m->mu, NULL) != 0) {
        pthread_cond_destroy(&m->cv);
        ok = 0;
    }
    if (ok && pthread_create(&m->thread, NULL, watch, m) != 0) {
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "%s: cannot start the thread that reports progress "
                        "and stats; running without\n",
                prog);
        free(m);
        return NULL;
    }
    return m;
}

void cli_monitor_stop(cli_monitor *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stopping = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    if (m->progress) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    free(m);
}
