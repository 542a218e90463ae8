/* SPDX-License-Identifier: Apache-2.0 */
/* echoflow._Pipeline: the C half of echoflow.Pipeline (python/echoflow/
 * __init__.py binds its Python maps to their names with bind_map(), then
 * hands the whole spec to parse(), which the library reads). Iterating
 * calls ef_pipeline_next() with the GIL released and yields
 * echoflow.Sample objects.
 *
 * Lock rules: `mu` serialises next(), state_dict(), load_state_dict(),
 * len() and close() across Python threads, so one pipeline may be
 * iterated from several threads (each sample goes to one of them), and a
 * state is taken between two samples. It is waited for with the GIL
 * released, never the other way round, so a thread waiting for it never
 * holds the GIL that the holder needs. stop() does not take it, so that
 * it can wake a next() in progress; it takes `stop_mu` instead, which
 * close() also takes to detach `p`, so a pipeline is never destroyed
 * while another thread is inside ef_pipeline_stop() on it (that call
 * wakes the waiter before it returns). _feedback() and stats() take
 * `stop_mu` too, for the same reason and not `mu`: the library takes
 * feedback and gives its figures while a next() waits, and a training
 * loop may ask from another thread than the one iterating. close()
 * takes `mu`, then `stop_mu`; nothing takes them the other way round.
 * A thread the pipeline itself waits for, one running a Python map of
 * it or its Python source's iterable, never takes `mu`: the calls that
 * would raise StateError there instead of waiting on themselves.
 *
 * A child forked after the pipeline was made has none of its threads,
 * and may have its locks held by threads that are not there: every call
 * in the child raises StateError before it takes a lock, and close() or
 * the garbage collector forgets the pipeline there (its memory is the
 * child's copy) instead of joining threads that do not exist. */
#include "pyef.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    ef_pipeline *p; /* NULL once closed; set and cleared under both locks */
    pthread_mutex_t mu;
    pthread_mutex_t stop_mu;
    PyObject *spec; /* str, for stats() */
    uint64_t seed;
    ef_on_error on_error;
    pyef_map **maps;
    int nmaps;
    PyObject *map_error; /* first exception a Python map raised */
    int stopped;         /* stop() or close() was called: the end, not an
                            error */
    int final_status;    /* EF_END or the error, once reached */
    PyObject *last_stats; /* stats() as they were at close() */
    PyObject *convert;    /* makes each field's value of its DLPack
                             capsule; NULL: echoflow.Tensor */
    /* with `convert`: whether and how often shared fields are copied */
    pyef_handout handout;
    PyObject *feed;  /* a Python source's feed (pysource.c), or NULL */
    uint64_t warned; /* the library's warnings issued so far (under mu) */
    uint64_t skips_warned; /* the skipped items warned of so far (under mu) */
    unsigned forks;  /* pyef_forks() when made: another in a forked child */
    long pid;        /* the process that made it, for the message */
} pipeline;

static int inherited(const pipeline *self)
{
    return self->forks != pyef_forks();
}

/* 0, or -1 with StateError set in a forked child */
static int not_inherited(const pipeline *self)
{
    if (!inherited(self))
        return 0;
    char msg[200];
    snprintf(msg, sizeof msg,
             "this pipeline was made in process %ld, which forked this one "
             "(%ld); its threads did not come along: make a new pipeline "
             "here",
             self->pid, (long)getpid());
    pyef_raise(EF_ESTATE, msg);
    return -1;
}

/* 0, or -1 with StateError set on a thread running one of the
 * pipeline's own maps, for which the caller would wait on itself */
static int not_from_own_map(const pipeline *self)
{
    if (!pyef_map_serving(self))
        return 0;
    pyef_raise(EF_ESTATE, "a map of this pipeline cannot call next(), "
                          "state_dict(), load_state_dict(), len() or close() "
                          "on it: each waits for the map to return; stats() "
                          "and stop() are allowed");
    return -1;
}

/* 0, or -1 with StateError set on the thread that runs the iterable of
 * the pipeline's own Python source: the pipeline waits for that thread's
 * items, so a call that waits for the pipeline would wait on itself. */
static int not_from_own_source(const pipeline *self)
{
    if (!pyef_feed_serving(self->feed))
        return 0;
    pyef_raise(EF_ESTATE, "a source of this pipeline cannot call next(), "
                          "state_dict(), load_state_dict(), len() or close() "
                          "on it: each waits for the items the source has "
                          "yet to give; stats() and stop() are allowed");
    return -1;
}

/* Takes `mu`; -1 with StateError set instead in a forked child, in one
 * of the pipeline's own maps or in its source's iterable. */
static int lock(pipeline *self)
{
    if (not_inherited(self) < 0 || not_from_own_map(self) < 0 ||
        not_from_own_source(self) < 0)
        return -1;
    if (pthread_mutex_trylock(&self->mu) == 0)
        return 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    Py_END_ALLOW_THREADS
    return 0;
}

static void unlock(pipeline *self)
{
    pthread_mutex_unlock(&self->mu);
}

static PyObject *closed_error(void)
{
    PyErr_SetString(PyExc_ValueError, "the pipeline is closed");
    return NULL;
}

/* ---- building ---- */

