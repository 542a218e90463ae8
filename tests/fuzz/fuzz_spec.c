/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for text specs: ef_pipeline_parse (src/pipeline/spec.c, src/pipeline/options.c,
 * each stage's create) and, when that is cheap, a few pulls.
 *
 * The input is up to two specs separated by a NUL byte: the first is parsed
 * on a fresh pipeline, the second appended to it (so the all-or-nothing
 * commit is exercised too). Checked after each parse: the status, the
 * message on failure (non-empty, NUL-terminated, shorter than the buffer),
 * that a failed parse appended nothing and a successful one appended one
 * stage per unquoted '|' plus one, with the names given.
 *
 * A fuzz input must run in milliseconds, but options may legally ask for
 * huge buffers (shuffle:buffer=67108864), 256 threads, 1 GiB samples, or
 * files to read (idx, tar ...) or a rate to sleep for (throttle). So each
 * spec is first scanned with the library's own parsers (ef__spec_parse and
 * ef__opts_parse, without creating anything): inputs whose stages would
 * allocate too much when created are skipped, and the pipeline is pulled
 * only when an estimate of the work the pulls cause fits a budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "echoflow/echoflow.h"
#include "fuzz.h"
#include "io/paths.h"
#include "pipeline/spec.h"
#include "pipeline/stage.h"

/* EF_FUZZ_VERBOSE=1 in the environment: one line per parse and per run of
 * pulls, on stderr (to see what a corpus exercises) */
static int verbose(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("EF_FUZZ_VERBOSE");
        v = e && *e && strcmp(e, "0") != 0;
    }
    return v;
}

/* as in pipeline.c */
#define MAX_STAGES 64
/* bytes (plus a fixed cost per allocation) the stages' create() may
 * allocate in all */
#define CREATE_BUDGET (16.0 * 1024 * 1024)
#define ALLOC_COST 256.0
/* items moved through stages by the pulls; a thread start counts as
 * THREAD_COST items, 64 bytes of sample data as one */
#define WORK_BUDGET 20000.0
#define THREAD_COST 200.0

typedef enum {
    K_RANGE,
    K_BATCH,
    K_SHUFFLE,
    K_ECHO,
    K_PREFETCH,
    K_MAP,
    K_TAKE,
    K_REPEAT,
    K_UNBOUNDED /* reads files or sleeps (idx, throttle), or unknown */
} kind;

typedef struct {
    const char *name; /* the registry's, static */
    kind k;
    double a, b, c, d; /* the options that size the stage's work */
    double bytes;      /* payload of one item this stage emits, at most */
} stage_info;

/* The stages the pipeline holds (or is about to), as the scan saw them. */
typedef struct {
    stage_info st[MAX_STAGES];
    int n;
    double create_cost;
    int too_costly;
} scan;

/* An option's numeric value, by name; `dflt` when the schema lacks it (so
 * a schema change makes the estimate coarser, never a crash). */
static double opt_num(const ef__opts *o, const char *name, double dflt)
{
    for (int i = 0; i < o->n; i++) {
        if (strcmp(o->defs[i].name, name) != 0)
            continue;
        switch (o->defs[i].type) {
        case EF_OPT_INT:
        case EF_OPT_INT_AUTO: /* auto reads as 0 */
            return (double)o->values[i].i;
        case EF_OPT_FLOAT:
        case EF_OPT_FACTOR:
            return o->values[i].f;
        case EF_OPT_BOOL:
            return o->values[i].b;
        case EF_OPT_STRING:
            break;
        }
    }
    return dflt;
}

static const char *opt_str(const ef__opts *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->defs[i].name, name) == 0 &&
            o->defs[i].type == EF_OPT_STRING)
            return o->strings[i] ? o->strings[i] : "";
    return "";
}

/* Fills `si` from the typed options (`up_bytes`: what one item of the
 * upstream holds); returns what create() allocates. */
