/* SPDX-License-Identifier: Apache-2.0 */
/* `echoflow pack`: runs a pipeline and writes its samples as WebDataset
 * shards, so that a data set on disk (IDX, CIFAR, ...) can be served over
 * HTTP and read back with the tar source. Uses the public API only. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "cli.h"
#include "monitor.h"

/* "www/train-{000000..000005}.tar": the shard list as the tar source's
 * urls option takes it. */
static void print_shards(const ef_shard_writer *w, int64_t n)
{
    char first[1024], last[1024];
    ef_shard_writer_name(w, 0, first, sizeof first);
    ef_shard_writer_name(w, n - 1, last, sizeof last);
    if (n == 1) {
        printf("%s\n", first);
        return;
    }
    /* the names differ only in the number: find where */
    size_t a = 0, lf = strlen(first), ll = strlen(last), z = 0;
    while (a < lf && a < ll && first[a] == last[a])
        a++;
    while (z < lf - a && z < ll - a && first[lf - 1 - z] == last[ll - 1 - z])
        z++;
    /* widen to whole digit runs, so 0..9 reads {000000..000009} */
    while (a > 0 && first[a - 1] >= '0' && first[a - 1] <= '9')
        a--;
    while (z > 0 && first[lf - z] >= '0' && first[lf - z] <= '9')
        z--;
    printf("%.*s{%.*s..%.*s}%s\n", (int)a, first, (int)(lf - a - z), first + a,
           (int)(ll - a - z), last + a, first + lf - z);
}

/* SIGINT/SIGTERM. The handler only records the signal and posts a
 * semaphore (both async-signal-safe): ef_pipeline_stop takes a mutex, so
 * a watcher thread calls it, waking a next() that may block for long (a
 * throttled or network source); the pack loop also checks the flag
 * between samples. */
static volatile sig_atomic_t g_signal;
static sem_t g_wake;

static void on_signal(int sig)
{
    if (!g_signal)
        g_signal = sig;
    sem_post(&g_wake);
}

static void *watch(void *arg)
{
    while (sem_wait(&g_wake) != 0 && errno == EINTR)
        ;
    if (g_signal)
        ef_pipeline_stop(arg);
    return NULL; /* posted without a signal: the pack ended */
}

static int install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGINT, &sa, NULL) == 0 &&
           sigaction(SIGTERM, &sa, NULL) == 0;
}

static void print_summary(ef_shard_writer *w, ef_pipeline *p, int64_t samples,
                          int64_t shards)
{
    printf("packed %lld samples into %lld shards", (long long)samples,
           (long long)shards);
    char why[512];
    uint64_t skipped = ef_pipeline_skipped(p, why, sizeof why);
    if (skipped)
        printf(" (skipped %llu bad samples; the first: %s)",
               (unsigned long long)skipped, why);
    uint64_t abandoned = ef_pipeline_abandoned(p, why, sizeof why);
    if (abandoned) {
        ef_pipeline_stats ps;
        ef_pipeline_stats_get(p, &ps);
        printf(" (abandoned %llu shards or files, %llu bytes of them not "
               "read; the first: %s)",
               (unsigned long long)abandoned,
               (unsigned long long)ps.lost_bytes, why);
    }
    printf(":\n");
    if (shards > 0)
        print_shards(w, shards);
}

/* After a signal: a shard that holds per_shard samples is complete and is
 * finished; one with fewer is removed (destroy deletes its .partial
 * file). The summary names the complete shards only. Returns 128 + the
 * signal, as a shell reports a process killed by it. */