static int pipeline_init(pipeline *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"spec",  "seed",          "on_error",
                             "shard", "memory_budget", NULL};
    PyObject *spec, *seed_obj, *shard = Py_None, *budget_obj = Py_None;
    const char *on_error = "fail";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO|sOO:_Pipeline", kwlist,
                                     &spec, &seed_obj, &on_error, &shard,
                                     &budget_obj))
        return -1;
    unsigned long long budget = 0;
    if (budget_obj != Py_None) {
        if (!PyLong_Check(budget_obj)) {
            PyErr_Format(PyExc_TypeError,
                         "memory_budget must be an int (bytes) or None, not "
                         "%.80s",
                         Py_TYPE(budget_obj)->tp_name);
            return -1;
        }
        budget = PyLong_AsUnsignedLongLong(budget_obj);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "memory_budget must be from 0 (no limit) to "
                         "2**64 - 1 bytes, not %R",
                         budget_obj);
            return -1;
        }
    }
    long long part = 0, parts = 0;
    if (shard != Py_None &&
        (!PyTuple_Check(shard) ||
         !PyArg_ParseTuple(shard, "LL", &part, &parts))) {
        PyErr_Format(PyExc_TypeError,
                     "shard must be a tuple (part, count) of ints, not %R",
                     shard);
        return -1;
    }
    if (self->p) {
        PyErr_SetString(PyExc_RuntimeError, "the pipeline is already built");
        return -1;
    }
    /* any integer, numpy's included (operator.index) */
    PyObject *seed_int = PyIndex_Check(seed_obj) && !PyBool_Check(seed_obj)
                             ? PyNumber_Index(seed_obj)
                             : NULL;
    if (!seed_int) {
        PyErr_Format(PyExc_TypeError, "seed must be an int, not %.80s",
                     Py_TYPE(seed_obj)->tp_name);
        return -1;
    }
    unsigned long long seed = PyLong_AsUnsignedLongLong(seed_int);
    Py_DECREF(seed_int);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "seed must be an integer from 0 to 2**64 - 1, not %R",
                     seed_obj);
        return -1;
    }
    if (strcmp(on_error, "fail") == 0)
        self->on_error = EF_ON_ERROR_FAIL;
    else if (strcmp(on_error, "skip") == 0)
        self->on_error = EF_ON_ERROR_SKIP;
    else {
        PyErr_Format(PyExc_ValueError,
                     "on_error must be 'fail' or 'skip', not '%s'", on_error);
        return -1;
    }
    if (ef_pipeline_create(&self->p) != EF_OK) {
        PyErr_NoMemory();
        return -1;
    }
    Py_XSETREF(self->spec, Py_NewRef(spec));
    self->seed = seed;
    ef_pipeline_set_seed(self->p, seed);
    ef_pipeline_set_on_error(self->p, self->on_error);
    if (budget_obj != Py_None)
        ef_pipeline_set_memory_budget(self->p, budget);
    if (shard != Py_None) {
        int rc = ef_pipeline_set_shard(self->p, part, parts);
        if (rc != EF_OK) {
            pyef_raise(rc, ef_pipeline_error(self->p));
            return -1;
        }
    }
    return 0;
}

static PyObject *pipeline_parse(pipeline *self, PyObject *arg)
{
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!text)
        return NULL;
    /* the library reads a C string: what follows a NUL would be dropped */
    size_t nul = strlen(text);
    if ((Py_ssize_t)nul != n) {
        char msg[128];
        snprintf(msg, sizeof msg,
                 "a spec cannot hold a NUL character; one is at its byte %zu",
                 nul);
        return pyef_raise(EF_ESPEC, msg);
    }
    if (not_inherited(self) < 0)
        return NULL;
    if (!self->p)
        return closed_error();
    int rc = ef_pipeline_parse(self->p, text);
    if (rc != EF_OK)
        return pyef_raise(rc, ef_pipeline_error(self->p));
    Py_RETURN_NONE;
}

/* bind_map(name, fn): the spec's map:fn=NAME stages call fn; the next
 * parse() must use every name bound (ef_pipeline_bind_map). */
static PyObject *pipeline_bind_map(pipeline *self, PyObject *args)
{
    PyObject *fn;
    const char *name;
    if (!PyArg_ParseTuple(args, "sO:bind_map", &name, &fn))
        return NULL;
    if (not_inherited(self) < 0)
        return NULL;
    if (!self->p)
        return closed_error();
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "map '%s' is not callable", name);
    pyef_map **grown =
        PyMem_Realloc(self->maps, (size_t)(self->nmaps + 1) * sizeof *grown);
    if (!grown)
        return PyErr_NoMemory();
    self->maps = grown;
    ef_pipeline_stats ps; /* for the budget, fixed since __init__ */
    ef_pipeline_stats_get(self->p, &ps);
    pyef_map *m = pyef_map_new(fn, name, self, &self->map_error,
                               self->on_error == EF_ON_ERROR_FAIL,
                               ps.memory_budget, &self->handout);
    if (!m)
        return NULL;
    int rc = ef_pipeline_bind_map(self->p, name, pyef_map_call, m);
    if (rc != EF_OK) {
        pyef_map_free(m);
        return pyef_raise(rc, ef_pipeline_error(self->p));
    }
    /* kept until the pipeline goes, as the library may call it till then */
    self->maps[self->nmaps++] = m;
    Py_RETURN_NONE;
}

/* add_source(capacity, unbatch, options, batched=False) -> feed: a Python
 * source as the first stage. Its feeder thread (echoflow._feed_loop) puts items into
 * the feed returned; the pipeline keeps it until closed. */
