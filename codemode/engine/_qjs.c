/*
 * codemode.engine._qjs: codemode's bridge to QuickJS-ng (vendor/quickjs-ng, linked in statically).
 *
 * Why codemode has its own bridge instead of the quickjs-ng binding from PyPI (issue 14,
 * measured by bench/bench_engine.py, bench/bench_cpu.py and bench/bench_peers.py):
 *
 * - CPU-bound JS: the binding's wheel builds the engine as a shared object with interposable
 *   exports, so every call the interpreter makes to its own functions goes through the PLT
 *   (~2.9x slower). Linked in statically and built with -fvisibility=hidden, the engine runs at
 *   the speed of the fastest builds users can get (jsbox's rquickjs).
 * - Async tool calls: a program's JS runs on a worker thread, its tools on the host's event
 *   loop. Waking a parked thread costs 25-60 us on a 2-vCPU VM, and so does taking the GIL from
 *   a thread that is about to drop it (each is a futex wake). Here a program's JS never needs
 *   the GIL for an async call: the call goes into this channel's queue and an eventfd wakes the
 *   loop; the loop thread validates it, runs the tool and posts the result's JSON text back;
 *   the JS thread, which waits for it without the GIL (on a futex), settles the promise
 *   itself. (It used to spin up to 100 us first: at a load near 1 on 2 cores that made an
 *   async call 15-34% slower in most runs, bench/TRICKS.md.)
 * - Starting a program: a fresh context loads the prelude's bytecode (compiled once per
 *   process) without the GIL, so preparing the next context never holds up the event loop.
 *
 * Everything else (which calls are allowed, what a result means, the limits' policy) stays in
 * Python (codemode/engine/_program.py and _runtime.py); this file only moves JSON text between
 * the two threads, runs JS, and stops it when asked.
 *
 * Threads: a Context is used by one thread at a time (its program's), enforced: every method that
 * touches its engine takes the context's busy flag atomically at entry and a second thread (or a
 * call into Python from inside its JS) gets RuntimeError, never concurrent access; a freed context
 * raises RuntimeError too. A Channel is shared by
 * that thread and the event loop's; its queues are guarded by a mutex, its wake-ups are an
 * eventfd (towards the loop) and a futex word (towards the JS thread). Text crosses as UTF-8
 * with explicit lengths (U+0000 included).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <linux/futex.h>
#include <math.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "quickjs.h"

/* ---- time -------------------------------------------------------------------------------- */

static double
monotonic(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* the clock of Python's time.monotonic() on Linux */
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- strings ------------------------------------------------------------------------------ */

/* Python text of UTF-8 from the engine. quickjs-ng writes a lone surrogate as its code
 * point, which is not UTF-8: such text is decoded with replacement characters, so Python only
 * ever gets text it can encode. */
static PyObject *
py_text(const char *s, size_t n)
{
    PyObject *o = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, NULL);
    if (o == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        o = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "replace");
    }
    return o;
}

/* UTF-8 of a Python str; lone surrogates pass as their code points (JS strings can hold them).
 * The buffer belongs to *owner (or to s itself): valid while the caller holds *owner. */
static const char *
utf8_of(PyObject *s, Py_ssize_t *n, PyObject **owner)
{
    *owner = NULL;
    const char *p = PyUnicode_AsUTF8AndSize(s, n);
    if (p != NULL)
        return p;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return NULL;
    PyErr_Clear();
    *owner = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (*owner == NULL)
        return NULL;
    *n = PyBytes_GET_SIZE(*owner);
    return PyBytes_AS_STRING(*owner);
}

static char *
copy_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* ---- errors -------------------------------------------------------------------------------- */

static PyObject *JSError; /* codemode.engine._qjs.JSError */
static PyObject *KIND_CALL, *KIND_SYNC; /* hostCall's kinds, made once */

/* The pending exception as text, "<String(exception)>\n<its stack>" (malloc'd), and cleared.
 * Runs on the JS thread without the GIL. */
static char *
exception_text(JSContext *jc, size_t *len)
{
    JSValue exc = JS_GetException(jc);
    const char *head = JS_ToCString(jc, exc);
    if (head == NULL) { /* its toString threw: say so, and drop that exception too */
        JS_FreeValue(jc, JS_GetException(jc));
    }
    const char *stack = NULL;
    if (JS_IsObject(exc)) {
        JSValue s = JS_GetPropertyStr(jc, exc, "stack");
        if (JS_IsString(s))
            stack = JS_ToCString(jc, s);
        else if (JS_IsException(s))
            JS_FreeValue(jc, JS_GetException(jc));
        JS_FreeValue(jc, s);
    }
    const char *h = head != NULL ? head : "Error: (a thrown value that cannot be turned into text)";
    const char *st = stack != NULL ? stack : "";
    size_t hn = strlen(h), sn = strlen(st);
    char *text = malloc(hn + 1 + sn + 1);
    if (text != NULL) {
        memcpy(text, h, hn);
        text[hn] = '\n';
        memcpy(text + hn + 1, st, sn);
        text[hn + 1 + sn] = '\0';
        *len = hn + 1 + sn;
    }
    if (head != NULL)
        JS_FreeCString(jc, head);
    if (stack != NULL)
        JS_FreeCString(jc, stack);
    JS_FreeValue(jc, exc);
    return text;
}

/* Raise JSError with malloc'd text (freed here); GIL held. */
static PyObject *
raise_text(char *text, size_t len)
{
    if (text == NULL)
        return PyErr_NoMemory();
    PyObject *message = py_text(text, len);
    free(text);
    if (message != NULL) {
        PyErr_SetObject(JSError, message);
        Py_DECREF(message);
    }
    return NULL;
}

/* ---- Channel ------------------------------------------------------------------------------- */

typedef struct Call {
    struct Call *next;
    int64_t id, size;
    char *name, *payload; /* JSON text */
    size_t name_len, payload_len;
} Call;

typedef struct Result {
    struct Result *next;
    int64_t id;
    int ok, is_text;
    char *payload;
    size_t len;
} Result;

typedef struct {
    PyObject_HEAD
    int efd;
    int immediate; /* wake the loop at each call (else when the JS thread next waits) */
    /* The JS thread's caller hands its calls over itself when it would wait (an engine worker's
     * main thread: run(wait=False)), so nothing is woken when a call is posted. Only an immediate
     * channel's calls left there while JS runs on for HAND_OVER_AFTER are, from the interrupt
     * check, to whoever reads the eventfd (the worker's relay). */
    int hands_over;
    _Atomic double pending_since; /* when the oldest call not taken was posted (0: none; hands_over) */
    pthread_mutex_t mu;
    Call *calls, *calls_tail;       /* JS thread -> loop */
    Result *results, *results_tail; /* loop -> JS thread */
    Py_ssize_t unread;              /* results posted and not yet settled (guarded by mu) */
    _Atomic uint32_t seq;           /* futex word: bumped by each result and by interrupt() */
    _Atomic int parked;             /* the JS thread sleeps on seq */
    _Atomic int signaled;           /* the eventfd was written since the loop last took calls */
    _Atomic int interrupted;
} Channel;

static PyTypeObject ChannelType;

