/* SPDX-License-Identifier: Apache-2.0 */
/* echoflow.Sample: what iterating a pipeline yields, a dict of field name to
 * Tensor that also carries the sample's identity (echoflow.Identity: source
 * index, epoch, echo copy, and for a batch its count of fresh examples),
 * and for a batch its members' identities (ef_sample_members()). */
#include "pyef.h"

#include <dlpack/dlpack.h>
#include <string.h>
#include <structmember.h>

/* Columns of a row of Sample.members, as the fields of Identity. */
#define MEMBER_COLS 4

typedef struct {
    PyDictObject dict;
    PyObject *identity; /* an Identity, or NULL (None) */
    /* A batch's members: `members_raw` holds them as bytes of n rows of
     * MEMBER_COLS int64, copied when the sample is built (the ef_sample is
     * freed right after); the first read of .members wraps them, without a
     * copy, in a numpy array that stays in `members`, so each later read is
     * free and numpy is imported only by those who ask. At most one of the
     * two is set; neither: None. */
    PyObject *members_raw;
    PyObject *members;
} sample;

static PyStructSequence_Field identity_fields[] = {
    {"index", "position in the source (a batch: its number in the epoch)"},
    {"epoch", "pass over the source, from 0"},
    {"echo_copy", "0 for a fresh item, k for its k-th echo"},
    {"fresh", "a batch: how many of its examples were fresh; 0 otherwise"},
    {NULL, NULL},
};

static PyStructSequence_Desc identity_desc = {
    "echoflow.Identity",
    "Where a sample came from. Echoed copies share index and epoch and "
    "differ in echo_copy.",
    identity_fields,
    4,
};

PyTypeObject pyef_identity_type;

static int sample_traverse(sample *self, visitproc visit, void *arg)
{
    Py_VISIT(self->identity);
    Py_VISIT(self->members);
    return PyDict_Type.tp_traverse((PyObject *)self, visit, arg);
}

static int sample_clear(sample *self)
{
    Py_CLEAR(self->identity);
    Py_CLEAR(self->members_raw);
    Py_CLEAR(self->members);
    return PyDict_Type.tp_clear((PyObject *)self);
}

static void sample_dealloc(sample *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->identity);
    Py_CLEAR(self->members_raw);
    Py_CLEAR(self->members);
    PyDict_Type.tp_dealloc((PyObject *)self);
}

static PyMemberDef sample_members[] = {
    {"identity", T_OBJECT, offsetof(sample, identity), 0,
     "echoflow.Identity of the sample (None for one built by hand)"},
    {NULL, 0, 0, 0, NULL},
};

/* numpy.ndarray((n, MEMBER_COLS), "int64", buffer=raw): read-only, since
 * bytes are, and sharing raw's memory. */
static PyObject *members_array(PyObject *raw)
{
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (!numpy)
        return NULL;
    PyObject *ndarray = PyObject_GetAttrString(numpy, "ndarray");
    Py_DECREF(numpy);
    if (!ndarray)
        return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(raw) / (MEMBER_COLS * 8);
    PyObject *args = Py_BuildValue("((nn)s)", n, (Py_ssize_t)MEMBER_COLS,
                                   "int64");
    PyObject *kwargs = args ? Py_BuildValue("{sO}", "buffer", raw) : NULL;
    PyObject *a = kwargs ? PyObject_Call(ndarray, args, kwargs) : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_DECREF(ndarray);
    return a;
}

static PyObject *sample_get_members(sample *self, void *closure)
{
    (void)closure;
    if (!self->members && self->members_raw) {
        self->members = members_array(self->members_raw);
        if (!self->members)
            return NULL;
        Py_CLEAR(self->members_raw);
    }
    return Py_NewRef(self->members ? self->members : Py_None);
}

/* Settable, as identity is, so that a converted copy of a sample
 * (echoflow.torch.to_torch) carries them on. */
static int sample_set_members(sample *self, PyObject *value, void *closure)
{
    (void)closure;
    Py_CLEAR(self->members_raw);
    Py_XSETREF(self->members,
               value && value != Py_None ? Py_NewRef(value) : NULL);
    return 0;
}

