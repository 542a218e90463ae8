/* `echoflow train`: the reference trainer behind an echoflow pipeline.
 * Uses the public API and train/ only. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "echoflow/echoflow.h"

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
    double throttle;
    int json, print_spec;
    uint64_t memory_budget; /* --memory-budget, when budget_given */
    int budget_given;
    eft_comm comm; /* under mpirun: this process's rank and the size */
    char spec_buf[4096], test_buf[1024], shard_buf[4096];
} train_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: echoflow train [options]\n"
            "data (one of):\n"
            "  --data fashion-mnist      the Debian package's files, shuffled,"
            " normalised;\n"
            "                            random crop and flip for the cnn\n"
            "  --spec SPEC --test-spec SPEC  your own pipelines: training "
            "batches and\n"
            "                            the held-out set (fields image, "
            "label)\n"
            "echoing (with --data):\n"
            "  --echo OPTS               echo stage options, e.g. factor=2,"
            "shuffle=1000\n"
            "                            or factor=auto,max=8\n"
            "  --echo-at WHERE           before-augment (default), "
            "after-augment, batch\n"
            "  --throttle RATE           emulate a slow upstream: RATE "
            "examples/s\n"
            "training:\n"
            "  --model mlp|cnn  --batch N  --lr X  --momentum X  "
            "--weight-decay X\n"
            "  --schedule constant|linear  --warmup STEPS  --seed S  "
            "--threads N\n"
            "  --target-acc A   --eval-every N (fresh examples)  --max-fresh "
            "N  --json\n"
            "  --save-model PATH   write the weights at the end (format: "
            "train/model.h)\n"
            "  --print-spec     print the training and held-out pipelines "
            "(one a line)\n"
            "                   and exit\n"
            "  --memory-budget SIZE  bytes the pipelines' queues and buffers "
            "may hold\n"
            "                   (default 1G; 0: no limit)\n"
            "data parallel (under mpirun -np N, each process reads "
            "shard=RANK/N):\n"
            "  --check-sync     check after every step that every process "
            "holds the\n"
            "                   same weights, bit for bit\n");
}