static void
notify_js(Channel *ch)
{
    atomic_fetch_add(&ch->seq, 1);
    if (atomic_load(&ch->parked))
        syscall(SYS_futex, &ch->seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void
wake_loop(Channel *ch)
{
    if (!atomic_exchange(&ch->signaled, 1)) {
        uint64_t one = 1;
        ssize_t r;
        do {
            r = write(ch->efd, &one, sizeof one);
        } while (r < 0 && errno == EINTR);
    }
}

static PyObject *
Channel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"immediate", "hands_over", NULL};
    int immediate = 1, hands_over = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pp", kwlist, &immediate, &hands_over))
        return NULL;
    Channel *self = (Channel *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    pthread_mutex_init(&self->mu, NULL);
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        Py_DECREF(self);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->immediate = immediate;
    self->hands_over = hands_over;
    return (PyObject *)self;
}

static void
Channel_dealloc(Channel *self)
{
    for (Call *c = self->calls; c != NULL;) {
        Call *next = c->next;
        free(c->name);
        free(c->payload);
        free(c);
        c = next;
    }
    for (Result *r = self->results; r != NULL;) {
        Result *next = r->next;
        free(r->payload);
        free(r);
        r = next;
    }
    if (self->efd >= 0)
        close(self->efd);
    pthread_mutex_destroy(&self->mu);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The eventfd lives as long as the channel: the program's context holds the channel until it is
 * freed, so the JS thread never writes to a closed (or reused) descriptor. */
static PyObject *
Channel_fileno(Channel *self, PyObject *unused)
{
    return PyLong_FromLong(self->efd);
}

static PyObject *
Channel_take_calls(Channel *self, PyObject *unused)
{
    /* In this order: a call posted meanwhile either is taken below or writes the eventfd again. */
    uint64_t count;
    ssize_t r = read(self->efd, &count, sizeof count);
    (void)r; /* EAGAIN: nothing was written */
    atomic_store(&self->signaled, 0);
    pthread_mutex_lock(&self->mu);
    atomic_store(&self->pending_since, 0.0);
    Call *c = self->calls;
    self->calls = self->calls_tail = NULL;
    pthread_mutex_unlock(&self->mu);

    PyObject *list = PyList_New(0);
    int failed = list == NULL;
    while (c != NULL) {
        Call *next = c->next;
        if (!failed) {
            PyObject *name = py_text(c->name, c->name_len);
            PyObject *payload = py_text(c->payload, c->payload_len);
            PyObject *item = NULL;
            if (name != NULL && payload != NULL)
                item = Py_BuildValue("(LOOL)", (long long)c->id, name, payload, (long long)c->size);
            Py_XDECREF(name);
            Py_XDECREF(payload);
            if (item == NULL || PyList_Append(list, item) < 0)
                failed = 1;
            Py_XDECREF(item);
        }
        free(c->name);
        free(c->payload);
        free(c);
        c = next;
    }
    if (failed) {
        Py_XDECREF(list);
        return NULL;
    }
    return list;
}

static PyObject *
Channel_post(Channel *self, PyObject *args)
{
    long long id;
    int ok, is_text;
    PyObject *payload;
    if (!PyArg_ParseTuple(args, "LpUp", &id, &ok, &payload, &is_text))
        return NULL;
    PyObject *owner;
    Py_ssize_t n;
    const char *p = utf8_of(payload, &n, &owner);
    if (p == NULL)
        return NULL;
    Result *r = calloc(1, sizeof *r);
    char *copy = r != NULL ? copy_bytes(p, (size_t)n) : NULL;
    Py_XDECREF(owner);
    if (copy == NULL) {
        free(r);
        return PyErr_NoMemory();
    }
    r->id = id;
    r->ok = ok;
    r->is_text = is_text;
    r->payload = copy;
    r->len = (size_t)n;
    pthread_mutex_lock(&self->mu);
    if (self->results_tail != NULL)
        self->results_tail->next = r;
    else
        self->results = r;
    self->results_tail = r;
    self->unread++;
    pthread_mutex_unlock(&self->mu);
    notify_js(self);
    Py_RETURN_NONE;
}

static PyObject *
Channel_interrupt(Channel *self, PyObject *unused)
{
    atomic_store(&self->interrupted, 1);
    notify_js(self);
    Py_RETURN_NONE;
}

static PyObject *
Channel_get_interrupted(Channel *self, void *closure)
{
    return PyBool_FromLong(atomic_load(&self->interrupted));
}

static PyObject *
Channel_get_unread(Channel *self, void *closure)
{
    pthread_mutex_lock(&self->mu);
    Py_ssize_t n = self->unread;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef Channel_methods[] = {
    {"fileno", (PyCFunction)Channel_fileno, METH_NOARGS,
     "The eventfd that becomes readable when the program has posted calls (for the event loop)."},
    {"take_calls", (PyCFunction)Channel_take_calls, METH_NOARGS,
     "The calls posted since the last take, as [(id, name, payload_json, size)] (loop thread)."},
    {"post", (PyCFunction)Channel_post, METH_VARARGS,
     "post(call_id, ok, payload, is_text): hand a call's result to the program (any thread)."},
    {"interrupt", (PyCFunction)Channel_interrupt, METH_NOARGS,
     "Stop the program: its next interrupt check throws, a wait returns (any thread)."},
    {NULL}};

static PyGetSetDef Channel_getset[] = {
    {"interrupted", (getter)Channel_get_interrupted, NULL, "Whether interrupt() was called.", NULL},
    {"unread", (getter)Channel_get_unread, NULL,
     "Results posted that the program has not read yet (it reads them in the order they were posted).", NULL},
    {NULL}};

static PyTypeObject ChannelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemode.engine._qjs.Channel",
    .tp_basicsize = sizeof(Channel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Channel(immediate=True, hands_over=False): one program's calls out, results in, and its stop signal.",
    .tp_new = Channel_new,
    .tp_dealloc = (destructor)Channel_dealloc,
    .tp_methods = Channel_methods,
    .tp_getset = Channel_getset,
};

/* ---- Context ------------------------------------------------------------------------------- */

/* The prelude's entry points, taken from its globals (and deleted there) after it loads. */
enum { F_START, F_SETTLE, F_FIRE, F_DRAIN, F_TAKE_OUTPUT, F_TAKE_CHUNK, F_REPORT, N_ENTRY };
static const char *ENTRY_NAMES[N_ENTRY] = {
    "__cm_start", "__cm_settle", "__cm_fire", "__cm_drain", "__cm_take_output", "__cm_take_chunk", "__cm_report",
};

/* A runtime and its context, with the prelude's entry points: plain C, made and freed by any
 * thread (the keeper's, below, or a worker's) without the GIL. */
typedef struct Engine {
    struct Engine *next;
    JSRuntime *rt;
    JSContext *jc;
    JSValue entry[N_ENTRY];
    int loaded; /* the prelude ran and its entry points are taken */
} Engine;

typedef struct {
    PyObject_HEAD
    Engine *engine; /* NULL once freed */
    JSRuntime *rt;  /* the engine's, for short */
    JSContext *jc;
    JSValue *entry;
    int loaded;
    PyObject *host;   /* hostCall's Python side: host(kind, id, name, payload_json, size) -> str */
    Channel *channel; /* the running program's (strong reference) */
    _Atomic int armed; /* the interrupt check honours channel->interrupted (disarm: any thread) */
    _Atomic int busy;  /* a method is using the engine (enter/leave): one thread at a time */
    size_t stack_bytes; /* JS's stack limit asked for (set_limits; 0: the engine's default) */
    size_t slice_stack; /* the slice's (set_slice), while one runs */
    int64_t outstanding; /* calls posted to the loop and not yet settled */
    /* A first stretch run on the event loop's thread (set_slice): it ends at slice_until (time.monotonic
     * seconds) and refuses calls into Python; `slice_end` says which ended it. */
    double slice_until;
    const char *slice_end; /* NULL, "refused" (a call into Python) or "expired" */
} Context;

static PyTypeObject ContextType;

/* How long an immediate hands-over channel's calls wait for JS to stop running before they go
 * to whoever reads its eventfd (a program that posts calls and computes on still has them
 * started; one that awaits them at once hands them over itself, waking no thread). */
#define HAND_OVER_AFTER 1e-3

/* The engine asks about every 10,000 ticks; nothing happens here until interrupt(), but a
 * hands-over channel's calls left too long (HAND_OVER_AFTER). */
static int
on_interrupt(JSRuntime *rt, void *opaque)
{
    Context *self = opaque;
    if (self->slice_until > 0 && monotonic() >= self->slice_until) {
        self->slice_end = "expired";
        return 1;
    }
    Channel *ch = self->channel;
    if (ch == NULL)
        return 0;
    double since = atomic_load_explicit(&ch->pending_since, memory_order_relaxed);
    if (since != 0.0 && monotonic() - since >= HAND_OVER_AFTER)
        wake_loop(ch);
    return atomic_load_explicit(&self->armed, memory_order_relaxed) &&
           atomic_load_explicit(&ch->interrupted, memory_order_relaxed);
}

/* End the stretch at once (an uncatchable error): it will start over elsewhere. */
static JSValue
refuse_in_slice(JSContext *jc, Context *self)
{
    self->slice_end = "refused";
    JSValue error = JS_NewError(jc);
    JS_SetUncatchableError(jc, error);
    return JS_Throw(jc, error);
}

static const char FAULT_REPLY[] = "e{\"code\":\"tool_failed\",\"message\":\"engine fault: the host's call handler failed\",\"data\":null}";

/* hostCall(kind, id, name, payloadJson, size): the prelude's call into Python, answered at
 * once (inline tools, store, searchTools). Takes the GIL for the Python part only. */
static JSValue
js_host_call(JSContext *jc, JSValueConst this_val, int argc, JSValueConst *argv)
{
    Context *self = JS_GetContextOpaque(jc);
    if (self->slice_until > 0) /* on the event loop's thread: no call into Python from here */
        return refuse_in_slice(jc, self);
    if (argc < 5)
        return JS_ThrowTypeError(jc, "hostCall: 5 arguments expected");
    int64_t id, size;
    if (JS_ToInt64(jc, &id, argv[1]) < 0 || JS_ToInt64(jc, &size, argv[4]) < 0)
        return JS_EXCEPTION;
    size_t kn, nn, pn;
    const char *kind = JS_ToCStringLen(jc, &kn, argv[0]);
    const char *name = JS_ToCStringLen(jc, &nn, argv[2]);
    const char *payload = JS_ToCStringLen(jc, &pn, argv[3]);
    JSValue reply = JS_EXCEPTION;
    if (kind != NULL && name != NULL && payload != NULL) {
        PyGILState_STATE gil = PyGILState_Ensure();
        PyObject *result = NULL;
        PyObject *host = Py_XNewRef(self->host); /* held for the call, whatever set_host does */
        if (host != NULL) {
            PyObject *k = kn == 4 && memcmp(kind, "call", 4) == 0   ? Py_NewRef(KIND_CALL)
                          : kn == 4 && memcmp(kind, "sync", 4) == 0 ? Py_NewRef(KIND_SYNC)
                                                                    : py_text(kind, kn);
            PyObject *args[5] = {k, PyLong_FromLongLong(id), py_text(name, nn), py_text(payload, pn),
                                 PyLong_FromLongLong(size)};
            if (args[0] != NULL && args[1] != NULL && args[2] != NULL && args[3] != NULL && args[4] != NULL)
                result = PyObject_Vectorcall(host, args, 5, NULL);
            for (int i = 0; i < 5; i++)
                Py_XDECREF(args[i]);
        }
        PyObject *owner = NULL;
        Py_ssize_t len = 0;
        const char *text = NULL;
        if (result != NULL && PyUnicode_Check(result))
            text = utf8_of(result, &len, &owner);
        if (text == NULL) { /* the handler must never fail; if it did, the call fails, not the host */
            if (PyErr_Occurred())
                PyErr_WriteUnraisable(host != NULL ? host : Py_None);
            text = FAULT_REPLY;
            len = (Py_ssize_t)(sizeof FAULT_REPLY - 1);
        }
        reply = JS_NewStringLen(jc, text, (size_t)len);
        Py_XDECREF(owner);
        Py_XDECREF(result);
        Py_XDECREF(host);
        PyGILState_Release(gil);
    }
    JS_FreeCString(jc, kind);
    JS_FreeCString(jc, name);
    JS_FreeCString(jc, payload);
    return reply;
}

/* postCall(id, name, payloadJson, size): a call for the event loop; no GIL. */
static JSValue
js_post_call(JSContext *jc, JSValueConst this_val, int argc, JSValueConst *argv)
{
    Context *self = JS_GetContextOpaque(jc);
    Channel *ch = self->channel;
    if (ch == NULL)
        return JS_ThrowTypeError(jc, "postCall: no program is running");
    if (argc < 4)
        return JS_ThrowTypeError(jc, "postCall: 4 arguments expected");
    int64_t id, size;
    if (JS_ToInt64(jc, &id, argv[0]) < 0 || JS_ToInt64(jc, &size, argv[3]) < 0)
        return JS_EXCEPTION;
    size_t nn, pn;
    const char *name = JS_ToCStringLen(jc, &nn, argv[1]);
    const char *payload = JS_ToCStringLen(jc, &pn, argv[2]);
    Call *c = NULL;
    if (name != NULL && payload != NULL) {
        c = calloc(1, sizeof *c);
        if (c != NULL) {
            c->id = id;
            c->size = size;
            c->name = copy_bytes(name, nn);
            c->name_len = nn;
            c->payload = copy_bytes(payload, pn);
            c->payload_len = pn;
            if (c->name == NULL || c->payload == NULL) {
                free(c->name);
                free(c->payload);
                free(c);
                c = NULL;
            }
        }
    }
    int had_strings = name != NULL && payload != NULL;
    JS_FreeCString(jc, name);
    JS_FreeCString(jc, payload);
    if (c == NULL)
        return had_strings ? JS_ThrowOutOfMemory(jc) : JS_EXCEPTION;
    pthread_mutex_lock(&ch->mu);
    if (ch->calls_tail != NULL)
        ch->calls_tail->next = c;
    else
        ch->calls = c;
    ch->calls_tail = c;
    if (ch->hands_over && ch->immediate && atomic_load(&ch->pending_since) == 0.0)
        atomic_store(&ch->pending_since, monotonic());
    pthread_mutex_unlock(&ch->mu);
    self->outstanding++;
    if (ch->immediate && !ch->hands_over)
        wake_loop(ch);
    return JS_UNDEFINED;
}


/* ---- encodeArgs: plain data to JSON in one pass -----------------------------------------------
 *
 * A tool call's arguments are nearly always plain data: objects of Object.prototype (or none),
 * arrays of Array.prototype, strings, finite numbers, booleans, null. For those the prelude's
 * check and JSON.stringify took ~1.6 us of an inline call's ~9.7 (bench/bench_engine.py); this
 * does both in ~0.2. It never runs the program's code (an accessor, a Proxy: not plain) and
 * never calls toJSON, so no change to a prototype can redirect it. What is not plain data
 * gives undefined: the prelude then checks it (naming the path of what JSON cannot carry) and
 * encodes it its careful way. Output as JSON.stringify writes it: a lone surrogate escaped. */

#define ENCODE_MAX_DEPTH 64

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int
buf_put(Buf *b, const char *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* `s` (UTF-8 from JS_ToCStringLen, a lone surrogate as its 3-byte code point) as a JSON string. */
static int
put_json_string(Buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (buf_put(b, "\"", 1) < 0)
        return -1;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        size_t len = 0, skip = 1;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, len = 2;
        } else if (c < 0x20) {
            switch (c) {
            case '\b': memcpy(esc, "\\b", 2), len = 2; break;
            case '\f': memcpy(esc, "\\f", 2), len = 2; break;
            case '\n': memcpy(esc, "\\n", 2), len = 2; break;
            case '\r': memcpy(esc, "\\r", 2), len = 2; break;
            case '\t': memcpy(esc, "\\t", 2), len = 2; break;
            default:
                memcpy(esc, "\\u00", 4), esc[4] = hex[c >> 4], esc[5] = hex[c & 15], len = 6;
            }
        } else if (c == 0xED && i + 2 < n && ((unsigned char)s[i + 1] & 0xE0) == 0xA0) {
            unsigned cp = 0xD000 | (((unsigned char)s[i + 1] & 0x3F) << 6) | ((unsigned char)s[i + 2] & 0x3F);
            memcpy(esc, "\\u", 2);
            esc[2] = hex[cp >> 12], esc[3] = hex[(cp >> 8) & 15], esc[4] = hex[(cp >> 4) & 15], esc[5] = hex[cp & 15];
            len = 6, skip = 3;
        } else {
            continue;
        }
        if (buf_put(b, s + start, i - start) < 0 || buf_put(b, esc, len) < 0)
            return -1;
        i += skip - 1;
        start = i + 1;
    }
    if (buf_put(b, s + start, n - start) < 0)
        return -1;
    return buf_put(b, "\"", 1);
}

static int
put_js_string(JSContext *jc, Buf *b, JSValueConst v)
{
    size_t n;
    const char *s = JS_ToCStringLen(jc, &n, v);
    if (s == NULL)
        return -1;
    int r = put_json_string(b, s, n);
    JS_FreeCString(jc, s);
    return r;
}

/* 1: written; 0: not plain data; -1: an exception (pending in jc) or out of memory. */
static int
encode_plain(JSContext *jc, Buf *b, JSValueConst v, JSValueConst object_proto, JSValueConst array_proto, int depth)
{
    switch (JS_VALUE_GET_TAG(v)) {
    case JS_TAG_INT: {
        char num[16];
        int len = snprintf(num, sizeof num, "%d", JS_VALUE_GET_INT(v));
        return buf_put(b, num, (size_t)len) < 0 ? -1 : 1;
    }
    case JS_TAG_FLOAT64: {
        if (!isfinite(JS_VALUE_GET_FLOAT64(v)))
            return 0;
        size_t n;
        const char *s = JS_ToCStringLen(jc, &n, v); /* the engine's own number to text */
        if (s == NULL)
            return -1;
        int r = buf_put(b, s, n);
        JS_FreeCString(jc, s);
        return r < 0 ? -1 : 1;
    }
    case JS_TAG_BOOL:
        return (JS_VALUE_GET_BOOL(v) ? buf_put(b, "true", 4) : buf_put(b, "false", 5)) < 0 ? -1 : 1;
    case JS_TAG_NULL:
        return buf_put(b, "null", 4) < 0 ? -1 : 1;
    case JS_TAG_STRING:
        return put_js_string(jc, b, v) < 0 ? -1 : 1;
    case JS_TAG_OBJECT:
        break;
    default: /* undefined, a symbol, a BigInt, ... */
        return 0;
    }
    if (depth > ENCODE_MAX_DEPTH || JS_IsProxy(v))
        return 0;
    JSValue proto = JS_GetPrototype(jc, v);
    if (JS_IsException(proto))
        return -1;
    int is_array = JS_IsArray(v);
    int fits = is_array ? JS_VALUE_GET_PTR(proto) == JS_VALUE_GET_PTR(array_proto) && JS_IsObject(proto)
                        : JS_IsNull(proto) || (JS_IsObject(proto) && JS_VALUE_GET_PTR(proto) == JS_VALUE_GET_PTR(object_proto));
    JS_FreeValue(jc, proto);
    if (!fits)
        return 0;
    if (is_array) {
        int64_t len;
        if (JS_GetLength(jc, v, &len) < 0)
            return -1;
        if (buf_put(b, "[", 1) < 0)
            return -1;
        for (int64_t i = 0; i < len; i++) {
            JSValue item = JS_GetPropertyInt64(jc, v, i);
            if (JS_IsException(item))
                return -1;
            int r = (i > 0 && buf_put(b, ",", 1) < 0) ? -1 : encode_plain(jc, b, item, object_proto, array_proto, depth + 1);
            JS_FreeValue(jc, item);
            if (r <= 0)
                return r; /* (a hole reads as undefined: not plain) */
        }
        return buf_put(b, "]", 1) < 0 ? -1 : 1;
    }
    JSPropertyEnum *props;
    uint32_t count;
    if (JS_GetOwnPropertyNames(jc, &props, &count, v, JS_GPN_STRING_MASK | JS_GPN_ENUM_ONLY) < 0)
        return -1;
    int result = buf_put(b, "{", 1) < 0 ? -1 : 1;
    int first = 1;
    for (uint32_t i = 0; i < count && result == 1; i++) {
        JSPropertyDescriptor desc;
        int has = JS_GetOwnProperty(jc, &desc, v, props[i].atom);
        if (has < 0) {
            result = -1;
            break;
        }
        if (has == 0)
            continue; /* deleted meanwhile */
        if (desc.flags & JS_PROP_GETSET) { /* an accessor: reading it would run the program's code */
            JS_FreeValue(jc, desc.getter);
            JS_FreeValue(jc, desc.setter);
            result = 0;
            break;
        }
        JS_FreeValue(jc, desc.getter);
        JS_FreeValue(jc, desc.setter);
        if (JS_IsUndefined(desc.value))
            continue; /* left out, as JSON.stringify does */
        JSValue key = JS_AtomToString(jc, props[i].atom);
        if (JS_IsException(key)) {
            JS_FreeValue(jc, desc.value);
            result = -1;
            break;
        }
        if ((!first && buf_put(b, ",", 1) < 0) || put_js_string(jc, b, key) < 0 || buf_put(b, ":", 1) < 0)
            result = -1;
        else
            result = encode_plain(jc, b, desc.value, object_proto, array_proto, depth + 1);
        first = 0;
        JS_FreeValue(jc, key);
        JS_FreeValue(jc, desc.value);
    }
    JS_FreePropertyEnum(jc, props, count);
    if (result == 1 && buf_put(b, "}", 1) < 0)
        result = -1;
    return result;
}

/* encodeArgs(value, Object.prototype, Array.prototype): its JSON text, or undefined (not plain). */
static JSValue
js_encode_args(JSContext *jc, JSValueConst this_val, int argc, JSValueConst *argv)
{
    if (argc < 3)
        return JS_ThrowTypeError(jc, "encodeArgs: 3 arguments expected");
    Buf b = {0};
    int r = encode_plain(jc, &b, argv[0], argv[1], argv[2], 0);
    JSValue out = r == 1 ? JS_NewStringLen(jc, b.p, b.n) : r == 0 ? JS_UNDEFINED : JS_EXCEPTION;
    if (r < 0 && !JS_HasException(jc))
        out = JS_ThrowOutOfMemory(jc);
    free(b.p);
    return out;
}

static int
install_natives(JSContext *jc)
{
    JSValue global = JS_GetGlobalObject(jc);
    int ok = JS_SetPropertyStr(jc, global, "__cm_host_call", JS_NewCFunction(jc, js_host_call, "hostCall", 5)) >= 0 &&
             JS_SetPropertyStr(jc, global, "__cm_post_call", JS_NewCFunction(jc, js_post_call, "postCall", 4)) >= 0 &&
             JS_SetPropertyStr(jc, global, "__cm_encode_args", JS_NewCFunction(jc, js_encode_args, "encodeArgs", 3)) >= 0;
    JS_FreeValue(jc, global);
    return ok;
}

/* Take the prelude's entry points out of its globals. */
static int
take_entries(Engine *e)
{
    JSContext *jc = e->jc;
    JSValue global = JS_GetGlobalObject(jc);
    int ok = 1;
    for (int i = 0; i < N_ENTRY; i++) {
        JSValue f = JS_GetPropertyStr(jc, global, ENTRY_NAMES[i]);
        if (!JS_IsFunction(jc, f)) {
            JS_FreeValue(jc, f);
            ok = 0;
            break;
        }
        e->entry[i] = f;
        JSAtom atom = JS_NewAtom(jc, ENTRY_NAMES[i]);
        JS_DeleteProperty(jc, global, atom, 0);
        JS_FreeAtom(jc, atom);
    }
    JS_FreeValue(jc, global);
    return ok;
}

static void
engine_free(Engine *e)
{
    if (e->jc != NULL) {
        for (int i = 0; i < N_ENTRY; i++)
            JS_FreeValue(e->jc, e->entry[i]);
        JS_FreeContext(e->jc);
    }
    if (e->rt != NULL)
        JS_FreeRuntime(e->rt);
    free(e);
}

/* A fresh engine, with `prelude` (bytecode) run if given; NULL when out of memory or when the
 * prelude threw (*error then holds its text, malloc'd). Any thread, no GIL. */
static Engine *
engine_new(const uint8_t *prelude, size_t prelude_len, char **error, size_t *error_len)
{
    Engine *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    for (int i = 0; i < N_ENTRY; i++)
        e->entry[i] = JS_UNDEFINED;
    e->rt = JS_NewRuntime();
    if (e->rt != NULL) {
        JS_SetCanBlock(e->rt, false); /* Atomics.wait throws instead of blocking the thread */
        e->jc = JS_NewContext(e->rt);
    }
    if (e->jc == NULL || !install_natives(e->jc)) {
        engine_free(e);
        return NULL;
    }
    if (prelude == NULL)
        return e;
    JSValue fn = JS_ReadObject(e->jc, prelude, prelude_len, JS_READ_OBJ_BYTECODE);
    JSValue result = JS_IsException(fn) ? JS_EXCEPTION : JS_EvalFunction(e->jc, fn);
    if (JS_IsException(result)) {
        if (error != NULL)
            *error = exception_text(e->jc, error_len);
        engine_free(e);
        return NULL;
    }
    JS_FreeValue(e->jc, result);
    if (!take_entries(e)) {
        engine_free(e);
        return NULL;
    }
    e->loaded = 1;
    return e;
}

/* ---- the keeper: engines made ahead and freed, off the critical path ------------------------
 *
 * Every program gets a fresh engine. Making one costs ~0.18 ms of CPU (runtime 7 us, context
 * 55, reading the prelude's bytecode 45, running it 27) and freeing one ~0.04 ms. Done by a
 * worker right after its program ended, that work competed (on a 2-CPU machine) with the event
 * loop just when the loop took the outcome: the loop woke ~0.2 ms late. One pthread that never
 * touches Python (no GIL) keeps `spare` engines ready and frees used ones. Nobody waits for it:
 * the event loop takes a ready engine or none (take_ready: the program then starts on a
 * worker), a worker takes one or makes its own. The host's keeper runs at normal priority:
 * measured back to back (bench/bench_engine.py), at SCHED_IDLE it had an engine ready for
 * 62-77% of programs, at normal priority for 76-92%, and print(1) took 0.16-0.19 ms instead of
 * 0.18-0.24.
 *
 * An engine worker's keeper (set_prelude's `idle`) runs at SCHED_IDLE: there the keeper's work
 * competes with other workers' programs, not with the loop. 200 programs at once (64 workers
 * on 2 CPUs, bench/bench_engine_modes.py): the programs' first stretches were queued behind
 * the making and freeing of engines (~0.35 ms of CPU a program), and ran at 0.74-0.77x thread
 * mode's rate; with the keeper at SCHED_IDLE, made and freed in the gaps, at 0.90-1.01x. A
 * worker whose keeper found no idle CPU makes its own (print(1) 0.66 ms instead of 0.48; 0.89 ms
 * with both CPUs held by other work). Such a keeper holds one used engine at most (others are
 * freed by their caller), and trims the heap once it has nothing left to do: a worker's RSS
 * stays that of one engine, not of the most it held during a burst. */

#define MAX_USED 8 /* engines waiting to be freed; beyond that the caller frees its own */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the keeper waits on it for work */
    uint8_t *prelude;
    size_t prelude_len;
    int spare;
    Engine *ready;
    int n_ready;
    Engine *used;
    int n_used;
    int running;
    int idle; /* the keeper runs at SCHED_IDLE: only when a CPU has nothing else to do */
    int failing; /* the last attempt to make one failed: wait for the next take */
    /* how engines were had and freed: ahead (by the keeper) or by the caller */
    long long taken_ready, made_by_caller, freed_ahead, freed_by_caller;
} keeper = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void *
keeper_main(void *unused)
{
    int untrimmed = 0; /* engines freed since the heap was last trimmed (an idle keeper's) */
    pthread_mutex_lock(&keeper.mu);
    for (;;) {
        if (untrimmed && keeper.used == NULL && (keeper.failing || keeper.n_ready >= keeper.spare)) {
            /* An idle keeper with nothing left to do gives the freed pages back (a worker's RSS
             * stays that of one engine, not of the most it held at once). */
            untrimmed = 0;
            pthread_mutex_unlock(&keeper.mu);
            malloc_trim(0);
            pthread_mutex_lock(&keeper.mu);
            continue;
        }
        while (keeper.used == NULL && (keeper.failing || keeper.n_ready >= keeper.spare))
            pthread_cond_wait(&keeper.cv, &keeper.mu);
        if (keeper.used != NULL) {
            Engine *e = keeper.used;
            keeper.used = e->next;
            keeper.n_used--;
            pthread_mutex_unlock(&keeper.mu);
            engine_free(e);
            untrimmed = keeper.idle;
            pthread_mutex_lock(&keeper.mu);
            continue;
        }
        const uint8_t *prelude = keeper.prelude;
        size_t len = keeper.prelude_len;
        pthread_mutex_unlock(&keeper.mu);
        Engine *e = engine_new(prelude, len, NULL, NULL);
        pthread_mutex_lock(&keeper.mu);
        if (e == NULL) {
            keeper.failing = 1;
            continue;
        }
        e->next = keeper.ready;
        keeper.ready = e;
        keeper.n_ready++;
    }
    return NULL;
}

/* keeper.mu held. */
static void
keeper_wake(void)
{
    if (!keeper.running && keeper.prelude != NULL) {
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 8 * 1024 * 1024);
        if (pthread_create(&thread, &attr, keeper_main, NULL) == 0) {
            keeper.running = 1;
            if (keeper.idle) { /* (set by this thread: a worker's seal may come before the keeper runs) */
                struct sched_param none = {0};
                pthread_setschedparam(thread, SCHED_IDLE, &none);
            }
        }
        pthread_attr_destroy(&attr);
    }
    pthread_cond_signal(&keeper.cv);
}

