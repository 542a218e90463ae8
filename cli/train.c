/* SPDX-License-Identifier: Apache-2.0 */
/* `echoflow train`: the reference trainer behind an echoflow pipeline.
 * Uses the public API and train/ only. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"

#ifndef EF_HAVE_TRAINER
int cmd_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "echoflow: train needs OpenBLAS, which this build lacks: "
                    "apt-get install libopenblas-dev, then rebuild\n");
    return 2;
}
#else
#include <cblas.h>

#include "trainer.h"
#ifdef EF_HAVE_MPI
#include "train_mpi.h"
#endif

#define FMNIST "/usr/share/datasets/fashion-mnist"

typedef struct {
    eft_config cfg;
    const char *data, *spec, *test_spec, *echo, *echo_at;
    const char *model, *schedule;
    double throttle;
    int json, print_spec, check_sync;
    int every_given;
    cli_pipeline_opts po;
    eft_comm comm; /* under mpirun: this process's rank and the size */
    char spec_buf[4096], test_buf[1024];
    /* echo policy feedback (cfg.feedback) */
    char policy[32]; /* the echo policy; "uniform": none */
} train_opts;

static const char about[] =
    "Trains a model on batches from an echoflow pipeline and reports the\n"
    "fresh examples, steps and time it took to reach the target accuracy.\n"
    "Under mpirun -np N, each process reads its partitions of the data\n"
    "and the processes average their gradients.\n"
    "With --checkpoint PATH --resume, the same command run again after a\n"
    "kill goes on from the last checkpoint; with --threads 1 it ends with\n"
    "the weights the uninterrupted run would have (see the report's\n"
    "samples_hash and weights_hash). Under mpirun one file holds the job:\n"
    "it resumes on any process count dividing --partitions (on any\n"
    "number of trainers when --spec reads the `service`).\n"
    "With an echo policy (--echo ...,policy=NAME, or echo:policy=NAME in\n"
    "--spec), each step feeds every example's training loss back to the\n"
    "echo stage.\n";

/* Parses the options into o, the trainer's defaults for the rest: 0, 1
 * after --help, -1 after a message. */
