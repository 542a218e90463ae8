/* SPDX-License-Identifier: Apache-2.0 */
/* echoflow.Tensor: one field of a sample, read-only, exported without a copy
 * through the buffer protocol (PEP 3118) and DLPack 0.6. A Tensor holds a
 * reference on the field's ef_buffer, and so does every export of it (a
 * memoryview or numpy array through the Tensor, a DLPack capsule or the
 * torch tensor made from it by itself), so the memory stays valid while any
 * of them lives, after its sample and its pipeline are gone. */
#include "pyef.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>


typedef struct {
    PyObject_HEAD
    ef_buffer *buf; /* one reference, ours */
    const void *data;
    ef_dtype dtype;
    int ndim;
    Py_ssize_t shape[EF_MAX_DIMS];
    Py_ssize_t strides[EF_MAX_DIMS]; /* bytes, C order */
    size_t nbytes;
} tensor;

/* The PEP 3118 format and the DLPack type of each dtype. bfloat16 has no
 * format (numpy has no such type). bool goes out over DLPack as uint8:
 * DLPack 0.6, which torch 1.13 and numpy 1.24 read, has no bool
 * (echoflow.torch views it as torch.bool again). */
static const struct {
    const char *format;
    uint8_t dl_code;
} dtype_info[EF__DTYPE_COUNT] = {
    [EF_U8] = {"B", kDLUInt},    [EF_I32] = {"i", kDLInt},
    [EF_I64] = {"q", kDLInt},    [EF_F32] = {"f", kDLFloat},
    [EF_BOOL] = {"?", kDLUInt},  [EF_I8] = {"b", kDLInt},
    [EF_I16] = {"h", kDLInt},    [EF_U16] = {"H", kDLUInt},
    [EF_F16] = {"e", kDLFloat},  [EF_BF16] = {NULL, kDLBfloat},
    [EF_F64] = {"d", kDLFloat},
};

PyObject *pyef_tensor_new(const ef_tensor *t)
{
    if (t->dtype < 0 || t->dtype >= EF__DTYPE_COUNT || t->ndim < 0 ||
        t->ndim > EF_MAX_DIMS || !t->buffer) {
        PyErr_Format(PyExc_SystemError, "echoflow: field '%s' is malformed",
                     t->name ? t->name : "?");
        return NULL;
    }
    tensor *self = PyObject_New(tensor, &pyef_tensor_type);
    if (!self)
        return NULL;
    self->buf = ef_buffer_retain(t->buffer);
    self->data = t->data;
    self->dtype = t->dtype;
    self->ndim = t->ndim;
    self->nbytes = t->nbytes;
    Py_ssize_t stride = (Py_ssize_t)ef_dtype_size(t->dtype);
    for (int d = t->ndim - 1; d >= 0; d--) {
        self->shape[d] = (Py_ssize_t)t->shape[d];
        self->strides[d] = stride;
        stride *= self->shape[d];
    }
    return (PyObject *)self;
}

int pyef_tensor_view(PyObject *obj, ef_tensor *out, size_t *offset)
{
    if (!PyObject_TypeCheck(obj, &pyef_tensor_type))
        return 0;
    const tensor *self = (const tensor *)obj;
    out->name = NULL;
    out->dtype = self->dtype;
    out->ndim = self->ndim;
    for (int d = 0; d < self->ndim; d++)
        out->shape[d] = self->shape[d];
    out->data = self->data;
    out->nbytes = self->nbytes;
    out->buffer = self->buf;
    *offset = (size_t)((const char *)self->data -
                       (const char *)ef_buffer_data(self->buf));
    return 1;
}

static void tensor_dealloc(tensor *self)
{
    ef_buffer_release(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- buffer protocol ---- */

static int tensor_getbuffer(tensor *self, Py_buffer *view, int flags)
{
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError,
                        "echoflow tensors are read-only: a sample's memory "
                        "is shared with its echoed copies; copy it first "
                        "(numpy.array(t)) to write");
        view->obj = NULL;
        return -1;
    }
    if (!dtype_info[self->dtype].format) { /* without a format: bytes */
        PyErr_Format(PyExc_BufferError,
                     "echoflow.Tensor: %s has no buffer format (numpy has no "
                     "bfloat16): read it with torch.from_dlpack(t), or cast "
                     "it to f32 in the pipeline (cast:dtype=f32)",
                     ef_dtype_name(self->dtype));
        view->obj = NULL;
        return -1;
    }
    view->buf = (void *)self->data;
    view->obj = Py_NewRef(self);
    view->len = (Py_ssize_t)self->nbytes;
    view->readonly = 1;
    view->itemsize = (Py_ssize_t)ef_dtype_size(self->dtype);
    view->format = (flags & PyBUF_FORMAT)
                       ? (char *)dtype_info[self->dtype].format
                       : NULL;
    view->ndim = self->ndim;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs tensor_as_buffer = {
    .bf_getbuffer = (getbufferproc)tensor_getbuffer,
};

/* ---- DLPack ---- */

static void dlpack_deleter(DLManagedTensor *m)
{
    ef_buffer_release(m->manager_ctx);
    free(m);
}

/* Frees a capsule nobody consumed; a consumer renames it "used_dltensor"
 * and takes over the deleter. */
static void dlpack_capsule_destructor(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, "dltensor"))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m)
        m->deleter(m);
    else
        PyErr_WriteUnraisable(capsule);
    PyErr_Restore(type, value, tb);
}