/* A fresh engine with the prelude: a ready one, else made here. No GIL. */
static Engine *
keeper_take(char **error, size_t *error_len)
{
    pthread_mutex_lock(&keeper.mu);
    Engine *e = keeper.ready;
    if (e != NULL) {
        keeper.ready = e->next;
        keeper.n_ready--;
        keeper.taken_ready++;
    } else {
        keeper.made_by_caller++;
    }
    keeper.failing = 0;
    keeper_wake();
    const uint8_t *prelude = keeper.prelude;
    size_t len = keeper.prelude_len;
    pthread_mutex_unlock(&keeper.mu);
    if (e == NULL)
        e = engine_new(prelude, len, error, error_len);
    return e;
}

/* A ready engine, or NULL: never made here, never waited for. No GIL. */
static Engine *
keeper_take_ready(void)
{
    pthread_mutex_lock(&keeper.mu);
    Engine *e = keeper.ready;
    if (e != NULL) {
        keeper.ready = e->next;
        keeper.n_ready--;
        keeper.taken_ready++;
        keeper_wake();
    }
    pthread_mutex_unlock(&keeper.mu);
    return e;
}

/* Hand a used engine to the keeper to free (or free it here). No GIL. */
static void
keeper_give_back(Engine *e)
{
    pthread_mutex_lock(&keeper.mu);
    /* An idle-priority keeper may not run for a while (every CPU busy): one engine waits for
     * it at most, the others are freed by their caller (a worker's heap does not grow with
     * the engines of a burst). */
    if (keeper.running && keeper.n_used < (keeper.idle ? 1 : MAX_USED)) {
        e->next = keeper.used;
        keeper.used = e;
        keeper.n_used++;
        pthread_cond_signal(&keeper.cv);
        keeper.freed_ahead++;
        e = NULL;
    } else {
        keeper.freed_by_caller++;
    }
    pthread_mutex_unlock(&keeper.mu);
    if (e != NULL)
        engine_free(e);
}

