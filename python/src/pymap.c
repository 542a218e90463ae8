/* SPDX-License-Identifier: Apache-2.0 */
/* Python callables as map stages. The pipeline's map threads call
 * pyef_map_call(), which takes the GIL, hands the callable the input as an
 * echoflow.Sample, and builds the output sample from the mapping it
 * returns: an echoflow.Tensor passes through without a copy, any other
 * C-contiguous buffer (a numpy array) is copied once into the pipeline's
 * memory. Whatever the callable raises fails the sample with a message
 * naming the map and the exception; the first exception is kept for the
 * consumer to raise as the cause. A mapping whose arrays together pass
 * the pipeline's memory budget fails with EF_ENOMEM before anything is
 * copied, as the stage would refuse the copy anyway. */
#include "pyef.h"

#include <stdatomic.h>
#include <string.h>

struct pyef_map {
    PyObject *fn;
    char name[64];
    const void *owner;      /* the pipeline object */
    atomic_int calls;       /* threads inside fn now */
    PyObject **first_error; /* the pipeline's slot, written under the GIL */
    int keep_error;
    uint64_t budget; /* the pipeline's memory budget; 0: none */
    pyef_handout *handout; /* the pipeline's: the epoch base */
};

/* The pipeline whose map this thread is running, if any. */
static _Thread_local const void *serving;

int pyef_map_serving(const void *pipeline)
{
    return serving == pipeline;
}

int pyef_map_busy(const pyef_map *m)
{
    return atomic_load((atomic_int *)&m->calls) > 0;
}

pyef_map *pyef_map_new(PyObject *fn, const char *name, const void *owner,
                       PyObject **first_error, int keep_error, uint64_t budget,
                       pyef_handout *handout)
{
    pyef_map *m = PyMem_Calloc(1, sizeof *m);
    if (!m)
        return (pyef_map *)PyErr_NoMemory();
    m->fn = Py_NewRef(fn);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->owner = owner;
    m->first_error = first_error;
    m->keep_error = keep_error;
    m->budget = budget;
    m->handout = handout;
    return m;
}

void pyef_map_free(pyef_map *m)
{
    if (!m)
        return;
    Py_DECREF(m->fn);
    PyMem_Free(m);
}

int pyef_buffer_dtype(const Py_buffer *v, ef_dtype *out)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] && f[1])
        return -1;
    switch (f[0]) {
    case 'B':
        *out = EF_U8;
        return 0;
    case 'b':
        *out = EF_I8;
        return 0;
    case '?':
        *out = EF_BOOL;
        return 0;
    case 'H':
        *out = EF_U16;
        return v->itemsize == 2 ? 0 : -1;
    case 'h':
    case 'i':
    case 'l':
    case 'q':
        if (v->itemsize == 2)
            *out = EF_I16;
        else if (v->itemsize == 4)
            *out = EF_I32;
        else if (v->itemsize == 8)
            *out = EF_I64;
        else
            return -1;
        return 0;
    case 'e':
        *out = EF_F16;
        return 0;
    case 'f':
        *out = EF_F32;
        return 0;
    case 'd':
        *out = EF_F64;
        return 0;
    default:
        return -1;
    }
}

void pyef_format_describe(const Py_buffer *v, char *buf, size_t cap)
{
    const char *f = v->format ? v->format : "B";
    int bits = (int)(8 * v->itemsize);
    if (*f == '>' || *f == '!')
        snprintf(buf, cap, "big-endian '%s'", f);
    else if (!strcmp(f, "Zf") || !strcmp(f, "Zd") || !strcmp(f, "Zg"))
        snprintf(buf, cap, "complex%d", bits);
    else if (!strcmp(f, "I") || !strcmp(f, "L") || !strcmp(f, "Q"))
        snprintf(buf, cap, "uint%d", bits);
    else if (!strcmp(f, "g"))
        snprintf(buf, cap, "float%d", bits);
    else if (!strcmp(f, "O"))
        snprintf(buf, cap, "object");
    else
        snprintf(buf, cap, "format '%s' of %zd-byte items", f, v->itemsize);
}

int pyef_field_refused(const ef_sample *s, const char *what, const char *name,
                       int rc)
{
    size_t len = strlen(name);
    int n = ef_sample_field_count(s);
    if (rc == EF_ENOMEM)
        PyErr_Format(PyExc_MemoryError, "%sfield '%.200s': out of memory", what,
                     name);
    else if (rc == EF_EINVAL && len >= EF_MAX_NAME)
        PyErr_Format(PyExc_ValueError,
                     "%sfield '%.40s...': a name of %zu bytes, over the "
                     "limit of %d (EF_MAX_NAME - 1)",
                     what, name, len, EF_MAX_NAME - 1);
    else if (rc == EF_EINVAL && n >= EF_MAX_FIELDS)
        PyErr_Format(PyExc_ValueError,
                     "%sfield '%.200s': the sample has %d fields already, "
                     "the most it may hold (EF_MAX_FIELDS)",
                     what, name, n);
    else if (rc == EF_EINVAL && len == 0)
        PyErr_Format(PyExc_ValueError, "%sa field has an empty name", what);
    else
        PyErr_Format(PyExc_ValueError, "%sfield '%.200s': %s", what, name,
                     ef_strerror(rc));
    return -1;
}