PyObject *pyef_dlpack_capsule(const ef_tensor *t)
{
    /* one allocation: the managed tensor, then its shape and strides */
    DLManagedTensor *m =
        malloc(sizeof *m + 2 * (size_t)t->ndim * sizeof(int64_t));
    if (!m)
        return PyErr_NoMemory();
    int64_t *shape = (int64_t *)(m + 1);
    int64_t *strides = shape + t->ndim;
    int64_t stride = 1; /* in elements, C order */
    for (int d = t->ndim - 1; d >= 0; d--) {
        shape[d] = t->shape[d];
        strides[d] = stride;
        stride *= t->shape[d];
    }
    size_t item = ef_dtype_size(t->dtype);
    m->dl_tensor = (DLTensor){
        .data = (void *)t->data,
        .device = {kDLCPU, 0},
        .ndim = t->ndim,
        .dtype = {dtype_info[t->dtype].dl_code, (uint8_t)(8 * item), 1},
        .shape = shape,
        .strides = strides,
        .byte_offset = 0,
    };
    m->manager_ctx = ef_buffer_retain(t->buffer);
    m->deleter = dlpack_deleter;
    PyObject *capsule =
        PyCapsule_New(m, "dltensor", dlpack_capsule_destructor);
    if (!capsule)
        dlpack_deleter(m);
    return capsule;
}

static PyObject *tensor_dlpack(tensor *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:__dlpack__", kwlist,
                                     &stream))
        return NULL;
    if (stream != Py_None) {
        PyErr_SetString(PyExc_BufferError,
                        "echoflow tensors live in CPU memory: "
                        "__dlpack__ takes stream=None only");
        return NULL;
    }
    ef_tensor t;
    size_t offset;
    pyef_tensor_view((PyObject *)self, &t, &offset);
    return pyef_dlpack_capsule(&t);
}

static PyObject *tensor_dlpack_device(tensor *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(ii)", kDLCPU, 0);
}

/* ---- attributes ---- */

static PyObject *tensor_shape(tensor *self, void *closure)
{
    (void)closure;
    PyObject *t = PyTuple_New(self->ndim);
    for (int d = 0; t && d < self->ndim; d++) {
        PyObject *n = PyLong_FromSsize_t(self->shape[d]);
        if (!n) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, d, n);
    }
    return t;
}

static PyObject *tensor_dtype(tensor *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(ef_dtype_name(self->dtype));
}

static PyObject *tensor_ndim(tensor *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->ndim);
}

static PyObject *tensor_nbytes(tensor *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->nbytes);
}

static PyObject *tensor_address(tensor *self, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr((void *)self->data);
}

static PyObject *tensor_repr(tensor *self)
{
    PyObject *shape = tensor_shape(self, NULL);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("echoflow.Tensor(dtype=%s, shape=%R)",
                                       ef_dtype_name(self->dtype), shape);
    Py_DECREF(shape);
    return r;
}

/* ---- numbers: int(t), float(t), bool(t), operator.index(t) ---- */

/* The value of a tensor of one element, as a Python int or float; a
 * TypeError naming `what` and the shape for any other. As numpy and torch
 * do, and not the buffer's bytes parsed as a number's text. */
static PyObject *one_value(tensor *self, const char *what)
{
    size_t esize = ef_dtype_size(self->dtype);
    if (self->nbytes != esize) {
        PyObject *shape = tensor_shape(self, NULL);
        if (shape) {
            PyErr_Format(PyExc_TypeError,
                         "echoflow.Tensor: only a tensor of one element "
                         "converts to %s; this one is %s %R (index it "
                         "through numpy.asarray(t) or torch.from_dlpack(t))",
                         what, ef_dtype_name(self->dtype), shape);
            Py_DECREF(shape);
        }
        return NULL;
    }
    switch (self->dtype) {
    case EF_U8:
        return PyLong_FromLong(*(const uint8_t *)self->data);
    case EF_I32:
        return PyLong_FromLong(*(const int32_t *)self->data);
    case EF_I64:
        return PyLong_FromLongLong(*(const int64_t *)self->data);
    case EF_F32:
        return PyFloat_FromDouble(*(const float *)self->data);
    case EF_BOOL:
        return PyBool_FromLong(*(const uint8_t *)self->data != 0);
    case EF_I8:
        return PyLong_FromLong(*(const int8_t *)self->data);
    case EF_I16:
        return PyLong_FromLong(*(const int16_t *)self->data);
    case EF_U16:
        return PyLong_FromLong(*(const uint16_t *)self->data);
    case EF_F16:
        return PyFloat_FromDouble(ef_f16_to_float(*(const uint16_t *)self->data));
    case EF_BF16:
        return PyFloat_FromDouble(
            ef_bf16_to_float(*(const uint16_t *)self->data));
    case EF_F64:
        return PyFloat_FromDouble(*(const double *)self->data);
    default:
        PyErr_Format(PyExc_TypeError, "echoflow.Tensor: dtype %s does not "
                     "convert to %s", ef_dtype_name(self->dtype), what);
        return NULL;
    }
}