static double describe(stage_info *si, const ef__opts *o, double up_bytes)
{
    const char *n = si->name;
    si->a = si->b = si->c = si->d = 0;
    si->bytes = up_bytes;
    if (strcmp(n, "range") == 0) {
        si->k = K_RANGE;
        si->a = opt_num(o, "bytes", 0);
        si->bytes = 8 + si->a;
        return 0;
    }
    if (strcmp(n, "batch") == 0) {
        si->k = K_BATCH;
        si->a = opt_num(o, "size", 1);
        si->bytes = up_bytes * si->a;
        return si->a * 8 + ALLOC_COST;
    }
    if (strcmp(n, "shuffle") == 0) {
        si->k = K_SHUFFLE;
        si->a = opt_num(o, "buffer", 1);
        return si->a * 8 + ALLOC_COST;
    }
    if (strcmp(n, "echo") == 0) {
        si->k = K_ECHO;
        si->a = opt_num(o, "factor", 2);
        si->b = opt_num(o, "shuffle", 0);
        si->c = opt_num(o, "max", 8);
        si->d = opt_num(o, "pool", 64);
        double cost = si->b * 8 + ALLOC_COST;
        if (si->a == 0) /* auto: a pool, and max lists of pool entries */
            cost += si->d * 32 + si->c * (si->d * 8 + ALLOC_COST);
        return cost;
    }
    if (strcmp(n, "prefetch") == 0) {
        si->k = K_PREFETCH;
        si->a = opt_num(o, "depth", 2);
        return si->a * 32 + ALLOC_COST;
    }
    if (strcmp(n, "map") == 0 || strcmp(n, "random_crop") == 0 ||
        strcmp(n, "flip") == 0) {
        si->k = K_MAP;
        si->a = opt_num(o, "threads", 1);
        if (strcmp(opt_str(o, "fn"), "to_f32") == 0)
            si->bytes = up_bytes * 4;
        return si->a * 16 * 64 + ALLOC_COST;
    }
    /* image stages: an output of at most 4 bytes an element (8 for cast
     * to i64); the resizing ones emit height x width x (channels, at most
     * the upstream's bytes) */
    if (strcmp(n, "decode") == 0 || strcmp(n, "normalize") == 0 ||
        strcmp(n, "to_chw") == 0 || strcmp(n, "cast") == 0 ||
        strcmp(n, "resize") == 0 || strcmp(n, "random_resized_crop") == 0 ||
        strcmp(n, "decode_crop") == 0) {
        si->k = K_MAP;
        si->a = opt_num(o, "threads", 1);
        si->bytes = up_bytes * 8;
        if (strcmp(n, "resize") == 0 || strcmp(n, "random_resized_crop") == 0 ||
            strcmp(n, "decode_crop") == 0) {
            double side = opt_num(o, "size", 0);
            double h = opt_num(o, "height", 0), w = opt_num(o, "width", 0);
            si->bytes = (h ? h : side) * (w ? w : side) * 4 * up_bytes;
        }
        return si->a * 16 * 64 + ALLOC_COST;
    }
    /* tfexample: a byte of the record becomes at most 8 (a varint to an
     * i64); corner_boxes: four f32 lists become one f32 [n,4], fewer */
    if (strcmp(n, "tfexample") == 0 || strcmp(n, "corner_boxes") == 0) {
        si->k = K_MAP;
        si->a = opt_num(o, "threads", 1);
        si->bytes = up_bytes * 8;
        return si->a * 16 * 64 + ALLOC_COST;
    }
    if (strcmp(n, "take") == 0) {
        si->k = K_TAKE;
        si->a = opt_num(o, "count", 0);
        return 0;
    }
    if (strcmp(n, "repeat") == 0) {
        si->k = K_REPEAT;
        return 0;
    }
    si->k = K_UNBOUNDED;
    /* sources of many files expand their list when created (and are never
     * pulled: they read files or URLs) */
    const char *list = strcmp(n, "tar") == 0 ? "urls"
                       : strcmp(n, "tfrecord") == 0 || strcmp(n, "cifar") == 0 ||
                               strcmp(n, "npy") == 0
                           ? "files"
                           : NULL;
    size_t count = 0, bytes = 0;
    ef__err err;
    if (list &&
        ef__paths_count(opt_str(o, list), n, &count, &bytes, &err) == EF_OK)
        return (double)count * (sizeof(char *) + 8) + (double)bytes +
               ALLOC_COST;
    return 0;
}