static PyObject *pipeline_add_source(pipeline *self, PyObject *args)
{
    int capacity, unbatch, batched = 0;
    const char *options;
    if (!PyArg_ParseTuple(args, "ips|p:add_source", &capacity, &unbatch,
                          &options, &batched))
        return NULL;
    if (not_inherited(self) < 0)
        return NULL;
    if (!self->p)
        return closed_error();
    if (self->feed)
        return pyef_raise(EF_ESPEC, "source: the pipeline has one already");
    if (capacity < 1)
        return PyErr_Format(PyExc_ValueError,
                            "source: read_ahead must be >= 1, not %d",
                            capacity);
    if (unbatch && batched)
        return PyErr_Format(PyExc_ValueError,
                            "source: unbatch splits batches, batched keeps "
                            "them whole: give one of them");
    PyObject *feed =
        pyef_feed_new(capacity, unbatch, batched, &self->map_error);
    if (!feed)
        return NULL;
    int rc = ef_pipeline_add_source(self->p, pyef_feed_next, feed, options);
    if (rc != EF_OK) {
        Py_DECREF(feed);
        return pyef_raise(rc, ef_pipeline_error(self->p));
    }
    self->feed = feed;
    return Py_NewRef(feed);
}

/* ---- iterating ---- */

/* With an exception set: makes the first exception a Python map raised
 * its __cause__, if there was one. Returns NULL. */
static PyObject *with_map_cause(pipeline *self)
{
    if (self->map_error) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyException_SetCause(value, Py_NewRef(self->map_error));
        PyErr_Restore(type, value, tb);
    }
    return NULL;
}

/* Appends a warning for each item on_error=skip dropped since the last
 * look (the first EF_SKIPS_KEPT, then one saying more were): without one,
 * a Loader's data could shrink with nothing said. 0, or -1 on error. */