static PyGetSetDef sample_getset[] = {
    {"members", (getter)sample_get_members, (setter)sample_set_members,
     "A batch's examples, in order: a read-only numpy int64 array of shape "
     "[n, 4], one row (index, epoch, echo_copy, fresh) per example, as "
     "Identity; what Pipeline.feedback() takes. None for a sample that is "
     "not a batch. Built once, on the first read.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyef_sample_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "echoflow.Sample",
    .tp_doc = "A sample: a dict of field name to Tensor, with .identity.",
    .tp_basicsize = sizeof(sample),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)sample_traverse,
    .tp_clear = (inquiry)sample_clear,
    .tp_dealloc = (destructor)sample_dealloc,
    .tp_members = sample_members,
    .tp_getset = sample_getset,
};

int pyef_sample_types_init(void)
{
    if (PyStructSequence_InitType2(&pyef_identity_type, &identity_desc) < 0)
        return -1;
    pyef_sample_type.tp_base = &PyDict_Type;
    return PyType_Ready(&pyef_sample_type);
}

static PyObject *identity_from(ef_sample_id id, int64_t epoch_base)
{
    id.epoch += epoch_base;
    PyObject *t = PyStructSequence_New(&pyef_identity_type);
    if (!t)
        return NULL;
    PyObject *v[4] = {
        PyLong_FromLongLong(id.index), PyLong_FromLongLong(id.epoch),
        PyLong_FromLong(id.echo_copy), PyLong_FromLong(id.fresh)};
    for (int i = 0; i < 4; i++) {
        if (!v[i]) {
            for (int k = i; k < 4; k++)
                Py_XDECREF(v[k]);
            Py_DECREF(t);
            return NULL;
        }
        PyStructSequence_SET_ITEM(t, i, v[i]);
    }
    return t;
}

/* The members of batch `s` as bytes of n rows of MEMBER_COLS int64; NULL
 * without an exception for a sample that is not a batch. */
static PyObject *members_bytes(const ef_sample *s, int64_t epoch_base)
{
    int64_t n = ef_sample_members(s, NULL, 0);
    if (n <= 0)
        return NULL;
    if ((uint64_t)n > PY_SSIZE_T_MAX / (MEMBER_COLS * 8))
        return PyErr_NoMemory();
    ef_sample_id *ids = PyMem_Malloc((size_t)n * sizeof *ids);
    if (!ids)
        return PyErr_NoMemory();
    int64_t got = ef_sample_members(s, ids, n);
    assert(got == n);
    (void)got;
    PyObject *raw =
        PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * MEMBER_COLS * 8);
    if (raw) {
        int64_t *row = (int64_t *)PyBytes_AS_STRING(raw);
        for (int64_t i = 0; i < n; i++, row += MEMBER_COLS) {
            row[0] = ids[i].index;
            row[1] = ids[i].epoch + epoch_base;
            row[2] = ids[i].echo_copy;
            row[3] = ids[i].fresh;
        }
    }
    PyMem_Free(ids);
    return raw;
}

/* ---- handing fields out writable ----
 *
 * A DLPack capsule cannot say read-only, and torch makes a writable tensor
 * of it, so an in-place `x.sub_(m)` writes into the field's memory. That
 * memory must then be this sample's alone: nothing that could be handed
 * out later (an echo copy in the echo stage's pool or shuffle buffer, a
 * copy queued in a prefetch, a later sample viewing a source's whole file,
 * an earlier Tensor or tensor still alive) may show it. The buffer's
 * count says so: the sample holds one reference per field on it, and
 * anyone else holding it is one more. Nobody can take a new reference
 * without holding one already, so a count that equals the sample's own
 * stays that way once the sample is ours; a higher one may drop later,
 * which only costs a copy that was not needed.
 *
 * A buffer that wraps the user's own memory (a Python source's tensor,
 * array or bytearray: ef_buffer_is_borrowed) is never the sample's alone,
 * whatever its count: the user holds it outside echoflow, and a write
 * would change their data. Such fields, and views of them (an echo, a
 * take, a batch of one viewing its part), go out as copies.
 *
 * Fields of one sample may view one buffer (a batch slab, a record split
 * into fields). They are not echo copies: when their ranges are apart, a
 * write into one cannot reach another, and they go out without a copy.
 * Ranges that overlap (a Python map returning one Tensor under two names)
 * are copied: a write into one dict entry would change another. */

/* Gives out copies of large fields with the GIL released. */
#define COPY_WITHOUT_GIL (256 * 1024)

static int ranges_overlap(const ef_tensor *a, const ef_tensor *b)
{
    const char *pa = a->data, *pb = b->data;
    return pa < pb + b->nbytes && pb < pa + a->nbytes;
}

/* Sets copy[i] for each of the n fields `f` of a sample whose memory something
 * else may show (above). All counts are read before any capsule of the
 * sample adds its own reference. */