static int scan_stage(void *arg, const ef__spec_stage *sp, ef__err *err)
{
    scan *sc = arg;
    char name[64]; /* truncated as pipeline.c does */
    size_t len = sp->name_len < sizeof name ? sp->name_len : sizeof name - 1;
    memcpy(name, sp->name, len);
    name[len] = '\0';
    const ef__stage_def *def = ef__stage_find(name);
    if (!def || sc->n >= MAX_STAGES)
        return ef__err_set(err, EF_ESPEC, "scan: the parse stops here");
    ef__opts o;
    int rc = ef__opts_parse(&o, def, sp->opts, sp->opts_len, err);
    if (rc != EF_OK)
        return rc;
    double up_bytes = sc->n > 0 ? sc->st[sc->n - 1].bytes : 0;
    stage_info *si = &sc->st[sc->n++];
    si->name = def->info.name;
    sc->create_cost += describe(si, &o, up_bytes);
    ef__opts_free(&o);
    if (sc->create_cost > CREATE_BUDGET) {
        sc->too_costly = 1;
        return ef__err_set(err, EF_ESPEC, "scan: too costly");
    }
    return EF_OK;
}

/* The work `pulls` next() calls cause, walking from the consumer up:
 * `demand` items are asked of each stage, which is reset `resets` times;
 * every stage is counted as if it touched each byte of what it emits. */
static double pull_work(const scan *sc, double pulls)
{
    double demand = pulls, resets = 0, work = 0;
    for (int i = sc->n - 1; i >= 0; i--) {
        const stage_info *s = &sc->st[i];
        double passes = 1 + resets;
        work += demand * (1 + s->bytes / 64);
        switch (s->k) {
        case K_RANGE:
            break;
        case K_BATCH:
            demand *= s->a;
            break;
        case K_SHUFFLE:
            demand += s->a * passes;
            break;
        case K_ECHO:
            demand += (s->b + (s->a == 0 ? s->d : 0)) * passes;
            if (s->a == 0)
                work += THREAD_COST * passes;
            break;
        case K_PREFETCH:
            demand += s->a * passes;
            work += THREAD_COST * passes;
            break;
        case K_MAP:
            demand += s->a * 17 * passes;
            work += s->a * THREAD_COST * passes;
            break;
        case K_TAKE:
            demand = fmin(demand, s->a * passes);
            break;
        case K_REPEAT:
            /* each pass gives at least one item or ends the repeat */
            resets += demand + 1;
            demand += demand + 1;
            break;
        case K_UNBOUNDED:
            return INFINITY;
        }
    }
    return work;
}

/* Counts the stages of `spec` as ef__spec_parse splits them. */
static int count_stages(const char *spec)
{
    int n = 1, quoted = 0;
    for (const char *p = spec; *p; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (*p == '|' && !quoted)
            n++;
    }
    return n;
}

static void check_message(const ef_pipeline *p)
{
    fuzz_check_message(ef_pipeline_error(p), EF__ERR_MAX, NULL);
}

/* Parses `spec` onto `p` (scanned first); returns 0 when it was skipped as
 * too costly, else 1. */
static int parse_checked(ef_pipeline *p, scan *sc, const char *spec)
{
    int before = ef_pipeline_stage_count(p);
    CHECK(before == sc->n);
    ef__err err;
    ef__err_clear(&err);
    ef__spec_parse(spec, scan_stage, sc, &err);
    if (sc->too_costly) {
        if (verbose())
            fprintf(stderr, "skip \"%s\": too costly to create\n", spec);
        return 0;
    }

    int rc = ef_pipeline_parse(p, spec);
    int after = ef_pipeline_stage_count(p);
    if (verbose())
        fprintf(stderr, "parse \"%s\": %s %s\n", spec, ef_status_name(rc),
                ef_pipeline_error(p));
    if (rc != EF_OK) {
        CHECK(rc < 0);
        CHECK(after == before);
        check_message(p);
        sc->n = before; /* nothing was committed */
        return 1;
    }
    CHECK(after == before + count_stages(spec));
    CHECK(after == sc->n);
    for (int i = 0; i < after; i++) {
        ef_stage_stats ss;
        CHECK(ef_pipeline_stage_stats(p, i, &ss) == EF_OK);
        CHECK(ss.name && strcmp(ss.name, sc->st[i].name) == 0);
    }
    return 1;
}