static int new_skips(pipeline *self, PyObject *texts)
{
    uint64_t n = ef_pipeline_skip(self->p, 0, NULL, 0);
    for (; self->skips_warned < n && self->skips_warned <= EF_SKIPS_KEPT;
         self->skips_warned++) {
        char why[480], buf[560];
        ef_pipeline_skip(self->p, self->skips_warned, why, sizeof why);
        if (self->skips_warned < EF_SKIPS_KEPT)
            snprintf(buf, sizeof buf, "on_error='skip' dropped an item: %s",
                     why);
        else
            snprintf(buf, sizeof buf,
                     "on_error='skip' dropped more than %d items; "
                     "stats()['skipped'] counts them, stats()['skips'] "
                     "names the first %d",
                     EF_SKIPS_KEPT, EF_SKIPS_KEPT);
        PyObject *t = pyef_text(buf);
        int rc = t ? PyList_Append(texts, t) : -1;
        Py_XDECREF(t);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The library's warnings given since the last look, and the items skipped,
 * as texts; NULL with an exception set on failure. Two atomic reads when
 * there are none. */
static PyObject *new_warnings(pipeline *self)
{
    PyObject *texts = PyList_New(0);
    if (texts && lock(self) < 0)
        Py_CLEAR(texts);
    if (!texts)
        return NULL;
    uint64_t n = self->p ? ef_pipeline_warning(self->p, 0, NULL, 0) : 0;
    for (; texts && self->warned < n; self->warned++) {
        char buf[512];
        ef_pipeline_warning(self->p, self->warned, buf, sizeof buf);
        if (!buf[0])
            snprintf(buf, sizeof buf, "more warnings than it keeps");
        PyObject *t = pyef_text(buf);
        if (!t || PyList_Append(texts, t) < 0)
            Py_CLEAR(texts);
        Py_XDECREF(t);
    }
    if (texts && self->p && new_skips(self, texts) < 0)
        Py_CLEAR(texts);
    unlock(self);
    return texts;
}

static PyObject *iternext_sample(pipeline *self);

/* Whether to warn `text`: 1 unless the pipeline's `_warned` set (one
 * that the passes of a Loader or of echo() share) already holds it with
 * other figures, as each epoch's measurements make it; -1 on error. */
static int first_of_its_kind(pipeline *self, const char *text)
{
    PyObject *seen = PyObject_GetAttrString((PyObject *)self, "_warned");
    if (!seen) {
        PyErr_Clear();
        return 1;
    }
    int first = 1;
    if (PySet_Check(seen)) {
        size_t n = strlen(text), k = 0;
        char *key = PyMem_Malloc(n + 1);
        if (!key) {
            Py_DECREF(seen);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            if (text[i] < '0' || text[i] > '9')
                key[k++] = text[i];
        PyObject *kind = PyUnicode_DecodeUTF8(key, (Py_ssize_t)k, "replace");
        PyMem_Free(key);
        int held = kind ? PySet_Contains(seen, kind) : -1;
        first = held < 0 ? -1 : !held;
        if (first == 1 && PySet_Add(seen, kind) < 0)
            first = -1;
        Py_XDECREF(kind);
    }
    Py_DECREF(seen);
    return first;
}

/* A sample, then warnings.warn() for each warning the pipeline gave
 * meanwhile (issued outside the lock: a filter may run any code). */
static PyObject *pipeline_iternext(pipeline *self)
{
    PyObject *obj = iternext_sample(self);
    if (PyErr_Occurred())
        return obj;
    PyObject *texts = new_warnings(self);
    for (Py_ssize_t i = 0; texts && i < PyList_GET_SIZE(texts); i++) {
        const char *t = PyUnicode_AsUTF8(PyList_GET_ITEM(texts, i));
        int first = t ? first_of_its_kind(self, t) : -1;
        if (first < 0 || (first && pyef_warn(t) < 0))
            Py_CLEAR(texts);
    }
    if (!texts) {
        Py_XDECREF(obj);
        return NULL;
    }
    Py_DECREF(texts);
    return obj;
}

static PyObject *iternext_sample(pipeline *self)
{
    if (lock(self) < 0)
        return NULL;
    if (!self->p) {
        unlock(self);
        return closed_error();
    }
    ef_sample *s = NULL;
    int interrupted;
    int rc = pyef_next_interruptible(self->p, self->feed, &s, &interrupted);
    if (rc != EF_OK)
        self->final_status = rc;
    if (interrupted && PyErr_CheckSignals() < 0) {
        unlock(self);
        ef_sample_free(s);
        return NULL;
    }
    if (rc == EF_OK) {
        unlock(self);
        PyObject *obj = pyef_sample_from(s, self->convert, &self->handout);
        ef_sample_free(s);
        return obj;
    }
    if (rc == EF_END || (rc == EF_ECANCELED && self->stopped)) {
        unlock(self);
        return NULL;
    }
    const char *msg =
        interrupted ? "interrupted by SIGINT" : ef_pipeline_error(self->p);
    const char *why = self->feed ? pyef_feed_failure(self->feed) : NULL;
    if (why && rc == EF_ECALLBACK && strncmp(msg, "source:", 7) == 0) {
        /* the library knows only that the callback failed; say how */
        PyObject *text = PyUnicode_FromFormat("%s: %s", msg, why);
        if (text)
            pyef_raise(rc, PyUnicode_AsUTF8(text));
        Py_XDECREF(text);
    } else
        pyef_raise(rc, msg);
    unlock(self);
    return with_map_cause(self);
}

static PyObject *pipeline_convert_with(pipeline *self, PyObject *args,
                                       PyObject *kwargs)
{
    static char *kwlist[] = {"fn", "copy_shared", "retype", NULL};
    PyObject *fn, *retype = Py_None;
    int copy_shared = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$pO:convert_with",
                                     kwlist, &fn, &copy_shared, &retype))
        return NULL;
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "%R is not callable", fn);
    if (retype != Py_None && !PyCallable_Check(retype))
        return PyErr_Format(PyExc_TypeError, "%R is not callable", retype);
    Py_XSETREF(self->convert, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_XSETREF(self->handout.retype,
               retype == Py_None ? NULL : Py_NewRef(retype));
    self->handout.copy_shared = copy_shared;
    Py_RETURN_NONE;
}

/* (fields copied, bytes copied) by the hand-out rule so far: for tests
 * and bench/handout_copy.py. */
static PyObject *pipeline_handout_copies(pipeline *self, void *closure)
{
    (void)closure;
    return Py_BuildValue("(KK)", self->handout.copies,
                         self->handout.copied_bytes);
}

static PyObject *pipeline_iter(PyObject *self)
{
    return Py_NewRef(self);
}

/* ---- checkpoints: the dict state_dict() gives ---- */

/* The version of the dict; the library's state inside has its own. */
#define STATE_VERSION 1

static PyObject *bad_state(const char *what)
{
    return pyef_raise(EF_EFORMAT, what);
}

/* Both calls with the GIL released: a save pauses the stages' threads,
 * and a Python map's thread needs the GIL to finish its call. */
static PyObject *pipeline_state_dict(pipeline *self, PyObject *unused)
{
    (void)unused;
    if (lock(self) < 0)
        return NULL;
    if (!self->p) {
        unlock(self);
        return closed_error();
    }
    size_t size = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ef_pipeline_save_state(self->p, NULL, 0, &size);
    Py_END_ALLOW_THREADS
    PyObject *bytes = NULL;
    if (rc == EF_OK &&
        (bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size))) {
        char *buf = PyBytes_AS_STRING(bytes);
        Py_BEGIN_ALLOW_THREADS
        /* no next() in between: the same size */
        rc = ef_pipeline_save_state(self->p, buf, size, &size);
        Py_END_ALLOW_THREADS
    }
    if (rc != EF_OK) {
        Py_CLEAR(bytes);
        pyef_raise(rc, ef_pipeline_error(self->p));
    }
    unlock(self);
    if (!bytes)
        return NULL;
    return Py_BuildValue("{s:i,s:N}", "version", STATE_VERSION, "pipeline",
                         bytes);
}

/* The library's state in `state` (a dict of state_dict()), checked as far
 * as the dict goes; the library checks the rest. */