static int number(const char *opt, const char *v, double min, double max,
                  double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* "nan" passes no range test: refuse it by name */
    if (!*v || *end || errno || isnan(x) || x < min || x > max) {
        fprintf(stderr,
                "echoflow train: %s expects a number from %g to %g, got "
                "'%s'\n",
                opt, min, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Numeric options: where each goes and the values it accepts. */
typedef struct {
    const char *name;
    double min, max;
    double value;
    int given;
} numeric_opt;

enum {
    N_BATCH,
    N_LR,
    N_MOMENTUM,
    N_DECAY,
    N_WARMUP,
    N_TARGET,
    N_EVAL,
    N_MAX_FRESH,
    N_THREADS,
    N_THROTTLE,
    N_COUNT
};

static int parse(train_opts *o, int argc, char **argv)
{
    numeric_opt num[N_COUNT] = {
        [N_BATCH] = {"--batch", 1, 65536, 0, 0},
        [N_LR] = {"--lr", 0, 100, 0, 0},
        [N_MOMENTUM] = {"--momentum", 0, 0.9999, 0, 0},
        [N_DECAY] = {"--weight-decay", 0, 1, 0, 0},
        [N_WARMUP] = {"--warmup", 0, 1e12, 0, 0},
        [N_TARGET] = {"--target-acc", 0, 1, 0, 0},
        [N_EVAL] = {"--eval-every", 1, 1e12, 0, 0},
        [N_MAX_FRESH] = {"--max-fresh", 1, 1e15, 0, 0},
        [N_THREADS] = {"--threads", 1, 16, 0, 0},
        [N_THROTTLE] = {"--throttle", 1e-3, 1e12, 0, 0},
    };
    eft_config *c = &o->cfg;
    eft_config_defaults(c);
    o->echo_at = "before-augment";
    c->threads = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--print-spec")) {
            o->print_spec = 1;
            continue;
        }
        if (!strcmp(a, "--check-sync")) {
            c->check_sync = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr,
                    "echoflow train: unknown option or missing value: "
                    "'%s'\n",
                    a);
            usage(stderr);
            return -1;
        }
        const char *v = argv[++i];
        int k = 0;
        while (k < N_COUNT && strcmp(a, num[k].name) != 0)
            k++;
        if (k < N_COUNT) {
            if (number(a, v, num[k].min, num[k].max, &num[k].value))
                return -1;
            num[k].given = 1;
        } else if (!strcmp(a, "--seed")) {
            /* an integer: a double would round seeds above 2^53 */
            if (cli_parse_seed("echoflow train", "--seed", v, &c->seed))
                return -1;
        } else if (!strcmp(a, "--memory-budget")) {
            if (cli_parse_size("echoflow train", "--memory-budget", v,
                               &o->memory_budget))
                return -1;
            o->budget_given = 1;
        } else if (!strcmp(a, "--data")) {
            o->data = v;
        } else if (!strcmp(a, "--spec")) {
            o->spec = v;
        } else if (!strcmp(a, "--test-spec")) {
            o->test_spec = v;
        } else if (!strcmp(a, "--echo")) {
            o->echo = v;
        } else if (!strcmp(a, "--echo-at")) {
            o->echo_at = v;
        } else if (!strcmp(a, "--save-model")) {
            c->save_model = v;
        } else if (!strcmp(a, "--model")) {
            if (eft_arch_parse(v, &c->arch)) {
                fprintf(stderr,
                        "echoflow train: --model expects mlp or cnn, "
                        "got '%s'\n",
                        v);
                return -1;
            }
        } else if (!strcmp(a, "--schedule")) {
            if (!strcmp(v, "constant") || !strcmp(v, "linear")) {
                c->schedule = v[0] == 'c' ? EFT_LR_CONSTANT : EFT_LR_LINEAR;
            } else {
                fprintf(stderr,
                        "echoflow train: --schedule expects constant "
                        "or linear, got '%s'\n",
                        v);
                return -1;
            }
        } else {
            fprintf(stderr, "echoflow train: unknown option '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (num[N_BATCH].given)
        c->batch = (int)num[N_BATCH].value;
    if (num[N_LR].given)
        c->lr = num[N_LR].value;
    if (num[N_MOMENTUM].given)
        c->momentum = num[N_MOMENTUM].value;
    if (num[N_DECAY].given)
        c->weight_decay = num[N_DECAY].value;
    if (num[N_WARMUP].given)
        c->warmup_steps = (long)num[N_WARMUP].value;
    if (num[N_TARGET].given)
        c->target_acc = num[N_TARGET].value;
    if (num[N_EVAL].given)
        c->eval_every = (long)num[N_EVAL].value;
    if (num[N_MAX_FRESH].given)
        c->max_fresh = (long)num[N_MAX_FRESH].value;
    if (num[N_THREADS].given)
        c->threads = (int)num[N_THREADS].value;
    if (num[N_THROTTLE].given)
        o->throttle = num[N_THROTTLE].value;
    return 0;
}

/* The preset pipelines for --data fashion-mnist. */
static int preset(train_opts *o)
{
    if (strcmp(o->data, "fashion-mnist") != 0) {
        fprintf(stderr,
                "echoflow train: --data knows fashion-mnist only, "
                "got '%s' (use --spec for other data)\n",
                o->data);
        return -1;
    }
    const char *where[] = {"before-augment", "after-augment", "batch"};
    int at = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(o->echo_at, where[i]))
            at = i;
    if (at < 0) {
        fprintf(stderr,
                "echoflow train: --echo-at expects before-augment, "
                "after-augment or batch, got '%s'\n",
                o->echo_at);
        return -1;
    }
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
                     slow, at == 0 ? echo : "", augment, at == 1 ? echo : "",
                     o->cfg.batch, at == 2 ? echo : "");
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

/* A pipeline from `spec`; with `comm`, reading this process's part. */
static ef_pipeline *build(const train_opts *o, const char *spec,
                          const char *what, const eft_comm *comm)
{
    ef_pipeline *p;
    if (ef_pipeline_create(&p) != EF_OK)
        return NULL;
    if (ef_pipeline_set_seed(p, o->cfg.seed) != EF_OK ||
        (o->budget_given &&
         ef_pipeline_set_memory_budget(p, o->memory_budget) != EF_OK) ||
        (comm && ef_pipeline_set_shard(p, comm->rank, comm->size) != EF_OK) ||
        ef_pipeline_parse(p, spec) != EF_OK) {
        fprintf(stderr, "echoflow train: %s pipeline: %s\n", what,
                ef_pipeline_error(p));
        ef_pipeline_destroy(p);
        return NULL;
    }
    return p;
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

typedef struct {
    ef_pipeline *p;
    int tty, quiet;
} progress_ctx;

static void on_progress(void *user, const eft_progress *pr, int evaluated)
{
    progress_ctx *pc = user;
    ef_pipeline_stats ps;
    ef_stage_stats st;
    ef_pipeline_stats_get(pc->p, &ps);
    double factor = 1;
    if (echo_stage(pc->p, &st) >= 0)
        ef_stage_stats_extra(&st, "effective_factor", &factor);
    if (pc->quiet || (!evaluated && !pc->tty))
        return; /* plain lines only at evaluations */
    fprintf(stderr,
            "%sfresh %8ld  steps %6ld  train loss %.4f  test acc %s%.4f  "
            "echo %.2f  waited %4.1f%%  %6.1f s%s",
            pc->tty ? "\r" : "", pr->fresh, pr->steps, pr->train_loss,
            pr->evaluated ? "" : "~", pr->evaluated ? pr->accuracy : 0.0,
            factor > 0 ? factor : 1, 100 * ps.consumer_wait_fraction,
            pr->train_s, pc->tty ? (evaluated ? "\n" : "") : "\n");
}

/* A number as JSON: exact for integers up to 2^53, null when not finite
 * (JSON has no NaN or infinity). */
static void json_value(double v)
{
    if (!isfinite(v))
        printf("null");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        printf("%.0f", v);
    else
        printf("%.6g", v);
}

static void json_field(const char *key, double v)
{
    printf(", \"%s\": ", key);
    json_value(v);
}

/* What each process reports of its own part, gathered on process 0. */
enum { F_FRESH, F_BATCHES, F_FACTOR, F_R, F_WAIT, F_COUNT };

static void own_figures(const ef_pipeline *p, const eft_result *r,
                        double out[F_COUNT])
{
    ef_pipeline_stats ps;
    ef_stage_stats st;
    ef_pipeline_stats_get(p, &ps);
    out[F_FRESH] = (double)r->local_fresh;
    out[F_BATCHES] = (double)r->local_batches;
    out[F_FACTOR] = 1;
    out[F_R] = 0;
    if (echo_stage(p, &st) >= 0) {
        ef_stage_stats_extra(&st, "effective_factor", &out[F_FACTOR]);
        ef_stage_stats_extra(&st, "r_estimate", &out[F_R]);
    }
    out[F_WAIT] = ps.consumer_wait_fraction;
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
static void report_ranks_json(const eft_comm *c, const eft_result *r,
                              const double *all, int has_echo)
{
    printf(", \"processes\": %d", c->size);
    json_field("comm_s", r->comm_s);
    json_field("comm_ms_per_step",
               r->final.steps ? 1e3 * r->comm_s / (double)r->final.steps : 0);
    printf(", \"ranks\": [");
    for (int i = 0; i < c->size; i++) {
        const double *f = all + i * F_COUNT;
        printf("%s{\"rank\": %d", i ? ", " : "", i);
        json_field("fresh", f[F_FRESH]);
        json_field("batches", f[F_BATCHES]);
        json_field("effective_factor", f[F_FACTOR]);
        json_field("r_estimate", f[F_R]);
        json_field("consumer_wait_fraction", f[F_WAIT]);
        printf("}");
    }
    printf("]");
    if (has_echo) {
        double lo, hi, rlo, rhi;
        spread(all, c->size, F_FACTOR, &lo, &hi);
        spread(all, c->size, F_R, &rlo, &rhi);
        printf(", \"echo_spread\": {\"effective_factor\": [");
        json_value(lo);
        printf(", ");
        json_value(hi);
        printf("], \"r_estimate\": [");
        json_value(rlo);
        printf(", ");
        json_value(rhi);
        printf("]}");
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

/* `all`: every process's figures, under mpirun; NULL otherwise. */
static void report(const train_opts *o, const ef_pipeline *p,
                   const eft_result *r, const double *all, int json)
{
    ef_pipeline_stats ps;
    ef_stage_stats st;
    ef_pipeline_stats_get(p, &ps);
    int has_echo = echo_stage(p, &st) >= 0;
    if (json) {
        printf("{\"model\": \"%s\", \"reached\": %s",
               eft_arch_name(o->cfg.arch), r->reached ? "true" : "false");
        json_field("target_acc", o->cfg.target_acc);
        json_field("fresh_to_target", (double)r->fresh_to_target);
        json_field("steps_to_target", (double)r->steps_to_target);
        json_field("time_to_target_s", r->time_to_target_s);
        printf(", \"diverged\": %s", r->diverged_at_step ? "true" : "false");
        json_field("eval_time_s", r->final.eval_s);
        json_field("train_time_s", r->final.train_s);
        json_field("fresh", (double)r->final.fresh);
        json_field("steps", (double)r->final.steps);
        json_field("examples", (double)r->final.examples);
        /* a diverged run has a NaN loss: null, which JSON can hold */
        json_field("final_accuracy", r->final.accuracy);
        json_field("final_loss", r->final.loss);
        json_field("train_examples_per_s", r->train_examples_per_s);
        json_field("consumer_wait_fraction", ps.consumer_wait_fraction);
        printf(", \"seed\": %llu", (unsigned long long)o->cfg.seed);
        json_field("lr", o->cfg.lr);
        printf(", \"batch\": %d, \"echo\": ", o->cfg.batch);
        if (!has_echo) {
            printf("null");
        } else {
            printf("{");
            for (int k = 0; k < st.nextra; k++) {
                printf("%s\"%s\": ", k ? ", " : "", st.extra[k].key);
                json_value(st.extra[k].value);
            }
            printf("}");
        }
        if (all)
            report_ranks_json(o->cfg.comm, r, all, has_echo);
        printf("}\n");
        return;
    }
    printf("model %s, batch %d, lr %g, seed %llu\n", eft_arch_name(o->cfg.arch),
           o->cfg.batch, o->cfg.lr, (unsigned long long)o->cfg.seed);
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
    printf("final test accuracy %.4f, loss %.4f\n", r->final.accuracy,
           r->final.loss);
    printf("trained on %ld examples (%ld fresh) in %.2f s: %.0f examples/s; "
           "evaluation took %.2f s apart\n",
           r->final.examples, r->final.fresh, r->final.train_s,
           r->train_examples_per_s, r->final.eval_s);
    printf("the trainer waited for data %.1f%% of the time\n",
           100 * ps.consumer_wait_fraction);
    if (has_echo) {
        double v;
        printf("echo:");
        for (int k = 0; k < st.nextra; k++) {
            v = st.extra[k].value;
            printf(" %s=%.4g", st.extra[k].key, v);
        }
        printf("\n");
    }
    if (all)
        report_ranks_text(o->cfg.comm, r, all);
}

/* Checks the options and builds the spec; returns 0, or the exit code. */
static int setup(train_opts *o, int launched, int argc, char **argv)
{
    if (parse(o, argc, argv))
        return 2;
    if (launched)
        o->cfg.comm = &o->comm;
    if (o->data && (o->spec || o->test_spec)) {
        fprintf(stderr, "echoflow train: give --data or --spec/--test-spec, "
                        "not both\n");
        return 2;
    }
    if (!o->data && (!o->spec || !o->test_spec)) {
        fprintf(stderr, "echoflow train: give --data fashion-mnist, or both "
                        "--spec and --test-spec\n");
        usage(stderr);
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
    ef_pipeline *test_p = build(o, o->test_spec, "test", NULL);
    ef_pipeline *train_p =
        test_p ? build(o, o->spec, "training", comm) : NULL;
    if (!train_p) {
        ef_pipeline_destroy(test_p);
        return 2;
    }
    char err[1024];
    eft_dataset test;
    if (eft_dataset_load(test_p, o->cfg.mean, o->cfg.std, &test, err,
                         sizeof err)) {
        fprintf(stderr, "echoflow train: %s\n", err);
        ef_pipeline_destroy(test_p);
        ef_pipeline_destroy(train_p);
        return 1;
    }
    ef_pipeline_destroy(test_p);
    if (!o->json && lead)
        fprintf(stderr, "training on: %s%s\n", o->spec,
                comm ? " (each process its part: shard=RANK/N)" : "");
    /* --json keeps stderr for errors unless a person is watching */
    progress_ctx pc = {train_p, isatty(2), !lead || (o->json && !isatty(2))};
    eft_result r;
    int rc = eft_train(&o->cfg, train_p, &test, on_progress, 20, &pc, &r, err,
                       sizeof err);
    double mine[F_COUNT], *all = NULL;
    if (rc == 0 && comm) {
        own_figures(train_p, &r, mine);
        all = calloc((size_t)comm->size * F_COUNT, sizeof *all);
        if (!all) {
            snprintf(err, sizeof err, "out of memory");
            rc = -1;
        } else if (comm->gather(comm->user, mine, F_COUNT, all, err, sizeof err))
            rc = -1;
    }
    if (rc && comm)
        fprintf(stderr, "echoflow train: rank %d: %s\n", comm->rank, err);
    else if (rc)
        fprintf(stderr, "echoflow train: %s\n", err);
    else if (lead)
        report(o, train_p, &r, all, o->json);
    free(all);
    free((void *)test.x);
    free((void *)test.y);
    ef_pipeline_destroy(train_p);
    return rc ? 1 : 0;
}

int cmd_train(int argc, char **argv)
{
    train_opts o;
    memset(&o, 0, sizeof o);
#ifdef EF_HAVE_MPI
    char err[512];
    int launched = train_mpi_start(&argc, &argv, &o.comm, err, sizeof err);
    if (launched < 0) {
        fprintf(stderr, "echoflow train: %s\n", err);
        return 1;
    }
#else
    int launched = 0;
#endif
    int rc = setup(&o, launched, argc, argv);
    if (rc == 0 && o.print_spec)
        printf("%s\n%s\n", o.spec, o.test_spec);
    else if (rc == 0)
        rc = run(&o);
#ifdef EF_HAVE_MPI
    train_mpi_finish(rc);
#endif
    return rc;
}
#endif
