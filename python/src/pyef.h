/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The echoflow Python extension (echoflow._echoflow): what its files share.
 * It is written on the public header alone, like any other user of the
 * library.
 *
 * tensor.c     echoflow.Tensor: a field of a sample, exported without a
 *              copy through the buffer protocol and DLPack
 * sample.c     echoflow.Sample (a dict with an identity) and its Identity
 * pipeline.c   echoflow._Pipeline: building, iterating, checkpoints,
 *              stats, stop, close
 * pymap.c      Python callables as map stages
 * pysource.c   Python iterables as the first stage
 * interrupt.c  Ctrl-C while next() waits with the GIL released
 * errors.c     the exception classes, one per status code
 * tokens.c     write_tokens: documents' token ids into a token file
 * module.c     the module itself
 */
#ifndef PYEF_H
#define PYEF_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <echoflow/echoflow.h>

/* ---- tensor.c ---- */
extern PyTypeObject pyef_tensor_type;
/* A new Tensor viewing field `t`; takes its own reference on t->buffer. */
PyObject *pyef_tensor_new(const ef_tensor *t);
/* When `obj` is a Tensor: its field into *out (buffer borrowed from the
 * Tensor) and 1; 0 otherwise. */
int pyef_tensor_view(PyObject *obj, ef_tensor *out, size_t *offset);
/* A new DLPack capsule ("dltensor") sharing field `t`'s memory; it holds
 * its own reference on t->buffer. */
PyObject *pyef_dlpack_capsule(const ef_tensor *t);

/* ---- sample.c ---- */
extern PyTypeObject pyef_sample_type;
extern PyTypeObject pyef_identity_type;
int pyef_sample_types_init(void);
/* How pyef_sample_from hands fields to a `convert` function. What it
 * makes of a capsule (a torch tensor) is writable, so a field whose memory
 * anything but this sample may still show (an echo pool, a shuffle buffer,
 * a queued copy, a source's whole file, a Tensor or tensor handed out
 * before) is copied first when `copy_shared` is set; see sample.c. The
 * counts are updated with the GIL held. */
typedef struct {
    int copy_shared;
    /* NULL, or retype(converted, dtype name) for the dtypes DLPack 0.6
     * readers take as others: bool comes to `convert` as uint8 and u16
     * as int16 (torch 1.13 has no uint16), and retype gives the value
     * handed out (a bool view, an int32 copy); owned */
    PyObject *retype;
    unsigned long long copies;       /* fields copied */
    unsigned long long copied_bytes; /* their bytes */
    /* added to the epoch of every identity handed out (Pipeline's
     * epoch=): the library counts passes from 0 */
    int64_t epoch_base;
} pyef_handout;

/* A new Sample: field name -> Tensor for every field of `s`, with its
 * identity; with `convert`, field name -> convert(DLPack capsule of the
 * field) instead (torch._C._from_dlpack makes torch tensors of them),
 * copying shared fields as `h` says (`h` is required with `convert`;
 * without, it only gives the epoch base, and may be NULL). `s`
 * is borrowed: Tensors and capsules hold buffer references of their own,
 * so `s` may be freed right after. */
PyObject *pyef_sample_from(const ef_sample *s, PyObject *convert,
                           pyef_handout *h);

/* ---- errors.c ---- */
int pyef_errors_init(PyObject *module);
/* A text of the library's (a message, a name) as str. It may quote input
 * that is not UTF-8 (a corrupt state's stage name): such bytes show as
 * U+FFFD rather than fail the decoding. */
PyObject *pyef_text(const char *s);
/* Raises the exception class of `status` with `message`; returns NULL. */
PyObject *pyef_raise(int status, const char *message);
/* warnings.warn(text, echoflow.PipelineWarning): 0, or -1 with an
 * exception set (the warning filters made it an error). */
int pyef_warn(const char *text);

/* ---- pymap.c ---- */
typedef struct pyef_map pyef_map;
/* A map stage context for callable `fn` named `name`, a stage of the
 * pipeline object `owner`; `*first_error` (a slot the pipeline owns)
 * receives the first exception raised inside it when `keep_error` is set;
 * `budget` is the pipeline's memory budget (0: none), which an output
 * must fit before it is copied. NULL with an exception set on failure. */