static int state_bytes(PyObject *state, Py_buffer *view)
{
    if (!PyDict_Check(state)) {
        PyErr_Format(PyExc_TypeError,
                     "load_state_dict() takes the dict state_dict() "
                     "returned, not %.80s",
                     Py_TYPE(state)->tp_name);
        return -1;
    }
    PyObject *version = PyDict_GetItemString(state, "version");
    PyObject *blob = PyDict_GetItemString(state, "pipeline");
    if (!version || !blob) {
        bad_state("state: the dict has no 'version' or no 'pipeline' key: "
                  "not one that Pipeline.state_dict() returned");
        return -1;
    }
    long v = PyLong_Check(version) ? PyLong_AsLong(version) : -1;
    if (v != STATE_VERSION) {
        PyErr_Clear();
        PyObject *msg = PyUnicode_FromFormat(
            "state: version %R of the dict, this echoflow reads version %d",
            version, STATE_VERSION);
        if (msg) {
            bad_state(PyUnicode_AsUTF8(msg));
            Py_DECREF(msg);
        }
        return -1;
    }
    if (PyUnicode_Check(blob) ||
        PyObject_GetBuffer(blob, view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyObject *msg = PyUnicode_FromFormat(
            "state: 'pipeline' is a %s, expected the bytes state_dict() "
            "gave",
            Py_TYPE(blob)->tp_name);
        if (msg) {
            bad_state(PyUnicode_AsUTF8(msg));
            Py_DECREF(msg);
        }
        return -1;
    }
    return 0;
}

static PyObject *pipeline_load_state_dict(pipeline *self, PyObject *state)
{
    Py_buffer view;
    if (state_bytes(state, &view) < 0)
        return NULL;
    if (lock(self) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!self->p) {
        unlock(self);
        PyBuffer_Release(&view);
        return closed_error();
    }
    int rc;
    /* items are read again, maybe through a Python map */
    Py_BEGIN_ALLOW_THREADS
    rc = ef_pipeline_restore_state(self->p, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    if (rc != EF_OK)
        pyef_raise(rc, ef_pipeline_error(self->p));
    unlock(self);
    PyBuffer_Release(&view);
    if (rc != EF_OK)
        return with_map_cause(self);
    Py_RETURN_NONE;
}

/* ---- stats: the object `echoflow run --json` prints ---- */

static int set_item(PyObject *d, const char *key, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* One figure of a stats struct `st` into dict d, for
 * EF_..._STATS_FIGURES: `echoflow run --json` writes the same list. */
#define FIGURE_ITEM(member, kind)                                              \
    if (set_item(d, #member, FIGURE_##kind(st.member)) < 0)                    \
        goto fail;
#define FIGURE_UINT(v) PyLong_FromUnsignedLongLong((unsigned long long)(v))
#define FIGURE_REAL(v) PyFloat_FromDouble(v)

static PyObject *stage_stats(const ef_pipeline *p, int i)
{
    ef_stage_stats st;
    ef_pipeline_stage_stats(p, i, &st);
    PyObject *d = PyDict_New();
    if (!d || set_item(d, "name", pyef_text(st.name)) < 0)
        goto fail;
    EF_STAGE_STATS_FIGURES(FIGURE_ITEM)
    for (int k = 0; k < st.nextra; k++)
        if (set_item(d, st.extra[k].key,
                     PyFloat_FromDouble(st.extra[k].value)) < 0)
            goto fail;
    return d;
fail:
    Py_XDECREF(d);
    return NULL;
}

/* Why each of the first EF_SKIPS_KEPT skipped items was dropped: a list
 * of str. */
static PyObject *skip_texts(ef_pipeline *p)
{
    uint64_t n = ef_pipeline_skip(p, 0, NULL, 0);
    PyObject *list = PyList_New(0);
    for (uint64_t i = 0; list && i < n && i < EF_SKIPS_KEPT; i++) {
        char why[512];
        ef_pipeline_skip(p, i, why, sizeof why);
        PyObject *t = pyef_text(why);
        if (!t || PyList_Append(list, t) < 0)
            Py_CLEAR(list);
        Py_XDECREF(t);
    }
    return list;
}

static PyObject *stats_of(pipeline *self)
{
    ef_pipeline *p = self->p;
    ef_pipeline_stats st;
    ef_pipeline_stats_get(p, &st);
    int rc = self->final_status;
    /* stop() and close() end a run early; that is no error */
    int stopped = self->stopped && (rc == 0 || rc == EF_ECANCELED);
    const char *status = stopped          ? "stopped"
                         : rc == EF_END ? "ok"
                         : rc == 0      ? "running"
                                        : ef_status_name(rc);
    double rate = st.elapsed_s > 0 ? (double)st.items / st.elapsed_s : 0;
    char why[512];
    PyObject *d = PyDict_New();
    if (!d || set_item(d, "spec", Py_NewRef(self->spec)) < 0 ||
        set_item(d, "seed", PyLong_FromUnsignedLongLong(self->seed)) < 0 ||
        set_item(d, "status", PyUnicode_FromString(status)) < 0 ||
        (rc < 0 && !stopped &&
         set_item(d, "error", pyef_text(ef_pipeline_error(p))) <
             0))
        goto fail;
    EF_PIPELINE_STATS_FIGURES(FIGURE_ITEM)
    if (set_item(d, "items_per_s", PyFloat_FromDouble(rate)) < 0 ||
        (ef_pipeline_skipped(p, why, sizeof why) &&
         set_item(d, "first_skip", pyef_text(why)) < 0) ||
        set_item(d, "skips", skip_texts(p)) < 0 ||
        (ef_pipeline_abandoned(p, why, sizeof why) &&
         set_item(d, "first_abandon", pyef_text(why)) < 0))
        goto fail;
    int n = ef_pipeline_stage_count(p);
    PyObject *stages = PyList_New(n);
    if (!stages)
        goto fail;
    for (int i = 0; i < n; i++) {
        PyObject *one = stage_stats(p, i);
        if (!one) {
            Py_DECREF(stages);
            goto fail;
        }
        PyList_SET_ITEM(stages, i, one);
    }
    if (set_item(d, "stages", stages) < 0)
        goto fail;
    return d;
fail:
    Py_XDECREF(d);
    return NULL;
}

/* _length() -> int: ef_pipeline_length. TypeError with the library's
 * message where the length is not known in advance, which is what len()
 * of an iterable without one raises. The GIL is released: a source may
 * read its files' headers (idx) or the files (cifar) to count. */
static PyObject *pipeline_length(pipeline *self, PyObject *unused)
{
    (void)unused;
    if (lock(self) < 0)
        return NULL;
    if (!self->p) {
        unlock(self);
        return closed_error();
    }
    int64_t n = -1;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ef_pipeline_length(self->p, &n);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (rc == EF_OK)
        result = PyLong_FromLongLong((long long)n);
    else if (rc == EF_EUNSUPPORTED)
        PyErr_SetString(PyExc_TypeError, ef_pipeline_error(self->p));
    else
        pyef_raise(rc, ef_pipeline_error(self->p));
    unlock(self);
    return result;
}

/* Under `stop_mu`, not `mu`: the library's figures may be read while a
 * next() waits (on a stalled source, say), so stats() from another
 * thread, or from a map of the pipeline, need not wait for it; stop_mu
 * only keeps close() from destroying the pipeline meanwhile. It is taken
 * with the GIL released, as everywhere, so that its holder may take the
 * GIL. */
static PyObject *pipeline_stats(pipeline *self, PyObject *unused)
{
    (void)unused;
    if (not_inherited(self) < 0)
        return NULL;
    if (pthread_mutex_trylock(&self->stop_mu) != 0) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->stop_mu);
        Py_END_ALLOW_THREADS
    }
    PyObject *d = self->p ? stats_of(self)
                  : self->last_stats ? PyDict_Copy(self->last_stats)
                                     : closed_error();
    pthread_mutex_unlock(&self->stop_mu);
    return d;
}

/* ---- feedback for echo policies ---- */

/* Whether `view` holds native int64 (`is_int`) or float64 items. */
static int is_8byte(const Py_buffer *view, int is_int)
{
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN))
        f++;
    int ok = is_int ? (f[0] == 'q' || f[0] == 'l') : f[0] == 'd';
    return ok && f[1] == '\0' && view->itemsize == 8;
}

/* Raises ValueError naming the first value that is not finite and returns
 * 1; 0 when there is none. */
static int raise_non_finite(const double *values, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (isfinite(values[i]))
            continue;
        PyObject *v = PyFloat_FromDouble(values[i]);
        if (v) {
            PyErr_Format(PyExc_ValueError,
                         "feedback: values[%zd] is %R; each value must be "
                         "finite (no NaN or infinity): nothing was applied",
                         i, v);
            Py_DECREF(v);
        }
        return 1;
    }
    return 0;
}

