/* SPDX-License-Identifier: Apache-2.0 */
/* The stage interface: a small vtable, typed options, and the helpers every
 * stage uses to pull from its upstream and keep its statistics.
 *
 * Threading: a stage is pulled by one thread at a time (its downstream's
 * thread, or under a lock held by a parallel map). Asynchronous stages own
 * threads of their own; cancel() must wake every one of them, destroy()
 * joins them. Statistics counters are read with relaxed atomics from
 * any thread; most have a single writer (ef__stat_add), and those marked
 * "several writers" are updated with atomic adds. */
#ifndef EF_PIPELINE_STAGE_H
#define EF_PIPELINE_STAGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/budget.h"
#include "core/err.h"
#include "core/rng.h"
#include "echoflow/echoflow.h"

/* ---- options ---------------------------------------------------- */

/* One option of a stage's schema: the fields of ef_option_info, which
 * the registry copies out for users (registry.c), and flags that stay
 * inside the library. Tables write one EF__OPT row per option. */
typedef struct {
    const char *name;
    ef_opt_type type;
    const char *default_value; /* NULL: required; "" for none */
    const char *help;
    double min, max; /* inclusive bounds for int, float and factor */
    unsigned flags;  /* the option flags below, ORed */
} ef__option_def;

/* Option flags, one bit each; the registry never shows them. */
enum {
    /* The option changes how fast the stage runs, never what it emits
     * (threads, queue depths, retries): ef__opts_format leaves it out,
     * so a state saved under one value restores under another. */
    EF__SPEED_ONLY = 1u << 0,
    /* The option says where a fresh pipeline starts (the service's first
     * epoch), which a restored state says itself: ef__opts_format leaves
     * it out too. */
    EF__START_ONLY = 1u << 1,
};

/* A row of an option table: EF__OPT(name, type, default, help, min, max)
 * as in ef_option_info, then optionally the option's flags, ORed
 * together. (The second macro gives flags 0 when none are written.) */
#define EF__OPT(...) EF__OPT_ROW(__VA_ARGS__, 0u, 0)
#define EF__OPT_ROW(name, type, dflt, help, min, max, flags, ...)             \
    {(name), (type), (dflt), (help), (min), (max), (flags)}

typedef union {
    int64_t i;
    double f; /* float, and factor (0 means "auto") */
    int b;
    const char *s; /* points into the stage's option storage */
} ef__opt_value;

/* at most 32: ef__opts.given holds a bit per option */
#define EF__MAX_OPTIONS 24

/* An option table's row count and the table, for ef__stage_info, checked
 * at compile time against EF__MAX_OPTIONS (a struct may hold a static
 * assertion, and sizeof makes it an expression). */