pyef_map *pyef_map_new(PyObject *fn, const char *name, const void *owner,
                       PyObject **first_error, int keep_error, uint64_t budget,
                       pyef_handout *handout);
/* Whether this thread is inside a call of one of `pipeline`'s maps. */
int pyef_map_serving(const void *pipeline);
/* Whether some thread is inside a call of m's callable now. */
int pyef_map_busy(const pyef_map *m);
void pyef_map_free(pyef_map *m);
int pyef_map_call(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx);
/* The dtype of a buffer's elements, from its struct format and size; -1
 * when echoflow has none for it. */
int pyef_buffer_dtype(const Py_buffer *v, ef_dtype *out);
/* A buffer's element type as numpy names it where it can ("uint32",
 * "complex64"), for a message that refuses it. */
void pyef_format_describe(const Py_buffer *v, char *buf, size_t cap);
/* The dtypes echoflow holds, as numpy and torch name them, for messages. */
/* DLPack 0.6 (our header) has no bool; this is DLPack 0.8's code. */
#define PYEF_DL_BOOL 6
#define PYEF_DTYPES                                                            \
    "bool, uint8, int8, int16, uint16, int32, int64, float16, bfloat16, "      \
    "float32, float64"
/* Raises ValueError (MemoryError for EF_ENOMEM) for ef_sample_add's
 * refusal `rc` of field `name` on `s`, naming the limit it passed
 * (EF_MAX_NAME, EF_MAX_FIELDS) where that is why; `what` prefixes the
 * message ("source: " or ""). Returns -1. */
int pyef_field_refused(const ef_sample *s, const char *what, const char *name,
                       int rc);

/* ---- pysource.c ---- */
extern PyTypeObject pyef_feed_type;
/* A new feed holding at most `capacity` samples; with `unbatch`, each item
 * put is a batch, split into its rows; with `batched`, each item is a
 * batch kept whole, one sample whose members are its rows. `*first_error` (a slot the pipeline
 * owns, until pyef_feed_close) receives what the iterable raised. */
PyObject *pyef_feed_new(int capacity, int unbatch, int batched,
                        PyObject **first_error);
/* The ef_source_fn of a feed (`user`). */
int pyef_feed_next(void *user, int64_t epoch, int block, ef_sample **out);
/* After the pipeline reading the feed is destroyed: wakes the feeder, whose
 * put() and wait_pass() then say so, and frees the samples left. */
void pyef_feed_close(PyObject *feed);
/* After ef_pipeline_stop() on the pipeline reading the feed: a read that
 * waits for items returns EF_ECANCELED instead, also when the feeder is
 * stuck. Takes no GIL. */
void pyef_feed_stop(PyObject *feed);
/* Whether this thread runs the feed's iterable (its feeder thread); 0 for
 * a NULL feed. */
int pyef_feed_serving(PyObject *feed);
/* What the feed's iterable raised ("ValueError: ..."), once it has; NULL
 * before. Valid as long as the feed. */
const char *pyef_feed_failure(PyObject *feed);

/* ---- interrupt.c ---- */
/* Calls ef_pipeline_next(p, out) with the GIL released. On the main thread,
 * a SIGINT meanwhile stops `p`, and `feed` (its Python source's, or NULL;
 * kept alive by the caller), so the call returns at once; then
 * *interrupted is set and Python's own handler has been run, so
 * PyErr_CheckSignals() raises KeyboardInterrupt. */
int pyef_next_interruptible(ef_pipeline *p, PyObject *feed, ef_sample **out,
                            int *interrupted);
void pyef_interrupt_after_fork(void);

/* ---- pipeline.c ---- */
extern PyTypeObject pyef_pipeline_type;

/* ---- tokens.c ---- */
/* write_tokens(spec, path, field="tokens", dtype="uint16", eos=None, *,
 * seed=0, on_error="fail") -> the number of tokens written. */
PyObject *pyef_write_tokens(PyObject *module, PyObject *args, PyObject *kw);

/* ---- module.c ---- */
/* How many forks this process descends from since the module loaded:
 * a pipeline made under another count belongs to a parent process. */
unsigned pyef_forks(void);

#endif /* PYEF_H */