/* The rows of `view` ([n, 4] int64: index, epoch, echo_copy, fresh) as
 * identities, in memory the caller frees with PyMem_Free. */
static ef_sample_id *ids_of(const Py_buffer *view, Py_ssize_t n,
                            int64_t epoch_base)
{
    ef_sample_id *ids = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids)
        return (ef_sample_id *)PyErr_NoMemory();
    const int64_t *row = view->buf;
    for (Py_ssize_t i = 0; i < n; i++, row += 4)
        ids[i] = (ef_sample_id){.index = row[0],
                                .epoch = row[1] - epoch_base,
                                .echo_copy = (int32_t)row[2],
                                .fresh = (int32_t)row[3]};
    return ids;
}

/* _feedback(ids, values): the buffers echoflow.Pipeline.feedback() made,
 * checked again here: ids C-contiguous int64 [n, 4], values float64 [n]. */
static PyObject *pipeline_feedback(pipeline *self, PyObject *args)
{
    PyObject *ids_obj, *values_obj;
    if (!PyArg_ParseTuple(args, "OO:_feedback", &ids_obj, &values_obj))
        return NULL;
    Py_buffer iv, vv;
    if (PyObject_GetBuffer(ids_obj, &iv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) <
        0)
        return NULL;
    if (PyObject_GetBuffer(values_obj, &vv,
                           PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&iv);
        return NULL;
    }
    PyObject *result = NULL;
    ef_sample_id *ids = NULL;
    if (!is_8byte(&iv, 1) || iv.ndim != 2 || iv.shape[1] != 4) {
        PyErr_Format(PyExc_TypeError,
                     "feedback: ids must be a C-contiguous int64 buffer of "
                     "shape [n, 4] (as Sample.members), not format '%s' "
                     "with %d dimensions",
                     iv.format ? iv.format : "B", iv.ndim);
        goto done;
    }
    if (!is_8byte(&vv, 0) || vv.ndim != 1) {
        PyErr_Format(PyExc_TypeError,
                     "feedback: values must be a C-contiguous float64 "
                     "buffer of shape [n], not format '%s' with %d "
                     "dimensions",
                     vv.format ? vv.format : "B", vv.ndim);
        goto done;
    }
    Py_ssize_t n = iv.shape[0];
    if (vv.shape[0] != n) {
        PyErr_Format(PyExc_ValueError,
                     "feedback: %zd ids and %zd values; expected one value "
                     "per id",
                     n, vv.shape[0]);
        goto done;
    }
    if (raise_non_finite(vv.buf, n) ||
        !(ids = ids_of(&iv, n, self->handout.epoch_base)) ||
        not_inherited(self) < 0)
        goto done;
    int rc = EF_OK, closed = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->stop_mu); /* close() waits for us */
    if (self->p)
        rc = ef_pipeline_feedback(self->p, ids, vv.buf, (size_t)n);
    else
        closed = 1;
    pthread_mutex_unlock(&self->stop_mu);
    Py_END_ALLOW_THREADS
    if (closed)
        closed_error();
    else if (rc != EF_OK) /* the library leaves its message alone */
        pyef_raise(rc, "feedback: the library refused the values");
    else
        result = Py_NewRef(Py_None);