static int parse(train_opts *o, int argc, char **argv)
{
    eft_config *c = &o->cfg;
    eft_config_defaults(c);
    c->threads = 2;
    c->checkpoint_every = 1000;
    o->echo_at = "before-augment";
    o->model = eft_arch_name(c->arch);
    o->schedule = c->schedule == EFT_LR_CONSTANT ? "constant" : "linear";
    const arg_opt opts[] = {
        {"data (one of):", ARG_HEADING, NULL, NULL, 0, 0, NULL, NULL, NULL},
        {"--data", ARG_CHOICE, &o->data, NULL, 0, 0, "fashion-mnist", NULL,
         "the Debian package's files, shuffled; random crop\n"
         "and flip for the cnn"},
        {"--spec", ARG_STRING, &o->spec, NULL, 0, 0, NULL, "SPEC",
         "your own training pipeline: batches of fields image\n"
         "and label"},
        {"--test-spec", ARG_STRING, &o->test_spec, NULL, 0, 0, NULL, "SPEC",
         "your own held-out pipeline, with --spec"},
        {"echoing (with --data):", ARG_HEADING, NULL, NULL, 0, 0, NULL, NULL,
         NULL},
        {"--echo", ARG_STRING, &o->echo, NULL, 0, 0, NULL, "OPTS",
         "echo stage options: factor=2,shuffle=1000 or\n"
         "factor=auto,max=8; policy=NAME (not uniform):\n"
         "each example's training loss is fed back"},
        {"--echo-at", ARG_CHOICE, &o->echo_at, NULL, 0, 0,
         "before-augment|after-augment|batch", "WHERE",
         "where the echo stage goes: before-augment,\n"
         "after-augment or batch"},
        {"--throttle", ARG_DOUBLE, &o->throttle, NULL, 1e-3, 1e12, NULL, "RATE",
         "emulate a slow upstream: RATE examples/s"},
        {"training:", ARG_HEADING, NULL, NULL, 0, 0, NULL, NULL, NULL},
        {"--model", ARG_CHOICE, &o->model, NULL, 0, 0, "mlp|cnn", NULL,
         "the network"},
        {"--batch", ARG_INT, &c->batch, NULL, 1, 65536, NULL, "N",
         "examples per step"},
        {"--lr", ARG_DOUBLE, &c->lr, NULL, 0, 100, NULL, "X", "learning rate"},
        {"--momentum", ARG_DOUBLE, &c->momentum, NULL, 0, 0.9999, NULL, "X",
         "heavy-ball momentum"},
        {"--weight-decay", ARG_DOUBLE, &c->weight_decay, NULL, 0, 1, NULL, "X",
         "L2 penalty"},
        {"--schedule", ARG_CHOICE, &o->schedule, NULL, 0, 0, "constant|linear",
         NULL, "learning rate schedule"},
        {"--warmup", ARG_LONG, &c->warmup_steps, NULL, 0, 1e12, NULL, "STEPS",
         "linear warm-up steps"},
        {"--target-acc", ARG_DOUBLE, &c->target_acc, NULL, 0, 1, NULL, "A",
         "stop at this test accuracy (0: never)"},
        {"--eval-every", ARG_LONG, &c->eval_every, NULL, 1, 1e12, NULL, "N",
         "evaluate every N fresh examples"},
        {"--max-fresh", ARG_LONG, &c->max_fresh, NULL, 1, 1e15, NULL, "N",
         "stop after N fresh examples"},
        {"--threads", ARG_INT, &c->threads, NULL, 1, 16, NULL, "N",
         "threads splitting each batch"},
        {"--save-model", ARG_STRING, &c->save_model, NULL, 0, 0, NULL, "PATH",
         "write the weights at the end (format:\n"
         "train/model.h)"},
        {"checkpoints (under mpirun, of every process):", ARG_HEADING, NULL,
         NULL, 0, 0, NULL, NULL, NULL},
        {"--checkpoint", ARG_STRING, &c->checkpoint, NULL, 0, 0, NULL, "PATH",
         "save the run here (weights, optimiser, counters,\n"
         "the pipeline's position) at the start, every\n"
         "--checkpoint-every steps and at the end, replacing\n"
         "the file whole (written first to PATH.tmp.PID);\n"
         "a regular file, or none yet"},
        {"--checkpoint-every", ARG_LONG, &c->checkpoint_every, &o->every_given,
         1, 1e12, NULL, "STEPS", "steps between checkpoints"},
        {"--resume", ARG_FLAG, &c->resume, NULL, 0, 0, NULL, NULL,
         "go on from --checkpoint's file if there is one\n"
         "(else start afresh); it must be of this run:\n"
         "the same options but --threads"},
        {"pipelines:", ARG_HEADING, NULL, NULL, 0, 0, NULL, NULL, NULL},
        {"--partitions", ARG_INT, &c->partitions, NULL, 1, 4096, NULL, "P",
         "the data as P partitions (default: one per\n"
         "process); resumes on any process count dividing P"},
        CLI_PIPELINE_ARGS(&o->po),
        {"output:", ARG_HEADING, NULL, NULL, 0, 0, NULL, NULL, NULL},
        {"--json", ARG_FLAG, &o->json, NULL, 0, 0, NULL, NULL,
         "the report as one JSON object"},
        {"--print-spec", ARG_FLAG, &o->print_spec, NULL, 0, 0, NULL, NULL,
         "print the training and held-out pipelines (one a\n"
         "line) and exit"},
        {"data parallel (under mpirun -np N):", ARG_HEADING, NULL, NULL, 0, 0,
         NULL, NULL, NULL},
        {"--check-sync", ARG_FLAG, &o->check_sync, NULL, 0, 0, NULL, NULL,
         "check after every step that every process holds\n"
         "the same weights, bit for bit"},
    };
    const arg_command cmd = {"echoflow train", "", 0, about, opts,
                             (int)(sizeof opts / sizeof opts[0])};
    int rc = args_parse(&cmd, argc, argv, NULL);
    if (rc)
        return rc;
    c->seed = o->po.seed;
    c->check_sync = o->check_sync;
    eft_arch_parse(o->model, &c->arch); /* a choice the parser checked */
    c->schedule = o->schedule[0] == 'c' ? EFT_LR_CONSTANT : EFT_LR_LINEAR;
    return 0;
}

