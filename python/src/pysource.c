/* SPDX-License-Identifier: Apache-2.0 */
/* Python iterables as the first stage: echoflow.Pipeline(spec, source=...).
 *
 * A Python thread (echoflow._feed_loop) iterates the user's iterable, a
 * torch DataLoader say, and hands each item to Feed.put(); put() makes
 * samples of it, without a copy, and queues them in a bounded ring. The
 * pipeline's source callback takes them from the ring: it blocks when the
 * stage after it does, and answers EF_AGAIN when polled (echo:factor=auto
 * echoes meanwhile). The GIL is held only while Python objects are touched;
 * waiting for room, for the pipeline to ask for a pass and for samples is
 * done without it.
 *
 * Fields without a copy: an object with __dlpack__ (a CPU torch tensor, a
 * numpy array) is imported through DLPack, and any other C-contiguous
 * buffer (bytes, memoryview) through the buffer protocol; the sample's
 * ef_buffer holds the producer's memory and gives it back when its last
 * reference goes. A DLPack deleter needs no GIL of ours (torch's needs
 * none, numpy's takes it itself); a buffer's release takes it.
 *
 * With unbatch, each item is a batch: every field's leading dimension is
 * split into that many samples viewing one buffer at their own offsets.
 * With batched, each item is a batch kept whole: one sample whose members
 * (ef_sample_set_members) are its rows, so that the stages that take one
 * example refuse it as they refuse the output of `batch`.
 *
 * Lock rule: `mu` guards every field below it in the struct; nothing calls
 * into Python or the library while holding it, except ef_sample_free() of
 * samples whose buffers are DLPack or library memory. */
#include "pyef.h"

#include <dlpack/dlpack.h>
#include <pthread.h>
#include <string.h>

typedef struct {
    PyObject_HEAD pthread_mutex_t mu;
    pthread_cond_t changed; /* any field below changed: one condition, as
                               few threads (one feeder, one reader) wait */
    ef_sample **ring;
    int cap, head, count;
    int64_t wanted;     /* the pass the pipeline asks for; -1 before */
    int64_t fed;        /* the pass the feeder is on */
    int ended;          /* the feeder finished pass `fed` */
    int closed;         /* the pipeline is gone: put() refuses */
    int stopped;        /* the pipeline was stopped: reads wait no more */
    int failed;         /* the feeder's iterable raised: a negative status */
    int64_t next_index; /* identity index of the next sample of the pass */
    char why[512];      /* what the iterable raised, as text */
    int unbatch;
    int batched;
    /* with batched: the identity index of the next batch's first example */
    int64_t next_member;
    PyObject **first_error; /* the pipeline's slot, set under the GIL */
} feed;

/* The feed whose iterable this thread runs (its feeder's), or NULL: the
 * pipeline refuses the calls from it that would wait for the feeder
 * itself (pyef_feed_serving). */
static _Thread_local const feed *feeding;

/* ---- the pipeline's side ---- */

/* The source callback (ef_source_fn) given to ef_pipeline_add_source. */
int pyef_feed_next(void *user, int64_t epoch, int block, ef_sample **out)
{
    feed *f = user;
    int rc;
    pthread_mutex_lock(&f->mu);
    if (epoch > f->wanted) { /* a new pass: the feeder starts it */
        f->wanted = epoch;
        pthread_cond_broadcast(&f->changed);
    }
    for (;;) {
        if (f->count > 0 && f->fed == epoch) {
            *out = f->ring[f->head];
            f->head = (f->head + 1) % f->cap;
            f->count--;
            pthread_cond_broadcast(&f->changed);
            rc = EF_OK;
            break;
        }
        if (f->failed) {
            rc = f->failed;
            break;
        }
        if (f->ended && f->fed == epoch) {
            rc = EF_END;
            break;
        }
        if (!block) {
            rc = EF_AGAIN;
            break;
        }
        if (f->closed || f->stopped) {
            rc = EF_ECANCELED;
            break;
        }
        pthread_cond_wait(&f->changed, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* ---- importing fields ---- */

static void release_dlpack(void *user)
{
    DLManagedTensor *m = user;
    if (m->deleter)
        m->deleter(m);
}

static void release_pybuffer(void *user)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_buffer *v = user;
    PyBuffer_Release(v);
    PyMem_Free(v);
    PyGILState_Release(gil);
}

static int dl_dtype(const DLDataType *t, ef_dtype *out)
{
    static const struct {
        uint8_t code, bits;
        ef_dtype dtype;
    } known[] = {
        {kDLUInt, 8, EF_U8},      {kDLUInt, 16, EF_U16},
        {kDLInt, 8, EF_I8},       {kDLInt, 16, EF_I16},
        {kDLInt, 32, EF_I32},     {kDLInt, 64, EF_I64},
        {kDLFloat, 16, EF_F16},   {kDLFloat, 32, EF_F32},
        {kDLFloat, 64, EF_F64},   {kDLBfloat, 16, EF_BF16},
        {PYEF_DL_BOOL, 8, EF_BOOL},
    };
    if (t->lanes != 1)
        return -1;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].code == t->code && known[i].bits == t->bits) {
            *out = known[i].dtype;
            return 0;
        }
    return -1;
}

