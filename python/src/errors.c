/* SPDX-License-Identifier: Apache-2.0 */
/* The exception classes: echoflow.Error, and one subclass per error status
 * of the library, so a caller can catch a data error apart from a bad
 * spec. Every one carries the library's message (file, offset, what was
 * expected) and the status as .status. */
#include "pyef.h"

/* One row per negative status: the class name, the Python builtin it also
 * derives from (NULL for none), and what it is for. */
static const struct {
    int status;
    const char *name;
    PyObject **also;
    const char *doc;
} classes[] = {
    {EF_EINVAL, "SpecError", &PyExc_ValueError,
     "A bad pipeline spec or option: the message names the stage and "
     "option."},
    {EF_ESPEC, "SpecError", &PyExc_ValueError, NULL},
    {EF_ENOMEM, "OutOfMemoryError", &PyExc_MemoryError,
     "The library ran out of memory."},
    {EF_EIO, "ReadError", NULL,
     "Reading failed: a file that cannot be opened, an HTTP error."},
    {EF_EFORMAT, "FormatError", NULL,
     "Malformed input: a truncated file, a corrupt record, a bad image."},
    {EF_ESHAPE, "ShapeError", NULL,
     "Tensors whose shapes or types do not match (batching, a map's "
     "output)."},
    {EF_ECALLBACK, "CallbackError", NULL,
     "A map callback failed; a Python exception raised inside it is the "
     "__cause__."},
    {EF_ECANCELED, "StoppedError", NULL, "The pipeline was stopped."},
    {EF_ESTATE, "StateError", NULL, "Not allowed in the pipeline's state."},
    {EF_EUNSUPPORTED, "UnsupportedError", NULL,
     "This build lacks what the spec needs (libcurl, libjpeg-turbo ...)."},
};
#define NCLASSES (sizeof classes / sizeof classes[0])

static PyObject *base_error;
static PyObject *class_of[NCLASSES];
static PyObject *pipeline_warning;

int pyef_errors_init(PyObject *module)
{
    base_error = PyErr_NewExceptionWithDoc(
        "echoflow.Error",
        "Base of every error echoflow raises; .status is the library's "
        "status code (a negative int).",
        NULL, NULL);
    if (!base_error || PyModule_AddObjectRef(module, "Error", base_error) < 0)
        return -1;
    pipeline_warning = PyErr_NewExceptionWithDoc(
        "echoflow.PipelineWarning",
        "A pipeline works, but probably not as meant (a shuffle buffer that "
        "must fill from a slow upstream first, say); the library's "
        "ef_pipeline_warning().",
        PyExc_UserWarning, NULL);
    if (!pipeline_warning ||
        PyModule_AddObjectRef(module, "PipelineWarning", pipeline_warning) < 0)
        return -1;
    for (size_t i = 0; i < NCLASSES; i++) {
        for (size_t k = 0; k < i; k++)
            if (strcmp(classes[k].name, classes[i].name) == 0)
                class_of[i] = Py_NewRef(class_of[k]);
        if (class_of[i])
            continue;
        PyObject *bases = classes[i].also
                              ? PyTuple_Pack(2, base_error, *classes[i].also)
                              : PyTuple_Pack(1, base_error);
        if (!bases)
            return -1;
        char qualified[64];
        snprintf(qualified, sizeof qualified, "echoflow.%s", classes[i].name);
        /* .status of the class too, for errors raised in Python (the
         * echoflow.torch module's); the C side sets each instance's */
        PyObject *dict = Py_BuildValue("{s:i}", "status", classes[i].status);
        class_of[i] = dict ? PyErr_NewExceptionWithDoc(
                                 qualified, classes[i].doc, bases, dict)
                           : NULL;
        Py_XDECREF(dict);
        Py_DECREF(bases);
        if (!class_of[i] ||
            PyModule_AddObjectRef(module, classes[i].name, class_of[i]) < 0)
            return -1;
    }
    return 0;
}

int pyef_warn(const char *text)
{
    return PyErr_WarnEx(pipeline_warning, text, 1);
}

PyObject *pyef_text(const char *s)
{
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

PyObject *pyef_raise(int status, const char *message)
{
    PyObject *cls = base_error;
    for (size_t i = 0; i < NCLASSES; i++)
        if (classes[i].status == status)
            cls = class_of[i];
    if (!message || !message[0])
        message = ef_strerror(status);
    PyObject *text = pyef_text(message);
    PyObject *exc = text ? PyObject_CallOneArg(cls, text) : NULL;
    Py_XDECREF(text);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(status);
    if (!code || PyObject_SetAttrString(exc, "status", code) < 0) {
        Py_XDECREF(code);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}