done:
    PyMem_Free(ids);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&iv);
    return result;
}

/* ---- ending ---- */

/* Stops the library's pipeline, and the feed of a Python source: a read
 * waiting there is the library's callback, which ef_pipeline_stop()
 * cannot wake, so a source stuck in its iterable would keep next(), and
 * close()'s joining of the threads, waiting for ever. */
static PyObject *pipeline_stop(pipeline *self, PyObject *unused)
{
    (void)unused;
    if (not_inherited(self) < 0)
        return NULL;
    self->stopped = 1;
    PyObject *feed = Py_XNewRef(self->feed); /* close() may drop it */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->stop_mu);
    if (self->p)
        ef_pipeline_stop(self->p);
    pthread_mutex_unlock(&self->stop_mu);
    if (feed)
        pyef_feed_stop(feed);
    Py_END_ALLOW_THREADS
    Py_XDECREF(feed);
    Py_RETURN_NONE;
}

/* Stops, keeps the final stats, then destroys with the GIL released: the
 * map threads need it to finish their calls before they are joined. */
/* Drops the pipeline without joining its threads or taking its locks;
 * its memory and threads go with the process. */
static void forget(pipeline *self)
{
    self->p = NULL;
    self->feed = NULL;
    self->maps = NULL;
    self->nmaps = 0;
}

static void close_pipeline(pipeline *self)
{
    if (self->p && inherited(self)) {
        /* a forked child: no threads to join, locks that may be held */
        forget(self);
        return;
    }
    if (!self->p)
        return;
    pipeline_stop(self, NULL);
    lock(self);
    ef_pipeline *p = self->p;
    if (p) {
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        Py_XSETREF(self->last_stats, stats_of(self));
        PyErr_Clear();
        PyErr_Restore(exc_type, exc_value, exc_tb);
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->stop_mu); /* waits out a stop() */
        self->p = NULL;
        pthread_mutex_unlock(&self->stop_mu);
        ef_pipeline_destroy(p);
        Py_END_ALLOW_THREADS
    }
    unlock(self);
    if (self->feed) { /* the pipeline no longer reads it */
        pyef_feed_close(self->feed);
        Py_CLEAR(self->feed);
    }
    for (int i = 0; i < self->nmaps; i++)
        pyef_map_free(self->maps[i]);
    PyMem_Free(self->maps);
    self->maps = NULL;
    self->nmaps = 0;
}

static int maps_busy(const pipeline *self)
{
    for (int i = 0; i < self->nmaps; i++)
        if (pyef_map_busy(self->maps[i]))
            return 1;
    return 0;
}

#define EXIT_GRACE_MS 1000

/* At interpreter exit: stops, and closes unless a Python map of the
 * pipeline is still inside its call a second later (one blocked for
 * ever, after a Ctrl-C that stopped the loop around it): closing would
 * join its thread, and the exit would wait with it. Such a pipeline is
 * forgotten and ends with the process. */
static PyObject *pipeline_close_at_exit(pipeline *self, PyObject *unused)
{
    (void)unused;
    if (self->p && !inherited(self)) {
        Py_XDECREF(pipeline_stop(self, NULL));
        for (int ms = 0; maps_busy(self) && ms < EXIT_GRACE_MS; ms += 10) {
            Py_BEGIN_ALLOW_THREADS
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
            Py_END_ALLOW_THREADS
        }
        if (maps_busy(self))
            forget(self);
    }
    close_pipeline(self);
    Py_RETURN_NONE;
}

static PyObject *pipeline_close(pipeline *self, PyObject *unused)
{
    (void)unused;
    if (not_from_own_map(self) < 0 || not_from_own_source(self) < 0)
        return NULL;
    close_pipeline(self);
    Py_RETURN_NONE;
}

static PyObject *pipeline_new(PyTypeObject *type, PyObject *args,
                              PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    pipeline *self = (pipeline *)type->tp_alloc(type, 0);
    if (self) {
        pthread_mutex_init(&self->mu, NULL);
        pthread_mutex_init(&self->stop_mu, NULL);
        self->handout.copy_shared = 1;
        self->forks = pyef_forks();
        self->pid = (long)getpid();
    }
    return (PyObject *)self;
}

static int pipeline_traverse(pipeline *self, visitproc visit, void *arg)
{
    Py_VISIT(self->map_error);
    Py_VISIT(self->last_stats);
    Py_VISIT(self->convert);
    Py_VISIT(self->handout.retype);
    return 0;
}

static int pipeline_clear(pipeline *self)
{
    Py_CLEAR(self->map_error);
    Py_CLEAR(self->last_stats);
    Py_CLEAR(self->convert);
    Py_CLEAR(self->handout.retype);
    return 0;
}