/* After fork, in the child: no keeper thread (the engines it listed are left alone). */
static void
keeper_after_fork(void)
{
    pthread_mutex_init(&keeper.mu, NULL);
    pthread_cond_init(&keeper.cv, NULL);
    keeper.ready = keeper.used = NULL;
    keeper.n_ready = keeper.n_used = 0;
    keeper.running = 0;
}

static int
finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Bytes of C stack left below this frame on the calling thread (0 when unknown). The stack's
 * low end is looked up once per thread, a failure too: for the main thread glibc reads
 * /proc/self/maps to find it (~0.4 ms), which a sealed engine worker cannot open (its zygote
 * looks it up before it confines itself: prime_stack; a forked worker's main thread keeps it). */
static __thread uintptr_t thread_stack_low = 0;
static __thread int thread_stack_looked = 0;

static size_t
stack_room(void)
{
    if (!thread_stack_looked) {
        thread_stack_looked = 1;
        pthread_attr_t attr;
        void *base;
        size_t size;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &base, &size) == 0)
                thread_stack_low = (uintptr_t)base;
            pthread_attr_destroy(&attr);
        }
    }
    if (thread_stack_low == 0)
        return 0;
    char here;
    uintptr_t sp = (uintptr_t)&here;
    return sp > thread_stack_low ? (size_t)(sp - thread_stack_low) : 0;
}