/* A DLPack type as numpy and torch name it ("uint32", "complex64"). */
static void dl_describe(const DLDataType *t, char *buf, size_t cap)
{
    static const char *const kinds[] = {
        [kDLInt] = "int",          [kDLUInt] = "uint",
        [kDLFloat] = "float",      [kDLBfloat] = "bfloat",
        [kDLComplex] = "complex", [PYEF_DL_BOOL] = "bool",
    };
    const char *kind = t->code < sizeof kinds / sizeof kinds[0] && kinds[t->code]
                           ? kinds[t->code]
                           : "type code ";
    if (t->lanes != 1)
        snprintf(buf, cap, "%s%u x %u lanes", kind, t->bits, t->lanes);
    else if (t->code == PYEF_DL_BOOL)
        snprintf(buf, cap, "bool");
    else
        snprintf(buf, cap, "%s%u", kind, t->bits);
}

/* What one field holds: its memory as a buffer of ours, its dtype and
 * shape. */
typedef struct {
    ef_buffer *buf;
    ef_dtype dtype;
    int ndim;
    int64_t shape[EF_MAX_DIMS + 1];
    int variable; /* str or bytes: a list once batched, whatever the lengths
                     (a bytearray or memoryview is an array, as numpy's) */
    ef_text_kind text; /* str: EF_TEXT; a list of str: EF_TEXT_LIST */
    /* a batch's list of str (unbatch, batched): row r's text is bytes
     * [offsets[r], offsets[r + 1]) of buf; NULL otherwise */
    int64_t *offsets;
} imported;

/* `value` through DLPack: a capsule of `value.__dlpack__()`. */
static int import_dlpack(const char *name, PyObject *value, imported *im)
{
    PyObject *capsule = PyObject_CallMethod(value, "__dlpack__", NULL);
    if (!capsule)
        return -1;
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (!m) {
        Py_DECREF(capsule);
        return -1;
    }
    const DLTensor *t = &m->dl_tensor;
    const char *why = NULL;
    if (t->device.device_type != kDLCPU)
        why = "is not in CPU memory: the pipeline reads it on the CPU";
    else if (dl_dtype(&t->dtype, &im->dtype) < 0) {
        char what[64];
        dl_describe(&t->dtype, what, sizeof what);
        PyErr_Format(PyExc_TypeError,
                     "source: field '%s' (%.80s): %s is not a dtype echoflow "
                     "holds (it holds: " PYEF_DTYPES ")",
                     name, Py_TYPE(value)->tp_name, what);
        Py_DECREF(capsule);
        return -1;
    } else if (t->ndim > EF_MAX_DIMS + 1)
        why = "has too many dimensions";
    size_t nbytes = ef_dtype_size(im->dtype);
    int64_t expect = (int64_t)nbytes;
    for (int d = t->ndim - 1; !why && d >= 0; d--) {
        if (t->strides && t->shape[d] > 1 &&
            t->strides[d] * (int64_t)nbytes != expect)
            why = "is not contiguous: call .contiguous() on it";
        expect *= t->shape[d];
    }
    if (why) {
        PyErr_Format(PyExc_TypeError, "source: field '%s' (%.80s) %s", name,
                     Py_TYPE(value)->tp_name, why);
        Py_DECREF(capsule);
        return -1;
    }
    im->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        im->shape[d] = t->shape[d];
        nbytes *= (size_t)t->shape[d];
    }
    im->buf = ef_buffer_wrap((char *)t->data + t->byte_offset, nbytes,
                             release_dlpack, m);
    if (!im->buf) {
        Py_DECREF(capsule);
        PyErr_NoMemory();
        return -1;
    }
    /* ours now: the capsule must not delete it too */
    PyCapsule_SetName(capsule, "used_dltensor");
    PyCapsule_SetDestructor(capsule, NULL);
    Py_DECREF(capsule);
    return 0;
}