/* where check_sample's reads go, so they are not optimised away */
static volatile unsigned char touched;

static void check_sample(const ef_sample *s)
{
    ef_sample_id id = ef_sample_identity(s);
    CHECK(id.index >= 0 && id.epoch >= 0 && id.echo_copy >= 0);
    int nf = ef_sample_field_count(s);
    CHECK(nf >= 0 && nf <= EF_MAX_FIELDS);
    for (int f = 0; f < nf; f++) {
        ef_tensor t;
        CHECK(ef_sample_field(s, f, &t) == EF_OK);
        CHECK(t.name && strnlen(t.name, EF_MAX_NAME) < EF_MAX_NAME);
        CHECK(ef_dtype_size(t.dtype) > 0);
        CHECK(t.ndim >= 0 && t.ndim <= EF_MAX_DIMS);
        size_t n = ef_dtype_size(t.dtype);
        for (int d = 0; d < t.ndim; d++) {
            CHECK(t.shape[d] >= 0);
            n *= (size_t)t.shape[d];
        }
        CHECK(n == t.nbytes);
        CHECK(t.nbytes == 0 || (t.data && t.buffer));
        /* touch every byte: a view into freed or short memory shows up
         * under ASan */
        unsigned char acc = 0;
        for (size_t j = 0; j < t.nbytes; j++)
            acc ^= ((const unsigned char *)t.data)[j];
        touched = acc;
    }
}

static void pull_checked(ef_pipeline *p, int pulls)
{
    int rc = EF_OK;
    uint64_t got = 0;
    for (int i = 0; i < pulls && rc == EF_OK; i++) {
        ef_sample *s = NULL;
        rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            CHECK(s != NULL);
            check_sample(s);
            ef_sample_free(s);
            got++;
        } else {
            CHECK(s == NULL);
            CHECK(rc == EF_END || rc < 0);
        }
    }
    if (rc != EF_OK) {
        if (rc < 0)
            check_message(p);
        /* the end, or a failure, is sticky */
        ef_sample *s = NULL;
        CHECK(ef_pipeline_next(p, &s) == rc && s == NULL);
    }
    if (verbose())
        fprintf(stderr, "  pulled %llu of %d: %s %s\n", (unsigned long long)got,
                pulls, ef_status_name(rc), rc < 0 ? ef_pipeline_error(p) : "");
    ef_pipeline_stats ps;
    CHECK(ef_pipeline_stats_get(p, &ps) == EF_OK);
    CHECK(ps.items == got);
    for (int i = 0; i < ef_pipeline_stage_count(p); i++) {
        ef_stage_stats ss;
        CHECK(ef_pipeline_stage_stats(p, i, &ss) == EF_OK);
        CHECK(ss.nextra >= 0 && ss.nextra <= EF_MAX_STAT_EXTRAS);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    /* two NUL-terminated specs: the second starts after the first NUL */
    char *text = malloc(size + 2);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = text[size + 1] = '\0';
    const char *second =
        memchr(text, '\0', size) ? text + strlen(text) + 1 : NULL;

    ef_pipeline *p = NULL;
    CHECK(ef_pipeline_create(&p) == EF_OK && p);
    scan *sc = calloc(1, sizeof *sc);
    int go = sc && parse_checked(p, sc, text);
    if (go && second)
        go = parse_checked(p, sc, second);
    if (go) { /* with no stage, next() fails cleanly: checked too */
        static const int tries[] = {50, 10, 1};
        for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
            if (pull_work(sc, tries[i]) <= WORK_BUDGET) {
                pull_checked(p, tries[i]);
                break;
            }
        }
    }
    ef_pipeline_destroy(p);
    free(sc);
    free(text);
    return 0;
}