#define SLICE_STACK_MARGIN (256 * 1024) /* C stack kept free below JS's own limit */

/* ---- one thread at a time, never after free ------------------------------------------------
 *
 * Every method that touches a context's engine runs between enter() and leave(). enter() takes
 * the busy flag with one atomic exchange: a second thread, or the context's own host function
 * calling back into it from inside its JS, gets RuntimeError instead of using the engine at the
 * same time (QuickJS is not thread-safe, and the engine cannot be re-entered mid-call safely
 * from Python). A freed context raises RuntimeError. What other threads may call at any time
 * touches no engine: Channel.post/interrupt (a mutex and atomics), disarm (an atomic), the
 * outstanding/slice_end getters (plain reads). enter() also fits JS's stack limit to the stack
 * of the thread it runs on, so a limit set on a big stack cannot overflow a smaller one. */

static size_t
fit_stack(Context *self)
{
    size_t want = self->slice_until > 0 && self->slice_stack > 0 ? self->slice_stack
                  : self->stack_bytes > 0                         ? self->stack_bytes
                                                                  : JS_DEFAULT_STACK_SIZE;
    size_t room = stack_room();
    if (room > 0) {
        size_t most = room > 2 * SLICE_STACK_MARGIN ? room - SLICE_STACK_MARGIN : room / 2;
        if (want > most)
            want = most;
    }
    return want;
}

/* 1 when the caller may use the context (call leave() after), else 0 with RuntimeError set.
 * `freed_ok`: a freed context is fine (set_host, free). */
static int
enter_ex(Context *self, int freed_ok)
{
    if (atomic_exchange(&self->busy, 1)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the context is in use by another thread (or by the host call its JS is making): a "
                        "context is used by one thread at a time; wait until that call returns");
        return 0;
    }
    if (self->engine == NULL) {
        if (freed_ok)
            return 1;
        atomic_store(&self->busy, 0);
        PyErr_SetString(PyExc_RuntimeError, "the context was freed (its runtime is gone): make a new Context");
        return 0;
    }
    JS_UpdateStackTop(self->rt);
    JS_SetMaxStackSize(self->rt, fit_stack(self));
    return 1;
}

static int
enter(Context *self)
{
    return enter_ex(self, 0);
}

static void
leave(Context *self)
{
    atomic_store(&self->busy, 0);
}

static void bind_engine(Context *self, Engine *e);

static PyObject *
Context_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"prelude", NULL};
    int with_prelude = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:Context", kwlist, &with_prelude))
        return NULL;
    if (with_prelude && keeper.prelude == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_prelude() first (or Context(prelude=False))");
        return NULL;
    }
    Context *self = (Context *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Engine *e;
    char *error = NULL;
    size_t error_len = 0;
    Py_BEGIN_ALLOW_THREADS
    e = with_prelude ? keeper_take(&error, &error_len) : engine_new(NULL, 0, NULL, NULL);
    Py_END_ALLOW_THREADS
    if (e == NULL) {
        Py_DECREF(self);
        return error != NULL ? raise_text(error, error_len) : PyErr_NoMemory();
    }
    bind_engine(self, e);
    return (PyObject *)self;
}

/* Make engine `e` the context's (a Context just allocated). */
static void
bind_engine(Context *self, Engine *e)
{
    self->engine = e;
    self->rt = e->rt;
    self->jc = e->jc;
    self->entry = e->entry;
    self->loaded = e->loaded;
    JS_SetContextOpaque(e->jc, self);
    JS_SetInterruptHandler(e->rt, on_interrupt, self);
}

static PyObject *
qjs_take_ready(PyObject *module, PyObject *unused)
{
    Engine *e = keeper_take_ready();
    if (e == NULL)
        Py_RETURN_NONE;
    Context *self = (Context *)ContextType.tp_alloc(&ContextType, 0);
    if (self == NULL) {
        keeper_give_back(e);
        return NULL;
    }
    bind_engine(self, e);
    return (PyObject *)self;
}

static int
Context_traverse(Context *self, visitproc visit, void *arg)
{
    Py_VISIT(self->host);
    Py_VISIT((PyObject *)self->channel);
    return 0;
}

static int
Context_clear(Context *self)
{
    Py_CLEAR(self->host);
    Py_CLEAR(self->channel);
    return 0;
}