/* The preset pipelines for --data fashion-mnist. */
static int preset(train_opts *o)
{
    /* --echo-at, checked by the parser: before-augment, after-augment or
     * batch */
    int at = o->echo_at[0] == 'b' && o->echo_at[1] == 'e' ? 0
             : o->echo_at[0] == 'a'                      ? 1
                                                         : 2;
    char echo[256] = "", slow[64] = "";
    if (o->echo)
        snprintf(echo, sizeof echo, "echo:%s | ", o->echo);
    if (o->throttle > 0)
        /* the prefetch lets the slow upstream run ahead of the trainer */
        snprintf(slow, sizeof slow, "throttle:rate=%g | prefetch:256 | ",
                 o->throttle);
    const char *augment =
        o->cfg.arch == EFT_CNN ? "random_crop:pad=2 | flip:p=0.5 | " : "";
    int n = snprintf(o->spec_buf, sizeof o->spec_buf,
                     "idx:images=" FMNIST "/train-images-idx3-ubyte.gz,"
                     "labels=" FMNIST "/train-labels-idx1-ubyte.gz | "
                     "shuffle:60000 | repeat | %s%s%s%sbatch:%d | %sprefetch:4",
                     slow, at == 0 ? echo : "", augment,
                     at == 1 ? echo : "", o->cfg.batch, at == 2 ? echo : "");
    if (n >= (int)sizeof o->spec_buf) {
        fprintf(stderr, "echoflow train: --echo options too long\n");
        return -1;
    }
    snprintf(o->test_buf, sizeof o->test_buf,
             "idx:images=" FMNIST "/t10k-images-idx3-ubyte.gz,"
             "labels=" FMNIST "/t10k-labels-idx1-ubyte.gz | batch:1000");
    o->spec = o->spec_buf;
    o->test_spec = o->test_buf;
    return 0;
}

/* A pipeline from `spec` reading part `part` of `parts`. */
static ef_pipeline *build(const train_opts *o, const char *spec,
                          const char *what, int part, int parts)
{
    return cli_pipeline("echoflow train", what, &o->po, spec, part, parts);
}

/* The partitions' pipelines, built so far: k of them. */
static void destroy_partitions(ef_pipeline **parts, int k)
{
    while (parts && k-- > 0)
        ef_pipeline_destroy(parts[k]);
    free(parts);
}

/* The pipelines of the partitions this process hosts (trainer.h's
 * eft_job): rank, rank + N, ... of cfg.partitions; *n of them. NULL after
 * a message. */
static ef_pipeline **build_partitions(const train_opts *o, int *n)
{
    const eft_comm *comm = o->cfg.comm;
    int ranks = comm ? comm->size : 1, rank = comm ? comm->rank : 0;
    int partitions = o->cfg.partitions;
    *n = partitions / ranks;
    ef_pipeline **parts = calloc((size_t)*n, sizeof *parts);
    if (!parts) {
        fprintf(stderr, "echoflow train: out of memory\n");
        return NULL;
    }
    for (int k = 0; k < *n; k++) {
        parts[k] = build(o, o->spec, "training", rank + k * ranks, partitions);
        if (!parts[k]) {
            destroy_partitions(parts, k);
            return NULL;
        }
    }
    return parts;
}

/* Whether the pipeline's source is the `service`. */
static int reads_service(const ef_pipeline *p)
{
    ef_stage_stats st;
    ef_pipeline_stage_stats(p, 0, &st);
    return !strcmp(st.name, "service");
}

/* The echo stage's stats, or -1 when the pipeline has none. */
static int echo_stage(const ef_pipeline *p, ef_stage_stats *st)
{
    for (int i = 0; i < ef_pipeline_stage_count(p); i++) {
        ef_pipeline_stage_stats(p, i, st);
        if (!strcmp(st->name, "echo"))
            return i;
    }
    return -1;
}

/* A stat of the echo stage that adds up over partitions: counts, rates
 * and waits of pipelines that run side by side. */
static int adds_up(const char *key)
{
    static const char *const keys[] = {
        "fresh",         "echoed",          "feedback_matched", "feedback_stale",
        "upstream_rate", "downstream_rate", "downstream_wait_s"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i]))
            return 1;
    return 0;
}

/* The echo stage's stats over the n partitions this process hosts: what
 * adds up summed, the effective factor and fresh fraction of the sums,
 * the other ratios' means; -1 when the pipelines have no echo stage. */
static int echo_figures(ef_pipeline *const *parts, int n, ef_stage_stats *st)
{
    if (echo_stage(parts[0], st) < 0)
        return -1;
    for (int k = 1; k < n; k++) {
        ef_stage_stats more;
        echo_stage(parts[k], &more);
        for (int i = 0; i < st->nextra && i < more.nextra; i++)
            st->extra[i].value += more.extra[i].value;
    }
    double fresh = 0, echoed = 0;
    ef_stage_stats_extra(st, "fresh", &fresh);
    ef_stage_stats_extra(st, "echoed", &echoed);
    for (int i = 0; i < st->nextra; i++) {
        ef_stat_extra *e = &st->extra[i];
        if (!strcmp(e->key, "effective_factor"))
            e->value = fresh > 0 ? (fresh + echoed) / fresh : 0;
        else if (!strcmp(e->key, "fresh_fraction"))
            e->value = fresh + echoed > 0 ? fresh / (fresh + echoed) : 0;
        else if (!adds_up(e->key))
            e->value /= n;
    }
    return 0;
}