static PyObject *tensor_int(tensor *self)
{
    PyObject *v = one_value(self, "int");
    if (v && PyFloat_Check(v)) { /* truncated, as int(2.7) is */
        PyObject *i = PyNumber_Long(v);
        Py_DECREF(v);
        return i;
    }
    return v;
}

static PyObject *tensor_float(tensor *self)
{
    PyObject *v = one_value(self, "float");
    if (v && PyLong_Check(v)) {
        PyObject *f = PyNumber_Float(v);
        Py_DECREF(v);
        return f;
    }
    return v;
}

static int is_float(ef_dtype dt)
{
    return dt == EF_F32 || dt == EF_F64 || dt == EF_F16 || dt == EF_BF16;
}

/* operator.index(t), range(t), a list index: integer dtypes only */
static PyObject *tensor_index(tensor *self)
{
    if (is_float(self->dtype)) {
        PyErr_Format(PyExc_TypeError, "echoflow.Tensor: an %s tensor is not "
                     "an index; int(t) truncates it",
                     ef_dtype_name(self->dtype));
        return NULL;
    }
    return one_value(self, "an index");
}

static int tensor_bool(tensor *self)
{
    PyObject *v = one_value(self, "bool");
    if (!v)
        return -1;
    int truth = PyObject_IsTrue(v);
    Py_DECREF(v);
    return truth;
}

static PyNumberMethods tensor_as_number = {
    .nb_bool = (inquiry)tensor_bool,
    .nb_int = (unaryfunc)tensor_int,
    .nb_float = (unaryfunc)tensor_float,
    .nb_index = (unaryfunc)tensor_index,
};

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)tensor_shape, NULL, "the shape, a tuple of ints", NULL},
    {"dtype", (getter)tensor_dtype, NULL, "'u8', 'i32', 'i64', 'f32', 'bool', 'i8', 'i16', 'u16', "
     "'f16', 'bf16' or 'f64'", NULL},
    {"ndim", (getter)tensor_ndim, NULL, "number of dimensions", NULL},
    {"nbytes", (getter)tensor_nbytes, NULL, "size of the data in bytes", NULL},
    {"address", (getter)tensor_address, NULL,
     "address of the first byte (shared by every export of the tensor)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* numpy.asarray(t) reads the buffer; for bf16, which has none, numpy would
 * make an array of one object of it without a word, so __array__ (which
 * numpy asks next) says why instead. */
static PyObject *tensor_array(tensor *self, PyObject *args)
{
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTuple(args, "|OO:__array__", &dtype, &copy))
        return NULL;
    if (!dtype_info[self->dtype].format)
        return PyErr_Format(PyExc_TypeError,
                            "echoflow.Tensor: %s has no numpy dtype: read "
                            "it with torch.from_dlpack(t), or cast it to f32 "
                            "in the pipeline (cast:dtype=f32)",
                            ef_dtype_name(self->dtype));
    PyObject *view = PyMemoryView_FromObject((PyObject *)self);
    PyObject *numpy = view ? PyImport_ImportModule("numpy") : NULL;
    PyObject *a = numpy ? PyObject_CallMethod(numpy, "asarray", "OO", view,
                                              dtype)
                        : NULL;
    Py_XDECREF(numpy);
    Py_XDECREF(view);
    return a;
}

static PyMethodDef tensor_methods[] = {
    {"__array__", (PyCFunction)tensor_array, METH_VARARGS,
     "numpy.asarray(t): the tensor's memory as a read-only array."},
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule sharing this tensor's memory (stream must be None)."},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
     "(device type, device id): (1, 0), the CPU."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject pyef_tensor_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "echoflow.Tensor",
    .tp_doc = "A read-only field of a sample: numpy.asarray(t), "
              "numpy.from_dlpack(t) and torch.from_dlpack(t) share its "
              "memory without a copy (torch.as_tensor takes "
              "numpy.asarray(t); bf16 has no numpy form, and bool goes "
              "over DLPack as uint8). A tensor of one element converts with "
              "int(), float() and bool(), an integer one with "
              "operator.index().",
    .tp_basicsize = sizeof(tensor),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = (reprfunc)tensor_repr,
    .tp_as_buffer = &tensor_as_buffer,
    .tp_as_number = &tensor_as_number,
    .tp_getset = tensor_getset,
    .tp_methods = tensor_methods,
};