static int interrupted(ef_shard_writer *w, ef_pipeline *p, long per_shard,
                       int sig)
{
    int64_t samples = ef_shard_writer_samples(w);
    int64_t complete = samples / per_shard, left = samples % per_shard;
    if (samples > 0 && left == 0 && ef_shard_writer_finish(w) != EF_OK) {
        fprintf(stderr, "echoflow pack: %s\n", ef_shard_writer_error(w));
        complete--; /* the writer removed it */
        left = per_shard;
    }
    char name[1024] = "";
    if (left)
        ef_shard_writer_name(w, complete, name, sizeof name);
    printf("interrupted by %s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    if (left)
        printf(": removed the unfinished shard %s.partial (%lld samples)",
               name, (long long)left);
    printf("\n");
    print_summary(w, p, complete * per_shard, complete);
    ef_shard_writer_destroy(w); /* removes the unfinished shard */
    return 128 + sig;
}

int cmd_pack(int argc, char **argv)
{
    long per_shard = 10000;
    double stats_every = 0;
    cli_pipeline_opts po = {0};
    const arg_opt opts[] = {
        {"--per-shard", ARG_LONG, &per_shard, NULL, 1, 1e15, NULL, "N",
         "samples per shard"},
        CLI_PIPELINE_ARGS(&po),
        {"--stats-every", ARG_DOUBLE, &stats_every, NULL, 0.01, 86400, NULL,
         "SECONDS",
         "while packing, print the stats as a JSON line\n"
         "on stdout every SECONDS"},
    };
    const arg_command cmd = {
        "echoflow pack", "SPEC PATTERN", 2,
        "Writes every sample of the pipeline SPEC into tar shards named by\n"
        "PATTERN, a printf pattern for the shard number such as\n"
        "out/train-%06d.tar. Fields: a u8 image named image becomes\n"
        "KEY.png, an integer label becomes KEY.cls, u8 byte fields are\n"
        "written as they are. A sample with boxes (f32 [n,4], as the coco\n"
        "source gives them) also gets KEY.json holding boxes and every\n"
        "i64 or f32 field that is a scalar or has one value per box\n"
        "(labels, image_id...); json_boxes reads it back. For example\n"
        "  echoflow pack \"idx:images=train-images-idx3-ubyte.gz,"
        "labels=train-labels-idx1-ubyte.gz\" www/train-%06d.tar\n",
        opts, (int)(sizeof opts / sizeof opts[0])};
    const char *pos[2];
    int parsed = args_parse(&cmd, argc, argv, pos);
    if (parsed)
        return parsed == 1 ? 0 : 2;
    const char *spec = pos[0], *pattern = pos[1];
    ef_pipeline *p = cli_pipeline("echoflow pack", NULL, &po, spec, 0, 1);
    if (!p)
        return 2;
    ef_shard_writer *w = NULL;
    ef_status rc = ef_shard_writer_create(&w, pattern, per_shard);
    if (rc != EF_OK) {
        fprintf(stderr, "echoflow pack: %s\n",
                w ? ef_shard_writer_error(w) : ef_strerror(rc));
        ef_shard_writer_destroy(w);
        ef_pipeline_destroy(p);
        return 2;
    }
    pthread_t watcher;
    int watching = sem_init(&g_wake, 0, 0) == 0 &&
                   pthread_create(&watcher, NULL, watch, p) == 0;
    if (!watching || !install_handlers())
        fprintf(stderr, "echoflow pack: cannot handle SIGINT/SIGTERM (%s): "
                        "an interrupted pack leaves its .partial shard\n",
                strerror(errno));
    cli_monitor *mon =
        cli_monitor_start("echoflow pack", p, isatty(2), stats_every, stdout);
    ef_sample *s;
    while (!g_signal && (rc = ef_pipeline_next(p, &s)) == EF_OK) {
        rc = ef_shard_writer_add(w, s);
        ef_sample_free(s);
        if (rc != EF_OK)
            break;
    }
    cli_monitor_stop(mon);
    /* a signal after the data ended lets the pack finish: it is done */
    int sig = g_signal;
    if (watching) {
        sem_post(&g_wake);
        pthread_join(watcher, NULL);
        sem_destroy(&g_wake);
    }
    if (sig) {
        int status = interrupted(w, p, per_shard, sig);
        ef_pipeline_destroy(p);
        return status;
    }
    if (rc == EF_END)
        rc = ef_shard_writer_finish(w);
    if (rc != EF_OK) {
        fprintf(stderr, "echoflow pack: %s\n",
                ef_pipeline_error(p)[0] ? ef_pipeline_error(p)
                                        : ef_shard_writer_error(w));
    } else {
        print_summary(w, p, ef_shard_writer_samples(w),
                      ef_shard_writer_shards(w));
    }
    ef_shard_writer_destroy(w);
    ef_pipeline_destroy(p);
    return rc == EF_OK ? 0 : 1;
}