/* `value` through the buffer protocol (bytes, memoryview, numpy scalars). */
static int import_buffer(const char *name, PyObject *value, imported *im)
{
    Py_buffer *v = PyMem_Malloc(sizeof *v);
    if (!v) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyObject_GetBuffer(value, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyMem_Free(v);
        PyErr_Format(PyExc_TypeError,
                     "source: field '%s' is a %.80s; expected a tensor, an "
                     "array, bytes, str, int or float",
                     name, Py_TYPE(value)->tp_name);
        return -1;
    }
    const char *why = NULL;
    char what[128];
    if (pyef_buffer_dtype(v, &im->dtype) < 0) {
        char format[64];
        pyef_format_describe(v, format, sizeof format);
        snprintf(what, sizeof what, "%s is not a dtype echoflow holds", format);
        PyErr_Format(PyExc_TypeError,
                     "source: field '%s' (%.80s): %s (it holds: " PYEF_DTYPES
                     ")",
                     name, Py_TYPE(value)->tp_name, what);
        PyBuffer_Release(v);
        PyMem_Free(v);
        return -1;
    } else if (v->ndim > EF_MAX_DIMS + 1)
        why = "has too many dimensions";
    if (why) {
        PyErr_Format(PyExc_TypeError, "source: field '%s' (%.80s) %s", name,
                     Py_TYPE(value)->tp_name, why);
        PyBuffer_Release(v);
        PyMem_Free(v);
        return -1;
    }
    im->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++)
        im->shape[d] = v->shape ? v->shape[d] : v->len / v->itemsize;
    im->buf = ef_buffer_wrap(v->buf, (size_t)v->len, release_pybuffer, v);
    if (!im->buf) {
        PyBuffer_Release(v);
        PyMem_Free(v);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* A Python int (as int64) or float (as float32), copied: they are small. */
static int import_number(const char *name, PyObject *value, imported *im)
{
    void *data;
    if (PyFloat_Check(value)) {
        im->buf = ef_buffer_new(sizeof(float));
        im->dtype = EF_F32;
        if (im->buf) {
            data = ef_buffer_data(im->buf);
            *(float *)data = (float)PyFloat_AS_DOUBLE(value);
        }
    } else {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            PyErr_Format(PyExc_OverflowError,
                         "source: field '%s' is %R, outside int64", name,
                         value);
            return -1;
        }
        im->buf = ef_buffer_new(sizeof(int64_t));
        im->dtype = EF_I64;
        if (im->buf) {
            data = ef_buffer_data(im->buf);
            *(int64_t *)data = v;
        }
    }
    if (!im->buf) {
        PyErr_NoMemory();
        return -1;
    }
    im->ndim = 0;
    return 0;
}

/* Whether value is a non-empty list or tuple of str only. */
static int is_text_list(PyObject *value)
{
    if (!PyList_Check(value) && !PyTuple_Check(value))
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyUnicode_Check(PySequence_Fast_GET_ITEM(value, i)))
            return 0;
    return n > 0;
}

/* A list of str, copied into one buffer: as one field of NUL-ended texts
 * (EF_TEXT_LIST), or with `rows` as a batch's texts, one per row
 * (im->offsets). */
static int import_texts(PyObject *value, int rows, imported *im)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        if (!PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(value, i), &len))
            return -1;
        total += len + !rows;
    }
    im->buf = ef_buffer_new(total ? (size_t)total : 1);
    im->offsets = rows ? PyMem_Calloc((size_t)n + 1, sizeof(int64_t)) : NULL;
    if (!im->buf || (rows && !im->offsets)) {
        ef_buffer_release(im->buf);
        PyMem_Free(im->offsets);
        im->buf = NULL;
        im->offsets = NULL;
        PyErr_NoMemory();
        return -1;
    }
    char *at = ef_buffer_data(im->buf);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *text =
            PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(value, i), &len);
        memcpy(at, text, (size_t)len);
        at += len;
        if (rows)
            im->offsets[i + 1] = im->offsets[i] + len;
        else
            *at++ = '\0';
    }
    im->dtype = EF_U8;
    im->ndim = 1;
    im->shape[0] = rows ? n : total;
    im->variable = 1;
    im->text = rows ? EF_TEXT : EF_TEXT_LIST;
    return 0;
}

