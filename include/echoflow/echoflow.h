/* SPDX-License-Identifier: Apache-2.0 */
/*
 * echoflow: input pipelines for neural-network training, built around data
 * echoing. This is the only public header.
 *
 * A pipeline is a chain of stages (read, decode, shuffle, augment, echo,
 * batch, prefetch ...). The consumer pulls samples from the last stage with
 * ef_pipeline_next(); asynchronous stages run on threads of their own.
 *
 * Conventions:
 * - Functions return an ef_status: 0 is success, positive values are
 *   non-error states (EF_END), negative values are errors.
 * - Handles are opaque. Destroy functions accept NULL.
 * - Every function that takes or returns a pointer says who frees it.
 *
 * Threads:
 * - A pipeline is built and pulled (create, set_*, parse, add_*, next,
 *   destroy) by one thread at a time.
 * - From any thread, while another pulls: ef_pipeline_stop(), the stats
 *   (ef_pipeline_stats_get, ef_pipeline_stage_count,
 *   ef_pipeline_stage_stats), ef_pipeline_skipped(),
 *   ef_pipeline_abandoned() and ef_pipeline_warning(). Destroy only after
 *   every such call returned.
 * - Samples are immutable once emitted: any thread may read and free
 *   them, and their tensors' memory lives as long as some reference to it
 *   (a sample, an ef_buffer_retain), even after the pipeline is gone.
 * - A map callback runs on the map's worker threads, several at once
 *   when threads > 1, or inline on the thread that pulls the map's
 *   output (option inline); it must not pull (next) from its own
 *   pipeline.
 */
#ifndef ECHOFLOW_H
#define ECHOFLOW_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the shared library exports: these declarations and nothing else
 * (it is built with hidden visibility). */
#if defined(__GNUC__)
#define EF_API __attribute__((visibility("default")))
#else
#define EF_API
#endif

#define EF_VERSION_MAJOR 0
#define EF_VERSION_MINOR 3
#define EF_VERSION_PATCH 0
#define EF_VERSION_NUMBER                                                      \
    (EF_VERSION_MAJOR * 10000 + EF_VERSION_MINOR * 100 + EF_VERSION_PATCH)
#define EF__STRINGIFY(x) #x
#define EF__VERSION_TEXT(a, b, c)                                              \
    EF__STRINGIFY(a) "." EF__STRINGIFY(b) "." EF__STRINGIFY(c)
/* "MAJOR.MINOR.PATCH" of this header; ef_version_string() is the library's. */
#define EF_VERSION_STRING                                                      \
    EF__VERSION_TEXT(EF_VERSION_MAJOR, EF_VERSION_MINOR, EF_VERSION_PATCH)

/* The version of the library actually linked, as EF_VERSION_NUMBER. */
EF_API unsigned ef_version_number(void);
/* "MAJOR.MINOR.PATCH" of the linked library; static storage. */
EF_API const char *ef_version_string(void);

/* ------------------------------------------------------------------ */
/* Status codes                                                        */

/* X(NAME, value, text). One list, so names and texts never drift. */
#define EF_STATUS_MAP(X)                                                       \
    X(OK, 0, "success")                                                        \
    X(END, 1, "end of data")                                                   \
    X(AGAIN, 2, "no item ready yet")                                           \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of memory")                                             \
    X(EIO, -3, "input/output error")                                           \
    X(EFORMAT, -4, "malformed input data")                                     \
    X(ESPEC, -5, "invalid pipeline specification")                             \
    X(ECALLBACK, -6, "user callback failed")                                   \
    X(ECANCELED, -7, "pipeline was stopped")                                   \
    X(ESTATE, -8, "operation not allowed in this state")                       \
    X(EUNSUPPORTED, -9, "feature not available in this build")                 \
    X(ESHAPE, -10, "tensor shapes or types do not match")

typedef enum {
#define EF__STATUS_ENUM(name, value, text) EF_##name = value,
    EF_STATUS_MAP(EF__STATUS_ENUM)
#undef EF__STATUS_ENUM
} ef_status;

/* A short text for a status code; static storage, never NULL. */
EF_API const char *ef_strerror(int status);
/* The code's name without the prefix ("EINVAL"); static storage. */
EF_API const char *ef_status_name(int status);

/* ------------------------------------------------------------------ */
/* Buffers: reference-counted bytes. Thread-safe counting.             */

typedef struct ef_buffer ef_buffer;

/* A new buffer of `size` bytes (uninitialised), reference count 1.
 * The caller owns the reference; NULL when out of memory. */
EF_API ef_buffer *ef_buffer_new(size_t size);
/* Wraps memory the buffer does not own: `release(user)` is called when the
 * last reference goes. The caller owns the returned reference. The memory
 * stays the caller's to read and write: the buffer is borrowed
 * (ef_buffer_is_borrowed), and a binding that hands fields out writable
 * copies it first. */
EF_API ef_buffer *ef_buffer_wrap(void *data, size_t size, void (*release)(void *user),
                          void *user);
/* 1 when b wraps memory owned outside echoflow (ef_buffer_wrap): its owner
 * may read and write it, so a consumer that writes into a field must copy
 * it first; else 0. A view of such a buffer (an echo, a batch viewing its
 * parts) is the same buffer, borrowed too. */
EF_API int ef_buffer_is_borrowed(const ef_buffer *b);
/* Adds a reference and returns `b`; the caller owns the new reference. */
EF_API ef_buffer *ef_buffer_retain(ef_buffer *b);
/* Drops a reference; frees on the last. Accepts NULL. */
EF_API void ef_buffer_release(ef_buffer *b);
EF_API void *ef_buffer_data(const ef_buffer *b);
EF_API size_t ef_buffer_size(const ef_buffer *b);
/* Current reference count (a snapshot; for in-place decisions and tests). */
EF_API unsigned ef_buffer_refcount(const ef_buffer *b);