static void shared_fields(const ef_tensor *f, int n, int *copy)
{
    for (int i = 0; i < n; i++) {
        unsigned own = 0;
        int overlap = 0;
        for (int j = 0; j < n; j++) {
            if (f[j].buffer != f[i].buffer)
                continue;
            own++;
            overlap |= j != i && ranges_overlap(&f[i], &f[j]);
        }
        copy[i] =
            f[i].nbytes > 0 && (overlap || ef_buffer_is_borrowed(f[i].buffer) ||
                                ef_buffer_refcount(f[i].buffer) > own);
    }
}

/* A capsule of a copy of field `t` in a new buffer of its own. */
static PyObject *copied_capsule(const ef_tensor *t, pyef_handout *h)
{
    ef_buffer *b = ef_buffer_new(t->nbytes);
    if (!b)
        return PyErr_NoMemory();
    ef_tensor c = *t;
    c.buffer = b;
    c.data = ef_buffer_data(b);
    if (t->nbytes >= COPY_WITHOUT_GIL) {
        Py_BEGIN_ALLOW_THREADS
        memcpy(ef_buffer_data(b), t->data, t->nbytes);
        Py_END_ALLOW_THREADS
    } else {
        memcpy(ef_buffer_data(b), t->data, t->nbytes);
    }
    PyObject *capsule = pyef_dlpack_capsule(&c);
    ef_buffer_release(b); /* the capsule holds its own */
    if (capsule) {
        h->copies++;
        h->copied_bytes += t->nbytes;
    }
    return capsule;
}

/* One tensor as Python hands it: through `convert` (a fresh copy first
 * when `copy`), else as an echoflow.Tensor. */
static PyObject *tensor_value(const ef_tensor *t, int copy, PyObject *convert,
                              pyef_handout *h)
{
    if (!convert)
        return pyef_tensor_new(t);
    PyObject *capsule = copy ? copied_capsule(t, h) : pyef_dlpack_capsule(t);
    int retype = h->retype && (t->dtype == EF_BOOL || t->dtype == EF_U16);
    if (capsule && retype && t->dtype == EF_U16) {
        /* as int16, the same bits: retype widens them */
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
        m->dl_tensor.dtype.code = kDLInt;
    }
    PyObject *v = capsule ? PyObject_CallOneArg(convert, capsule) : NULL;
    Py_XDECREF(capsule);
    if (v && retype) {
        PyObject *name = PyUnicode_FromString(ef_dtype_name(t->dtype));
        PyObject *r =
            name ? PyObject_CallFunctionObjArgs(h->retype, v, name, NULL) : NULL;
        Py_XDECREF(name);
        Py_SETREF(v, r);
    }
    return v;
}

/* The text kind of field t of s: as marked (ef_sample_set_text), and
 * WebDataset's key and URL, which are text: str, as webdataset and torch
 * users expect, not bytes. */
static ef_text_kind text_kind(const ef_sample *s, const ef_tensor *t)
{
    if (t->dtype != EF_U8)
        return EF_NOT_TEXT;
    if (!strcmp(t->name, "__key__") || !strcmp(t->name, "__url__"))
        return EF_TEXT;
    return ef_sample_text(s, t->name);
}

/* A list of the NUL-ended texts of p (EF_TEXT_LIST). */
static PyObject *text_list(const ef_tensor *p)
{
    const char *at = p->data, *end = at + p->nbytes;
    PyObject *list = PyList_New(0);
    while (list && at < end) {
        const char *nul = memchr(at, '\0', (size_t)(end - at));
        if (!nul)
            nul = end; /* a last text without its NUL: all of it */
        PyObject *text = PyUnicode_DecodeUTF8(at, nul - at, "surrogateescape");
        if (!text || PyList_Append(list, text) < 0)
            Py_CLEAR(list);
        Py_XDECREF(text);
        at = nul + 1;
    }
    return list;
}

/* The part of t `start` rows in and `rows` rows long: one example of a
 * field that holds them one after another. */
static ef_tensor part_of(const ef_tensor *t, int64_t start, int64_t rows)
{
    ef_tensor p = *t;
    size_t row = t->shape[0] ? t->nbytes / (size_t)t->shape[0] : 0;
    p.shape[0] = rows;
    p.data = (const unsigned char *)t->data + (size_t)start * row;
    p.nbytes = (size_t)rows * row;
    return p;
}

/* One example's value in a list: str for text (a list of str for a list
 * of texts), bytes for other 1-D u8 (an encoded image, a caption), else a
 * tensor viewing the batch's. */