/* The fraction of the time the trainer waited for data: the sum of its
 * partitions' pipelines', which it waits on one at a time. */
static double wait_fraction(ef_pipeline *const *parts, int n)
{
    double f = 0;
    for (int k = 0; k < n; k++) {
        ef_pipeline_stats ps;
        ef_pipeline_stats_get(parts[k], &ps);
        f += ps.consumer_wait_fraction;
    }
    return f;
}

typedef struct {
    ef_pipeline *const *parts; /* the partitions this process hosts */
    int nparts;
    int tty, quiet;
    const char *checkpoint;
} progress_ctx;

static void on_resumed(void *user, const eft_progress *pr)
{
    const progress_ctx *pc = user;
    if (!pc->quiet)
        fprintf(stderr,
                "resuming from %s: step %ld, %ld fresh examples, %.2f s of "
                "training\n",
                pc->checkpoint, pr->steps, pr->fresh, pr->train_s);
}

static void on_progress(void *user, const eft_progress *pr, int evaluated)
{
    progress_ctx *pc = user;
    if (pc->quiet || (!evaluated && !pc->tty))
        return; /* plain lines only at evaluations */
    ef_stage_stats st;
    double factor = 1;
    if (echo_figures(pc->parts, pc->nparts, &st) >= 0)
        ef_stage_stats_extra(&st, "effective_factor", &factor);
    fprintf(stderr,
            "%sfresh %8ld  steps %6ld  train loss %.4f  test acc %s%.4f  "
            "echo %.2f  waited %4.1f%%  %6.1f s%s",
            pc->tty ? "\r" : "", pr->fresh, pr->steps, pr->train_loss,
            pr->evaluated ? "" : "~", pr->evaluated ? pr->accuracy : 0.0,
            factor > 0 ? factor : 1,
            100 * wait_fraction(pc->parts, pc->nparts),
            pr->train_s, pc->tty ? (evaluated ? "\n" : "") : "\n");
}

/* What each process reports of its own part, gathered on process 0. */
enum { F_FRESH, F_BATCHES, F_FACTOR, F_R, F_WAIT, F_FEEDBACK, F_COUNT };

static void own_figures(ef_pipeline *const *parts, int nparts,
                        const eft_result *r, double out[F_COUNT])
{
    ef_stage_stats st;
    out[F_FRESH] = (double)r->local_fresh;
    out[F_BATCHES] = (double)r->local_batches;
    out[F_FACTOR] = 1;
    out[F_R] = 0;
    if (echo_figures(parts, nparts, &st) >= 0) {
        ef_stage_stats_extra(&st, "effective_factor", &out[F_FACTOR]);
        ef_stage_stats_extra(&st, "r_estimate", &out[F_R]);
    }
    out[F_WAIT] = wait_fraction(parts, nparts);
    out[F_FEEDBACK] = (double)r->feedback_values;
}