/* Detach the engine from this object (no JS may run on it after this). */
static Engine *
detach(Context *self)
{
    Engine *e = self->engine;
    if (e != NULL) {
        JS_SetInterruptHandler(e->rt, NULL, NULL);
        JS_SetContextOpaque(e->jc, NULL);
    }
    self->engine = NULL;
    self->rt = NULL;
    self->jc = NULL;
    self->loaded = 0;
    return e;
}

static void
Context_dealloc(Context *self)
{
    PyObject_GC_UnTrack(self);
    Engine *e = detach(self);
    if (e != NULL) {
        if (finalizing()) {
            engine_free(e);
        } else {
            Py_BEGIN_ALLOW_THREADS
            keeper_give_back(e);
            Py_END_ALLOW_THREADS
        }
    }
    Context_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Detach the engine and free it: here, or handed to the keeper (freed here when none runs). */
static PyObject *
release_engine(Context *self, int to_keeper)
{
    if (!enter_ex(self, 1)) /* (releasing a released context does nothing) */
        return NULL;
    Engine *e = detach(self);
    if (e != NULL) {
        Py_BEGIN_ALLOW_THREADS
        if (to_keeper)
            keeper_give_back(e);
        else
            engine_free(e);
        Py_END_ALLOW_THREADS
    }
    leave(self);
    Py_RETURN_NONE;
}

static PyObject *
Context_hand_back(Context *self, PyObject *unused)
{
    return release_engine(self, 1);
}

static PyObject *
Context_free(Context *self, PyObject *unused)
{
    return release_engine(self, 0);
}

/* A JS value as Python (GIL held; takes the value): str, int, float, bool, None, else JSON text. */
static PyObject *
to_python(Context *self, JSValue v)
{
    JSContext *jc = self->jc;
    PyObject *out = NULL;
    if (JS_IsString(v)) {
        size_t n;
        const char *s = JS_ToCStringLen(jc, &n, v);
        if (s != NULL) {
            out = py_text(s, n);
            JS_FreeCString(jc, s);
        }
    } else if (JS_IsBool(v)) {
        out = PyBool_FromLong(JS_ToBool(jc, v));
    } else if (JS_IsNull(v) || JS_IsUndefined(v)) {
        out = Py_NewRef(Py_None);
    } else if (JS_VALUE_GET_TAG(v) == JS_TAG_INT) {
        out = PyLong_FromLong(JS_VALUE_GET_INT(v));
    } else if (JS_IsNumber(v)) {
        double d;
        JS_ToFloat64(jc, &d, v);
        out = PyFloat_FromDouble(d);
    } else {
        JSValue json = JS_JSONStringify(jc, v, JS_UNDEFINED, JS_UNDEFINED);
        if (JS_IsString(json)) {
            size_t n;
            const char *s = JS_ToCStringLen(jc, &n, json);
            if (s != NULL) {
                out = py_text(s, n);
                JS_FreeCString(jc, s);
            }
        } else if (JS_IsException(json)) {
            size_t n = 0;
            char *text = exception_text(jc, &n);
            JS_FreeValue(jc, v);
            return raise_text(text, n);
        } else {
            out = Py_NewRef(Py_None);
        }
        JS_FreeValue(jc, json);
    }
    JS_FreeValue(jc, v);
    if (out == NULL && !PyErr_Occurred())
        PyErr_NoMemory();
    return out;
}

static PyObject *
Context_eval(Context *self, PyObject *args)
{
    const char *source, *filename = "<eval>";
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "s#|s", &source, &n, &filename))
        return NULL;
    if (!enter(self))
        return NULL;
    JSValue v;
    char *error = NULL;
    size_t error_len = 0;
    Py_BEGIN_ALLOW_THREADS
    v = JS_Eval(self->jc, source, (size_t)n, filename, JS_EVAL_TYPE_GLOBAL);
    if (JS_IsException(v))
        error = exception_text(self->jc, &error_len);
    Py_END_ALLOW_THREADS
    PyObject *out = JS_IsException(v) ? raise_text(error, error_len) : to_python(self, v);
    leave(self);
    return out;
}

static PyObject *
Context_set_limits(Context *self, PyObject *args)
{
    Py_ssize_t memory, stack;
    if (!PyArg_ParseTuple(args, "nn", &memory, &stack))
        return NULL;
    if (memory < 0 || stack < 0) {
        PyErr_SetString(PyExc_ValueError, "set_limits: memory_bytes and stack_bytes must be >= 0");
        return NULL;
    }
    if (!enter(self))
        return NULL;
    JS_SetMemoryLimit(self->rt, (size_t)memory);
    self->stack_bytes = (size_t)stack;
    JS_SetMaxStackSize(self->rt, fit_stack(self)); /* (at most what this thread's stack has room for) */
    leave(self);
    Py_RETURN_NONE;
}

static PyObject *
Context_set_host(Context *self, PyObject *host)
{
    if (host != Py_None && !PyCallable_Check(host)) {
        PyErr_SetString(PyExc_TypeError, "set_host: a callable or None");
        return NULL;
    }
    if (!enter_ex(self, 1))
        return NULL;
    Py_XSETREF(self->host, host == Py_None ? NULL : Py_NewRef(host));
    leave(self);
    Py_RETURN_NONE;
}

static int
need_loaded(Context *self)
{
    if (!self->loaded) {
        PyErr_SetString(PyExc_RuntimeError, self->engine == NULL ? "the context was freed" : "the context has no prelude");
        return 0;
    }
    return 1;
}

/* Call entry point `which` (no GIL); the value, or JS_EXCEPTION with *error set. */
static JSValue
call_entry(Context *self, int which, int argc, JSValue *argv, char **error, size_t *error_len)
{
    JSValue v = JS_Call(self->jc, self->entry[which], JS_UNDEFINED, argc, argv);
    for (int i = 0; i < argc; i++)
        JS_FreeValue(self->jc, argv[i]);
    if (JS_IsException(v))
        *error = exception_text(self->jc, error_len);
    return v;
}

static PyObject *
Context_start(Context *self, PyObject *args)
{
    PyObject *channel;
    const char *source, *effectful, *namespaces, *inline_names;
    Py_ssize_t source_len, effectful_len, namespaces_len, inline_len;
    long long data_limit, calls_limit;
    if (!PyArg_ParseTuple(args, "O!s#LLs#s#s#", &ChannelType, &channel, &source, &source_len, &data_limit,
                          &calls_limit, &effectful, &effectful_len, &namespaces, &namespaces_len, &inline_names,
                          &inline_len))
        return NULL;
    if (!enter(self))
        return NULL;
    if (!need_loaded(self)) {
        leave(self);
        return NULL;
    }
    Py_XSETREF(self->channel, (Channel *)Py_NewRef(channel));
    atomic_store(&self->armed, 1);
    self->outstanding = 0;
    char *error = NULL;
    size_t error_len = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    JSContext *jc = self->jc;
    JSValue main = JS_Eval(jc, source, (size_t)source_len, "<input>", JS_EVAL_TYPE_GLOBAL);
    if (JS_IsException(main)) {
        failed = 1;
        error = exception_text(jc, &error_len);
    } else {
        JSValue argv[6] = {
            main,
            JS_NewInt64(jc, data_limit),
            JS_NewInt64(jc, calls_limit),
            JS_NewStringLen(jc, effectful, (size_t)effectful_len),
            JS_NewStringLen(jc, namespaces, (size_t)namespaces_len),
            JS_NewStringLen(jc, inline_names, (size_t)inline_len),
        };
        JSValue v = call_entry(self, F_START, 6, argv, &error, &error_len);
        failed = JS_IsException(v);
        JS_FreeValue(jc, v);
    }
    Py_END_ALLOW_THREADS
    leave(self);
    if (failed)
        return raise_text(error, error_len);
    Py_RETURN_NONE;
}

/* What run() returns for. */
enum { EV_ERROR, EV_DRAIN, EV_IDLE, EV_TIMER, EV_DEADLINE, EV_INTERRUPTED, EV_WAIT };

/* The prelude's drain: messages for the host ("" when none; with `force`, also printed text).
 * 1 with *text set, 0 when there is nothing, -1 on error (*text is the error). */
static int
drain(Context *self, int force, char **text, size_t *len)
{
    JSValue argv[1] = {JS_NewBool(self->jc, force)};
    JSValue v = call_entry(self, F_DRAIN, 1, argv, text, len);
    if (JS_IsException(v))
        return -1;
    size_t n = 0;
    const char *s = JS_ToCStringLen(self->jc, &n, v);
    int got = 0;
    if (s == NULL) {
        *text = exception_text(self->jc, len);
        JS_FreeValue(self->jc, v);
        return -1;
    }
    if (n > 0) {
        *text = copy_bytes(s, n);
        *len = n;
        got = *text != NULL ? 1 : -1;
    }
    JS_FreeCString(self->jc, s);
    JS_FreeValue(self->jc, v);
    return got;
}

