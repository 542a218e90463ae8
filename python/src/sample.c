/* echoflow.Sample: what iterating a pipeline yields, a dict of field name to
 * Tensor that also carries the sample's identity (echoflow.Identity: source
 * index, epoch, echo copy, and for a batch its count of fresh examples). */
#include "pyef.h"

#include <structmember.h>

typedef struct {
    PyDictObject dict;
    PyObject *identity; /* an Identity, or NULL (None) */
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
    return PyDict_Type.tp_traverse((PyObject *)self, visit, arg);
}

static int sample_clear(sample *self)
{
    Py_CLEAR(self->identity);
    return PyDict_Type.tp_clear((PyObject *)self);
}

static void sample_dealloc(sample *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->identity);
    PyDict_Type.tp_dealloc((PyObject *)self);
}

static PyMemberDef sample_members[] = {
    {"identity", T_OBJECT, offsetof(sample, identity), 0,
     "echoflow.Identity of the sample (None for one built by hand)"},
    {NULL, 0, 0, 0, NULL},
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
};

int pyef_sample_types_init(void)
{
    if (PyStructSequence_InitType2(&pyef_identity_type, &identity_desc) < 0)
        return -1;
    pyef_sample_type.tp_base = &PyDict_Type;
    return PyType_Ready(&pyef_sample_type);
}

static PyObject *identity_from(ef_sample_id id)
{
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

PyObject *pyef_sample_from(const ef_sample *s, PyObject *convert)
{
    sample *out = (sample *)PyObject_CallNoArgs((PyObject *)&pyef_sample_type);
    if (!out)
        return NULL;
    out->identity = identity_from(ef_sample_identity(s));
    if (!out->identity)
        goto fail;
    int n = ef_sample_field_count(s);
    for (int i = 0; i < n; i++) {
        ef_tensor t;
        if (ef_sample_field(s, i, &t) != EF_OK) {
            PyErr_SetString(PyExc_SystemError, "echoflow: bad field index");
            goto fail;
        }
        PyObject *v;
        if (convert) {
            PyObject *capsule = pyef_dlpack_capsule(&t);
            v = capsule ? PyObject_CallOneArg(convert, capsule) : NULL;
            Py_XDECREF(capsule);
        } else {
            v = pyef_tensor_new(&t);
        }
        if (!v)
            goto fail;
        int rc = PyDict_SetItemString((PyObject *)out, t.name, v);
        Py_DECREF(v);
        if (rc < 0)
            goto fail;
    }
    return (PyObject *)out;
fail:
    Py_DECREF(out);
    return NULL;
}