static void pipeline_dealloc(pipeline *self)
{
    PyObject_GC_UnTrack(self);
    close_pipeline(self);
    pipeline_clear(self);
    Py_CLEAR(self->spec);
    if (!inherited(self)) { /* a child's copies may be held */
        pthread_mutex_destroy(&self->mu);
        pthread_mutex_destroy(&self->stop_mu);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pipeline_closed(pipeline *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->p == NULL);
}

static PyMethodDef pipeline_methods[] = {
    {"parse", (PyCFunction)pipeline_parse, METH_O,
     "parse(text): appends the stages of a spec."},
    {"bind_map", (PyCFunction)pipeline_bind_map, METH_VARARGS,
     "bind_map(name, fn): the next parse()'s map:fn=NAME stages call fn; "
     "that parse raises SpecError if none names it."},
    {"add_source", (PyCFunction)pipeline_add_source, METH_VARARGS,
     "add_source(read_ahead, unbatch, options, batched=False) -> feed: a "
     "Python source as the first stage; echoflow.Pipeline(source=...) "
     "feeds it."},
    {"convert_with", (PyCFunction)(void (*)(void))pipeline_convert_with,
     METH_VARARGS | METH_KEYWORDS,
     "convert_with(fn, *, copy_shared=True): yields fields as fn(DLPack "
     "capsule) from now on, such as torch tensors with torch.from_dlpack; "
     "None: Tensors again. What fn makes may be written into, so a field "
     "whose memory something else may still show (an echo copy to come, "
     "a source's file) goes out as a copy of its own; copy_shared=False "
     "shares it anyway (for measuring what the copies cost)."},
    {"state_dict", (PyCFunction)pipeline_state_dict, METH_NOARGS,
     "state_dict() -> dict: the pipeline's position, between two samples "
     "or before the first: {'version': 1, 'pipeline': bytes}. It names "
     "positions, generator counters and the identities of the items the "
     "stages hold, never their payloads; pickle or torch.save it. "
     "UnsupportedError for a pipeline whose position cannot be saved "
     "(tar, map:ordered=false); a failed pipeline raises its error."},
    {"load_state_dict", (PyCFunction)pipeline_load_state_dict, METH_O,
     "load_state_dict(state): resumes at the position state_dict() gave, "
     "on a pipeline built like the saved one (the same spec and seed; "
     "thread counts and depths may differ), before its first sample. The "
     "samples that follow are those the saved pipeline would have given. "
     "A corrupt or truncated state raises FormatError, one of another "
     "pipeline SpecError, each naming the first stage that differs, and "
     "the pipeline is left as it was; after iteration has started, or a "
     "second time, StateError."},
    {"_feedback", (PyCFunction)pipeline_feedback, METH_VARARGS,
     "_feedback(ids, values): ids a C-contiguous int64 buffer [n, 4], "
     "values a float64 buffer [n]; echoflow.Pipeline.feedback() converts "
     "what it is given into these."},
    {"_length", (PyCFunction)pipeline_length, METH_NOARGS,
     "_length() -> int: the items a run yields (len() of the pipeline); "
     "TypeError with the reason where that is not known in advance."},
    {"stats", (PyCFunction)pipeline_stats, METH_NOARGS,
     "stats() -> dict: what `echoflow run --json` prints for the run so "
     "far (its figures at close() once closed)."},
    {"stop", (PyCFunction)pipeline_stop, METH_NOARGS,
     "stop(): ends the iteration from any thread; threads wake up."},
    {"_close_at_exit", (PyCFunction)pipeline_close_at_exit, METH_NOARGS,
     "_close_at_exit(): close(), unless a Python map of the pipeline is "
     "stuck inside its call: then the pipeline ends with the process."},
    {"close", (PyCFunction)pipeline_close, METH_NOARGS,
     "close(): stops and frees the pipeline. Tensors it gave out stay "
     "valid."},
    {NULL, NULL, 0, NULL},
};

static PyObject *pipeline_epoch_base(pipeline *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(self->handout.epoch_base);
}

/* Set once, by echoflow.Pipeline before the first item (its epoch=). */
static int pipeline_set_epoch_base(pipeline *self, PyObject *value,
                                   void *closure)
{
    (void)closure;
    long long v = value ? PyLong_AsLongLong(value) : -1;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > (1LL << 62)) {
        PyErr_Format(PyExc_ValueError, "epoch must be from 0 to 2**62, not %R",
                     value);
        return -1;
    }
    self->handout.epoch_base = v;
    return 0;
}

static PyGetSetDef pipeline_getset[] = {
    {"_epoch_base", (getter)pipeline_epoch_base,
     (setter)pipeline_set_epoch_base,
     "what the epoch of identities handed out counts from", NULL},
    {"closed", (getter)pipeline_closed, NULL, "True once close()d", NULL},
    {"_handout_copies", (getter)pipeline_handout_copies, NULL,
     "(fields, bytes) copied so far before convert_with's fn saw them",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyef_pipeline_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "echoflow._Pipeline",
    .tp_doc = "The C half of echoflow.Pipeline.",
    .tp_basicsize = sizeof(pipeline),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = pipeline_new,
    .tp_init = (initproc)pipeline_init,
    .tp_dealloc = (destructor)pipeline_dealloc,
    .tp_traverse = (traverseproc)pipeline_traverse,
    .tp_clear = (inquiry)pipeline_clear,
    .tp_iter = pipeline_iter,
    .tp_iternext = (iternextfunc)pipeline_iternext,
    .tp_methods = pipeline_methods,
    .tp_getset = pipeline_getset,
};