/* Settle every result the loop has posted. The count settled, or -1 on error (*text set). */
static int
settle_results(Context *self, char **text, size_t *len)
{
    Channel *ch = self->channel;
    int count = 0;
    for (;;) {
        pthread_mutex_lock(&ch->mu);
        Result *r = ch->results;
        if (r != NULL) {
            ch->results = r->next;
            if (ch->results == NULL)
                ch->results_tail = NULL;
            ch->unread--;
        }
        pthread_mutex_unlock(&ch->mu);
        if (r == NULL)
            return count;
        JSContext *jc = self->jc;
        JSValue argv[4] = {
            JS_NewInt64(jc, r->id),
            JS_NewBool(jc, r->ok),
            JS_NewStringLen(jc, r->payload, r->len),
            JS_NewBool(jc, r->is_text),
        };
        free(r->payload);
        free(r);
        self->outstanding--;
        count++;
        if (JS_IsException(argv[2])) {
            *text = exception_text(jc, len);
            return -1;
        }
        JSValue v = call_entry(self, F_SETTLE, 4, argv, text, len);
        if (JS_IsException(v))
            return -1;
        JS_FreeValue(jc, v);
    }
}

static int
has_calls(Channel *ch)
{
    pthread_mutex_lock(&ch->mu);
    int any = ch->calls != NULL;
    pthread_mutex_unlock(&ch->mu);
    return any;
}

/* Sleep until seq moves past `seen` or `until` (time.monotonic seconds). */
static void
park_wait(Channel *ch, uint32_t seen, double until)
{
    double left = until - monotonic();
    if (left <= 0)
        return;
    if (left > 3600)
        left = 3600;
    struct timespec rel;
    rel.tv_sec = (time_t)left;
    rel.tv_nsec = (long)((left - (double)rel.tv_sec) * 1e9);
    atomic_store(&ch->parked, 1);
    if (atomic_load(&ch->seq) == seen)
        syscall(SYS_futex, &ch->seq, FUTEX_WAIT_PRIVATE, seen, &rel, NULL, 0);
    atomic_store(&ch->parked, 0);
}

/* Run the program until the host must act: run its jobs, settle posted results, wait. */
static int
run_loop(Context *self, double deadline, double timer_at, int wait, char **text, size_t *len)
{
    Channel *ch = self->channel;
    for (;;) {
        for (;;) {
            JSContext *job_ctx;
            int r = JS_ExecutePendingJob(self->rt, &job_ctx);
            if (r == 0)
                break;
            if (r < 0) {
                *text = exception_text(job_ctx, len);
                return EV_ERROR;
            }
        }
        int d = drain(self, 0, text, len);
        if (d != 0)
            return d > 0 ? EV_DRAIN : EV_ERROR;
        uint32_t seen = atomic_load(&ch->seq); /* before taking: a later post moves it */
        int settled = settle_results(self, text, len);
        if (settled < 0)
            return EV_ERROR;
        if (settled > 0)
            continue;
        if (!ch->immediate && !ch->hands_over && has_calls(ch))
            wake_loop(ch);
        if (atomic_load(&ch->interrupted))
            return EV_INTERRUPTED;
        if (self->outstanding == 0 && isinf(timer_at))
            return EV_IDLE;
        double now = monotonic();
        if (now >= deadline)
            return EV_DEADLINE;
        if (now >= timer_at)
            return EV_TIMER;
        if (!wait) { /* it would wait: printed text first, then say so */
            d = drain(self, 1, text, len);
            return d != 0 ? (d > 0 ? EV_DRAIN : EV_ERROR) : EV_WAIT;
        }
        /* About to sleep: printed text goes to the host first (progress reports count it). */
        d = drain(self, 1, text, len);
        if (d != 0)
            return d > 0 ? EV_DRAIN : EV_ERROR;
        park_wait(ch, seen, deadline < timer_at ? deadline : timer_at);
    }
}

static PyObject *
Context_run(Context *self, PyObject *args)
{
    double deadline, timer_at;
    int wait = 1;
    if (!PyArg_ParseTuple(args, "dd|p", &deadline, &timer_at, &wait))
        return NULL;
    if (!enter(self))
        return NULL;
    if (!need_loaded(self)) {
        leave(self);
        return NULL;
    }
    if (self->channel == NULL) {
        leave(self);
        PyErr_SetString(PyExc_RuntimeError, "run: no program was started");
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    int event;
    Py_BEGIN_ALLOW_THREADS
    event = run_loop(self, deadline, timer_at, wait, &text, &len);
    Py_END_ALLOW_THREADS
    leave(self); /* (what follows touches no engine) */
    static const char *names[] = {"error", "drain", "idle", "timer", "deadline", "interrupted", "wait"};
    if (event == EV_ERROR)
        return raise_text(text, len);
    if (event == EV_DRAIN) {
        PyObject *t = py_text(text, len);
        free(text);
        if (t == NULL)
            return NULL;
        return Py_BuildValue("(sN)", names[event], t);
    }
    return Py_BuildValue("(sO)", names[event], Py_None);
}

static PyObject *
Context_fire(Context *self, PyObject *args)
{
    long long timer;
    if (!PyArg_ParseTuple(args, "L", &timer))
        return NULL;
    if (!enter(self))
        return NULL;
    if (!need_loaded(self)) {
        leave(self);
        return NULL;
    }
    char *error = NULL;
    size_t error_len = 0;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    JSValue argv[1] = {JS_NewInt64(self->jc, timer)};
    JSValue v = call_entry(self, F_FIRE, 1, argv, &error, &error_len);
    failed = JS_IsException(v);
    JS_FreeValue(self->jc, v);
    Py_END_ALLOW_THREADS
    leave(self);
    if (failed)
        return raise_text(error, error_len);
    Py_RETURN_NONE;
}

/* Call an entry point that takes nothing and returns text (or null: None). */
static PyObject *
text_entry(Context *self, int which)
{
    if (!enter(self))
        return NULL;
    if (!need_loaded(self)) {
        leave(self);
        return NULL;
    }
    char *error = NULL;
    size_t error_len = 0;
    JSValue v;
    Py_BEGIN_ALLOW_THREADS
    v = call_entry(self, which, 0, NULL, &error, &error_len);
    Py_END_ALLOW_THREADS
    PyObject *out = JS_IsException(v) ? raise_text(error, error_len) : to_python(self, v);
    leave(self);
    return out;
}

static PyObject *
Context_take_output(Context *self, PyObject *unused)
{
    return text_entry(self, F_TAKE_OUTPUT);
}

static PyObject *
Context_take_chunk(Context *self, PyObject *unused)
{
    return text_entry(self, F_TAKE_CHUNK);
}

static PyObject *
Context_report(Context *self, PyObject *unused)
{
    return text_entry(self, F_REPORT);
}

static PyObject *
Context_set_slice(Context *self, PyObject *args)
{
    double seconds;
    Py_ssize_t stack_bytes = 0;
    if (!PyArg_ParseTuple(args, "d|n", &seconds, &stack_bytes))
        return NULL;
    if (stack_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "set_slice: stack_bytes must be >= 0");
        return NULL;
    }
    if (!enter(self))
        return NULL;
    self->slice_end = NULL;
    if (seconds <= 0) {
        self->slice_until = 0;
        self->slice_stack = 0;
        JS_SetMaxStackSize(self->rt, fit_stack(self));
        leave(self);
        Py_RETURN_TRUE;
    }
    /* This thread (the event loop's) may have less stack than a worker's: JS gets what is left
     * here (above a margin), and a program that needs more starts over on a worker. */
    size_t room = stack_room();
    if (room < 2 * SLICE_STACK_MARGIN) {
        leave(self);
        Py_RETURN_FALSE;
    }
    size_t limit = (size_t)stack_bytes;
    if (limit == 0 || limit > room - SLICE_STACK_MARGIN)
        limit = room - SLICE_STACK_MARGIN;
    self->slice_stack = limit;
    self->slice_until = monotonic() + seconds;
    JS_SetMaxStackSize(self->rt, fit_stack(self));
    leave(self);
    Py_RETURN_TRUE;
}