/* Adds `value` to `s` as field `name`; a Python exception on failure. */
/* Field `name` of the map's input, as it was: the map handed back the
 * value it was given (a key, a batch's list of keys), which may be a
 * Python form (str, a list) of a field that is more than a tensor. */
static int pass_through(ef_sample *s, const ef_sample *in, const char *name)
{
    ef_tensor t;
    int rc = ef_sample_get(in, name, &t);
    if (rc == EF_OK)
        rc = ef_sample_add(s, name, t.dtype, t.ndim, t.shape, t.buffer,
                           (size_t)((const unsigned char *)t.data -
                                    (const unsigned char *)
                                        ef_buffer_data(t.buffer)));
    int64_t n = rc == EF_OK ? ef_sample_ragged_lengths(in, name, NULL, 0) : 0;
    if (n > 0) {
        int64_t *lengths = PyMem_Calloc((size_t)n, sizeof *lengths);
        if (!lengths)
            return PyErr_NoMemory(), -1;
        ef_sample_ragged_lengths(in, name, lengths, n);
        rc = ef_sample_set_ragged(s, name, lengths, n);
        PyMem_Free(lengths);
    }
    return rc == EF_OK ? 0 : pyef_field_refused(s, "", name, rc);
}

/* A str becomes its UTF-8 bytes, u8 [n], marked as text, as sources
 * store it. */
static int add_text(ef_sample *s, const char *name, PyObject *value)
{
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(value, &n);
    if (!text)
        return -1;
    int64_t shape[1] = {n};
    void *data;
    int rc = ef_sample_add_new(s, name, EF_U8, 1, shape, &data);
    if (rc == EF_OK)
        rc = ef_sample_set_text(s, name, EF_TEXT); /* a str again */
    if (rc != EF_OK)
        return pyef_field_refused(s, "", name, rc);
    memcpy(data, text, (size_t)n);
    return 0;
}

/* A list of str or bytes becomes a ragged u8 field: the texts one after
 * another, with their lengths, as batch makes of a __key__ or a caption. */
static int add_texts(ef_sample *s, const char *name, PyObject *list)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    int64_t *lengths = PyMem_Calloc(n ? (size_t)n : 1, sizeof *lengths);
    if (!lengths)
        return PyErr_NoMemory(), -1;
    int64_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = PyList_GET_ITEM(list, k);
        Py_ssize_t len = -1;
        if (PyUnicode_Check(v))
            PyUnicode_AsUTF8AndSize(v, &len);
        else if (PyBytes_Check(v))
            len = PyBytes_GET_SIZE(v);
        else
            PyErr_Format(PyExc_TypeError,
                         "field '%s': item %zd of the list is a %.80s; a "
                         "list field holds str or bytes",
                         name, k, Py_TYPE(v)->tp_name);
        if (len < 0) {
            PyMem_Free(lengths);
            return -1;
        }
        lengths[k] = len;
        total += len;
    }
    int64_t shape[1] = {total};
    unsigned char *data;
    int rc = n ? ef_sample_add_new(s, name, EF_U8, 1, shape, (void **)&data)
               : EF_EINVAL;
    for (Py_ssize_t k = 0; rc == EF_OK && k < n; k++) {
        PyObject *v = PyList_GET_ITEM(list, k);
        const char *src = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v)
                                             : PyBytes_AS_STRING(v);
        memcpy(data, src, (size_t)lengths[k]);
        data += lengths[k];
    }
    if (rc == EF_OK)
        rc = ef_sample_set_ragged(s, name, lengths, n);
    int all_str = 1;
    for (Py_ssize_t k = 0; k < n; k++)
        all_str &= PyUnicode_Check(PyList_GET_ITEM(list, k));
    if (rc == EF_OK && all_str) /* each a str again */
        rc = ef_sample_set_text(s, name, EF_TEXT);
    PyMem_Free(lengths);
    if (rc != EF_OK && !n)
        PyErr_Format(PyExc_ValueError, "field '%s': an empty list", name);
    else if (rc != EF_OK)
        pyef_field_refused(s, "", name, rc);
    return rc == EF_OK ? 0 : -1;
}