/* The smallest and largest of figure f over the n processes. */
static void spread(const double *all, int n, int f, double *lo, double *hi)
{
    *lo = *hi = all[f];
    for (int i = 1; i < n; i++) {
        double v = all[i * F_COUNT + f];
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
}

/* Under mpirun: the processes, their parts, and the collectives' cost. */
static void report_ranks_json(json_writer *w, const eft_comm *c,
                              const eft_result *r, const double *all,
                              int has_echo)
{
    json_number(w, "processes", c->size);
    json_number(w, "comm_s", r->comm_s);
    json_number(w, "comm_ms_per_step",
                r->final.steps ? 1e3 * r->comm_s / (double)r->final.steps
                               : 0);
    json_begin_array(w, "ranks");
    for (int i = 0; i < c->size; i++) {
        const double *f = all + i * F_COUNT;
        json_begin_object(w, NULL);
        json_number(w, "rank", i);
        json_number(w, "fresh", f[F_FRESH]);
        json_number(w, "batches", f[F_BATCHES]);
        json_number(w, "effective_factor", f[F_FACTOR]);
        json_number(w, "r_estimate", f[F_R]);
        json_number(w, "consumer_wait_fraction", f[F_WAIT]);
        json_number(w, "feedback_values", f[F_FEEDBACK]);
        json_end(w);
    }
    json_end(w);
    if (has_echo) {
        static const struct {
            const char *key;
            int figure;
        } spreads[] = {{"effective_factor", F_FACTOR}, {"r_estimate", F_R}};
        json_begin_object(w, "echo_spread");
        for (int k = 0; k < 2; k++) {
            double lo, hi;
            spread(all, c->size, spreads[k].figure, &lo, &hi);
            json_begin_array(w, spreads[k].key);
            json_number(w, NULL, lo);
            json_number(w, NULL, hi);
            json_end(w);
        }
        json_end(w);
    }
}

static void report_ranks_text(const eft_comm *c, const eft_result *r,
                              const double *all)
{
    printf("%d processes; collectives took %.2f s (%.2f ms a step)\n",
           c->size, r->comm_s,
           r->final.steps ? 1e3 * r->comm_s / (double)r->final.steps : 0);
    for (int i = 0; i < c->size; i++) {
        const double *f = all + i * F_COUNT;
        printf("  rank %d: %.0f fresh examples in %.0f batches, echo "
               "factor %.2f at R = %.2f, waited %.1f%%\n",
               i, f[F_FRESH], f[F_BATCHES], f[F_FACTOR], f[F_R],
               100 * f[F_WAIT]);
    }
}

/* What the report says beyond the trainer's result: the pipeline's and its
 * echo stage's figures, and the values fed back over every process. */
typedef struct {
    double wait_fraction;
    ef_stage_stats st; /* the echo stage's, when has_echo */
    int has_echo;
    double fed;
} run_figures;

/* The checkpoint figures of a run that checkpoints, as JSON. */
static void report_checkpoints_json(json_writer *w, const eft_result *r)
{
    if (r->resumed)
        json_number(w, "resumed_at_step", (double)r->resumed_at_step);
    else
        json_null(w, "resumed_at_step");
    json_number(w, "checkpoints", (double)r->checkpoints);
    json_number(w, "checkpoint_time_s", r->checkpoint_s);
    json_number(w, "resume_time_s", r->resume_s);
}

/* The report as one JSON object on stdout. */
static void report_json(const train_opts *o, const eft_result *r,
                        const double *all, const run_figures *g)
{
    json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w, NULL);
    json_string(&w, "model", eft_arch_name(o->cfg.arch));
    json_bool(&w, "reached", r->reached);
    json_number(&w, "target_acc", o->cfg.target_acc);
    json_number(&w, "fresh_to_target", (double)r->fresh_to_target);
    json_number(&w, "steps_to_target", (double)r->steps_to_target);
    json_number(&w, "time_to_target_s", r->time_to_target_s);
    json_bool(&w, "diverged", r->diverged_at_step != 0);
    json_number(&w, "eval_time_s", r->final.eval_s);
    json_number(&w, "train_time_s", r->final.train_s);
    json_number(&w, "fresh", (double)r->final.fresh);
    json_number(&w, "steps", (double)r->final.steps);
    json_number(&w, "examples", (double)r->final.examples);
    /* a diverged run has a NaN loss: null, which JSON can hold */
    json_number(&w, "final_accuracy", r->final.accuracy);
    json_number(&w, "final_loss", r->final.loss);
    json_number(&w, "train_examples_per_s", r->train_examples_per_s);
    json_number(&w, "consumer_wait_fraction", g->wait_fraction);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r->samples_hash);
    json_string(&w, "samples_hash", hex);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r->weights_hash);
    json_string(&w, "weights_hash", hex);
    if (o->cfg.checkpoint)
        report_checkpoints_json(&w, r);
    json_uint(&w, "seed", o->cfg.seed);
    json_number(&w, "lr", o->cfg.lr);
    json_number(&w, "batch", o->cfg.batch);
    json_string(&w, "echo_policy", o->policy);
    json_number(&w, "feedback_values", g->fed);
    if (!g->has_echo) {
        json_null(&w, "echo");
    } else {
        json_begin_object(&w, "echo");
        for (int k = 0; k < g->st.nextra; k++)
            json_number(&w, g->st.extra[k].key, g->st.extra[k].value);
        json_end(&w);
    }
    if (all)
        report_ranks_json(&w, o->cfg.comm, r, all, g->has_echo);
    json_end(&w);
    putchar('\n');
}

/* Whether and when the run reached its target, or why not. */
static void report_target_text(const train_opts *o, const eft_result *r)
{
    if (o->cfg.target_acc > 0 && r->reached)
        printf("reached %.2f%% test accuracy after %ld fresh examples, %ld "
               "steps, %.2f s of training\n",
               100 * o->cfg.target_acc, r->fresh_to_target, r->steps_to_target,
               r->time_to_target_s);
    else if (r->diverged_at_step)
        printf("training diverged: the loss of step %ld was not finite; "
               "try a smaller --lr\n",
               r->diverged_at_step);
    else if (o->cfg.target_acc > 0)
        printf("did not reach %.2f%% within %ld fresh examples\n",
               100 * o->cfg.target_acc, o->cfg.max_fresh);
}