#define EF__OPTIONS(table)                                                     \
    (int)(sizeof(table) / sizeof((table)[0]) +                                 \
          0 * sizeof(struct {                                                  \
              _Static_assert(sizeof(table) / sizeof((table)[0]) <=             \
                                 EF__MAX_OPTIONS,                              \
                             #table " has more than EF__MAX_OPTIONS rows");    \
              int ok;                                                          \
          })),                                                                 \
        (table)

/* Options of one stage, checked against its schema and typed. */
typedef struct {
    int n;
    const ef__option_def *defs;
    ef__opt_value values[EF__MAX_OPTIONS];
    char *strings[EF__MAX_OPTIONS]; /* owned copies of string values */
    unsigned given;                 /* bit i: option i was in the text */
} ef__opts;

/* Int and int-or-auto options: 0 means "auto" (every such option's min
 * is at least 1). */
int64_t ef__opt_int(const ef__opts *o, const char *name);
double ef__opt_float(const ef__opts *o, const char *name);
int ef__opt_bool(const ef__opts *o, const char *name);
/* "" when the option has no value; never NULL. */
const char *ef__opt_string(const ef__opts *o, const char *name);
/* Factor options: 0 means "auto". */
double ef__opt_factor(const ef__opts *o, const char *name);
/* Whether the option was written in the spec (not left to its default). */
int ef__opt_given(const ef__opts *o, const char *name);
/* String option `name` of `stage`, which must be `a` or `b`: *is_a says
 * which. EF_ESPEC naming both otherwise. */
int ef__opt_choice(const ef__opts *o, const char *stage, const char *name,
                   const char *a, const char *b, int *is_a, ef__err *err);

/* ---- the per-pipeline context ------------------------------------ */

/* A C map callback named for the spec (ef_pipeline_bind_map). */
#define EF__MAP_NAME_MAX 64 /* names: at most EF__MAP_NAME_MAX - 1 bytes */
typedef struct {
    char name[EF__MAP_NAME_MAX];
    ef_map_fn fn;
    void *user;
    int used; /* a stage of the parse under way runs it */
} ef__bound_map;

typedef struct {
    ef__bound_map *v;
    int n, cap;
} ef__bound_maps;

typedef struct {
    uint64_t seed;
    atomic_int cancelled;
    pthread_mutex_t mu;       /* guards nothing but the wait below */
    pthread_cond_t cond;      /* signalled once on cancel */
    int skip_bad;             /* on_error=skip: drop bad samples, count them */
    _Atomic uint64_t skipped; /* bad samples dropped, all stages */
    pthread_mutex_t skip_mu;  /* guards skip_msgs */
    /* why the first EF_SKIPS_KEPT were dropped, in order; `skipped` grows
     * under skip_mu once the text is in */
    char skip_msgs[EF_SKIPS_KEPT][EF__ERR_MAX];
    /* on_error=skip: parts of the input (a shard, a file) whose unread
     * rest was given up, and the bytes of it not read where the part's
     * size was known; several writers */
    _Atomic uint64_t abandoned, lost_bytes;
    char abandon_msg[EF__ERR_MAX]; /* the first, guarded by skip_mu */
    /* ef__warn: the count, written under skip_mu and read by anyone, and
     * the first EF_WARNINGS_KEPT texts, guarded by skip_mu */
    _Atomic uint64_t warned;
    char warnings[EF_WARNINGS_KEPT][EF__ERR_MAX];
    int64_t shard_i, shard_n; /* ef_pipeline_set_shard(); n = 0: unset */
    ef__budget budget;        /* bytes held by queues and buffers */
    /* the names bound for the parse under way, which map stages created
     * by it look up; NULL outside ef_pipeline_parse (building thread) */
    ef__bound_maps *bound;
} ef__ctx;

/* Sleeps until the monotonic deadline; EF_ECANCELED if the pipeline is
 * stopped first. */
int ef__ctx_sleep_until(ef__ctx *ctx, uint64_t deadline_ns);
int ef__ctx_is_cancelled(ef__ctx *ctx);
/* The callback bound to `name` for the parse under way, marked used;
 * NULL when none is (or no parse is under way). */
const ef__bound_map *ef__ctx_use_map(ef__ctx *ctx, const char *name);

/* ---- stages ------------------------------------------------------ */

typedef struct ef__stage ef__stage;

/* Checkpoints (state.h). */
struct ef__state_out;
struct ef__state_in;
struct ef__ident;
struct ef__idents;
typedef struct ef__state_out ef__state_out;
typedef struct ef__state_in ef__state_in;

/* A map stage with threads=auto: `max` workers started, of which the
 * first `allowed` may take input; the pipeline's tuner (tune.c) sets
 * `allowed` from the measured costs. The stage writes busy_ns (several
 * writers: atomic adds); the tuner, on the consumer's thread, owns the
 * fields below it. */
typedef struct {
    int max;
    atomic_int allowed;       /* 1 <= allowed <= max */
    _Atomic uint64_t busy_ns; /* time inside the transform, all workers */
    /* after the tuner stored a new `allowed`: wakes workers that wait */
    void (*wake)(ef__stage *s);
    uint64_t seen_busy_ns; /* busy_ns at the tuner's last look */
    double cost;           /* ns of transform per consumer item (smoothed) */
} ef__auto_threads;

/* A stage's name, help and option schema: ef_stage_info over the
 * library's own option rows (the registry hands out public copies). */
typedef struct {
    const char *name;
    const char *help;
    int noptions;
    const ef__option_def *options;
} ef__stage_info;

typedef struct {
    ef__stage_info info; /* name, help, option schema */
    int is_source;      /* takes no upstream */
    /* Checks cross-option rules and allocates s->state. Options were
     * already type- and range-checked. */
    int (*create)(ef__stage *s, const ef__opts *o, ef__err *err);
    /* Called once the pipeline is complete, before any stage opens: a
     * stage may tell its upstream how it is consumed. Optional. */
    void (*link)(ef__stage *s);
    /* Told by link(), before open: this stage's consumer is a batch of n,
     * so an ordered map stage may write its outputs into the batch's
     * buffers (pipeline/slabs.h). Optional. */
    void (*feeds_batch)(ef__stage *s, int64_t n);
    /* Starts threads. The upstream is already open. Optional. */
    int (*open)(ef__stage *s, ef__err *err);
    /* The next item into *out: EF_OK, EF_END, or an error in err. */
    int (*next)(ef__stage *s, ef_sample **out, ef__err *err);
    /* Like next but never blocks: EF_AGAIN when nothing is ready. Only
     * stages with a queue offer it. Optional. */
    int (*poll)(ef__stage *s, ef_sample **out, ef__err *err);
    /* Starts a new pass numbered `epoch` after EF_END. Optional: the
     * default resets the upstream. */
    int (*reset)(ef__stage *s, int64_t epoch, ef__err *err);
    /* Wakes every thread and waiter; must not block. Optional. */
    void (*cancel)(ef__stage *s);
    /* Joins threads and frees the state. Optional. */
    void (*destroy)(ef__stage *s);
    /* Adds stage-specific figures to out->extra. Optional. */
    void (*stats)(const ef__stage *s, ef_stage_stats *out);
    /* ---- checkpoints (state.h, pipeline_state.c) ----
     * Stops the stage's threads from pulling its upstream until resume(),
     * waiting for pulls under way: what it took from upstream is then
     * fixed. Called from the last stage to the first. Optional. */
    void (*pause)(ef__stage *s);
    void (*resume)(ef__stage *s);
    /* Writes the stage's own record: cursors, counters, RNG counters and
     * the identities of the items it holds. Items taken from the upstream
     * and not handed on yet go to ef__state_replay() instead, in the order
     * the stage would take them again. An error (EF_EUNSUPPORTED) for a
     * stage whose position cannot be saved. Optional: no record. */
    int (*save)(ef__stage *s, ef__state_out *o, ef__err *err);
    /* Reads that record back, before the pipeline opens. Held items are
     * read again with ef__stage_fetch(s->up, ...). Optional: the record
     * must then be empty. */
    int (*restore)(ef__stage *s, ef__state_in *in, ef__err *err);
    /* The item this stage emitted with identity `d`, made again: a
     * source reads the record, a transform applies itself to the
     * upstream's item. Thread-safe, usable before open. Optional: the
     * upstream's item, unchanged. Sources without one cannot restore. */
    int (*fetch)(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                 ef__err *err);
    /* Values the consumer measured per item (ef_pipeline_feedback), from
     * any thread; arguments already checked. */
    void (*feedback)(ef__stage *s, const ef_sample_id *ids,
                     const double *values, size_t n);
    /* What uses those values (an echo stage's policy name, static or
     * the stage's), or NULL where the stage ignores them
     * (ef_pipeline_wants_feedback). Optional: ignores them. */
    const char *(*listens)(const ef__stage *s);
    /* The items a whole pass of this stage yields (ef_pipeline_length),
     * into *n, given `up`, its upstream's (a count, or EF__LENGTH_ENDLESS;
     * 0 for a source). EF_OK with *n a count or EF__LENGTH_ENDLESS (then,
     * where `up` was not endless, why in err, status left to the caller);
     * EF_EUNSUPPORTED with why in err ("<stage>: ...") where the count is
     * not known in advance; another error where finding it failed (a
     * file that cannot be read). Called on the consumer's thread, before
     * open and after, never with an unknown `up`. Optional: a source
     * without one is unknown; any other stage yields as many items as
     * its upstream. Under on_error=skip a count is the pass with nothing
     * dropped, an upper bound. */
    int (*length)(ef__stage *s, int64_t up, int64_t *n, ef__err *err);
    /* Sources: the name of part `part` of the input (a sample's
     * origin.part: the file or shard's path or URL), for messages about
     * the sample (ef__stage_where); NULL when unknown. Borrowed, alive as
     * long as the stage. Optional. */
    const char *(*part_name)(const ef__stage *s, int64_t part);
    /* Sources whose items' index is (part << 32) + the position in that
     * part: messages about an item name the position in its file. */
    int index_in_part;
    /* Sources whose state names what the consumer was handed, not what
     * the stages after them hold (the `service`): ef_pipeline_next tells
     * delivered() each item it hands out, and a restore deals everything
     * else again from the source, so the stages after it save no record
     * and restart as built (pipeline_state.c). */
    void (*delivered)(ef__stage *s, const ef_sample *out);
    /* Sources whose save may be a collective among processes (the
     * `service` read by several trainers): each process must save at
     * every checkpoint, even one that handed out nothing since its last,
     * so a state is kept only from a size query to the save that follows
     * it (pipeline_state.c). */
    int save_collective;
} ef__stage_def;

/* A pass with no end (length() of repeat without a count). */
#define EF__LENGTH_ENDLESS (-1)

struct ef__stage {
    const ef__stage_def *def;
    ef__stage *up; /* NULL for sources */
    ef__ctx *ctx;
    int index;     /* position in the pipeline, for RNG keys */
    int64_t epoch; /* current pass, set by reset */
    int ended;     /* the last pull returned EF_END (sticky until reset) */
    void *state;
    ef__opts opts;
    void (*user_fn)(void); /* the C callback of a map or source stage */
    void *user_data;
    /* statistics: one writer each, see ef__stat_add */
    _Atomic uint64_t items_in, items_out, wait_up_ns, wait_down_ns;
    _Atomic uint64_t skipped; /* bad samples dropped (several writers) */
    _Atomic uint64_t abandoned, lost_bytes; /* see ef__ctx (several writers) */
    /* the counter of time spent inside this stage's next() by whoever pulls
     * it (the next stage's wait_up_ns, or the consumer's wait); set before
     * open */
    const _Atomic uint64_t *pulled_ns;
    /* the consumer's waiting inside ef_pipeline_next; set before open */
    const struct ef__consumer_wait *consumer_wait;
    /* for the stats: workers allowed now (map stages) and queue depth
     * now (prefetch); 0 where the stage has none */
    atomic_int threads_now, depth_now;
    ef__auto_threads *auto_threads; /* NULL unless threads=auto */
    /* after a restore: items this stage had taken from its upstream and
     * not handed on, which its next pulls take again (by identity) before
     * the upstream's own; see ef__stage_pull. Guarded like the pulls. */
    struct ef__idents *replay;
};

/* Pulls the next item from s->up, timing the wait into s->wait_up_ns and
 * counting items. Once the upstream has ended, returns EF_END without
 * calling it again. */
int ef__stage_pull(ef__stage *s, ef_sample **out, ef__err *err);
/* The item stage `s` emitted with identity `d`, made again (see the
 * def's fetch); for restores. */
int ef__stage_fetch(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                    ef__err *err);
/* Non-blocking pull through the upstream's poll(). */
int ef__stage_poll(ef__stage *s, ef_sample **out, ef__err *err);
/* Starts pass `epoch` of `s` and everything above it (after EF_END). */
int ef__stage_reset(ef__stage *s, int64_t epoch, ef__err *err);
/* Resets only the stages above `s` (for stages with a reset of their own). */
int ef__stage_reset_upstream(ef__stage *s, int64_t epoch, ef__err *err);
/* Applies the pipeline's error policy to a failure about one sample (or
 * one unreadable part of the input) described by err. With on_error=skip
 * and a status about the data (EF_EFORMAT, EF_EIO, EF_ESHAPE,
 * EF_ECALLBACK), counts the skip, keeps the first message, clears err and
 * returns 1: the caller drops what failed and goes on. Otherwise returns 0
 * and the caller fails as usual. Thread-safe. */
int ef__stage_skip(ef__stage *s, ef__err *err);
/* The same policy for a failure that ends a whole part of the input (a
 * shard or file of `size` bytes, -1 when unknown) at byte `at` of it: under
 * skip, counts the part as abandoned and the bytes not read as lost, adds
 * "<part> abandoned at byte N of SIZE" to the message, keeps the first,
 * clears err and returns 1. */
int ef__stage_abandon(ef__stage *s, ef__err *err, const char *part,
                      uint64_t at, int64_t size);
/* Gives a warning (ef_pipeline_warning): counts it, keeps its text while
 * fewer than EF_WARNINGS_KEPT were given. Thread-safe. */
void ef__warn(ef__ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Checks a sample that stage `from` handed over against the memory
 * budget: one larger than the whole budget is EF_ENOMEM, "<stage>: sample
 * N: B bytes, over the memory budget ...", and *smp is freed and set to
 * NULL. Every hand-over checks (ef__stage_pull, ef__stage_poll, and the
 * pipeline's own next), so the budget bounds the items no queue sees: a
 * batch, a map's output, a decoded image. Not a bad sample: skip does not
 * pass over it. */
int ef__stage_check_size(const ef__stage *from, ef_sample **smp, ef__err *err);
/* EF_ECANCELED, with the one message every stage gives when the
 * pipeline is stopped under it: "<stage>: the pipeline was stopped". */
int ef__stage_stopped(const ef__stage *s, ef__err *err);
/* Where sample `smp`, met at stage `s`, came from, for a message about
 * it: "item N (epoch E)", then the source's name of its part ("file
 * 'data/a.tar'") and its `__key__` ("key 'n0001'") where known. Never
 * fails; truncated to cap. */
void ef__stage_where(const ef__stage *s, const ef_sample *smp, char *buf,
                     size_t cap);
/* Keyed generator for a decision of stage `s` about a sample. */
void ef__stage_rng(const ef__stage *s, ef__rng *r, ef_sample_id id);

static inline void ef__stat_add(_Atomic uint64_t *c, uint64_t n)
{
    /* single writer: a relaxed load and store, no locked instruction */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t ef__stat_get(const _Atomic uint64_t *c)
{
    return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

/* The consumer's time inside ef_pipeline_next: the waits that returned,
 * and the start of the one in progress (0: none), so that a reading
 * taken during a long wait counts it (the echo stage's R estimate). */
typedef struct ef__consumer_wait {
    _Atomic uint64_t done_ns, since_ns;
} ef__consumer_wait;

/* The consumer's waiting up to now (ef__timer_ns). */
static inline uint64_t ef__consumer_waited_ns(const ef__consumer_wait *w,
                                              uint64_t now)
{
    uint64_t since = ef__stat_get(&w->since_ns);
    uint64_t done = ef__stat_get(&w->done_ns);
    return done + (since && now > since ? now - since : 0);
}

/* Appends an extra figure to a stats record (ignored when full). */
void ef__stats_extra(ef_stage_stats *st, const char *key, double value);

/* ---- sharding ---------------------------------------------------- */

/* A source's share of the data, from its `shard` option "I/N": this
 * process reads the parts p with p % n == i. */
typedef struct {
    int64_t i, n;
} ef__shard;

/* The share stage `s` reads: its `shard` option ("I/N", 0 <= I < N), or
 * the pipeline's (ef_pipeline_set_shard), which a source's own option
 * other than the default 0/1 contradicts. */
int ef__shard_parse(const ef__stage *s, const ef__opts *o, ef__shard *out,
                    ef__err *err);

/* How many of `records` items (numbered 0 to records - 1) part sh->i of
 * sh->n holds: those r with r % n == i. */
int64_t ef__shard_count(const ef__shard *sh, int64_t records);

/* Shuffles order[0..n) in place for pass `epoch` of source s, with a
 * generator keyed by the seed, the stage and the epoch: every process
 * of a sharded job and every restore draws the same order. */
void ef__shard_shuffle(const ef__stage *s, int64_t epoch, int64_t *order,
                       size_t n);

/* The option every source declares; its default reads everything. */
#define EF__SHARD_OPTION                                                       \
    EF__OPT("shard", EF_OPT_STRING, "0/1",                                     \
            "I/N: read only part I of N (0 <= I < N), for N processes", 0, 0)

/* ---- creation ---------------------------------------------------- */

/* Parses `text` (len bytes of "key=value,..." or a bare first value; may be
 * empty) against the stage's schema. On error `o` holds nothing. */
int ef__opts_parse(ef__opts *o, const ef__stage_def *def, const char *text,
                   size_t len, ef__err *err);
void ef__opts_free(ef__opts *o);
/* The options that shape the stage's output as "name=value,...", every
 * one spelled out (defaults too), for comparing a saved state with the
 * pipeline; options flagged EF__SPEED_ONLY are left out. */
void ef__opts_format(const ef__opts *o, char *buf, size_t cap);
/* `spec` as its stages' names and ef__opts_format texts joined by " | "
 * into buf (cap bytes): two specs that give the same samples (spacing,
 * a bare first value, a default spelled out, 08 for 8) read alike. */
int ef__spec_canonical(const char *spec, char *buf, size_t cap, ef__err *err);
/* Whether two processes' values of a setting (ef_service_hello) agree:
 * the same text, the same number however written, or for "the spec" the
 * same ef__spec_canonical text. */
int ef__setting_same(const char *name, const char *a, const char *b);

/* A new stage: options parsed and checked, state created. The caller owns
 * *out (ef__stage_free). */
int ef__stage_create(ef__stage **out, const ef__stage_def *def,
                     const char *opts, size_t len, ef__ctx *ctx,
                     void (*fn)(void), void *user, ef__err *err);
void ef__stage_free(ef__stage *s);
/* For a create(): s->state, `size` zeroed bytes, freed by the stage's
 * destroy(). NULL with "<stage>: out of memory" in err. */
void *ef__stage_new_state(ef__stage *s, size_t size, ef__err *err);

/* ---- the registry ------------------------------------------------ */

const ef__stage_def *ef__stage_find(const char *name);

/* One per stage file (stages/list.h). */
#define EF_STAGE(folder, name) extern const ef__stage_def ef__stage_##name;
#include "stages/list.h"
#undef EF_STAGE
/* C callback sources: not in the registry, added by
 * ef_pipeline_add_source() only. */
extern const ef__stage_def ef__stage_source;

#endif
