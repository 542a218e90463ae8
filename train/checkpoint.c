/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints of a training run (see checkpoint.h for the format). */
#include "checkpoint.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h" /* the library's own, src/common/ */
#include "crc32c.h"

#define MAGIC "EFTCKPT" /* and its terminating zero: 8 bytes */
#define VERSION_ONE 1   /* one process reading one partition */
#define VERSION_PARTS 2 /* partitions: each one's part */
#define HEADER 24 /* magic, version, partitions, payload bytes */
#define TRAILER 4 /* the CRC */
#define MAX_SETTINGS 64

static int fail(char *err, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- hashes ---------------------------------------------------------- */

uint64_t eft_hash(uint64_t h, const void *data, size_t n)
{
    /* each step is a bijection of the state for a given word, so two
       inputs that differ in one word always hash apart */
    const unsigned char *p = data;
    h ^= (uint64_t)n * 0xff51afd7ed558ccdull;
    for (;; p += 8, n -= 8) {
        uint64_t w = 0;
        if (n)
            memcpy(&w, p, n < 8 ? n : 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
        if (n <= 8)
            return h;
    }
}

uint64_t eft_model_hash(eft_model *m)
{
    uint64_t h = 0;
    for (int i = 0; i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        h = eft_hash(h, v, n * sizeof *v);
    }
    return h;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* ---- the settings a checkpoint must share with the run ---------------- */

enum { SET_INT = 0, SET_FLOAT = 1 };

typedef struct {
    const char *name;
    int kind;
    uint64_t i; /* SET_INT */
    double f;   /* SET_FLOAT */
} setting;

static setting int_setting(const char *name, uint64_t v)
{
    return (setting){name, SET_INT, v, 0};
}

static setting float_setting(const char *name, double v)
{
    return (setting){name, SET_FLOAT, 0, v};
}

/* The run's settings into s[]; returns their count. */
static int settings_of(const eft_run_id *id, setting *s)
{
    const eft_config *c = id->cfg;
    int n = 0;
    s[n++] = int_setting("model", (uint64_t)c->arch);
    s[n++] = int_setting("batch", (uint64_t)c->batch);
    s[n++] = int_setting("seed", c->seed);
    s[n++] = float_setting("lr", c->lr);
    s[n++] = float_setting("momentum", c->momentum);
    s[n++] = float_setting("weight-decay", c->weight_decay);
    s[n++] = int_setting("nesterov", (uint64_t)c->nesterov);
    s[n++] = int_setting("schedule", (uint64_t)c->schedule);
    s[n++] = int_setting("warmup", (uint64_t)c->warmup_steps);
    s[n++] = float_setting("target-acc", c->target_acc);
    s[n++] = int_setting("eval-every", (uint64_t)c->eval_every);
    s[n++] = int_setting("max-fresh", (uint64_t)c->max_fresh);
    s[n++] = float_setting("mean", c->mean);
    s[n++] = float_setting("std", c->std);
    s[n++] = int_setting("held-out set", id->test_hash);
    assert(n <= MAX_SETTINGS);
    return n;
}

/* A setting's value as the user would write it. */
static void describe(const setting *s, char *buf, size_t len)
{
    if (!strcmp(s->name, "model"))
        snprintf(buf, len, "%s", eft_arch_name((eft_arch)s->i));
    else if (!strcmp(s->name, "schedule"))
        snprintf(buf, len, "%s",
                 s->i == EFT_LR_CONSTANT ? "constant" : "linear");
    else if (!strcmp(s->name, "held-out set"))
        snprintf(buf, len, "hash %016llx", (unsigned long long)s->i);
    else if (s->kind == SET_FLOAT) /* the shortest that reads back */
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, len, "%.*g", digits, s->f);
            if (strtod(buf, NULL) == s->f)
                break;
        }
    else if (!strcmp(s->name, "seed"))
        snprintf(buf, len, "%llu", (unsigned long long)s->i);
    else
        snprintf(buf, len, "%lld", (long long)s->i);
}

/* ---- writing ----------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} wbuf;

/* Room for n more bytes; the space is written by the caller. */
static unsigned char *room(wbuf *b, size_t n)
{
    if (!b->p)
        return NULL;
    if (b->len + n > b->cap) {
        size_t cap = (b->len + n) * 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            free(b->p);
            b->p = NULL;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    unsigned char *at = b->p + b->len;
    b->len += n;
    return at;
}

static void put_le(wbuf *b, uint64_t v, int bytes)
{
    unsigned char *p = room(b, (size_t)bytes);
    for (int i = 0; p && i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(wbuf *b, uint64_t v)
{
    put_le(b, v, 8);
}

static void put_i64(wbuf *b, long v)
{
    put_le(b, (uint64_t)(int64_t)v, 8);
}

static void put_f64(wbuf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_le(b, u, 8);
}

static void put_floats(wbuf *b, const float *v, size_t n)
{
    unsigned char *p = room(b, n * 4);
    for (size_t i = 0; p && i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        p[4 * i] = (unsigned char)u;
        p[4 * i + 1] = (unsigned char)(u >> 8);
        p[4 * i + 2] = (unsigned char)(u >> 16);
        p[4 * i + 3] = (unsigned char)(u >> 24);
    }
}

static void put_bytes(wbuf *b, const void *data, size_t n)
{
    unsigned char *p = room(b, n);
    if (p && n)
        memcpy(p, data, n);
}

/* The counters, in the order read_counters() reads them. */
static void put_counters(wbuf *b, const eft_run_state *st)
{
    const eft_result *r = &st->res;
    const eft_progress *p = &r->final;
    put_u64(b, (uint64_t)r->reached);
    put_i64(b, r->fresh_to_target);
    put_i64(b, r->steps_to_target);
    put_f64(b, r->time_to_target_s);
    put_i64(b, r->diverged_at_step);
    put_i64(b, p->fresh);
    put_i64(b, p->steps);
    put_i64(b, p->examples);
    put_f64(b, p->train_s);
    put_f64(b, p->eval_s);
    put_f64(b, p->accuracy);
    put_f64(b, p->loss);
    put_f64(b, p->train_loss);
    put_u64(b, (uint64_t)p->evaluated);
    put_i64(b, r->local_fresh);
    put_i64(b, r->local_batches);
    put_u64(b, r->samples_hash);
    put_i64(b, st->next_eval);
    put_i64(b, st->evaluated_at);
    for (int i = 0; i < EFT_LOSS_WINDOW; i++)
        put_f64(b, st->loss_window[i]);
    put_u64(b, (uint64_t)st->finished);
}

/* The header and the payload up to the model's end into b: what every
 * version shares. `nparts`: 0 for version 1. */
static void encode_head(wbuf *b, uint32_t version, int nparts,
                        const eft_run_id *id, eft_model *m,
                        const eft_run_state *st)
{
    put_bytes(b, MAGIC, 8);
    put_le(b, version, 4);
    put_le(b, (uint64_t)nparts, 4);
    put_u64(b, 0); /* the payload's size, filled in by seal() */
    setting set[MAX_SETTINGS];
    int nset = settings_of(id, set);
    put_le(b, (uint64_t)nset, 4);
    for (int i = 0; i < nset; i++) {
        size_t len = strlen(set[i].name);
        put_le(b, len, 1);
        put_bytes(b, set[i].name, len);
        put_le(b, (uint64_t)set[i].kind, 1);
        if (set[i].kind == SET_FLOAT)
            put_f64(b, set[i].f);
        else
            put_u64(b, set[i].i);
    }
    put_counters(b, st);
    int nparams = eft_model_param_count(m);
    put_le(b, (uint64_t)nparams, 4);
    for (int i = 0; i < nparams; i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        put_u64(b, n);
        put_floats(b, v, n);
        put_floats(b, eft_model_momentum(m, i), n);
    }
}

/* The payload's size into the header and the CRC after it. */
static void seal(wbuf *b)
{
    if (!b->p)
        return;
    uint64_t payload = b->len - HEADER;
    for (int i = 0; i < 8; i++)
        b->p[HEADER - 8 + i] = (unsigned char)(payload >> (8 * i));
    put_le(b, ef__crc32c(0, b->p, b->len), 4);
}

/* ---- a partition's part ---------------------------------------------- */

static void put_le_at(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

void eft_part_encode(const eft_part *p, unsigned char *out)
{
    put_le_at(out, (uint64_t)(int64_t)p->fresh);
    put_le_at(out + 8, (uint64_t)(int64_t)p->batches);
    put_le_at(out + 16, p->samples_hash);
    put_le_at(out + 24, (uint64_t)(int64_t)p->feedback_values);
    put_le_at(out + 32, p->state_n);
    if (p->state_n)
        memcpy(out + EFT_PART_HEADER, p->state, p->state_n);
}

int eft_part_decode(const void *bytes, size_t n, eft_part *p)
{
    const unsigned char *b = bytes;
    if (n < EFT_PART_HEADER ||
        le64(b + 32) != (uint64_t)(n - EFT_PART_HEADER))
        return -1;
    p->fresh = (long)(int64_t)le64(b);
    p->batches = (long)(int64_t)le64(b + 8);
    p->samples_hash = le64(b + 16);
    p->feedback_values = (long)(int64_t)le64(b + 24);
    p->state = b + EFT_PART_HEADER;
    p->state_n = n - EFT_PART_HEADER;
    return 0;
}

size_t eft_part_size(const void *bytes, size_t n)
{
    const unsigned char *b = bytes;
    if (n < EFT_PART_HEADER ||
        le64(b + 32) > (uint64_t)(n - EFT_PART_HEADER))
        return 0;
    return EFT_PART_HEADER + (size_t)le64(b + 32);
}

/* ---- one run per path ------------------------------------------ */

static int lock_path(char *buf, size_t cap, const char *path)
{
    int n = snprintf(buf, cap, "%s.lock", path);
    return n >= 0 && (size_t)n < cap ? 0 : -1;
}

int eft_checkpoint_lock(const char *path, char *err, size_t len)
{
    char lp[4096];
    if (lock_path(lp, sizeof lp, path))
        return fail(err, len, "%s: the path is too long", path);
    /* the lock file may be unlinked by a run ending between our open and
     * our flock: then the lock held is on a file no one else finds, and
     * we try again on the new one */
    for (;;) {
        int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return fail(err, len, "%s: cannot create: %s", lp, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK)
                return fail(err, len,
                            "%s: another run is checkpointing to this path "
                            "(it holds %s); give each run its own "
                            "--checkpoint",
                            path, lp);
            return fail(err, len, "%s: cannot lock %s: %s", path, lp,
                        strerror(e));
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && stat(lp, &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            return fd;
        close(fd);
    }
}

void eft_checkpoint_unlock(const char *path, int fd)
{
    char lp[4096];
    if (fd < 0)
        return;
    /* unlinked while held: a run waiting to lock it sees it is gone */
    if (lock_path(lp, sizeof lp, path) == 0)
        unlink(lp);
    close(fd);
}

/* The message of a failed commit of the checkpoint file. */
static void commit_failure(const ef__atomic_file *a, char *err, size_t len)
{
    const char *why = strerror(a->error);
    switch (a->failed) {
    case EF__ATOMIC_RENAME:
        fail(err, len, "%s: cannot rename %s over it: %s", a->path, a->tmp,
             why);
        break;
    case EF__ATOMIC_SYNC_FOLDER:
        fail(err, len, "%s: cannot fsync its folder: %s", a->path, why);
        break;
    default:
        fail(err, len, "%s: cannot %s: %s", a->tmp,
             a->failed == EF__ATOMIC_FSYNC   ? "fsync"
             : a->failed == EF__ATOMIC_CLOSE ? "close"
                                             : "write",
             why);
    }
}

/* A buffer with room for the model's values and momentum and `more`. */
static wbuf buffer_for(eft_model *m, size_t more)
{
    size_t weights = 0;
    for (int i = 0; i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        weights += n;
    }
    wbuf b = {NULL, 0, weights * 8 + more + 4096};
    b.p = malloc(b.cap);
    return b;
}

/* Writes the sealed file in b to path, whole or not at all; frees b. */
static int write_whole(const char *path, wbuf *b, char *err, size_t len)
{
    /* this process's own temporary file: two runs saving to one path
       must not write into, or rename away, each other's */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >=
        (int)sizeof tmp) {
        free(b->p);
        return fail(err, len, "%s: checkpoint path too long", path);
    }
    if (!b->p)
        return fail(err, len, "%s: checkpoint: out of memory", path);
    ef__atomic_file a;
    if (ef__atomic_open(&a, path, NULL) != 0) {
        free(b->p);
        fail(err, len, "%s: cannot create: %s", a.tmp ? a.tmp : tmp,
             strerror(a.error));
        ef__atomic_abort(&a);
        return -1;
    }
    int rc = 0;
    if (fwrite(b->p, 1, b->len, a.f) != b->len) {
        rc = -1;
        fail(err, len, "%s: cannot write: %s", a.tmp, strerror(errno));
    } else if (ef__atomic_commit(&a) != 0) {
        rc = -1;
        commit_failure(&a, err, len);
    }
    free(b->p);
    ef__atomic_abort(&a);
    return rc;
}

int eft_checkpoint_save(const char *path, const eft_run_id *id, eft_model *m,
                        const eft_run_state *st, const void *pipe,
                        size_t pipe_n, char *err, size_t len)
{
    wbuf b = buffer_for(m, pipe_n);
    encode_head(&b, VERSION_ONE, 0, id, m, st);
    put_u64(&b, pipe_n);
    put_bytes(&b, pipe, pipe_n);
    seal(&b);
    return write_whole(path, &b, err, len);
}

int eft_checkpoint_save_parts(const char *path, const eft_run_id *id,
                              eft_model *m, const eft_run_state *st, int nparts,
                              const unsigned char *parts, const size_t *part_n,
                              char *err, size_t len)
{
    assert(nparts >= 1);
    size_t total = 0;
    for (int r = 0; r < nparts; r++)
        total += part_n[r] + 8;
    wbuf b = buffer_for(m, total);
    encode_head(&b, VERSION_PARTS, nparts, id, m, st);
    for (int r = 0; r < nparts; r++) {
        put_u64(&b, part_n[r]);
        put_bytes(&b, parts, part_n[r]);
        parts += part_n[r];
    }
    seal(&b);
    return write_whole(path, &b, err, len);
}

/* ---- reading ----------------------------------------------------------- */

/* A cursor over the payload; running past its end sets `bad`. */
typedef struct {
    const unsigned char *p;
    size_t len, at;
    int bad;
} rbuf;

static const unsigned char *take(rbuf *r, size_t n)
{
    if (r->bad || n > r->len - r->at) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *p = r->p + r->at;
    r->at += n;
    return p;
}

static uint64_t get_le(rbuf *r, int bytes)
{
    const unsigned char *p = take(r, (size_t)bytes);
    uint64_t v = 0;
    for (int i = 0; p && i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(rbuf *r)
{
    return get_le(r, 8);
}

static long get_i64(rbuf *r)
{
    return (long)(int64_t)get_le(r, 8);
}

static double get_f64(rbuf *r)
{
    uint64_t u = get_le(r, 8);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static void get_floats(const unsigned char *p, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = le32(p + 4 * i);
        memcpy(&out[i], &u, sizeof u);
    }
}

static void read_counters(rbuf *r, eft_run_state *st)
{
    eft_result *res = &st->res;
    eft_progress *p = &res->final;
    res->reached = get_u64(r) != 0;
    res->fresh_to_target = get_i64(r);
    res->steps_to_target = get_i64(r);
    res->time_to_target_s = get_f64(r);
    res->diverged_at_step = get_i64(r);
    p->fresh = get_i64(r);
    p->steps = get_i64(r);
    p->examples = get_i64(r);
    p->train_s = get_f64(r);
    p->eval_s = get_f64(r);
    p->accuracy = get_f64(r);
    p->loss = get_f64(r);
    p->train_loss = get_f64(r);
    p->evaluated = get_u64(r) != 0;
    res->local_fresh = get_i64(r);
    res->local_batches = get_i64(r);
    res->samples_hash = get_u64(r);
    st->next_eval = get_i64(r);
    st->evaluated_at = get_i64(r);
    for (int i = 0; i < EFT_LOSS_WINDOW; i++)
        st->loss_window[i] = get_f64(r);
    st->finished = get_u64(r) != 0;
}

/* Compares the file's settings with the run's: 0, or -1 naming the first
 * that differs. */
static int check_settings(rbuf *r, const char *path, const eft_run_id *id,
                          char *err, size_t len)
{
    setting mine[MAX_SETTINGS];
    int nmine = settings_of(id, mine);
    uint64_t n = get_le(r, 4);
    if (n > MAX_SETTINGS)
        return fail(err, len, "%s: corrupt: %llu settings", path,
                    (unsigned long long)n);
    int matched = 0, seen[MAX_SETTINGS] = {0};
    for (uint64_t i = 0; i < n && !r->bad; i++) {
        setting s = {0};
        char name[256];
        size_t nl = (size_t)get_le(r, 1);
        const unsigned char *np = take(r, nl);
        s.kind = (int)get_le(r, 1);
        if (s.kind == SET_FLOAT)
            s.f = get_f64(r);
        else
            s.i = get_u64(r);
        if (r->bad)
            break;
        memcpy(name, np, nl);
        name[nl] = '\0';
        s.name = name;
        const setting *m = NULL;
        for (int k = 0; k < nmine && !m; k++)
            if (!strcmp(mine[k].name, name)) {
                m = &mine[k];
                seen[k] = 1;
            }
        if (!m)
            return fail(err, len,
                        "%s: saved by a run with a setting this one lacks: "
                        "'%s'",
                        path, name);
        matched++;
        int same = m->kind == s.kind &&
                   (s.kind == SET_FLOAT ? memcmp(&m->f, &s.f, sizeof s.f) == 0
                                        : m->i == s.i);
        if (!same) {
            char was[64], now[64];
            describe(&s, was, sizeof was);
            describe(m, now, sizeof now);
            return fail(err, len,
                        "%s: saved by another run: %s %s there, %s here", path,
                        name, was, now);
        }
    }
    for (int k = 0; k < nmine && !r->bad && matched != nmine; k++)
        if (!seen[k]) {
            char now[64];
            describe(&mine[k], now, sizeof now);
            return fail(err, len,
                        "%s: saved by a run without the setting '%s' (%s "
                        "here)",
                        path, mine[k].name, now);
        }
    if (!r->bad && matched != nmine) /* a setting written twice */
        return fail(err, len,
                    "%s: saved by a run with %d of this one's %d settings",
                    path, matched, nmine);
    return r->bad
               ? fail(err, len, "%s: corrupt: cut short in the settings", path)
               : 0;
}

/* Reads the whole file into *data; 1 when it does not exist. */
static int read_file(const char *path, unsigned char **data, size_t *size,
                     char *err, size_t len)
{
    /* without blocking: a named pipe at path would wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return 1;
    if (fd < 0)
        return fail(err, len, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fail(err, len, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    unsigned char *p = malloc(n ? n : 1);
    if (!p) {
        close(fd);
        return fail(err, len, "%s: out of memory for %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    int saved = errno;
    close(fd);
    if (got != n) {
        free(p);
        return fail(err, len, "%s: cannot read: %s", path,
                    got < n ? strerror(saved) : "it changed size");
    }
    *data = p;
    *size = n;
    return 0;
}

/* Checks the envelope: magic, version, length, CRC. */
static int check_envelope(const unsigned char *p, size_t n, const char *path,
                          char *err, size_t len)
{
    if (n < 8 || memcmp(p, MAGIC, 8) != 0)
        return fail(err, len,
                    n < 8 ? "%s: truncated: %zu bytes, not even a checkpoint "
                            "header"
                          : "%s: not a checkpoint (no EFTCKPT header; %zu "
                            "bytes)",
                    path, n);
    if (n < HEADER)
        return fail(err, len,
                    "%s: truncated: %zu bytes, the header alone "
                    "is %d",
                    path, n, HEADER);
    uint32_t version = le32(p + 8);
    if (version != VERSION_ONE && version != VERSION_PARTS)
        return fail(err, len,
                    "%s: checkpoint format version %u; this build reads "
                    "versions %d and %d",
                    path, (unsigned)version, VERSION_ONE, VERSION_PARTS);
    uint64_t payload = (uint64_t)le32(p + 16) | (uint64_t)le32(p + 20) << 32;
    uint64_t whole = payload + HEADER + TRAILER; /* what the header says */
    if (payload > ((uint64_t)1 << 48))
        return fail(err, len, "%s: corrupt: its header says %llu bytes", path,
                    (unsigned long long)whole);
    if ((uint64_t)n < whole)
        return fail(err, len, "%s: truncated: %zu bytes, its header says %llu",
                    path, n, (unsigned long long)whole);
    if ((uint64_t)n > whole)
        return fail(err, len, "%s: corrupt: %zu bytes, its header says %llu",
                    path, n, (unsigned long long)whole);
    if (ef__crc32c(0, p, n - TRAILER) != le32(p + n - TRAILER))
        return fail(err, len,
                    "%s: corrupt: its checksum does not match its contents",
                    path);
    return 0;
}

/* Whether the file (its header at p, checked) was saved by a run of the
 * kind that reads it: one of `nparts` partitions, or 0 for one process
 * reading one (version 1). 0, or -1 naming both. */
static int check_partitions(const unsigned char *p, const char *path,
                            int nparts, char *err, size_t len)
{
    int parts = le32(p + 8) == VERSION_PARTS;
    uint32_t saved = le32(p + 12);
    if (parts && saved == 0)
        return fail(err, len, "%s: corrupt: a checkpoint of 0 partitions",
                    path);
    if (parts ? saved == (uint32_t)nparts : nparts == 0)
        return 0;
    char was[64], now[64];
    if (parts)
        snprintf(was, sizeof was, "%u partition%s", (unsigned)saved,
                 saved == 1 ? "" : "s");
    else
        snprintf(was, sizeof was, "one process outside mpirun, one partition");
    if (nparts)
        snprintf(now, sizeof now, "%d partition%s", nparts,
                 nparts == 1 ? "" : "s");
    else
        snprintf(now, sizeof now, "one process outside mpirun, one partition");
    return fail(err, len,
                "%s: saved by a run of %s; this run has %s (--partitions, by "
                "default one per process): resume it with the partitions it "
                "was saved with, on any number of processes that divides them",
                path, was, now);
}

/* What a checkpoint holds after the model: version 1's pipeline state, or
 * version 2's parts, one after another (`bytes`, allocated), with their
 * sizes (`part_n`, allocated; NULL for version 1). */
typedef struct {
    unsigned char *bytes;
    size_t n;
    size_t *part_n;
} tail;

/* Reads the tail of r into t: version 1's state, or `nparts` parts. */
static int read_tail(rbuf *r, int nparts, const char *path, tail *t, char *err,
                     size_t len)
{
    const size_t start = r->at;
    int count = nparts ? nparts : 1;
    if (nparts && !(t->part_n = calloc((size_t)nparts, sizeof *t->part_n)))
        return fail(err, len, "%s: out of memory", path);
    for (int k = 0; k < count && !r->bad; k++) {
        uint64_t n = get_u64(r);
        const unsigned char *part = take(r, (size_t)n);
        eft_part check;
        if (nparts && part && eft_part_decode(part, (size_t)n, &check))
            return fail(err, len,
                        "%s: corrupt: partition %d's part (%llu bytes) is not one",
                        path, k, (unsigned long long)n);
        if (nparts)
            t->part_n[k] = (size_t)n;
        t->n += (size_t)n;
    }
    if (r->bad || r->at != r->len)
        return fail(err, len, "%s: corrupt: %s", path,
                    r->bad ? "its contents end too soon"
                           : "bytes after its contents");
    t->bytes = malloc(t->n ? t->n : 1);
    if (!t->bytes)
        return fail(err, len, "%s: out of memory", path);
    /* the states or parts without the sizes between them */
    const unsigned char *at = r->p + start;
    size_t out = 0;
    for (int k = 0; k < count; k++) {
        size_t n = (size_t)le64(at);
        if (n)
            memcpy(t->bytes + out, at + 8, n);
        at += 8 + n;
        out += n;
    }
    return 0;
}

/* Reads the checkpoint at path, of a run of `nparts` partitions (0: one
 * process reading one, version 1), into m, *st and *t; as
 * eft_checkpoint_load. */
static int load(const char *path, const eft_run_id *id, int nparts,
                eft_model *m, eft_run_state *st, tail *t, char *err, size_t len)
{
    unsigned char *data = NULL;
    size_t size = 0;
    memset(t, 0, sizeof *t);
    int rc = read_file(path, &data, &size, err, len);
    if (rc != 0)
        return rc;
    rc = check_envelope(data, size, path, err, len);
    if (rc == 0)
        rc = check_partitions(data, path, nparts, err, len);
    rbuf r = {data + HEADER, rc == 0 ? size - HEADER - TRAILER : 0, 0, 0};
    if (rc == 0)
        rc = check_settings(&r, path, id, err, len);
    eft_run_state got;
    memset(&got, 0, sizeof got);
    int nparams = eft_model_param_count(m);
    const unsigned char *tensors[2 * EFT_MAX_LAYERS][2];
    if (rc == 0) {
        read_counters(&r, &got);
        uint64_t count = get_le(&r, 4);
        if (!r.bad && count != (uint64_t)nparams)
            rc = fail(err, len,
                      "%s: of another model: %llu tensors, the %s has %d", path,
                      (unsigned long long)count, eft_arch_name(m->arch),
                      nparams);
    }
    for (int i = 0; rc == 0 && i < nparams && !r.bad; i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        uint64_t count = get_u64(&r);
        if (!r.bad && count != n)
            rc = fail(err, len,
                      "%s: of another model: tensor %d has %llu values, "
                      "the %s's %zu",
                      path, i, (unsigned long long)count,
                      eft_arch_name(m->arch), n);
        else {
            tensors[i][0] = take(&r, n * 4);
            tensors[i][1] = take(&r, n * 4);
        }
    }
    if (rc == 0)
        rc = read_tail(&r, nparts, path, t, err, len);
    if (rc == 0) { /* every check passed: apply */
        for (int i = 0; i < nparams; i++) {
            float *v, *g;
            size_t n;
            eft_model_param(m, i, &v, &g, &n);
            get_floats(tensors[i][0], v, n);
            get_floats(tensors[i][1], eft_model_momentum(m, i), n);
        }
        *st = got;
    } else {
        free(t->bytes);
        free(t->part_n);
        memset(t, 0, sizeof *t);
    }
    free(data);
    return rc;
}

int eft_checkpoint_load(const char *path, const eft_run_id *id, eft_model *m,
                        eft_run_state *st, void **pipe, size_t *pipe_n,
                        char *err, size_t len)
{
    tail t;
    int rc = load(path, id, 0, m, st, &t, err, len);
    if (rc == 0) {
        *pipe = t.bytes;
        *pipe_n = t.n;
    }
    return rc;
}

int eft_checkpoint_load_parts(const char *path, const eft_run_id *id,
                              int nparts, eft_model *m, eft_run_state *st,
                              unsigned char **parts, size_t **part_n, char *err,
                              size_t len)
{
    assert(nparts >= 1);
    tail t;
    int rc = load(path, id, nparts, m, st, &t, err, len);
    if (rc == 0) {
        *parts = t.bytes;
        *part_n = t.part_n;
    }
    return rc;
}