/* ------------------------------------------------------------------ */
/* Samples: a small set of named tensor fields. A batch is a sample    */
/* whose tensors have a leading batch dimension.                       */

/* Element types. New ones are appended, so that a value keeps its number
 * (the service's chunks and saved files carry it). EF_BOOL is one byte,
 * 0 or 1; EF_F16 is IEEE binary16, EF_BF16 bfloat16 (the top half of a
 * float32), both little-endian as every other dtype. */
typedef enum {
    EF_U8 = 0,
    EF_I32,
    EF_I64,
    EF_F32,
    EF_BOOL,
    EF_I8,
    EF_I16,
    EF_U16,
    EF_F16,
    EF_BF16,
    EF_F64,
    EF__DTYPE_COUNT
} ef_dtype;

#define EF_MAX_DIMS 6
/* Bounds on hostile input, not on ordinary data: a sample holds at most
 * EF_MAX_FIELDS fields, a field name at most EF_MAX_NAME - 1 bytes. The
 * first 8 fields live in the sample itself; more cost one allocation. */
#define EF_MAX_FIELDS 1024
#define EF_MAX_NAME 256

/* Bytes per element; 0 for an unknown dtype. */
EF_API size_t ef_dtype_size(ef_dtype dtype);
/* "u8", "i32", "i64", "f32", "bool", "i8", "i16", "u16", "f16", "bf16",
 * "f64"; "?" for an unknown dtype. */
EF_API const char *ef_dtype_name(ef_dtype dtype);
/* The value of an f16 (IEEE binary16) or bf16 (bfloat16) element, whose
 * 16 bits are `bits`, as a float: exact (both fit a float); NaN stays
 * NaN. */
EF_API float ef_f16_to_float(uint16_t bits);
EF_API float ef_bf16_to_float(uint16_t bits);

/* A read-only view of one field. `data` points into a buffer that lives at
 * least as long as the sample it came from. */
typedef struct {
    const char *name;
    ef_dtype dtype;
    int ndim;
    int64_t shape[EF_MAX_DIMS];
    const void *data;
    size_t nbytes;
    ef_buffer *buffer; /* borrowed: retain it to keep data past the sample */
} ef_tensor;

/* Where a sample came from. Echoed copies share source index and epoch and
 * differ in echo_copy (0 = the fresh item). */
typedef struct {
    int64_t index;     /* position in the source (or batch number) */
    int64_t epoch;     /* pass over the source, from 0 */
    int32_t echo_copy; /* 0 for a fresh item, k for its k-th echo */
    int32_t fresh;     /* batches: how many of its examples were fresh
                          (echo_copy 0) when batched; 0 for examples */
} ef_sample_id;

typedef struct ef_sample ef_sample;

/* A new empty sample with the given identity. The caller owns it; free it
 * with ef_sample_free(). NULL when out of memory. */
EF_API ef_sample *ef_sample_new(ef_sample_id id);
/* Frees a sample and drops its buffer references. Accepts NULL. */
EF_API void ef_sample_free(ef_sample *s);
/* A new sample sharing every buffer of `s` (no payload copied). */
EF_API ef_sample *ef_sample_clone(const ef_sample *s);

/* Adds a field viewing `nbytes` of `buf` from byte `offset`. The sample takes
 * a new reference to `buf` (the caller keeps its own). nbytes must equal
 * the product of the shape times the dtype size and fit inside the buffer.
 * EF_EINVAL for a bad name, shape or range, or a duplicate name. */
EF_API ef_status ef_sample_add(ef_sample *s, const char *name, ef_dtype dtype, int ndim,
                  const int64_t *shape, ef_buffer *buf, size_t offset);
/* Convenience: allocates a buffer for the field and adds it; `*data` (if not
 * NULL) receives a pointer to fill before the sample is emitted. */
EF_API ef_status ef_sample_add_new(ef_sample *s, const char *name, ef_dtype dtype, int ndim,
                      const int64_t *shape, void **data);

EF_API int ef_sample_field_count(const ef_sample *s);
/* Field `i` (0 <= i < count) into *out. EF_EINVAL when out of range. */
EF_API ef_status ef_sample_field(const ef_sample *s, int i, ef_tensor *out);
/* The field called `name` into *out; EF_EINVAL when there is none. */
EF_API ef_status ef_sample_get(const ef_sample *s, const char *name, ef_tensor *out);
EF_API ef_sample_id ef_sample_identity(const ef_sample *s);
/* A ragged field: `batch` stacks examples whose field differs in its
 * first dimension (strings, encoded images, variable-length lists) by
 * laying them one after another along that dimension, so the tensor is
 * [total, ...]. Their lengths go to out[0..cap) (out may be NULL when
 * cap is 0); returns how many examples the field holds, or 0 for a
 * field that is not ragged or not there. */
EF_API int64_t ef_sample_ragged_lengths(const ef_sample *s, const char *name,
                                        int64_t *out, int64_t cap);
/* Makes field `name` of a sample being built ragged: n >= 1 examples of
 * lengths[0..n) rows each, which must sum to the field's first
 * dimension. EF_EINVAL otherwise. */
EF_API ef_status ef_sample_set_ragged(ef_sample *s, const char *name,
                                      const int64_t *lengths, int64_t n);
/* Marks field `name` (of one dimension or more) as variable-length by
 * nature: a text, an encoded image, a list. `batch` then lays it out
 * ragged whatever the lengths of a batch's examples, so a consumer gets a
 * list every time rather than a [B, L] tensor when the lengths happen to
 * be equal. The sources mark what they read this way. EF_EINVAL when
 * there is no such field or it has no dimension. */
