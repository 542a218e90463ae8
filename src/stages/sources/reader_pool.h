/* SPDX-License-Identifier: Apache-2.0 */
/* The kit of the sources that read parts (tar shards, single files) on a
 * pool of reader threads: the driver does the pass order, the threads,
 * the consumer's turns, the budget's waits, the error policy, checkpoints
 * of the readers' places and statistics once; a format
 * (ef__reader_format) lists the parts and reads one.
 *
 * shard=I/N keeps the parts p with p % N == I. Each pass reads the kept
 * parts in list order or shuffled by a generator keyed by (seed, stage,
 * epoch). R reader threads each read one part at a time into a queue of
 * `queue` items of their own. Ordered: reader k reads the pass's parts
 * k, k + R, k + 2R ... and the consumer takes one item from each reader
 * in turn, so the stream depends on the seed only. Unordered (where the
 * format has ordered=): a reader that finishes a part takes the next
 * unread one, and the consumer takes whatever sample is ready first.
 * poll() never blocks, so echo:factor=auto can follow.
 *
 * Memory: a reader charges the budget before it reads
 * (ef__reader_pool_hold) and hands the charge to its queue with the
 * sample. It waits for room first, unless the consumer waits for its
 * sample (ordered: the consumer's next item is the reader's next;
 * unordered: no reader has a sample ready, and this one is the one
 * reader let past), so the readers together hold the budget and one
 * sample at most.
 *
 * Errors: the format names a part that failed; under on_error=skip the
 * driver drops it (abandoned from where it stopped where the format
 * inflates, else skipped with an item without a sample, which keeps the
 * turns) and the reader goes on; otherwise the error goes through the
 * queue in order.
 *
 * Checkpoints (ordered only): the part list and the part, the parts'
 * compression as seen (where the format inflates), then the place of the
 * next item the consumer has not taken: where every part gives one item,
 * the position in the pass; otherwise, for each reader, the part's index
 * in the pass order, the byte offset where its next sample starts and
 * that sample's position in the part, then whose turn it is. What the
 * readers read ahead and the consumer has not taken is read again.
 *
 * Lock rules: each reader is a feed (feed.h) of one thread, with a queue
 * that has its own lock; the queues live as long as the stage, closed to
 * stop their readers and reopened for the next pass. `mu` guards
 * ready_seq (bumped after every push in unordered mode, so the consumer
 * can wait for "some queue has an item"). `wanted` and `ahead` are
 * atomics, which a reader waiting for room in the budget reads under the
 * budget's lock; whoever changes them notifies the budget after. No lock
 * is held while another is taken, and none while reading. The readers,
 * started by open() and reset(), end after handing over their END or an
 * error, or when their queue is closed; reset() and destroy() join them.
 *
 * A new format: a state struct whose first member is an ef__reader_pool,
 * an ef__reader_format, a create() that calls ef__reader_pool_create,
 * and a stage def with EF__READER_POOL_STAGE, its fetch and its length. */
#ifndef EF_STAGES_SOURCES_READER_POOL_H
#define EF_STAGES_SOURCES_READER_POOL_H

#include <stdatomic.h>

#include "io/paths.h"
#include "io/stream.h"
#include "pipeline/feed.h"
#include "pipeline/stage.h"
#include "stages/sources/checkpoint.h"

typedef struct ef__reader_pool ef__reader_pool;

/* Where a reader's next item starts: the part at index k of the pass
 * order, byte `offset` of it, the sample at `position` there (0, 0: the
 * part's start). */
typedef struct {
    size_t k;
    uint64_t offset;
    int64_t position;
} ef__pool_cursor;

typedef struct {
    ef__reader_pool *pool;
    ef__feed feed; /* finished: END or an error was taken */
    size_t next;   /* ordered: the reader's next index in the pass order */
    /* where its first part starts (a restore), set before the thread
     * starts and read by it once */
    uint64_t from_offset;
    int64_t from_position;
    /* consumer side (ordered): the next item not taken from it, and the
     * items taken this pass (a skipped part's too, unlike feed.taken) */
    ef__pool_cursor at;
    uint64_t took;
    /* reader thread only: items handed over this pass, and the bytes
     * charged to the budget for the one being read */
    uint64_t sent, held;
    /* statistics, written by the reader thread only */
    _Atomic uint64_t bytes, read_ns, retries, parts;
} ef__pool_reader;

/* Where a part that failed stopped: for ef__stage_abandon. */
typedef struct {
    uint64_t at;
    int64_t size; /* -1: unknown */
} ef__part_stop;

/* What a format says of itself and does. */
typedef struct {
    const char *unit;  /* a part's name: "shard", "file" */
    const char *units; /* its plural, also the statistic's name */
    /* the options that name the order's shuffle, the reader count and,
     * where the format has it (NULL: always ordered), ordered= */
    const char *shuffle_opt, *readers_opt, *ordered_opt;
    /* where a part that gets none says how many there are ("'urls'
     * lists") */
    const char *count_words;
    /* 1: every part gives one item (a sample, or one skipped), and the
     * place is a position in the pass; 0: a part gives samples whose
     * origin (its part and byte end) places the reader */
    int one_per_part;
    /* 1: the parts may be compressed (their kinds are saved); a failure
     * then abandons the rest of the part; 0: it skips the part */
    int inflates;
    /* Fills p->names (owned by the format) and p->sopts beyond the
     * defaults from the options. */
    int (*list)(ef__reader_pool *p, const ef__opts *o, ef__err *err);
    /* Reads part `part` on reader r's thread from byte `offset`, where
     * its sample at `position` starts (0, 0: all of it), handing items
     * over with ef__reader_pool_push. EF_OK when it was read to its end
     * (or dropped by the format itself); EF_ECANCELED when the readers
     * stop; otherwise an error in err, named, and *stop set where the
     * part stopped. */
    int (*read_part)(ef__pool_reader *r, int64_t part, uint64_t offset,
                     int64_t position, ef__part_stop *stop, ef__err *err);
    /* Frees what the format holds beyond the driver's (pool->names
     * included). */
    void (*destroy)(ef__reader_pool *p);
} ef__reader_format;