static int import_field(const char *name, PyObject *value, int rows,
                        imported *im)
{
    if (is_text_list(value))
        return import_texts(value, rows, im);
    /* exactly: numpy.float64 is a float, and has the dtype of its own */
    if (PyLong_Check(value) || PyFloat_CheckExact(value))
        return import_number(name, value, im);
    if (PyUnicode_Check(value)) {
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(value, &n);
        if (!text)
            return -1;
        void *data;
        im->buf = ef_buffer_new(n ? (size_t)n : 1);
        if (!im->buf) {
            PyErr_NoMemory();
            return -1;
        }
        data = ef_buffer_data(im->buf);
        memcpy(data, text, (size_t)n);
        im->dtype = EF_U8;
        im->ndim = 1;
        im->shape[0] = n;
        im->variable = 1;
        im->text = EF_TEXT;
        return 0;
    }
    /* the buffer protocol first: numpy's DLPack (1.24) has no bool, its
     * buffers have every dtype; torch tensors have DLPack only */
    if (PyObject_CheckBuffer(value) ||
        !PyObject_HasAttrString(value, "__dlpack__")) {
        im->variable = PyBytes_Check(value);
        return import_buffer(name, value, im);
    }
    return import_dlpack(name, value, im);
}

/* ---- the feeder's side ---- */

static void free_samples(ef_sample **s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        ef_sample_free(s[i]);
    PyMem_Free(s);
}

/* Makes `s` a batch of `rows` examples of pass `epoch`, numbered from
 * `first`. -1 with an exception set. */
static int declare_batch(ef_sample *s, int64_t rows, int64_t epoch,
                         int64_t first)
{
    ef_sample_id *ids = PyMem_Calloc((size_t)rows, sizeof *ids);
    if (!ids) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t r = 0; r < rows; r++)
        ids[r] = (ef_sample_id){.index = first + r, .epoch = epoch};
    int rc = ef_sample_set_members(s, ids, rows);
    PyMem_Free(ids);
    if (rc != EF_OK) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Adds imported field x as `name` of s: all of it, or with `unbatch` its
 * row r of `rows`. */
static int add_imported(ef_sample *s, const char *name, const imported *x,
                        int unbatch, int64_t r, int64_t rows)
{
    int rc;
    if (x->offsets && unbatch) { /* row r's text */
        int64_t len = x->offsets[r + 1] - x->offsets[r];
        rc = ef_sample_add(s, name, EF_U8, 1, &len, x->buf,
                           (size_t)x->offsets[r]);
    } else if (x->offsets) { /* a batch kept whole: its texts, ragged */
        rc = ef_sample_add(s, name, EF_U8, 1, &x->offsets[rows], x->buf, 0);
        int64_t *lengths = rc == EF_OK ? PyMem_Calloc((size_t)rows, 8) : NULL;
        for (int64_t k = 0; lengths && k < rows; k++)
            lengths[k] = x->offsets[k + 1] - x->offsets[k];
        if (rc == EF_OK)
            rc = lengths ? ef_sample_set_ragged(s, name, lengths, rows)
                         : EF_ENOMEM;
        PyMem_Free(lengths);
    } else {
        int skip = unbatch; /* the batch dimension */
        size_t row = ef_buffer_size(x->buf) / (size_t)(rows ? rows : 1);
        rc = ef_sample_add(s, name, x->dtype, x->ndim - skip, x->shape + skip,
                           x->buf, skip ? (size_t)r * row : 0);
        if (rc == EF_OK && x->variable && !x->text && x->ndim - skip >= 1)
            rc = ef_sample_set_variable(s, name);
    }
    if (rc == EF_OK && x->text)
        rc = ef_sample_set_text(s, name, x->text);
    return rc;
}

/* The samples of one item: `fields` a sequence of (name, value) pairs.
 * NULL with an exception set. *n receives how many, *examples how many
 * examples they hold (those of a batched item's one sample). */