/* The report as lines of text on stdout. */
static void report_text(const train_opts *o, const eft_result *r,
                        const double *all, const run_figures *g)
{
    printf("model %s, batch %d, lr %g, seed %llu\n", eft_arch_name(o->cfg.arch),
           o->cfg.batch, o->cfg.lr, (unsigned long long)o->cfg.seed);
    report_target_text(o, r);
    printf("final test accuracy %.4f, loss %.4f\n", r->final.accuracy,
           r->final.loss);
    printf("trained on %ld examples (%ld fresh) in %.2f s: %.0f examples/s; "
           "evaluation took %.2f s apart\n",
           r->final.examples, r->final.fresh, r->final.train_s,
           r->train_examples_per_s, r->final.eval_s);
    printf("the trainer waited for data %.1f%% of the time\n",
           100 * g->wait_fraction);
    if (r->resumed)
        printf("resumed from a checkpoint at step %ld\n", r->resumed_at_step);
    if (o->cfg.checkpoint)
        printf("%ld checkpoints written in %.2f s\n", r->checkpoints,
               r->checkpoint_s);
    if (o->cfg.feedback)
        printf("echo policy %s: %.0f values fed back\n", o->policy, g->fed);
    printf("samples hash %016llx, weights hash %016llx\n",
           (unsigned long long)r->samples_hash,
           (unsigned long long)r->weights_hash);
    if (g->has_echo) {
        printf("echo:");
        for (int k = 0; k < g->st.nextra; k++)
            printf(" %s=%.4g", g->st.extra[k].key, g->st.extra[k].value);
        printf("\n");
    }
    if (all)
        report_ranks_text(o->cfg.comm, r, all);
}

/* `all`: every process's figures, under mpirun; NULL otherwise. */
static void report(const train_opts *o, ef_pipeline *const *parts, int nparts,
                   const eft_result *r, const double *all, int json)
{
    run_figures g;
    g.wait_fraction = wait_fraction(parts, nparts);
    g.has_echo = echo_figures(parts, nparts, &g.st) >= 0;
    /* every process feeds its own pipeline: the run's count is the sum */
    g.fed = (double)r->feedback_values;
    for (int i = 1; all && i < o->cfg.comm->size; i++)
        g.fed += all[i * F_COUNT + F_FEEDBACK];
    if (json)
        report_json(o, r, all, &g);
    else
        report_text(o, r, all, &g);
}