static PyObject *
Context_get_slice_end(Context *self, void *closure)
{
    if (self->slice_end == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(self->slice_end);
}

static PyObject *
Context_disarm(Context *self, PyObject *unused)
{
    atomic_store(&self->armed, 0); /* (any thread: it only tells the interrupt check) */
    Py_RETURN_NONE;
}

static PyObject *
Context_get_outstanding(Context *self, void *closure)
{
    return PyLong_FromLongLong(self->outstanding);
}

static PyMethodDef Context_methods[] = {
    {"hand_back", (PyCFunction)Context_hand_back, METH_NOARGS,
     "Hand the engine to the keeper thread to free (here, when none runs); the object is then unusable."},
    {"free", (PyCFunction)Context_free, METH_NOARGS,
     "Free the engine now, on this thread (a context that held much memory); the object is then unusable."},
    {"eval", (PyCFunction)Context_eval, METH_VARARGS,
     "eval(source, filename='<eval>'): a script's value as str, int, float, bool or None (else its JSON)."},
    {"set_limits", (PyCFunction)Context_set_limits, METH_VARARGS, "set_limits(memory_bytes, stack_bytes)."},
    {"set_host", (PyCFunction)Context_set_host, METH_O,
     "set_host(callable or None): hostCall's Python side, host(kind, id, name, payload_json, size) -> str."},
    {"start", (PyCFunction)Context_start, METH_VARARGS,
     "start(channel, source, data_limit, calls_limit, effectful_json, namespaces_json, inline_json): compile the "
     "wrapped "
     "program and start it (its first stretch runs here)."},
    {"run", (PyCFunction)Context_run, METH_VARARGS,
     "run(deadline, timer_at) -> (event, text): run until the host must act (times on time.monotonic)."},
    {"fire", (PyCFunction)Context_fire, METH_VARARGS, "fire(timer_id): run a due timer's callback."},
    {"take_output", (PyCFunction)Context_take_output, METH_NOARGS, "The printed text since the last take."},
    {"take_chunk", (PyCFunction)Context_take_chunk, METH_NOARGS,
     "One piece of printed text (JSON), or None (after running out of memory)."},
    {"report", (PyCFunction)Context_report, METH_NOARGS, "The prelude's end-of-program report (JSON text)."},
    {"disarm", (PyCFunction)Context_disarm, METH_NOARGS, "Ignore interrupts from now on (collecting output)."},
    {"set_slice", (PyCFunction)Context_set_slice, METH_VARARGS,
     "set_slice(seconds, stack_bytes=0) -> bool: run only that long from now, on at most that much of this "
     "thread's stack, refusing calls into Python (0 ends the slice); False when this thread's stack is too "
     "small for one."},
    {NULL}};

static PyGetSetDef Context_getset[] = {
    {"outstanding", (getter)Context_get_outstanding, NULL, "Calls posted to the loop and not yet settled.", NULL},
    {"slice_end", (getter)Context_get_slice_end, NULL,
     "What ended the slice early: None, 'refused' (a call into Python) or 'expired'.", NULL},
    {NULL}};

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemode.engine._qjs.Context",
    .tp_basicsize = sizeof(Context),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Context(prelude=True): a fresh QuickJS runtime and context (with the prelude set_prelude() "
              "gave), used by one thread at a time.",
    .tp_new = Context_new,
    .tp_dealloc = (destructor)Context_dealloc,
    .tp_traverse = (traverseproc)Context_traverse,
    .tp_clear = (inquiry)Context_clear,
    .tp_methods = Context_methods,
    .tp_getset = Context_getset,
};

/* ---- module ------------------------------------------------------------------------------- */

static PyObject *
qjs_compile(PyObject *module, PyObject *args)
{
    const char *source, *filename;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "s#s", &source, &n, &filename))
        return NULL;
    uint8_t *buf = NULL;
    size_t size = 0;
    char *error = NULL;
    size_t error_len = 0;
    int made = 0, failed = 0;
    Py_BEGIN_ALLOW_THREADS
    JSRuntime *rt = JS_NewRuntime();
    JSContext *jc = rt != NULL ? JS_NewContext(rt) : NULL;
    if (jc != NULL) {
        made = 1;
        JSValue fn = JS_Eval(jc, source, (size_t)n, filename, JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_COMPILE_ONLY);
        if (JS_IsException(fn)) {
            failed = 1;
            error = exception_text(jc, &error_len);
        } else {
            uint8_t *out = JS_WriteObject(jc, &size, fn, JS_WRITE_OBJ_BYTECODE | JS_WRITE_OBJ_STRIP_SOURCE);
            if (out != NULL) {
                buf = malloc(size);
                if (buf != NULL)
                    memcpy(buf, out, size);
                js_free(jc, out);
            }
            JS_FreeValue(jc, fn);
        }
        JS_FreeContext(jc);
    }
    if (rt != NULL)
        JS_FreeRuntime(rt);
    Py_END_ALLOW_THREADS
    if (failed)
        return raise_text(error, error_len);
    if (!made || buf == NULL)
        return PyErr_NoMemory();
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)size);
    free(buf);
    return bytes;
}

static PyObject *
qjs_set_prelude(PyObject *module, PyObject *args)
{
    Py_buffer code;
    int spare;
    int idle = 0;
    if (!PyArg_ParseTuple(args, "y*i|p", &code, &spare, &idle))
        return NULL;
    pthread_mutex_lock(&keeper.mu);
    int same = keeper.prelude != NULL && keeper.prelude_len == (size_t)code.len &&
               memcmp(keeper.prelude, code.buf, (size_t)code.len) == 0;
    int other = keeper.prelude != NULL && !same;
    if (keeper.prelude == NULL) {
        keeper.prelude = malloc((size_t)code.len);
        if (keeper.prelude != NULL) {
            memcpy(keeper.prelude, code.buf, (size_t)code.len);
            keeper.prelude_len = (size_t)code.len;
        }
    }
    keeper.spare = spare > 0 ? spare : 0;
    keeper.idle = idle;
    int stored = keeper.prelude != NULL;
    pthread_mutex_unlock(&keeper.mu);
    PyBuffer_Release(&code);
    if (other) {
        PyErr_SetString(PyExc_ValueError, "set_prelude: another prelude is set already (one per process)");
        return NULL;
    }
    if (!stored)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *
qjs_keeper_stats(PyObject *module, PyObject *unused)
{
    pthread_mutex_lock(&keeper.mu);
    long long a = keeper.taken_ready, b = keeper.made_by_caller, c = keeper.freed_ahead, d = keeper.freed_by_caller;
    int ready = keeper.n_ready;
    pthread_mutex_unlock(&keeper.mu);
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:i}", "taken_ready", a, "made_by_caller", b, "freed_ahead", c,
                         "freed_by_caller", d, "ready", ready);
}

static PyObject *
qjs_prime_stack(PyObject *module, PyObject *unused)
{
    return PyLong_FromSize_t(stack_room());
}

/* spin_readable(fd, seconds): 1 when fd became readable (or hung up) within `seconds`, looked at
 * without the GIL and without sleeping, the CPU yielded between looks; 0 when it did not; -1 when
 * a yield let another task run (this CPU is wanted: the caller should sleep instead). Why and
 * when: codemode/engine/_wire.py, Spin. */
static PyObject *
qjs_spin_readable(PyObject *module, PyObject *args)
{
    int fd;
    double seconds;
    if (!PyArg_ParseTuple(args, "id", &fd, &seconds))
        return NULL;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "spin_readable: a negative file descriptor");
        return NULL;
    }
    if (!(seconds >= 0 && seconds <= 60)) { /* (NaN too: it would never end) */
        PyErr_SetString(PyExc_ValueError, "spin_readable: seconds must be from 0 to 60");
        return NULL;
    }
    int ready = 0;
    Py_BEGIN_ALLOW_THREADS
    double until = monotonic() + seconds;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        if (poll(&p, 1, 0) != 0) {
            ready = 1;
            break;
        }
        double now = monotonic();
        if (now >= until)
            break;
        sched_yield();
        if (monotonic() - now > 10e-6) { /* another task ran meanwhile: this CPU is wanted */
            ready = -1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(ready);
}

static PyMethodDef module_methods[] = {
    {"spin_readable", qjs_spin_readable, METH_VARARGS,
     "spin_readable(fd, seconds) -> int: 1 when fd became readable within seconds, looked at without "
     "sleeping (the CPU yielded between looks) nor the GIL; 0 when not; -1 when a yield let another task run."},
    {"compile", qjs_compile, METH_VARARGS, "compile(source, filename) -> bytes: a script's bytecode."},
    {"set_prelude", qjs_set_prelude, METH_VARARGS,
     "set_prelude(bytecode, spare): the prelude every Context() gets (once per process), and how many "
     "fresh contexts a background thread keeps ready."},
    {"take_ready", qjs_take_ready, METH_NOARGS,
     "A fresh context the keeper made ahead, or None (never made nor waited for here)."},
    {"prime_stack", qjs_prime_stack, METH_NOARGS,
     "Look up this thread's stack bounds now (bytes left below the caller; 0: unknown): a process "
     "about to lose /proc (an engine worker's zygote) keeps them for its main thread."},
    {"keeper_stats", qjs_keeper_stats, METH_NOARGS,
     "How contexts were had and freed so far: ahead by the keeper thread, or by the caller."},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "codemode.engine._qjs",
    "codemode's bridge to QuickJS-ng (see codemode/engine/_qjs.c).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__qjs(void)
{
    pthread_atfork(NULL, NULL, keeper_after_fork);
    if (PyType_Ready(&ChannelType) < 0 || PyType_Ready(&ContextType) < 0)
        return NULL;
    KIND_CALL = PyUnicode_InternFromString("call");
    KIND_SYNC = PyUnicode_InternFromString("sync");
    if (KIND_CALL == NULL || KIND_SYNC == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    JSError = PyErr_NewExceptionWithDoc("codemode.engine._qjs.JSError",
                                        "A JavaScript exception: its text, then its stack.", NULL, NULL);
    if (JSError == NULL || PyModule_AddObjectRef(m, "JSError", JSError) < 0 ||
        PyModule_AddObjectRef(m, "Channel", (PyObject *)&ChannelType) < 0 ||
        PyModule_AddObjectRef(m, "Context", (PyObject *)&ContextType) < 0 ||
        PyModule_AddStringConstant(m, "ENGINE_VERSION", JS_GetVersion()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