static ef_sample **samples_of(feed *f, PyObject *fields, int64_t epoch,
                              int64_t first_index, int64_t first_member,
                              int64_t *n, int64_t *examples)
{
    PyObject *seq = PySequence_Fast(fields, "put() takes (name, value) pairs");
    if (!seq)
        return NULL;
    Py_ssize_t nf = PySequence_Fast_GET_SIZE(seq);
    imported *im = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof *im);
    const char **names = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof *names);
    ef_sample **out = NULL;
    int has_rows = f->unbatch || f->batched;
    int64_t rows = has_rows ? -1 : 1;
    Py_ssize_t done = 0;
    if (!im || !names) {
        PyErr_NoMemory();
        goto fail;
    }
    for (; done < nf; done++) {
        const char *name;
        PyObject *value;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, done),
                              "sO;put() takes (name, value) pairs", &name,
                              &value) ||
            import_field(name, value, has_rows, &im[done]) < 0)
            goto fail;
        names[done] = name;
        if (!has_rows)
            continue;
        int64_t r = im[done].ndim > 0 ? im[done].shape[0] : -1;
        if (r < 0) {
            PyErr_Format(PyExc_ValueError,
                         "source: field '%s' of a batch is a scalar; every "
                         "field of a batch has the batch size as its first "
                         "dimension",
                         name);
            done++;
            goto fail;
        }
        if (rows >= 0 && r != rows) {
            PyErr_Format(PyExc_ValueError,
                         "source: field '%s' of a batch has %lld rows, the "
                         "fields before it %lld; every field of a batch has "
                         "the batch size as its first dimension",
                         name, (long long)r, (long long)rows);
            done++;
            goto fail;
        }
        rows = r;
    }
    if (rows < 0)
        rows = 0; /* a batch without fields: nothing to emit */
    /* a batched item is one sample, unless it has no rows */
    int64_t nout = f->batched ? rows > 0 : rows;
    out = PyMem_Calloc((size_t)(nout ? nout : 1), sizeof *out);
    if (!out) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int64_t r = 0; r < nout; r++) {
        ef_sample_id id = {.index = first_index + r, .epoch = epoch};
        if (f->batched)
            id.fresh = (int32_t)(rows < INT32_MAX ? rows : INT32_MAX);
        if (!(out[r] = ef_sample_new(id))) {
            free_samples(out, r);
            out = NULL;
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < nf; i++) {
            const imported *x = &im[i];
            int rc = add_imported(out[r], names[i], x, f->unbatch, r, rows);
            if (rc != EF_OK) {
                pyef_field_refused(out[r], "source: ", names[i], rc);
                free_samples(out, r + 1);
                out = NULL;
                goto fail;
            }
        }
        if (f->batched &&
            declare_batch(out[r], rows, epoch, first_member) < 0) {
            free_samples(out, r + 1);
            out = NULL;
            goto fail;
        }
    }
    *n = nout;
    *examples = rows;
fail:
    for (Py_ssize_t i = 0; im && i < done; i++) {
        ef_buffer_release(im[i].buf);
        PyMem_Free(im[i].offsets);
    }
    PyMem_Free(im);
    PyMem_Free(names);
    Py_DECREF(seq);
    return out;
}

/* put(fields) -> bool: queues the samples of one item, waiting for room;
 * False once the pipeline is gone (the feeder then stops). */
static PyObject *feed_put(feed *f, PyObject *fields)
{
    pthread_mutex_lock(&f->mu);
    int64_t epoch = f->fed, first = f->next_index, member = f->next_member;
    pthread_mutex_unlock(&f->mu);
    int64_t n = 0, examples = 0;
    ef_sample **s = samples_of(f, fields, epoch, first, member, &n, &examples);
    if (!s)
        return NULL;
    int64_t queued = 0;
    int closed = 0;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&f->mu);
    f->next_index += n;
    f->next_member += examples;
    while (queued < n) {
        while (f->count == f->cap && !f->closed)
            pthread_cond_wait(&f->changed, &f->mu);
        if (f->closed)
            break;
        f->ring[(f->head + f->count) % f->cap] = s[queued++];
        f->count++;
        pthread_cond_broadcast(&f->changed);
    }
    closed = f->closed;
    pthread_mutex_unlock(&f->mu);
    Py_END_ALLOW_THREADS
        /* what the pipeline did not take: freed with the GIL, which a buffer's
         * release takes */
        for (int64_t i = queued; i < n; i++) ef_sample_free(s[i]);
    PyMem_Free(s);
    return PyBool_FromLong(!closed);
}

/* wait_pass() -> int: waits for the pipeline to ask for a pass, and
 * returns its number; -1 once the pipeline is gone. */
