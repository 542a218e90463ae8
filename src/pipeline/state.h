/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline checkpoints: the bytes of a saved state and the identities of
 * the items it names.
 *
 * A state is symbolic: each stage writes its cursors, counters and RNG
 * counters, and the identities (never the payloads) of the items it holds:
 * a shuffle's buffer, an echo's pool, what an asynchronous stage took from
 * its upstream and has not handed on yet. On restore those items are read
 * again by identity through the stages above (ef__stage_fetch).
 *
 * Layout, all integers little-endian or LEB128 varints:
 *   "EFST" | u32 version | u64 payload bytes | u32 CRC-32C of the payload
 *   payload: varint seed, varint items delivered, varint ended,
 *            varint stage count, then per stage:
 *            string name, string options, varint epoch, varint ended,
 *            bytes (the stage's own record), idents (its replay list).
 * Strings and byte runs are a varint length and the bytes. */
#ifndef EF_PIPELINE_STATE_H
#define EF_PIPELINE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/sample.h"
#include "pipeline/stage.h"

#define EF__STATE_MAGIC "EFST"
#define EF__STATE_VERSION 1
#define EF__STATE_HEADER 20 /* magic, version, size, CRC */
/* The largest pass number a state may hold: far beyond any run (2^62
 * passes), yet a repeat can count on from it without overflowing. */
#define EF__STATE_MAX_EPOCH (INT64_C(1) << 62)

/* Item identities (ef__ident) are core's: core/sample.h. */

/* A list of identities that grows (the owner frees it). */
typedef struct ef__idents {
    ef__ident *items;
    size_t n, cap, at; /* `at`: the next one to use, for replay lists */
} ef__idents;

int ef__idents_add(ef__idents *l, const ef__ident *d); /* takes a ref */
void ef__idents_free(ef__idents *l);

/* ---- writing ----------------------------------------------------- */

typedef struct ef__state_out {
    unsigned char *buf;
    size_t len, cap;
    int failed; /* out of memory: every later put does nothing */
    ef__idents *replay; /* the stage's replay list (ef__state_replay) */
    /* set by the save() of a source that deals again what was not
     * delivered (the `service`): whether a restore finds it ended, which
     * is whether everything of its pass was delivered, not whether it
     * had its pass's end (what the stages after it held comes again) */
    enum { EF__SAVE_AS_IS, EF__SAVE_OPEN, EF__SAVE_ENDED } ends;
} ef__state_out;

/* A stage's save(): an item it took from its upstream and holds, to be
 * taken again after a restore, in order (see ef__stage_def.save). */
void ef__state_replay(ef__state_out *o, const ef_sample *s);
void ef__state_replay_ident(ef__state_out *o, const ef__ident *d);

void ef__put_u64(ef__state_out *o, uint64_t v); /* varint */
void ef__put_i64(ef__state_out *o, int64_t v);  /* zigzag varint */
void ef__put_bytes(ef__state_out *o, const void *data, size_t n);
void ef__put_str(ef__state_out *o, const char *s);
/* Appends what `part` holds, as it is (no length). */
void ef__put_raw(ef__state_out *o, const ef__state_out *part);
void ef__put_ident(ef__state_out *o, const ef__ident *d);
/* A count, then each identity. */
void ef__put_idents(ef__state_out *o, const ef__ident *d, size_t n);
void ef__state_out_free(ef__state_out *o);

/* ---- reading ----------------------------------------------------- */

/* Reads stop at the first problem: err says what was being read, at
 * which byte of the state, and what was expected; every later get
 * returns the same failure. */
typedef struct ef__state_in {
    const unsigned char *p;
    size_t len, at;
    size_t base; /* offset of p in the whole state, for messages */
    const char *where; /* the stage being read ("stage 2 'shuffle'") */
    ef__err *err;
    int failed;
} ef__state_in;

int ef__get_u64(ef__state_in *in, const char *what, uint64_t *v);
int ef__get_i64(ef__state_in *in, const char *what, int64_t *v);
/* A varint no larger than max. */
int ef__get_count(ef__state_in *in, const char *what, uint64_t max,
                  uint64_t *v);
/* A byte run: *data points into the state. */
int ef__get_bytes(ef__state_in *in, const char *what, const void **data,
                  size_t *n);
/* A string copied into buf (cut at cap - 1). */
int ef__get_str(ef__state_in *in, const char *what, char *buf, size_t cap);
int ef__get_ident(ef__state_in *in, const char *what, ef__ident *d);
/* Appends every identity of a list written by ef__put_idents. */
int ef__get_idents(ef__state_in *in, const char *what, ef__idents *l);
/* A failure about the contents (a value out of range): EF_EFORMAT with
 * "state: <where>: <message> (byte N)". */
int ef__state_bad(ef__state_in *in, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Whether every byte was read; a failure naming what is left otherwise. */
int ef__state_in_done(ef__state_in *in);

/* ---- sources that address records by index ---------------------- */

/* Whether record `index` of `count` is one this part reads (a fetch):
 * EF_EFORMAT naming the stage otherwise. */
int ef__index_check(const ef__stage *s, const ef__shard *shard,
                    int64_t index, int64_t count, ef__err *err);
/* Reads a cursor saved as a zigzag varint: the part's next record, from
 * shard->i to `count` (the end) in steps of shard->n. */
int ef__cursor_restore(ef__state_in *in, const ef__shard *shard,
                       int64_t count, int64_t *next);

/* ---- the envelope ------------------------------------------------ */

/* Writes the header for `payload` into out[0..EF__STATE_HEADER). */
void ef__state_seal(unsigned char *out, const unsigned char *payload,
                    size_t n);
/* Checks the header of a state of `size` bytes: magic, version, length
 * and checksum; on success *payload and *n give the payload. */
int ef__state_open(const void *state, size_t size,
                   const unsigned char **payload, size_t *n, ef__err *err);

#endif