EF_API ef_status ef_sample_set_variable(ef_sample *s, const char *name);
/* Text fields: a field of UTF-8 bytes (u8 [n]) marked as a str, or as a
 * list of str (each followed by a NUL byte: "a", "b" is "a\0b\0"), so that
 * a binding hands out str rather than bytes. The mark is variable-length
 * too (ef_sample_set_variable), and `batch` carries it to the ragged
 * field it makes: each example's text (or list of texts) there. */
typedef enum { EF_NOT_TEXT = 0, EF_TEXT = 1, EF_TEXT_LIST = 2 } ef_text_kind;
/* Marks field `name` of a sample being built as text of `kind`. EF_EINVAL
 * when there is no such field, it is not u8 [n], or kind is not EF_TEXT
 * or EF_TEXT_LIST. */
EF_API ef_status ef_sample_set_text(ef_sample *s, const char *name,
                                    ef_text_kind kind);
/* The text kind of field `name` (of an example, or of a batch made by
 * `batch`); EF_NOT_TEXT for any other field or none. */
EF_API ef_text_kind ef_sample_text(const ef_sample *s, const char *name);
/* A batch's examples: the identities of the samples stacked into it, in
 * order, into out[0..cap) (out may be NULL when cap is 0). Returns how many
 * the batch holds, which may exceed cap; 0 for a sample that is not a
 * batch. Feed these back with ef_pipeline_feedback(). */
EF_API int64_t ef_sample_members(const ef_sample *s, ef_sample_id *out,
                                 int64_t cap);
/* Makes `s`, a sample being built, a batch of the n >= 1 examples whose
 * identities are ids[0..n) (ef_sample_members() gives them back), for a
 * source whose items are batches already: the stages that take one
 * example (flip, to_chw, tfexample ...) then refuse it as they refuse
 * the output of `batch`, instead of reading the batch as one example.
 * The batch's own identity is the one it was made with (ef_sample_new).
 * EF_EINVAL for a NULL argument or n < 1, EF_ENOMEM. */
EF_API ef_status ef_sample_set_members(ef_sample *s, const ef_sample_id *ids,
                                       int64_t n);

/* ------------------------------------------------------------------ */
/* Map callbacks                                                       */

typedef struct ef_map_ctx ef_map_ctx;

/* Transforms `in` into `*out`. `in` is borrowed and immutable: build a new
 * sample (ef_sample_clone() and replace fields, or ef_sample_new()). On
 * success store a sample the pipeline will own in *out and return EF_OK; on
 * failure return a negative status, optionally after ef_map_ctx_fail().
 * Called from several threads at once when the map stage has threads > 1. */
typedef int (*ef_map_fn)(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx);

/* The `user` pointer given to ef_pipeline_add_map(). */
EF_API void *ef_map_ctx_user(const ef_map_ctx *ctx);
/* A random 64-bit value keyed by (seed, stage, sample identity, draw
 * number): the same sample and seed always get the same draws. */
