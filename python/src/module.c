/* SPDX-License-Identifier: Apache-2.0 */
/* echoflow._echoflow: the extension module. Its types and exceptions are
 * re-exported by the echoflow package (python/echoflow/__init__.py). */
#include "pyef.h"

#include <pthread.h>
#include <stdatomic.h>

static PyObject *stage_option(const ef_option_info *o)
{
    PyObject *dflt = o->default_value ? PyUnicode_FromString(o->default_value)
                                      : Py_NewRef(Py_None);
    if (!dflt)
        return NULL;
    return Py_BuildValue("{s:s,s:s,s:N,s:s,s:d,s:d}", "name", o->name, "type",
                         ef_opt_type_name(o->type), "default", dflt, "help",
                         o->help, "min", o->min, "max", o->max);
}

static PyObject *mod_stages(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int n = ef_stage_registry_count();
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        const ef_stage_info *info = ef_stage_registry_get(i);
        PyObject *opts = PyList_New(info->noptions);
        for (int k = 0; opts && k < info->noptions; k++) {
            PyObject *o = stage_option(&info->options[k]);
            if (!o)
                Py_CLEAR(opts);
            else
                PyList_SET_ITEM(opts, k, o);
        }
        PyObject *stage = opts ? Py_BuildValue("{s:s,s:s,s:N}", "name",
                                               info->name, "help", info->help,
                                               "options", opts)
                               : NULL;
        if (!stage) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, stage);
    }
    return list;
}

static PyObject *mod_epoch_seed(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *seed, *epoch, *part;
    if (!PyArg_ParseTuple(args, "OOO:epoch_seed", &seed, &epoch, &part))
        return NULL;
    /* any int, taken modulo 2^64 as the C function computes */
    unsigned long long v[3];
    PyObject *in[3] = {seed, epoch, part};
    for (int i = 0; i < 3; i++) {
        PyObject *n = PyNumber_Index(in[i]);
        if (!n)
            return NULL;
        v[i] = PyLong_AsUnsignedLongLongMask(n);
        Py_DECREF(n);
        if (v[i] == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    return PyLong_FromUnsignedLongLong(ef_epoch_seed(v[0], v[1], v[2]));
}

static PyObject *mod_split_spec(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_ssize_t size;
    const char *spec = PyUnicode_AsUTF8AndSize(arg, &size);
    if (!spec)
        return NULL;
    if ((size_t)size != strlen(spec)) {
        PyErr_SetString(PyExc_ValueError, "split_spec: the spec holds a NUL");
        return NULL;
    }
    PyObject *parts = PyList_New(0);
    for (const char *rest = spec; parts && rest;) {
        const char *text;
        size_t len;
        rest = ef_spec_stage(rest, &text, &len);
        PyObject *part = PyUnicode_FromStringAndSize(text, (Py_ssize_t)len);
        if (!part || PyList_Append(parts, part) != 0)
            Py_CLEAR(parts);
        Py_XDECREF(part);
    }
    return parts;
}

static PyObject *mod_service_launched(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(ef_service_launched());
}

/* Joins the service's mpirun job as a trainer (ef_service_join), for a
 * trainer that needs its place before its pipeline reads the service. */
static PyObject *mod_service_join_trainer(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    ef_service_hello hello = {.size = sizeof hello, .role = EF_SERVICE_TRAINER};
    ef_service_info info = {.size = sizeof info};
    char err[1024];
    ef_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ef_service_join(&hello, &info, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != EF_OK)
        return pyef_raise(rc, err[0] ? err
                                     : "service: the job's processes differ "
                                       "(another rank says how)");
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i}", "rank", info.rank,
                         "size_of_job", info.size_of_job, "trainers",
                         info.trainers, "workers", info.workers, "role_rank",
                         info.role_rank);
}

/* Trainer 0's bytes to every trainer (ef_service_trainers_bcast): each
 * trainer passes bytes of the same length, and gets trainer 0's. */
static PyObject *mod_service_trainers_bcast(PyObject *module, PyObject *arg)
{
    (void)module;
    char *data;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(arg, &data, &n) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(data, n);
    if (!out)
        return NULL;
    char *buf = PyBytes_AS_STRING(out);
    char err[1024];
    ef_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ef_service_trainers_bcast(buf, (size_t)n, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != EF_OK) {
        Py_DECREF(out);
        return pyef_raise(rc, err);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"_epoch_seed", mod_epoch_seed, METH_VARARGS,
     "_epoch_seed(seed, epoch, part) -> int: ef_epoch_seed(); see "
     "echoflow.epoch_seed."},
    {"_split_spec", mod_split_spec, METH_O,
     "_split_spec(spec) -> list of str: the stages of a spec by "
     "ef_spec_stage(); see echoflow.split_spec."},
    {"stages", mod_stages, METH_NOARGS,
     "stages() -> list of dicts: every stage, its help and its options "
     "(name, type, default, help, min, max), as `echoflow stages` lists "
     "them."},
    {"_service_launched", mod_service_launched, METH_NOARGS,
     "_service_launched() -> bool: whether mpirun (or another MPI "
     "launcher) started this process (ef_service_launched)."},
    {"_service_join_trainer", mod_service_join_trainer, METH_NOARGS,
     "_service_join_trainer() -> dict: joins the service's job as a "
     "trainer (ef_service_join) and returns this process's place: rank, "
     "size_of_job, trainers, workers, role_rank."},
    {"_service_trainers_bcast", mod_service_trainers_bcast, METH_O,
     "_service_trainers_bcast(data: bytes) -> bytes: trainer 0's data on "
     "every trainer, a collective of the trainers "
     "(ef_service_trainers_bcast); the same length on each."},
    {"write_tokens", (PyCFunction)(void (*)(void))pyef_write_tokens,
     METH_VARARGS | METH_KEYWORDS,
     "write_tokens(spec, path, field='tokens', dtype='uint16', eos=None, *, "
     "seed=0, on_error='fail') -> int: runs the pipeline `spec` and writes "
     "each sample's token ids (an integer field [n]) one after another into "
     "`path` as raw little-endian uint16 or uint32, `eos` after each when "
     "given: a nanoGPT token file for the tokens source. Returns the number "
     "of tokens written."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "echoflow._echoflow",
    .m_doc = "echoflow's C extension; use the echoflow package.",
    .m_size = -1,
    .m_methods = module_methods,
};

static atomic_uint forks;

unsigned pyef_forks(void)
{
    return atomic_load_explicit(&forks, memory_order_relaxed);
}

static void after_fork_in_child(void)
{
    atomic_fetch_add(&forks, 1);
    pyef_interrupt_after_fork();
}

PyMODINIT_FUNC PyInit__echoflow(void); /* the one exported symbol */

PyMODINIT_FUNC PyInit__echoflow(void)
{
    if (PyType_Ready(&pyef_tensor_type) < 0 ||
        PyType_Ready(&pyef_pipeline_type) < 0 ||
        PyType_Ready(&pyef_feed_type) < 0 || pyef_sample_types_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Tensor", (PyObject *)&pyef_tensor_type) <
            0 ||
        PyModule_AddObjectRef(m, "Sample", (PyObject *)&pyef_sample_type) <
            0 ||
        PyModule_AddObjectRef(m, "Identity",
                              (PyObject *)&pyef_identity_type) < 0 ||
        PyModule_AddObjectRef(m, "_Pipeline",
                              (PyObject *)&pyef_pipeline_type) < 0 ||
        PyModule_AddStringConstant(m, "__version__", ef_version_string()) <
            0 ||
        pyef_errors_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    pthread_atfork(NULL, NULL, after_fork_in_child);
    return m;
}