static PyObject *item_value(const ef_tensor *p, ef_text_kind text, int copy,
                            PyObject *convert, pyef_handout *h)
{
    if (text == EF_TEXT_LIST)
        return text_list(p);
    if (text == EF_TEXT)
        return PyUnicode_DecodeUTF8(p->data, (Py_ssize_t)p->nbytes,
                                    "surrogateescape");
    if (p->dtype == EF_U8 && p->ndim == 1)
        return PyBytes_FromStringAndSize(p->data, (Py_ssize_t)p->nbytes);
    return tensor_value(p, copy, convert, h);
}

/* A Python list of a batch's examples of field t: lengths[0..n) rows
 * each (a ragged field), or t's rows one by one (lengths NULL). */
static PyObject *list_value(const ef_tensor *t, const int64_t *lengths,
                            int64_t n, ef_text_kind text, int copy,
                            PyObject *convert, pyef_handout *h)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    int64_t start = 0;
    for (int64_t k = 0; list && k < n; k++) {
        ef_tensor p;
        if (lengths) {
            p = part_of(t, start, lengths[k]);
            start += lengths[k];
        } else { /* row k of [B, ...]: one example of a [...] field */
            p = part_of(t, k, 1);
            p.ndim--;
            memmove(p.shape, p.shape + 1, sizeof(int64_t) * (size_t)p.ndim);
        }
        PyObject *v = item_value(&p, text, copy, convert, h);
        if (!v)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)k, v);
    }
    return list;
}

/* Field t of s as Python hands it: a list for a ragged field or a
 * batch's text, str for an example's text, else a tensor. */
static PyObject *field_value(const ef_sample *s, const ef_tensor *t, int copy,
                             PyObject *convert, pyef_handout *h)
{
    ef_text_kind text = text_kind(s, t);
    int64_t n = ef_sample_ragged_lengths(s, t->name, NULL, 0);
    if (n > 0) {
        int64_t *lengths = PyMem_Calloc((size_t)n, sizeof *lengths);
        if (!lengths)
            return PyErr_NoMemory();
        ef_sample_ragged_lengths(s, t->name, lengths, n);
        PyObject *v = list_value(t, lengths, n, text, copy, convert, h);
        PyMem_Free(lengths);
        return v;
    }
    if (text && t->ndim == 1)
        return item_value(t, text, copy, convert, h);
    if (text && t->ndim == 2) /* a batch of texts of one length */
        return list_value(t, NULL, t->shape[0], text, copy, convert, h);
    return tensor_value(t, copy, convert, h);
}

PyObject *pyef_sample_from(const ef_sample *s, PyObject *convert,
                           pyef_handout *h)
{
    assert(!convert || h);
    /* most samples have a few fields: no allocation for those */
    ef_tensor few_f[16];
    int few_copy[16] = {0};
    ef_tensor *f = few_f;
    int *copy = few_copy;
    int n = ef_sample_field_count(s);
    sample *out = (sample *)PyObject_CallNoArgs((PyObject *)&pyef_sample_type);
    if (!out)
        return NULL;
    int64_t epoch_base = h ? h->epoch_base : 0;
    out->identity = identity_from(ef_sample_identity(s), epoch_base);
    if (!out->identity)
        goto fail;
    out->members_raw = members_bytes(s, epoch_base);
    if (!out->members_raw && PyErr_Occurred())
        goto fail;
    if (n > 16) {
        f = PyMem_Calloc((size_t)n, sizeof *f);
        copy = PyMem_Calloc((size_t)n, sizeof *copy);
        if (!f || !copy) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    for (int i = 0; i < n; i++) {
        if (ef_sample_field(s, i, &f[i]) != EF_OK) {
            PyErr_SetString(PyExc_SystemError, "echoflow: bad field index");
            goto fail;
        }
    }
    if (convert && h->copy_shared)
        shared_fields(f, n, copy);
    for (int i = 0; i < n; i++) {
        const ef_tensor t = f[i];
        PyObject *v = field_value(s, &t, copy[i], convert, h);
        if (!v)
            goto fail;
        int rc = PyDict_SetItemString((PyObject *)out, t.name, v);
        Py_DECREF(v);
        if (rc < 0)
            goto fail;
    }
    if (f != few_f) {
        PyMem_Free(f);
        PyMem_Free(copy);
    }
    return (PyObject *)out;
fail:
    if (f != few_f) {
        PyMem_Free(f);
        PyMem_Free(copy);
    }
    Py_DECREF(out);
    return NULL;
}