static PyObject *feed_wait_pass(feed *f, PyObject *unused)
{
    (void)unused;
    int64_t pass;
    feeding = f; /* the thread that waits for passes runs the iterable */
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&f->mu);
    while (!f->closed && f->wanted <= f->fed)
        pthread_cond_wait(&f->changed, &f->mu);
    pass = f->closed ? -1 : f->wanted;
    if (pass >= 0) {
        f->fed = pass;
        f->ended = 0;
        f->next_index = f->next_member = 0;
    }
    pthread_mutex_unlock(&f->mu);
    Py_END_ALLOW_THREADS return PyLong_FromLongLong(pass);
}

/* end(): the pass is over. */
static PyObject *feed_end(feed *f, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&f->mu);
    f->ended = 1;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mu);
    Py_RETURN_NONE;
}

/* fail(exc): the iterable raised `exc`; the pipeline fails with it. */
static PyObject *feed_fail(feed *f, PyObject *exc)
{
    if (f->first_error && !*f->first_error)
        *f->first_error = Py_NewRef(exc);
    PyObject *text = PyObject_Str(exc);
    const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
    pthread_mutex_lock(&f->mu);
    if (!f->failed)
        snprintf(f->why, sizeof f->why, "%s: %s", Py_TYPE(exc)->tp_name,
                 msg ? msg : "?");
    f->failed = EF_ECALLBACK;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mu);
    PyErr_Clear();
    Py_XDECREF(text);
    Py_RETURN_NONE;
}

const char *pyef_feed_failure(PyObject *obj)
{
    feed *f = (feed *)obj;
    pthread_mutex_lock(&f->mu);
    const char *why = f->failed ? f->why : NULL;
    pthread_mutex_unlock(&f->mu);
    return why;
}

int pyef_feed_serving(PyObject *obj)
{
    return obj && feeding == (const feed *)obj;
}

/* Called by the pipeline's stop(): the library cannot wake a callback
 * that waits for items, so a reader waiting on a feeder that is stuck
 * (or that waits for the pipeline itself) is woken here. The feeder goes
 * on until close. */
void pyef_feed_stop(PyObject *obj)
{
    feed *f = (feed *)obj;
    pthread_mutex_lock(&f->mu);
    f->stopped = 1;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mu);
}

/* Called by the pipeline once the library's pipeline is destroyed: the
 * feeder's put() and wait_pass() return, and the samples left are freed. */
void pyef_feed_close(PyObject *obj)
{
    feed *f = (feed *)obj;
    f->first_error = NULL; /* the pipeline's slot goes with it */
    pthread_mutex_lock(&f->mu);
    f->closed = 1;
    pthread_cond_broadcast(&f->changed);
    int n = f->count, head = f->head;
    f->count = 0;
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n; i++)
        ef_sample_free(f->ring[(head + i) % f->cap]);
}

PyObject *pyef_feed_new(int capacity, int unbatch, int batched,
                        PyObject **first_error)
{
    feed *f = PyObject_New(feed, &pyef_feed_type);
    if (!f)
        return NULL;
    f->ring = PyMem_Calloc((size_t)capacity, sizeof *f->ring);
    if (!f->ring) {
        PyObject_Free(f);
        return PyErr_NoMemory();
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->changed, NULL);
    f->cap = capacity;
    f->head = f->count = 0;
    f->wanted = f->fed = -1;
    f->ended = f->closed = f->stopped = f->failed = 0;
    f->why[0] = '\0';
    f->next_index = f->next_member = 0;
    f->unbatch = unbatch;
    f->batched = batched;
    f->first_error = first_error;
    return (PyObject *)f;
}

static void feed_dealloc(feed *f)
{
    pyef_feed_close((PyObject *)f);
    PyMem_Free(f->ring);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->changed);
    PyObject_Free(f);
}

static PyMethodDef feed_methods[] = {
    {"put", (PyCFunction)feed_put, METH_O,
     "put(fields) -> bool: queues the samples of one item, a sequence of "
     "(name, value) pairs; False once the pipeline is gone."},
    {"wait_pass", (PyCFunction)feed_wait_pass, METH_NOARGS,
     "wait_pass() -> int: the pass the pipeline asks for next, once it "
     "does; -1 once the pipeline is gone."},
    {"end", (PyCFunction)feed_end, METH_NOARGS, "end(): the pass is over."},
    {"fail", (PyCFunction)feed_fail, METH_O,
     "fail(exc): the iterable raised exc; the pipeline fails."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject pyef_feed_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "echoflow._Feed",
    .tp_doc = "The queue between a Python source's thread and its "
              "pipeline.",
    .tp_basicsize = sizeof(feed),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)feed_dealloc,
    .tp_methods = feed_methods,
};