EF_API uint64_t ef_map_ctx_random(ef_map_ctx *ctx);
/* A uniform double in [0, 1) from the same keyed stream. */
EF_API double ef_map_ctx_uniform(ef_map_ctx *ctx);
/* Records why the callback failed (printf-style); returns `status`. */
EF_API ef_status ef_map_ctx_fail(ef_map_ctx *ctx, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ------------------------------------------------------------------ */
/* Pipelines                                                           */

typedef struct ef_pipeline ef_pipeline;

/* A new, empty pipeline. The caller owns *out; free with
 * ef_pipeline_destroy(). */
EF_API ef_status ef_pipeline_create(ef_pipeline **out);
/* Stops every thread, frees every buffered sample. Safe mid-stream. Accepts
 * NULL. */
EF_API void ef_pipeline_destroy(ef_pipeline *p);

/* Seed for every random decision (default 0). Before the first next(). */
EF_API ef_status ef_pipeline_set_seed(ef_pipeline *p, uint64_t seed);

/* The seed for the pipeline that reads part `part` (a rank, a worker) of
 * the data in epoch `epoch` of a run seeded `seed`: `seed` itself for epoch
 * 0 of part 0, another for every other pair, so that each epoch and each
 * part shuffles in an order of its own, the same on every run. Arithmetic
 * modulo 2^64; the Python package's echoflow.epoch_seed is this function. */
EF_API uint64_t ef_epoch_seed(uint64_t seed, uint64_t epoch, uint64_t part);

/* The source reads only part `index` of `count` (0 <= index < count), as
 * its option shard=index/count would: N processes that each read their
 * own part read the data once between them. Before the source is added;
 * a source given its own shard= other than 0/1, or one without a shard
 * option (a C source), is then an error (EF_ESPEC). */
EF_API ef_status ef_pipeline_set_shard(ef_pipeline *p, int64_t index, int64_t count);

/* Appends stages from a text spec: "idx:images=a,labels=b | echo:2 |
 * batch:128". Stages are NAME[:OPT[,OPT...]] joined by '|'; OPT is
 * key=value, or a bare value for the stage's first option. A map:fn=NAME
 * stage runs the callback bound to NAME (ef_pipeline_bind_map) or the
 * built-in so named. On error nothing is appended and ef_pipeline_error()
 * names the stage and option. */
EF_API ef_status ef_pipeline_parse(ef_pipeline *p, const char *spec);
/* One stage of a text spec, for programs that show or edit specs (to build
 * a pipeline, hand ef_pipeline_parse() the whole spec): the text from
 * `spec` up to the first '|' that is not inside double quotes, or up to the
 * end, without white space around it, as [*begin, *begin + *len) inside
 * `spec`. Returns where the next stage starts (just past that '|'), or
 * NULL when this stage is the last. Allocates nothing: *begin points into
 * the caller's `spec`. An empty spec is one empty stage; so is the text
 * between two '|' in a row. Walk a spec with
 *     for (const char *s = spec; s;) { s = ef_spec_stage(s, &b, &n); ... } */
EF_API const char *ef_spec_stage(const char *spec, const char **begin,
                                 size_t *len);
/* Appends one stage by name with options "key=value,..." (may be NULL). */
EF_API ef_status ef_pipeline_add(ef_pipeline *p, const char *stage, const char *options);
/* A source written in C. With block = 1 it stores the next sample in *out
 * and returns EF_OK, returns EF_END at the end of the pass, or a negative
 * status on failure; with block = 0 it may also return EF_AGAIN when no
 * sample is ready yet (stages that poll, such as echo:factor=auto, then do
 * something else meanwhile). The pipeline owns the samples it is given;
 * their identity is the callback's to set (ef_sample_new). `epoch` counts
 * passes (repeat starts a new one). Called from one thread at a time. */
typedef int (*ef_source_fn)(void *user, int64_t epoch, int block,
                            ef_sample **out);

/* Appends a source running `fn`; it must be the first stage. `user` is
 * borrowed: it must outlive the pipeline. Options: length=N (N >= 0),
 * the number of samples the callback gives per pass, when the caller
 * knows it, for ef_pipeline_length(); without it the length is unknown.
 * The pipeline takes it on trust: the callback's EF_END still ends the
 * pass. */
EF_API ef_status ef_pipeline_add_source(ef_pipeline *p, ef_source_fn fn, void *user,
                           const char *options);

/* Appends a map stage running `fn` (options as for "map": threads, ordered).
 * `user` is borrowed: it must outlive the pipeline. */
EF_API ef_status ef_pipeline_add_map(ef_pipeline *p, ef_map_fn fn, void *user,
                        const char *options);

/* Names a map callback for the spec of the next ef_pipeline_parse(): its
 * stages map:fn=NAME (or map:NAME) run `fn` with `user`, taking the map's
 * other options (threads, ordered); a bound name comes before a built-in
 * of that name, and may serve several stages. That parse fails with
 * EF_ESPEC, appending nothing, when a name bound for it is used by no
 * stage (the message names them all); when it succeeds it drops the
 * bindings, so each parse binds its own; a failed one keeps them. Binding
 * a name again replaces its callback. Only ef_pipeline_parse() reads
 * them, not ef_pipeline_add(). `name` (1 to 63 bytes) is copied; `user`
 * is borrowed: it must outlive the pipeline. EF_EINVAL for a NULL
 * argument or a bad name; EF_ESTATE after the first next(). */
EF_API ef_status ef_pipeline_bind_map(ef_pipeline *p, const char *name,
                                      ef_map_fn fn, void *user);

/* What a bad sample does: a corrupt record or image, a truncated file, an
 * HTTP source that gave up, a map callback that failed on it. */
typedef enum {
    EF_ON_ERROR_FAIL = 0, /* the pipeline fails with a message (default) */
    EF_ON_ERROR_SKIP = 1  /* the sample is dropped and counted in the stats
                             as skipped; a shard or file that cannot be
                             read on is given up and counted as abandoned,
                             with the bytes of it left unread */
} ef_on_error;

/* Sets the policy for bad samples. Before the first next(). */
EF_API ef_status ef_pipeline_set_on_error(ef_pipeline *p, ef_on_error policy);

/* Why the first skipped sample was dropped (file, offset, what was wrong),
 * copied into buf (NUL-terminated, cut to cap); "" when none was. Returns
 * the number of samples skipped so far. Any thread. */
EF_API uint64_t ef_pipeline_skipped(ef_pipeline *p, char *buf, size_t cap);
/* Why skipped sample number i (from 0, in the order dropped) was, for the
 * first EF_SKIPS_KEPT of them; "" for any other i. Returns the number of
 * samples skipped so far, as ef_pipeline_skipped(). Any thread. */
#define EF_SKIPS_KEPT 16
EF_API uint64_t ef_pipeline_skip(ef_pipeline *p, uint64_t i, char *buf,
                                 size_t cap);

/* The same for parts of the input given up under skip: why the first was
 * (its location, and "shard abandoned at byte N of SIZE"); returns how
 * many were. Any thread. */
EF_API uint64_t ef_pipeline_abandoned(ef_pipeline *p, char *buf, size_t cap);

/* Warnings: things that work but probably not as meant, such as a shuffle
 * buffer that must fill from a slow upstream before its first item (each
 * stage warns once). Returns how many warnings the pipeline has given so
 * far; when i < that count, copies warning number i (from 0, in the order
 * given) into buf (NUL-terminated, cut to cap; "" for any other i). The
 * first EF_WARNINGS_KEPT texts are kept; a later one is counted and reads
 * as "". A consumer that checks the count after each next() (one atomic
 * read) sees each new warning once. Any thread. */
#define EF_WARNINGS_KEPT 16
EF_API uint64_t ef_pipeline_warning(ef_pipeline *p, uint64_t i, char *buf,
                                    size_t cap);

/* The memory budget: the most payload bytes the pipeline's queues,
 * read-ahead, shuffle buffers and echo pools may hold together (0: no
 * limit; the default is 1 GiB). Queues wait for room rather than go over
 * it; a sample larger than it, or a shuffle buffer or echo pool that
 * alone would pass it, fails the pipeline with EF_ENOMEM and a message
 * naming the stage. Before the first next(). */
EF_API ef_status ef_pipeline_set_memory_budget(ef_pipeline *p, uint64_t bytes);

/* Stops the pipeline from any thread: every thread and every waiting
 * next() wakes up, and next() returns EF_ECANCELED from then on. The
 * pipeline must still be destroyed. */
EF_API void ef_pipeline_stop(ef_pipeline *p);

/* The next sample into *out (the caller owns it: ef_sample_free()).
 * EF_OK with a sample, EF_END at the end of the data (then again on every
 * call), or a negative status: the pipeline has failed, ef_pipeline_error()
 * says why, and every later call returns the same status. */
EF_API ef_status ef_pipeline_next(ef_pipeline *p, ef_sample **out);

/* The detailed message of the last error (file, offset, option, what was
 * expected); "" when none. Owned by the pipeline, valid until the next call
 * on it. */
EF_API const char *ef_pipeline_error(const ef_pipeline *p);

/* The number of items the pipeline yields in all (what next() gives
 * before EF_END) into *out, when it is known in advance (*out is -1
 * otherwise). It is the whole run's, from its start: the same after
 * next() or a restore (not what is left).
 *
 * Each stage maps its upstream's count. Sources: range n; idx the
 * records its header announces, within first= and count=; cifar its
 * files' records; a C source its length= option; with shard=I/N (or
 * ef_pipeline_set_shard) exactly part I's share. take: the smaller of
 * its count and the upstream's (count after an endless upstream).
 * repeat: count passes (an empty upstream stays empty). echo with a
 * whole factor F: F per item, whatever its shuffle. batch: ceil(n /
 * size), or floor with drop_remainder. Every other stage passes its
 * upstream's count on. With on_error=skip a dropped sample shortens the
 * run: the count is then that of the run with none dropped, an upper
 * bound.
 *
 * EF_EUNSUPPORTED when the count is not known in advance, with
 * ef_pipeline_error() naming the stage and why: a source that learns it
 * only by reading everything (tar, tfrecord, a C source without
 * length=), repeat without a count ("repeat: never ends"), echo with a
 * fractional factor, factor=auto or a policy (copies decided item by
 * item as it runs), or a count past INT64_MAX.
 *
 * On the building and pulling thread, before the first next() and after.
 * idx reads its images file's header to answer (a few bytes, read again
 * at the first next()); cifar reads its files, which the first next()
 * then uses. A source that cannot be read fails the pipeline as the
 * first next() would: that error is returned, and every later next()
 * returns it. A failed pipeline returns its error and leaves its
 * message. EF_EINVAL for a NULL argument; EF_ESPEC for a pipeline with
 * no stages. */
EF_API ef_status ef_pipeline_length(ef_pipeline *p, int64_t *out);

/* Feedback for echo policies (echo:policy=..., docs/echoing.md): one value
 * per example, such as its training loss, by the identity it came with
 * (ef_sample_identity(), or ef_sample_members() of a batch; echo_copy is
 * ignored, so a value for any copy counts for the item). Echo stages with
 * a policy other than uniform use the values to choose what to echo; the
 * others ignore them, as they do identities no longer held. Callable from
 * any thread while the pipeline runs. EF_EINVAL for a NULL pipeline or
 * array, or a value that is not finite (NaN, infinite): nothing is applied
 * then, and ef_pipeline_error() is left alone, as another thread may be
 * reading it. */
EF_API ef_status ef_pipeline_feedback(ef_pipeline *p, const ef_sample_id *ids,
                                      const double *values, size_t n);

/* Whether the pipeline uses what ef_pipeline_feedback() is given: 1 when
 * one of its stages does (an echo stage with a policy other than
 * uniform), 0 when none does and feedback would be ignored, so that a
 * trainer computes per-example values only for a pipeline that listens.
 * When buf is not NULL, the first such stage's policy ("rank"), or
 * "uniform" when there is none, is copied into it (NUL-terminated, cut to
 * cap). It counts the stages added so far. 0 for a NULL pipeline. On the
 * building thread, or any thread once the pipeline runs. */
EF_API int ef_pipeline_wants_feedback(const ef_pipeline *p, char *buf,
                                      size_t cap);

/* Checkpoints: the pipeline's position as a small state, to resume a run
 * exactly where it stopped (after a preemption, say).
 *
 * The state is symbolic: the sources' cursors, every random generator's
 * counter, the identities (never the payloads) of what shuffle buffers,
 * echo pools and queues hold, and the items delivered. It is versioned
 * and checksummed, and independent of thread counts and queue depths.
 *
 * ef_pipeline_save_state: between two next() calls, on the consumer's
 * thread (also before the first). With buf NULL, only *size is set (the
 * bytes needed); a save that follows with no next() in between gives
 * exactly that many bytes. EF_EINVAL when cap is smaller than *size;
 * EF_EUNSUPPORTED for a pipeline with a stage whose position cannot be
 * saved (a C callback source, an unordered map or tar), the message
 * naming it; a failed pipeline gives its error. A pipeline reading the
 * `service` with several trainers saves the job's record, which every
 * trainer's saved state holds alike: each call is a collective among
 * the trainers (but a save right after a size query, which gives the
 * queried bytes), so every trainer saves at the same checkpoint, making
 * the same calls.
 *
 * ef_pipeline_restore_state: on a pipeline built like the saved one (the
 * same stages, options and seed), before its first next(). The next
 * samples are those the saved pipeline would have delivered, identity and
 * bytes, for pipelines that are deterministic (echo:factor=auto: the
 * fresh items, with its pool as it was). Items the state names are read
 * again by identity; the expensive stages run only for those. A state
 * that is corrupt, truncated, of another version or of another pipeline
 * (seed, stages, options) gives EF_EFORMAT or EF_ESPEC and a message
 * naming the first stage that differs, and leaves the pipeline untouched.
 * What only a stage's own record shows (a shard list or a file changed
 * since, items that can no longer be read) is found while the stages are
 * restored, and leaves the pipeline failed with that error. Once a state
 * has been applied, another restore (or one after next()) gives
 * EF_ESTATE. */
EF_API ef_status ef_pipeline_save_state(ef_pipeline *p, void *buf, size_t cap,
                                        size_t *size);
EF_API ef_status ef_pipeline_restore_state(ef_pipeline *p, const void *buf,
                                           size_t size);

/* ------------------------------------------------------------------ */
/* Statistics                                                          */

/* Room for a stage's own figures: the echo stage with automatic echoing
 * and a policy gives 13. */
#define EF_MAX_STAT_EXTRAS 24

typedef struct {
    const char *key; /* static storage */
    double value;
} ef_stat_extra;

typedef struct {
    const char *name;   /* stage name, "echo"; owned by the pipeline */
    uint64_t items_in;  /* items pulled from the upstream stage */
    uint64_t items_out; /* items handed downstream */
    double wait_up_s;   /* time spent waiting for the upstream */
    double wait_down_s; /* time an asynchronous stage waited for room */
    uint64_t skipped;   /* bad samples this stage dropped (on_error=skip) */
    uint64_t abandoned; /* shards or files it gave up (on_error=skip) */
    uint64_t lost_bytes; /* their bytes not read, where sizes were known */
    int nextra;         /* stage-specific figures (echo: fresh, echoed ...) */
    ef_stat_extra extra[EF_MAX_STAT_EXTRAS];
    int threads; /* map stages: workers allowed to take input now (with
                    threads=auto, what the tuner chose; 0 while the map
                    runs inline); 0 for others */
    int depth;   /* prefetch: the queue's depth now (with depth=auto, what
                    it has grown to); 0 for others */
    /* new fields go here, at the end (see ef_pipeline_stats_get) */
} ef_stage_stats;

/* Times count from the end of startup (the first next() opens every stage:
 * reading index files, starting threads), which is reported apart. */
typedef struct {
    uint64_t items;                /* samples handed to the consumer */
    double startup_s;              /* opening the stages */
    double elapsed_s;              /* from the end of startup to the last
                                      next() (to now while running) */
    double consumer_wait_s;        /* time spent inside ef_pipeline_next() */
    double consumer_wait_fraction; /* consumer_wait_s / elapsed_s */
    uint64_t skipped;              /* bad samples dropped, all stages */
    uint64_t abandoned;            /* shards or files given up */
    uint64_t lost_bytes;           /* their bytes not read (known sizes) */
    uint64_t memory_budget;        /* bytes; 0: no limit */
    uint64_t bytes_held;           /* payload held by queues and buffers */
    uint64_t peak_bytes_held;      /* the most held at once */
    /* new fields go here, at the end (see ef_pipeline_stats_get) */
} ef_pipeline_stats;

/* The figures of each struct that reports show, as X(member, kind), kind
 * UINT or REAL: the one list `echoflow run --json`, `echoflow train
 * --json` and Python's stats() are written from, so that they name the
 * same figures. Reports add a stage's `name` and its extras, and the
 * pipeline's `items_per_s`, `first_skip` and `first_abandon`. */
#define EF_PIPELINE_STATS_FIGURES(X)                                           \
    X(items, UINT)                                                             \
    X(elapsed_s, REAL)                                                         \
    X(startup_s, REAL)                                                         \
    X(consumer_wait_s, REAL)                                                   \
    X(consumer_wait_fraction, REAL)                                            \
    X(skipped, UINT)                                                           \
    X(abandoned, UINT)                                                         \
    X(lost_bytes, UINT)                                                        \
    X(memory_budget, UINT)                                                     \
    X(bytes_held, UINT)                                                        \
    X(peak_bytes_held, UINT)
#define EF_STAGE_STATS_FIGURES(X)                                              \
    X(items_in, UINT)                                                          \
    X(items_out, UINT)                                                         \
    X(wait_up_s, REAL)                                                         \
    X(wait_down_s, REAL)                                                       \
    X(skipped, UINT)                                                           \
    X(abandoned, UINT)                                                         \
    X(lost_bytes, UINT)                                                        \
    X(threads, UINT)                                                           \
    X(depth, UINT)

/* Any thread may read them while the pipeline runs (counters are read
 * atomically one by one, so figures taken together may be a few items
 * apart). A stage's own figures (extra) appear once the first next() has
 * opened the stages.
 *
 * The stats structs grow by fields added at their end. The calls are
 * macros that pass the size of the caller's struct, so a program built
 * against an older header gets the fields it knows from a newer library,
 * and one built against a newer header gets zeros for fields an older
 * library does not fill. */
#define ef_pipeline_stats_get(p, out)                                          \
    ef_pipeline_stats_get_sized((p), (out), sizeof *(out))
#define ef_pipeline_stage_stats(p, i, out)                                     \
    ef_pipeline_stage_stats_sized((p), (i), (out), sizeof *(out))
EF_API ef_status ef_pipeline_stats_get_sized(const ef_pipeline *p,
                                             ef_pipeline_stats *out,
                                             size_t size);
EF_API int ef_pipeline_stage_count(const ef_pipeline *p);
EF_API ef_status ef_pipeline_stage_stats_sized(const ef_pipeline *p, int i,
                                               ef_stage_stats *out,
                                               size_t size);
/* Looks up an extra figure by key; returns 1 and stores it when present. */
EF_API int ef_stage_stats_extra(const ef_stage_stats *st, const char *key,
                         double *value);

/* ------------------------------------------------------------------ */
/* Writing WebDataset shards                                           */

typedef struct ef_shard_writer ef_shard_writer;

/* A writer of WebDataset tar shards named by `pattern`, a printf pattern
 * with one integer conversion for the shard number, such as
 * "out/train-%06d.tar"; each shard holds at most `per_shard` samples. A
 * shard is written under a temporary name and renamed when complete, so a
 * failed run never leaves a partial shard under a final name.
 * On EF_ESPEC (a bad pattern) *out is still set, so that
 * ef_shard_writer_error() can say why; destroy it as usual. The caller owns
 * *out. */
EF_API ef_status ef_shard_writer_create(ef_shard_writer **out, const char *pattern,
                           int64_t per_shard);
/* Writes one sample as tar members KEY.EXT. KEY is the text of a u8 field
 * `__key__` when there is one, else the sample's index as 9 digits. Fields:
 * a u8 image [H,W] or [H,W,1|3] becomes EXT "png" (PNG-encoded) when
 * named `image` or `png`; an integer scalar becomes decimal text, with
 * EXT "cls" for `label` and its name otherwise; any other u8 [N] field is
 * written as is with its name as EXT; `__url__` is left out. A sample with
 * a field `boxes` of f32 [n,4] gets one member with EXT "json" instead of
 * its boxes and of each i64 or f32 field that is a scalar or of shape [n]
 * (labels, image_id...): one JSON object, {"boxes": [[x1, y1, x2, y2],
 * ...], "labels": [...], "image_id": 42}, f32 values with 9 significant
 * digits so that they read back bit for bit (the json_boxes stage; an f32
 * NaN or infinity there is EF_EFORMAT, a field `json` beside boxes
 * EF_ESHAPE). Anything else is EF_ESHAPE naming the field. A `__key__` must be a relative path such
 * as "dir/name", since tar unpacks members there: a leading '/', an empty,
 * '.' or '..' component, a control character or a '.' in the last
 * component is EF_ESHAPE naming the sample and the key. */
EF_API ef_status ef_shard_writer_add(ef_shard_writer *w, const ef_sample *s);
/* Completes the last shard. */
EF_API ef_status ef_shard_writer_finish(ef_shard_writer *w);
/* Shards begun so far, and samples written. */
EF_API int64_t ef_shard_writer_shards(const ef_shard_writer *w);
EF_API int64_t ef_shard_writer_samples(const ef_shard_writer *w);
/* The shard name for number `shard` into buf (cut to cap). */
EF_API void ef_shard_writer_name(const ef_shard_writer *w, int64_t shard, char *buf,
                          size_t cap);
/* The detailed message of the last error; "" when none. */
EF_API const char *ef_shard_writer_error(const ef_shard_writer *w);
/* Removes an unfinished shard's temporary file and frees. Accepts NULL. */
EF_API void ef_shard_writer_destroy(ef_shard_writer *w);

/* ------------------------------------------------------------------ */
/* Writing token files (language-model training data)                 */

typedef struct ef_token_writer ef_token_writer;

/* A writer of a nanoGPT-style token file at `path`: token ids as raw
 * little-endian `dtype` ("uint16" or "uint32"), no header, as numpy's
 * tofile() writes them and the tokens source reads them. The file is
 * written as PATH.tmp.PID and renamed to PATH by finish(), so a failed run
 * never leaves a partial file under the final name. On EF_ESPEC (a bad
 * dtype) or EF_EIO (the file cannot be created) *out is still set, so that
 * ef_token_writer_error() can say why; destroy it as usual. The caller
 * owns *out; path and dtype are copied. */
EF_API ef_status ef_token_writer_create(ef_token_writer **out, const char *path,
                                        const char *dtype);
/* Appends n token ids (n may be 0). An id that does not fit the dtype
 * (negative, or over 65535 for uint16) is EF_EINVAL naming the id, its
 * position and the dtype; nothing of the call is written then. */
EF_API ef_status ef_token_writer_add_ids(ef_token_writer *w, const int32_t *ids,
                                         size_t n);
/* Appends the ids of field `field` of sample `s` (an integer field of one
 * dimension: i32, i64 or u8 [n]), then `eos` unless it is negative: one
 * document. EF_ESHAPE naming the sample and field for a field that is not
 * there or not such ids; EF_EINVAL as add_ids for an id (or eos) out of
 * range. Nothing of the sample is written on failure. */
EF_API ef_status ef_token_writer_add(ef_token_writer *w, const ef_sample *s,
                                     const char *field, int64_t eos);
/* Writes what is buffered, closes and renames the file to its path. */
EF_API ef_status ef_token_writer_finish(ef_token_writer *w);
/* Tokens written so far (eos included), and documents (add() calls). */
EF_API int64_t ef_token_writer_tokens(const ef_token_writer *w);
EF_API int64_t ef_token_writer_documents(const ef_token_writer *w);
/* The detailed message of the last error; "" when none. */
EF_API const char *ef_token_writer_error(const ef_token_writer *w);
/* Removes an unfinished file's temporary and frees. Accepts NULL. */
EF_API void ef_token_writer_destroy(ef_token_writer *w);

/* ------------------------------------------------------------------ */
/* The preprocessing service (docs/distributed.md)                     */
/* One job started by Open MPI's mpirun holds trainers (echoflow train,
 * or any program whose pipeline reads the `service` source) and workers
 * (echoflow serve SPEC). Workers run SPEC on parts of the data (splits)
 * handed out as they ask; each trainer's `service` source receives their
 * samples and runs what follows (echo, shuffle, batch). In a build
 * without MPI every call but ef_service_launched() is EF_EUNSUPPORTED,
 * naming the package to install. */

/* 1 when a launcher (mpirun) started this process, else 0. */
EF_API int ef_service_launched(void);

typedef enum { EF_SERVICE_TRAINER = 1, EF_SERVICE_WORKER = 2 } ef_service_role;

/* What a process brings to the job's start. */
typedef struct {
    size_t size;          /* sizeof(ef_service_hello): the struct may grow */
    ef_service_role role;
    int refused;          /* 1: this process's own options were refused (it
                             said why); every process then ends */
    /* settings every process of this role must share, as names and
     * values ("--splits", "16"), compared at the start */
    const char *const *names;
    const char *const *values;
    int nsettings;
} ef_service_hello;

/* This process's place in the job. */
typedef struct {
    size_t size;            /* sizeof(ef_service_info): the struct may grow */
    int rank, size_of_job;  /* this process in MPI_COMM_WORLD, and its size */
    int trainers, workers;  /* processes of each role */
    int role_rank;          /* this process among those of its role */
    int64_t trainer_comm;   /* trainers: their communicator, as MPI_Comm_c2f()
                               gives it, for their own collectives */
} ef_service_info;

/* Joins the job: initialises MPI (with MPI_THREAD_MULTIPLE) unless the
 * program did, and meets every other process, which must all call it
 * once before any other collective. A `service` source joins as a
 * trainer by itself; a trainer with collectives of its own (echoflow
 * train) joins first to learn its communicator. EF_ESPEC when the
 * processes differ (the echoflow version, a setting of one role: err,
 * on the one process that says it, names the setting, both values and
 * ranks; "" on the others) or one was refused; every process then ends
 * with ef_service_leave(0). Calling it again returns the same info. */
EF_API ef_status ef_service_join(const ef_service_hello *hello,
                                 ef_service_info *info, char *err, size_t len);

/* Trainers only, all of them together (a collective on their
 * communicator): every trainer receives trainer 0's `len` bytes at `buf`,
 * `len` being the same on every trainer. For a trainer that starts a
 * collective library of its own among the trainers (torch.distributed
 * from Python): trainer 0 tells the others where to meet. EF_ESTATE
 * before ef_service_join() as a trainer, with the reason in err. */
EF_API ef_status ef_service_trainers_bcast(void *buf, size_t len, char *err,
                                           size_t errlen);

/* A worker's work (echoflow serve). */
typedef struct {
    size_t size;          /* sizeof(ef_serve_config): the struct may grow */
    const char *spec;     /* the upstream: the same on every worker */
    int64_t splits;       /* parts each epoch is handed out in; 0: 8 per
                             worker (the source must split that finely) */
    uint64_t seed;        /* split order and each split's pipeline seed */
    ef_on_error on_error;
    int64_t memory_budget; /* each split's pipeline; -1: the default */
    double throttle;      /* items/s this worker sends at most; 0: no limit
                             (an emulated slow worker) */
} ef_serve_config;

/* What a worker did, for its report. */
typedef struct {
    size_t size;          /* sizeof(ef_serve_report): the struct may grow */
    int64_t splits, items, messages;
    uint64_t bytes;       /* payload sent */
    double seconds;       /* from start to end */
    double credit_wait_s; /* waiting for a trainer to have room */
    double send_s;        /* inside MPI sends */
    double dispatch_wait_s; /* waiting for the next split */
    int trainers_left;    /* 1: it returned once every trainer had left (a
                             failure is known to them: leave with 0) */
} ef_serve_report;

/* Runs a worker, after ef_service_join() as one, until every trainer has
 * left: asks for splits, runs `spec` on each (part SPLIT of `splits`,
 * as ef_pipeline_set_shard), and sends the samples to the trainers as
 * they make room. A failure of the pipeline is sent to every trainer
 * (with this rank, the split and the epoch) and returned here too;
 * the worker then waits for the trainers to leave. */
EF_API ef_status ef_service_serve(const ef_serve_config *config,
                                  ef_serve_report *report, char *err,
                                  size_t len);

/* Leaves the job and ends MPI, if ef_service_join() started it: a
 * trainer tells the workers and waits for each to answer (samples still
 * on their way are dropped). A `status` other than 0 is a failure the
 * other processes may not know of: it ends the whole job at once
 * (MPI_Abort with that status), so that none waits for this one
 * forever. A process that joined and did not leave leaves at exit. */
EF_API void ef_service_leave(int status);

/* ------------------------------------------------------------------ */
/* The stage registry (self-documenting help)                          */

typedef enum {
    EF_OPT_INT = 0,
    EF_OPT_FLOAT,
    EF_OPT_BOOL,
    EF_OPT_STRING,
    EF_OPT_FACTOR,  /* a number >= 1, or "auto" */
    EF_OPT_INT_AUTO /* an integer in [min, max], or "auto" */
} ef_opt_type;

typedef struct {
    const char *name;
    ef_opt_type type;
    const char *default_value; /* NULL: required; "" for none */
    const char *help;
    double min, max; /* inclusive bounds for int, float and factor */
} ef_option_info;

typedef struct {
    const char *name;
    const char *help;
    int noptions;
    const ef_option_info *options;
} ef_stage_info;

EF_API int ef_stage_registry_count(void);
/* Stage `i` of the registry; static storage. NULL when out of range. */
EF_API const ef_stage_info *ef_stage_registry_get(int i);
/* "int", "float", "bool", "string", "factor", "int|auto". */
EF_API const char *ef_opt_type_name(ef_opt_type type);

#ifdef __cplusplus
}
#endif
#endif /* ECHOFLOW_H */