/* The checkpoint options: 0 when they make sense, -1 after a message. */
static int check_checkpoint(const train_opts *o)
{
    const eft_config *c = &o->cfg;
    if (!c->checkpoint && (o->every_given || c->resume)) {
        fprintf(stderr, "echoflow train: %s needs --checkpoint PATH\n",
                c->resume ? "--resume" : "--checkpoint-every");
        return -1;
    }
    if (!c->checkpoint)
        return 0;
    if (!c->checkpoint[0]) {
        fprintf(stderr, "echoflow train: --checkpoint needs the path of a "
                        "file; it was given an empty one\n");
        return -1;
    }
    /* a named pipe would block the resume's read for ever, a folder or a
       device would fail at the first save */
    struct stat sb;
    if (stat(c->checkpoint, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fprintf(stderr,
                "echoflow train: --checkpoint %s is %s, not a regular file: "
                "give the path of a checkpoint, or of one to create\n",
                c->checkpoint,
                S_ISFIFO(sb.st_mode)   ? "a named pipe"
                : S_ISDIR(sb.st_mode)  ? "a folder"
                : S_ISSOCK(sb.st_mode) ? "a socket"
                                       : "a device");
        return -1;
    }
    if (!c->resume && !o->print_spec && access(c->checkpoint, F_OK) == 0) {
        fprintf(stderr,
                "echoflow train: %s exists: give --resume to go on from it, "
                "or remove it to start afresh\n",
                c->checkpoint);
        return -1;
    }
    return 0;
}

/* Checks the options and builds the spec; returns 0 to train, -1 when
 * there is nothing to do (--help), or the exit code. */
static int setup(train_opts *o, int launched, int argc, char **argv)
{
    int parsed = parse(o, argc, argv);
    if (parsed)
        return parsed == 1 ? -1 : 2;
    if (launched)
        o->cfg.comm = &o->comm;
    if (o->data && (o->spec || o->test_spec)) {
        fprintf(stderr, "echoflow train: give --data or --spec/--test-spec, "
                        "not both\n");
        return 2;
    }
    if (!o->data && (!o->spec || !o->test_spec)) {
        fprintf(stderr, "echoflow train: give --data fashion-mnist, or both "
                        "--spec and --test-spec (see --help)\n");
        return 2;
    }
    if (!o->data && (o->echo || o->throttle > 0)) {
        fprintf(stderr, "echoflow train: --echo and --throttle shape the "
                        "--data pipeline; with --spec, write the stages in "
                        "the spec\n");
        return 2;
    }
    if (o->cfg.check_sync && !o->cfg.comm) {
        fprintf(stderr, "echoflow train: --check-sync checks the processes "
                        "of a run under mpirun; this is one process\n");
        return 2;
    }
    if (check_checkpoint(o))
        return 2;
    int ranks = o->cfg.comm ? o->comm.size : 1;
    if (o->cfg.partitions == 0)
        o->cfg.partitions = ranks;
    if (o->cfg.partitions % ranks != 0) {
        fprintf(stderr,
                "echoflow train: --partitions %d cannot be dealt evenly to "
                "%d processes: give a multiple of %d\n",
                o->cfg.partitions, ranks, ranks);
        return 2;
    }
    return o->data && preset(o) ? 2 : 0;
}

/* Everything after the options: 0, or the exit code. */
static int run(train_opts *o)
{
    const eft_comm *comm = o->cfg.comm;
    int lead = !comm || comm->rank == 0; /* the process that prints */
    /* the trainer's threads split each batch; BLAS stays on one */
    openblas_set_num_threads(1);
    /* every process evaluates its slice of the whole held-out set */
    ef_pipeline *test_p = build(o, o->test_spec, "test", 0, 1);
    int nparts = 0;
    ef_pipeline **parts = test_p ? build_partitions(o, &nparts) : NULL;
    if (!parts) {
        ef_pipeline_destroy(test_p);
        return 2;
    }
    /* the service deals the data to the trainers, and each one's state
     * is the job's: a checkpoint resumes on any number of them */
    o->cfg.shared_state = reads_service(parts[0]);
    /* values are fed back only to a pipeline whose echo policy uses them,
     * so that runs without one stay exactly as they were */
    o->cfg.feedback =
        ef_pipeline_wants_feedback(parts[0], o->policy, sizeof o->policy);
    char err[1024];
    eft_dataset test;
    if (eft_dataset_load(test_p, o->cfg.mean, o->cfg.std, &test, err,
                         sizeof err)) {
        fprintf(stderr, "echoflow train: %s\n", err);
        ef_pipeline_destroy(test_p);
        destroy_partitions(parts, nparts);
        return 1;
    }
    ef_pipeline_destroy(test_p);
    if (!o->json && lead && o->cfg.partitions > 1)
        fprintf(stderr,
                "training on: %s (as %d partitions, shard=p/%d; each process "
                "hosts %d)\n",
                o->spec, o->cfg.partitions, o->cfg.partitions, nparts);
    else if (!o->json && lead)
        fprintf(stderr, "training on: %s\n", o->spec);
    /* --json keeps stderr for errors unless a person is watching */
    progress_ctx pc = {parts, nparts, isatty(2),
                       !lead || (o->json && !isatty(2)), o->cfg.checkpoint};
    if (!pc.quiet && o->cfg.resume && access(o->cfg.checkpoint, F_OK) != 0)
        fprintf(stderr, "no checkpoint at %s yet: starting afresh\n",
                o->cfg.checkpoint);
    eft_result r;
    const eft_job job = {&o->cfg, NULL,      &test,  on_progress, 20,
                         &pc,     on_resumed, parts, nparts};
    int rc = eft_train(&job, &r, err, sizeof err);
    double mine[F_COUNT], *all = NULL;
    if (rc == 0 && comm) {
        own_figures(parts, nparts, &r, mine);
        all = calloc((size_t)comm->size * F_COUNT, sizeof *all);
        if (!all) {
            snprintf(err, sizeof err, "out of memory");
            rc = -1;
        } else if (comm->gather(comm->user, mine, F_COUNT, all, err, sizeof err))
            rc = -1;
    }
    if (rc && comm)
        fprintf(stderr, "echoflow train: rank %d: %s\n", comm->rank, err);
#ifdef EF_HAVE_MPI
    if (rc && comm && r.shared_failure)
        train_mpi_shared_failure(); /* printed: end in order */
#endif
    else if (rc)
        fprintf(stderr, "echoflow train: %s\n", err);
    else if (lead)
        report(o, parts, nparts, &r, all, o->json);
    free(all);
    free((void *)test.x);
    free((void *)test.y);
    destroy_partitions(parts, nparts);
    return rc ? 1 : 0;
}

#ifdef EF_HAVE_MPI
/* The options every process of a run under mpirun must be started with
 * alike, each with its value as text: what shapes the model, the steps,
 * the data and the collectives (a process with another --max-fresh or
 * --eval-every would wait in a collective the others never enter; another
 * --model sums gradients of another size). Free to differ: --threads and
 * --memory-budget (a machine's own cores and memory), --throttle (an
 * emulated slow link of one machine), --json and --save-model (process
 * 0's output). Each process reads its own part of the data already. */
enum { MAX_SETTINGS = 24 };
typedef struct {
    const char *name[MAX_SETTINGS], *value[MAX_SETTINGS];
    char text[MAX_SETTINGS][32]; /* the numbers' values */
    int n;
} settings;

static void put_text(settings *s, const char *name, const char *value)
{
    assert(s->n < MAX_SETTINGS);
    s->name[s->n] = name;
    s->value[s->n++] = value ? value : "(none)";
}

static void put_number(settings *s, const char *name, double v)
{
    char *buf = s->text[s->n];
    /* the shortest text that reads back as v */
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, sizeof s->text[0], "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    put_text(s, name, buf);
}

static void put_integer(settings *s, const char *name, unsigned long long v)
{
    snprintf(s->text[s->n], sizeof s->text[0], "%llu", v);
    put_text(s, name, s->text[s->n]);
}

/* 0 when every process has the same settings; -1 after a message (on
 * process 0) naming the first that differs. A collective. */
static int same_settings(const train_opts *o, int help)
{
    const eft_config *c = &o->cfg;
    settings s = {.n = 0};
    put_text(&s, "the echoflow version", ef_version_string());
    put_text(&s, "--help", help ? "given" : "not given");
    put_text(&s, "--print-spec", o->print_spec ? "given" : "not given");
    put_text(&s, "--data", o->data);
    put_text(&s, "--spec", o->data ? NULL : o->spec);
    put_text(&s, "--test-spec", o->data ? NULL : o->test_spec);
    put_text(&s, "--echo", o->echo);
    put_text(&s, "--echo-at", o->echo_at);
    put_text(&s, "--model", o->model);
    put_integer(&s, "--batch", (unsigned long long)c->batch);
    put_number(&s, "--lr", c->lr);
    put_number(&s, "--momentum", c->momentum);
    put_number(&s, "--weight-decay", c->weight_decay);
    put_text(&s, "--schedule", o->schedule);
    put_integer(&s, "--warmup", (unsigned long long)c->warmup_steps);
    put_number(&s, "--target-acc", c->target_acc);
    put_integer(&s, "--eval-every", (unsigned long long)c->eval_every);
    put_integer(&s, "--max-fresh", (unsigned long long)c->max_fresh);
    put_integer(&s, "--seed", (unsigned long long)o->po.seed);
    put_integer(&s, "--partitions", (unsigned long long)o->cfg.partitions);
    put_text(&s, "--on-error", o->po.on_error ? o->po.on_error : "fail");
    put_text(&s, "--check-sync", o->check_sync ? "given" : "not given");
    char err[1024];
    if (train_mpi_same_settings(s.name, s.value, s.n, err, sizeof err) == 0)
        return 0;
    if (err[0])
        fprintf(stderr, "echoflow train: %s\n", err);
    return -1;
}
#endif

int cmd_train(int argc, char **argv)
{
    train_opts o;
    memset(&o, 0, sizeof o);
#ifdef EF_HAVE_MPI
    char err[512];
    int launched = train_mpi_start(&o.comm, err, sizeof err);
    if (launched < 0) {
        /* the process that says why; "" on the others */
        if (err[0])
            fprintf(stderr, "echoflow train: %s\n", err);
        train_mpi_finish(2);
        return 2;
    }
#else
    int launched = 0;
#endif
    int rc = setup(&o, launched, argc, argv);
#ifdef EF_HAVE_MPI
    /* before any other collective: processes set apart would hang in
     * one, or exchange buffers of other sizes */
    if (launched && rc <= 0 && same_settings(&o, rc < 0))
        rc = 2;
#endif
    if (rc == 0 && o.print_spec)
        printf("%s\n%s\n", o.spec, o.test_spec);
    else if (rc == 0)
        rc = run(&o);
    else if (rc < 0)
        rc = 0; /* --help */
#ifdef EF_HAVE_MPI
    train_mpi_finish(rc);
#endif
    return rc;
}
#endif