static int add_field(ef_sample *s, const char *name, PyObject *value)
{
    ef_tensor t;
    size_t offset;
    int rc;
    if (PyUnicode_Check(value))
        return add_text(s, name, value);
    if (PyList_Check(value))
        return add_texts(s, name, value);
    if (pyef_tensor_view(value, &t, &offset)) {
        rc = ef_sample_add(s, name, t.dtype, t.ndim, t.shape, t.buffer,
                           offset);
        return rc == EF_OK ? 0 : pyef_field_refused(s, "", name, rc);
    }
    Py_buffer v;
    if (PyObject_GetBuffer(value, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Format(PyExc_TypeError,
                     "field '%s': a %.80s is not a C-contiguous array "
                     "(return echoflow.Tensor or numpy arrays)",
                     name, Py_TYPE(value)->tp_name);
        return -1;
    }
    ef_dtype dtype;
    int64_t shape[EF_MAX_DIMS];
    rc = -1;
    char what[64];
    if (pyef_buffer_dtype(&v, &dtype) < 0) {
        pyef_format_describe(&v, what, sizeof what);
        PyErr_Format(PyExc_TypeError,
                     "field '%s': %s is not a dtype echoflow holds (it "
                     "holds: " PYEF_DTYPES ")",
                     name, what);
    } else if (v.ndim > EF_MAX_DIMS)
        PyErr_Format(PyExc_ValueError,
                     "field '%s': %d dimensions, at most %d", name, v.ndim,
                     EF_MAX_DIMS);
    else {
        for (int d = 0; d < v.ndim; d++)
            shape[d] = v.shape ? v.shape[d] : v.len / v.itemsize;
        void *data;
        int st = ef_sample_add_new(s, name, dtype, v.ndim, shape, &data);
        if (st == EF_OK) {
            memcpy(data, v.buf, (size_t)v.len);
            rc = 0;
        } else
            pyef_field_refused(s, "", name, st);
    }
    PyBuffer_Release(&v);
    return rc;
}

/* The bytes the arrays of mapping `res` hold, as fields would count
 * them; values that are not arrays count nothing (adding them fails
 * later with the reason). */
static uint64_t result_bytes(PyObject *res)
{
    uint64_t n = 0;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(res, &pos, &key, &value)) {
        ef_tensor t;
        size_t offset;
        Py_buffer v;
        if (pyef_tensor_view(value, &t, &offset))
            n += t.nbytes;
        else if (PyObject_GetBuffer(value, &v, PyBUF_C_CONTIGUOUS) == 0) {
            n += (uint64_t)v.len;
            PyBuffer_Release(&v);
        } else
            PyErr_Clear();
    }
    return n;
}

static int sample_from_result(const ef_sample *in, PyObject *arg,
                              PyObject *res, ef_sample **out)
{
    if (!PyDict_Check(res)) {
        PyErr_Format(PyExc_TypeError,
                     "a map must return a dict of field name to array, "
                     "not %.80s",
                     Py_TYPE(res)->tp_name);
        return -1;
    }
    ef_sample *s = ef_sample_new(ef_sample_identity(in));
    if (!s) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(res, &pos, &key, &value)) {
        Py_ssize_t n = 0;
        const char *name =
            PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &n) : NULL;
        if (!name && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a map's field names must be str");
        else if (name && (Py_ssize_t)strlen(name) != n) { /* C stops at NUL */
            PyErr_Format(PyExc_ValueError,
                         "a map's field name cannot hold a NUL character: %R",
                         key);
            name = NULL;
        }
        if (!name) {
            ef_sample_free(s);
            return -1;
        }
        PyObject *given = PyDict_GetItemWithError(arg, key);
        if ((given == value ? pass_through(s, in, name)
                            : PyErr_Occurred() ? -1
                                               : add_field(s, name, value)) <
            0) {
            ef_sample_free(s);
            return -1;
        }
    }
    *out = s;
    return 0;
}

/* Turns the pending Python exception into the stage's failure. */
static int fail_from_exception(pyef_map *m, ef_map_ctx *ctx)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
    PyErr_Clear();
    int rc = ef_map_ctx_fail(ctx, EF_ECALLBACK, "map '%s' raised %s: %s",
                             m->name, ((PyTypeObject *)type)->tp_name,
                             msg ? msg : "?");
    Py_XDECREF(text);
    if (m->keep_error && !*m->first_error && value)
        *m->first_error = Py_NewRef(value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

int pyef_map_call(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    pyef_map *m = ef_map_ctx_user(ctx);
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = EF_OK;
    PyObject *arg = pyef_sample_from(in, NULL, m->handout);
    const void *outer = serving;
    serving = m->owner;
    atomic_fetch_add(&m->calls, 1);
    PyObject *res = arg ? PyObject_CallOneArg(m->fn, arg) : NULL;
    atomic_fetch_sub(&m->calls, 1);
    serving = outer;
    uint64_t n = res && m->budget && PyDict_Check(res) ? result_bytes(res) : 0;
    if (n > m->budget) /* the stage's own check, made before the copy */
        rc = ef_map_ctx_fail(ctx, EF_ENOMEM,
                             "its output: %llu bytes, over the memory budget "
                             "of %llu bytes (raise it: --memory-budget, "
                             "memory_budget= in Python, "
                             "ef_pipeline_set_memory_budget)",
                             (unsigned long long)n,
                             (unsigned long long)m->budget);
    else if (!res || sample_from_result(in, arg, res, out) < 0)
        rc = fail_from_exception(m, ctx);
    Py_XDECREF(arg);
    Py_XDECREF(res);
    PyGILState_Release(gil);
    return rc;
}
