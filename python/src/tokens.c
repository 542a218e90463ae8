/* SPDX-License-Identifier: Apache-2.0 */
/* echoflow.write_tokens: a pipeline's documents into a token file (raw
 * uint16 or uint32 ids), through ef_token_writer; what nanoGPT's
 * prepare.py does with numpy, for the tokens source to read. */
#include "pyef.h"

/* Raises the error of the pipeline, or else of the writer. */
static PyObject *fail(int rc, ef_pipeline *p, ef_token_writer *w)
{
    const char *msg = p && ef_pipeline_error(p)[0] ? ef_pipeline_error(p)
                      : w                          ? ef_token_writer_error(w)
                                                   : "";
    return pyef_raise(rc, msg[0] ? msg : ef_strerror(rc));
}

/* The pipeline of `spec`, seeded, with its error policy. */
static int make_pipeline(const char *spec, unsigned long long seed,
                         const char *on_error, ef_pipeline **out)
{
    int skip = !strcmp(on_error, "skip");
    if (!skip && strcmp(on_error, "fail")) {
        PyErr_Format(PyExc_ValueError,
                     "on_error must be 'fail' or 'skip', not '%s'", on_error);
        return -1;
    }
    int rc = ef_pipeline_create(out);
    if (rc == EF_OK)
        rc = ef_pipeline_set_seed(*out, seed);
    if (rc == EF_OK)
        rc = ef_pipeline_set_on_error(*out, skip ? EF_ON_ERROR_SKIP
                                                 : EF_ON_ERROR_FAIL);
    if (rc == EF_OK)
        rc = ef_pipeline_parse(*out, spec);
    if (rc != EF_OK) {
        fail(rc, *out, NULL);
        ef_pipeline_destroy(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

PyObject *pyef_write_tokens(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"spec", "path", "field",    "dtype",
                             "eos",  "seed", "on_error", NULL};
    const char *spec, *field = "tokens", *dtype = "uint16", *on_error = "fail";
    PyObject *path_obj, *eos_obj = Py_None;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO&|ssO$Ks", kwlist, &spec,
                                     PyUnicode_FSConverter, &path_obj, &field,
                                     &dtype, &eos_obj, &seed, &on_error))
        return NULL;
    long long eos = -1;
    if (eos_obj != Py_None) {
        eos = PyLong_AsLongLong(eos_obj);
        if (eos == -1 && PyErr_Occurred()) {
            Py_DECREF(path_obj);
            return NULL;
        }
        if (eos < 0) {
            Py_DECREF(path_obj);
            return PyErr_Format(PyExc_ValueError,
                                "eos must be a token id (0 or more), not %lld",
                                eos);
        }
    }
    ef_pipeline *p = NULL;
    if (make_pipeline(spec, seed, on_error, &p) < 0) {
        Py_DECREF(path_obj);
        return NULL;
    }
    ef_token_writer *w = NULL;
    int rc = ef_token_writer_create(&w, PyBytes_AS_STRING(path_obj), dtype);
    Py_DECREF(path_obj);
    ef_sample *s = NULL;
    int interrupted = 0;
    while (rc == EF_OK &&
           (rc = pyef_next_interruptible(p, NULL, &s, &interrupted)) == EF_OK) {
        Py_BEGIN_ALLOW_THREADS rc = ef_token_writer_add(w, s, field, eos);
        Py_END_ALLOW_THREADS ef_sample_free(s);
        s = NULL;
    }
    if (interrupted && PyErr_CheckSignals() < 0)
        rc = EF_ECANCELED;
    else if (rc == EF_END)
        rc = ef_token_writer_finish(w);
    PyObject *result = NULL;
    if (rc == EF_OK)
        result = PyLong_FromLongLong(ef_token_writer_tokens(w));
    else if (!PyErr_Occurred())
        fail(rc, p, w); /* the pipeline's message, or else the writer's */
    ef_token_writer_destroy(w); /* removes an unfinished file */
    ef_pipeline_destroy(p);
    return result;
}