/* The driver's state: the first member of a format's. */
struct ef__reader_pool {
    const ef__reader_format *fmt;
    ef__stage *s;
    const char *name; /* the stage's, for messages */
    ef__paths names;  /* the parts, filled by the format */
    ef__shard part;
    size_t nkept;   /* the parts this process reads: i, i + n ... */
    int64_t *order; /* this pass's order of them */
    int64_t epoch;  /* this pass, as the readers see it */
    int ordered, shuffle, nreaders;
    size_t depth;
    ef__stream_opts sopts;     /* the format's; cancelled set to &stop */
    ef__comp_seen comp;        /* fmt->inflates: each part's compression */
    int restored;              /* the next start goes from the cursors */
    atomic_int stop;           /* readers stop reading (cancel, or reset) */
    _Atomic size_t next_part;  /* unordered: next index in the order */
    /* ordered: the item the consumer takes next, as (items taken from
     * its reader) * nreaders + the reader's index (see awaited) */
    _Atomic uint64_t wanted;
    /* unordered: the reader let past the budget while no sample is
     * ready, or -1 */
    atomic_int ahead;
    ef__pool_reader *readers;
    /* consumer side */
    int rr;                  /* the reader to take from next */
    int alive;               /* readers that have not ended */
    ef__pool_reader *failed; /* the one that handed over an error */
    /* see the lock rules above */
    pthread_mutex_t mu;
    pthread_cond_t ready;
    uint64_t ready_seq;
};

/* For a format's create(): sets s->state to `size` zeroed bytes (at
 * least an ef__reader_pool, its first member), reads the shard, order
 * and queue options, lists the parts and makes the readers. On failure
 * s->state may be set; the stage's destroy frees it. */
int ef__reader_pool_create(ef__stage *s, const ef__opts *o,
                           const ef__reader_format *fmt, size_t size,
                           ef__err *err);

/* ---- for the format's read_part ------------------------------------ */

/* Charges n more bytes for what r reads, waiting for room (see above);
 * r NULL (a fetch, whose caller holds the sample) charges nothing. EF_OK,
 * or EF_ECANCELED when the readers stop. */
int ef__reader_pool_hold(ef__pool_reader *r, uint64_t n);
/* Gives back what r holds for a sample it does not hand over. */
void ef__reader_pool_let_go(ef__pool_reader *r);
/* Hands a sample to the consumer (NULL: an item without one, which keeps
 * the turns), its charge made `charge` bytes from what r holds. EF_OK, or
 * EF_ECANCELED (the sample freed) when the queue was closed. */
int ef__reader_pool_push(ef__pool_reader *r, ef_sample *smp, uint64_t charge);
/* Adds what stream s read since *prev to r's statistics (r may be NULL). */
void ef__reader_pool_count(ef__pool_reader *r, ef__stream *s,
                           ef__stream_stats *prev);
/* Adds "<stage>: <unit> N" to a message about part `part`. */
void ef__reader_pool_name_part(const ef__reader_pool *p, ef__err *err,
                               int64_t part);
/* A failure rc of part `part`: gives err its name and the reason where it
 * has no message of its own, then names the part. */
void ef__reader_pool_name_failure(const ef__reader_pool *p, ef__err *err,
                                  int rc, int64_t part);
/* Whether `part` is one this process reads. */
int ef__reader_pool_keeps(const ef__reader_pool *p, int64_t part);

/* ---- the stage ------------------------------------------------------- */

int ef__reader_pool_open(ef__stage *s, ef__err *err);
int ef__reader_pool_next(ef__stage *s, ef_sample **out, ef__err *err);
int ef__reader_pool_poll(ef__stage *s, ef_sample **out, ef__err *err);
int ef__reader_pool_reset(ef__stage *s, int64_t epoch, ef__err *err);
void ef__reader_pool_cancel(ef__stage *s);
void ef__reader_pool_destroy(ef__stage *s);
void ef__reader_pool_stats(const ef__stage *s, ef_stage_stats *out);
int ef__reader_pool_save(ef__stage *s, ef__state_out *o, ef__err *err);
int ef__reader_pool_restore(ef__stage *s, ef__state_in *in, ef__err *err);
/* The kept parts: the sample count of a format whose parts each give
 * one. */
int ef__reader_pool_length(ef__stage *s, int64_t up, int64_t *n,
                           ef__err *err);
const char *ef__reader_pool_part_name(const ef__stage *s, int64_t part);

/* The members of a reader-pool source's stage def, after its info and
 * create; the format adds .fetch and .length. */
#define EF__READER_POOL_STAGE                                                  \
    .is_source = 1, .open = ef__reader_pool_open,                              \
    .next = ef__reader_pool_next, .poll = ef__reader_pool_poll,                \
    .reset = ef__reader_pool_reset, .cancel = ef__reader_pool_cancel,          \
    .destroy = ef__reader_pool_destroy, .stats = ef__reader_pool_stats,        \
    .save = ef__reader_pool_save, .restore = ef__reader_pool_restore,          \
    .part_name = ef__reader_pool_part_name

#endif
