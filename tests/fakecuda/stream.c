/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA driver: streams run their work in order on one worker thread each; events,
 * legacy default stream barriers, stream capture into replayable graphs. */
#include "tests/fakecuda/internal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct CUstream_st {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the worker waits here for work */
    pthread_cond_t done_cv; /* waiters for progress wait here */
    FakecudaOp *head, *tail;
    uint64_t enqueued, done; /* sequence numbers of the last queued and last executed op */
    CUresult error;          /* first asynchronous error, sticky */
    bool destroyed;          /* handle released; the worker exits once drained */
    atomic_int refs;
    FakecudaStreamKind kind;
    unsigned flags;
    int priority;
    int device;
    unsigned long long id; /* cuStreamGetId: never reused in the process */
    /* capture state, guarded by mu */
    CUstreamCaptureStatus capture;
    CUstreamCaptureMode capture_mode;
    pthread_t capture_thread;
    unsigned long long capture_id;
    CUgraph graph;
    struct CUstream_st *next; /* all_streams list, guarded by streams_mu */
};

struct CUgraph_st {
    FakecudaOp *head, *tail;
    size_t count;
    struct CUgraph_st *next;
};

struct CUgraphExec_st {
    FakecudaOp *head;
    struct CUgraphExec_st *next;
};

struct CUevent_st {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    unsigned flags;
    uint64_t gen;      /* records issued */
    uint64_t done_gen; /* newest record executed */
    CUstream rec_stream; /* stream of the newest record (referenced), for waits */
    uint64_t rec_seq;
    CUstream cap_stream; /* the capture the newest record joined (referenced), or NULL */
    unsigned long long cap_id;
    struct timespec stamp;
    struct CUevent_st *next;
};

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static CUstream all_streams;                 /* every stream whose worker still runs */
static CUstream legacy[FAKECUDA_MAX_DEVICES]; /* created on first use, never destroyed */
static _Thread_local CUstream per_thread[FAKECUDA_MAX_DEVICES];
static pthread_key_t per_thread_key;
static pthread_once_t per_thread_once = PTHREAD_ONCE_INIT;
static atomic_ullong capture_ids;

static pthread_mutex_t objects_mu = PTHREAD_MUTEX_INITIALIZER;
static CUevent all_events;
static CUgraph all_graphs;
static CUgraphExec all_execs;

static _Atomic CUresult sticky_error;

/* ---- ops ---- */

FakecudaOp *fakecuda_op_new(FakecudaOpType type)
{
    FakecudaOp *const op = calloc(1, sizeof(*op));
    if (op)
        op->type = type;
    return op;
}

static void event_unref(CUevent ev);
static void graph_free(CUgraph g);
static CUgraph graph_clone(CUgraph g);

void fakecuda_op_free(FakecudaOp *op)
{
    if (!op)
        return;
    switch (op->type) {
    case FAKECUDA_OP_COPY:
        free(op->u.copy.staging);
        break;
    case FAKECUDA_OP_KERNEL:
        free(op->u.kernel.blob);
        free(op->u.kernel.params);
        break;
    case FAKECUDA_OP_EVENT:
        event_unref(op->u.event.event);
        break;
    case FAKECUDA_OP_WAIT:
        if (op->u.wait.target)
            fakecuda_stream_unref(op->u.wait.target);
        break;
    case FAKECUDA_OP_CHILD:
        if (op->u.child.graph)
            graph_free(op->u.child.graph);
        break;
    case FAKECUDA_OP_MEM_OP:
        free(op->u.mem_op.ops);
        break;
    default:
        break;
    }
    free(op);
}

/* A copy of count stream memory operations, or NULL when out of memory. */
CUstreamBatchMemOpParams *fakecuda_mem_ops_dup(const CUstreamBatchMemOpParams *ops, unsigned count)
{
    CUstreamBatchMemOpParams *const c = malloc((count ? count : 1) * sizeof(*c));
    if (c && count)
        memcpy(c, ops, count * sizeof(*c));
    return c;
}

/* Graph nodes are copied on instantiate and on every launch; only copies without staging, memsets,
 * kernels, host functions and stream memory operations are ever captured. */
static FakecudaOp *op_clone(const FakecudaOp *op)
{
    FakecudaOp *const c = fakecuda_op_new(op->type);
    if (!c)
        return NULL;
    c->u = op->u;
    if (op->type == FAKECUDA_OP_KERNEL) {
        const FakecudaKernel *const k = op->u.kernel.kernel;
        size_t total = 0;
        for (unsigned i = 0; i < k->param_count; i++)
            total += (k->param_sizes[i] + 7) & ~(size_t)7;
        c->u.kernel.blob = malloc(total ? total : 1);
        c->u.kernel.params = calloc(k->param_count ? k->param_count : 1, sizeof(void *));
        if (!c->u.kernel.blob || !c->u.kernel.params) {
            fakecuda_op_free(c);
            return NULL;
        }
        memcpy(c->u.kernel.blob, op->u.kernel.blob, total);
        size_t off = 0;
        for (unsigned i = 0; i < k->param_count; i++) {
            c->u.kernel.params[i] = (char *)c->u.kernel.blob + off;
            off += (k->param_sizes[i] + 7) & ~(size_t)7;
        }
    }
    if (op->type == FAKECUDA_OP_MEM_OP &&
        !(c->u.mem_op.ops = fakecuda_mem_ops_dup(op->u.mem_op.ops, op->u.mem_op.count))) {
        fakecuda_op_free(c);
        return NULL;
    }
    if (op->type == FAKECUDA_OP_CHILD && !(c->u.child.graph = graph_clone(op->u.child.graph))) {
        fakecuda_op_free(c);
        return NULL;
    }
    assert(op->type != FAKECUDA_OP_COPY || !op->u.copy.staging);
    return c;
}

static void op_list_free(FakecudaOp *head)
{
    while (head) {
        FakecudaOp *const next = head->next;
        fakecuda_op_free(head);
        head = next;
    }
}

/* ---- execution ---- */

static double now_ms(const struct timespec *t)
{
    return (double)t->tv_sec * 1e3 + (double)t->tv_nsec / 1e6;
}

/* A copy from the device into pinned host memory lands as the GPU's DMA does, without a fault:
 * written through /proc/self/mem, which ignores the pages' protection (a tracker that protects
 * them sees nothing, as on real hardware).  Falls back to a plain write where the kernel refuses. */
static int proc_mem_fd = -1;
static pthread_once_t proc_mem_once = PTHREAD_ONCE_INIT;

static void proc_mem_open(void)
{
    proc_mem_fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
}

void fakecuda_dma_write(void *dst, const void *src, size_t n)
{
    pthread_once(&proc_mem_once, proc_mem_open);
    size_t done = 0;
    while (proc_mem_fd >= 0 && done < n) {
        const ssize_t w =
            pwrite(proc_mem_fd, (const char *)src + done, n - done, (off_t)((uintptr_t)dst + done));
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            break;
        }
        done += (size_t)w;
    }
    if (done < n)
        memmove((char *)dst + done, (const char *)src + done, n - done);
}

/* A memset of pinned host memory lands the same way. */
static void dma_fill(void *dst, unsigned char value, size_t n)
{
    unsigned char chunk[4096];
    memset(chunk, value, sizeof(chunk));
    for (size_t done = 0; done < n; done += sizeof(chunk))
        fakecuda_dma_write((char *)dst + done, chunk, n - done < sizeof(chunk) ? n - done : sizeof(chunk));
}

static CUresult exec_copy(const FakecudaOp *op)
{
    const size_t n = op->u.copy.n;
    const uint64_t delay = atomic_load(&fakecuda_g.copy_delay_us) +
                           (uint64_t)fakecuda_g.copy_us_per_mib * n / ((uint64_t)1 << 20);
    if (op->u.copy.delay && delay)
        usleep((useconds_t)delay);
    void *const dst = fakecuda_mem_access(op->u.copy.dst, n, true);
    const void *const src = op->u.copy.staging ? op->u.copy.staging
                                               : fakecuda_mem_access(op->u.copy.src, n, true);
    if (!dst || !src)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    const bool dst_dev = fakecuda_mem_in_device_range(op->u.copy.dst);
    const bool src_dev = !op->u.copy.staging && fakecuda_mem_in_device_range(op->u.copy.src);
    FakecudaPtrInfo dst_info;
    fakecuda_mem_lookup(op->u.copy.dst, &dst_info);
    if (src_dev && (dst_info.kind == FAKECUDA_MEM_HOST_ALLOC || dst_info.kind == FAKECUDA_MEM_REGISTERED))
        fakecuda_dma_write(dst, src, n);
    else
        memmove(dst, src, n);
    FakecudaCounters *const c = &fakecuda_counters;
    if (dst_dev && src_dev) {
        atomic_fetch_add_explicit(&c->d2d_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->d2d_calls, 1, memory_order_relaxed);
    } else if (dst_dev) {
        atomic_fetch_add_explicit(&c->h2d_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->h2d_calls, 1, memory_order_relaxed);
    } else if (src_dev) {
        atomic_fetch_add_explicit(&c->d2h_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->d2h_calls, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&c->h2h_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->h2h_calls, 1, memory_order_relaxed);
    }
    return CUDA_SUCCESS;
}

static CUresult exec_op(const FakecudaOp *op)
{
    switch (op->type) {
    case FAKECUDA_OP_COPY:
        return exec_copy(op);
    case FAKECUDA_OP_MEMSET: {
        void *const dst = fakecuda_mem_access(op->u.memset.dst, op->u.memset.n, false);
        if (!dst)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (fakecuda_mem_in_device_range(op->u.memset.dst))
            memset(dst, op->u.memset.value, op->u.memset.n);
        else
            dma_fill(dst, op->u.memset.value, op->u.memset.n);
        atomic_fetch_add_explicit(&fakecuda_counters.memset_bytes, op->u.memset.n, memory_order_relaxed);
        atomic_fetch_add_explicit(&fakecuda_counters.memset_calls, 1, memory_order_relaxed);
        return CUDA_SUCCESS;
    }
    case FAKECUDA_OP_KERNEL:
        atomic_fetch_add_explicit(&fakecuda_counters.kernel_launches, 1, memory_order_relaxed);
        if (fakecuda_g.kernel_delay_us)
            usleep(fakecuda_g.kernel_delay_us);
        return fakecuda_kernel_run(op);
    case FAKECUDA_OP_EVENT: {
        const CUevent ev = op->u.event.event;
        pthread_mutex_lock(&ev->mu);
        if (op->u.event.gen > ev->done_gen) {
            ev->done_gen = op->u.event.gen;
            clock_gettime(CLOCK_MONOTONIC, &ev->stamp);
        }
        pthread_cond_broadcast(&ev->cv);
        pthread_mutex_unlock(&ev->mu);
        return CUDA_SUCCESS;
    }
    case FAKECUDA_OP_WAIT: {
        const CUstream t = op->u.wait.target;
        pthread_mutex_lock(&t->mu);
        while (t->done < op->u.wait.seq)
            pthread_cond_wait(&t->done_cv, &t->mu);
        pthread_mutex_unlock(&t->mu);
        return CUDA_SUCCESS;
    }
    case FAKECUDA_OP_HOST_FN:
        op->u.host_fn.fn(op->u.host_fn.arg);
        return CUDA_SUCCESS;
    case FAKECUDA_OP_MEM_OP:
        for (unsigned i = 0; i < op->u.mem_op.count; i++) {
            /* The device writes pinned host memory without a fault, as a DMA does. */
            const CUstreamBatchMemOpParams *const w = &op->u.mem_op.ops[i];
            const size_t n = w->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4;
            const uint64_t value = n == 8 ? w->writeValue.value64 : w->writeValue.value;
            const uintptr_t at = (uintptr_t)w->writeValue.address;
            void *const dst = fakecuda_mem_access(at, n, false);
            if (!dst)
                return CUDA_ERROR_ILLEGAL_ADDRESS;
            unsigned char bytes[8];
            for (size_t b = 0; b < n; b++)
                bytes[b] = (unsigned char)(value >> (8 * b));
            if (fakecuda_mem_in_device_range(at))
                memcpy(dst, bytes, n);
            else
                fakecuda_dma_write(dst, bytes, n);
        }
        return CUDA_SUCCESS;
    case FAKECUDA_OP_NOP:
        return CUDA_SUCCESS;
    case FAKECUDA_OP_CHILD: /* flattened at instantiation */
        break;
    }
    return CUDA_ERROR_UNKNOWN;
}

static void stream_free(CUstream s)
{
    assert(!s->head);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
}

void fakecuda_stream_unref(CUstream s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        stream_free(s);
}

static void *worker_main(void *arg)
{
    const CUstream s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->work_cv, &s->mu);
        FakecudaOp *const op = s->head;
        if (!op)
            break;
        pthread_mutex_unlock(&s->mu);
        const CUresult r = exec_op(op);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        if (r != CUDA_SUCCESS) {
            FAKECUDA_TRACE("stream %p: asynchronous error %d", (void *)s, (int)r);
            if (s->error == CUDA_SUCCESS)
                s->error = r;
            CUresult expected = CUDA_SUCCESS;
            atomic_compare_exchange_strong(&sticky_error, &expected, r);
        }
        s->done = op->seq;
        pthread_cond_broadcast(&s->done_cv);
        pthread_mutex_unlock(&s->mu);
        fakecuda_op_free(op);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);

    pthread_mutex_lock(&streams_mu);
    for (CUstream *p = &all_streams; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&streams_mu);
    fakecuda_stream_unref(s);
    return NULL;
}

/* Returns a stream with one reference for the caller and one for its worker. */
static CUresult stream_new(int device, FakecudaStreamKind kind, unsigned flags, int priority, CUstream *out)
{
    CUstream s = calloc(1, sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    atomic_init(&s->refs, 2);
    s->kind = kind;
    s->flags = flags;
    s->priority = priority;
    s->device = device;
    static atomic_ullong next_id;
    s->id = atomic_fetch_add(&next_id, 1) + 1;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    pthread_mutex_lock(&streams_mu);
    const int err = pthread_create(&thread, &attr, worker_main, s);
    if (err == 0) {
        s->next = all_streams;
        all_streams = s;
    }
    pthread_mutex_unlock(&streams_mu);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        stream_free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* Releases the handle: queued work still runs, then the worker exits. */
static void stream_release_handle(CUstream s)
{
    pthread_mutex_lock(&s->mu);
    s->destroyed = true;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    fakecuda_stream_unref(s);
}

static void per_thread_release(void *unused)
{
    (void)unused;
    for (int i = 0; i < FAKECUDA_MAX_DEVICES; i++) {
        if (per_thread[i]) {
            stream_release_handle(per_thread[i]);
            per_thread[i] = NULL;
        }
    }
}

static void per_thread_key_create(void)
{
    pthread_key_create(&per_thread_key, per_thread_release);
}

CUresult fakecuda_stream_get(CUstream handle, bool per_thread_default, CUstream *out)
{
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        handle = per_thread_default ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    CUstream s = NULL;
    if (handle == CU_STREAM_LEGACY) {
        pthread_mutex_lock(&streams_mu);
        s = legacy[dev];
        pthread_mutex_unlock(&streams_mu);
        if (!s) {
            CUstream fresh = NULL;
            const CUresult rc = stream_new(dev, FAKECUDA_STREAM_LEGACY, 0, 0, &fresh);
            if (rc != CUDA_SUCCESS)
                return rc;
            pthread_mutex_lock(&streams_mu);
            if (!legacy[dev]) {
                legacy[dev] = fresh;
                fresh = NULL;
            }
            s = legacy[dev];
            pthread_mutex_unlock(&streams_mu);
            if (fresh)
                stream_release_handle(fresh);
        }
        atomic_fetch_add(&s->refs, 1);
    } else if (handle == CU_STREAM_PER_THREAD) {
        if (!per_thread[dev]) {
            pthread_once(&per_thread_once, per_thread_key_create);
            const CUresult rc = stream_new(dev, FAKECUDA_STREAM_PER_THREAD, 0, 0, &per_thread[dev]);
            if (rc != CUDA_SUCCESS)
                return rc;
            pthread_setspecific(per_thread_key, &per_thread);
        }
        s = per_thread[dev];
        atomic_fetch_add(&s->refs, 1);
    } else {
        pthread_mutex_lock(&streams_mu);
        for (CUstream t = all_streams; t; t = t->next) {
            if (t == handle && t->kind == FAKECUDA_STREAM_USER && !t->destroyed) {
                s = t;
                atomic_fetch_add(&s->refs, 1);
                break;
            }
        }
        pthread_mutex_unlock(&streams_mu);
        if (!s)
            return CUDA_ERROR_INVALID_HANDLE;
    }
    *out = s;
    return CUDA_SUCCESS;
}

bool fakecuda_stream_capturing(CUstream s)
{
    pthread_mutex_lock(&s->mu);
    const bool capturing = s->capture != CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_mutex_unlock(&s->mu);
    return capturing;
}

void fakecuda_stream_invalidate_capture(CUstream s)
{
    pthread_mutex_lock(&s->mu);
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    pthread_mutex_unlock(&s->mu);
}

/* The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static _Thread_local CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

FAKECUDA_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    const CUstreamCaptureMode old = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* Whether capture t prohibits unsafe calls of this thread: in global mode (the default) the
 * thread's own captures not begun relaxed and other threads' global ones; in thread-local mode
 * its own only; in relaxed mode none. */
static bool capture_prohibits(CUstream t, pthread_t self)
{
    const bool own = pthread_equal(t->capture_thread, self);
    switch (thread_capture_mode) {
    case CU_STREAM_CAPTURE_MODE_RELAXED:
        return false;
    case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
        return own && t->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    default:
        return own ? t->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED
                   : t->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    }
}

/* Invalidates every active capture refuses(t, arg) names; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * when there was one. */
static CUresult invalidate_captures(bool (*refuses)(CUstream t, const void *arg), const void *arg)
{
    bool hit = false;
    pthread_mutex_lock(&streams_mu);
    for (CUstream t = all_streams; t; t = t->next) {
        pthread_mutex_lock(&t->mu);
        if (t->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE && refuses(t, arg)) {
            t->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            hit = true;
        }
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&streams_mu);
    return hit ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

static bool prohibits_caller(CUstream t, const void *self)
{
    return capture_prohibits(t, *(const pthread_t *)self);
}

CUresult fakecuda_capture_check_unsafe(void)
{
    const pthread_t self = pthread_self();
    return invalidate_captures(prohibits_caller, &self);
}

static bool on_device(CUstream t, const void *device)
{
    return t->device == *(const int *)device;
}

CUresult fakecuda_capture_check_device(int device)
{
    return invalidate_captures(on_device, &device);
}

/* A wait op on target up to its current tail, or NULL when nothing is pending there. */
static FakecudaOp *wait_for_tail(CUstream target)
{
    pthread_mutex_lock(&target->mu);
    const uint64_t tail = target->enqueued, done = target->done;
    pthread_mutex_unlock(&target->mu);
    if (tail <= done)
        return NULL;
    FakecudaOp *const w = fakecuda_op_new(FAKECUDA_OP_WAIT);
    if (!w)
        return NULL;
    atomic_fetch_add(&target->refs, 1);
    w->u.wait.target = target;
    w->u.wait.seq = tail;
    return w;
}

/* Legacy default stream semantics: an op on the legacy stream waits for all earlier work of the
 * device's blocking streams, and an op on a blocking stream waits for earlier legacy work.  Returns
 * the wait ops to queue ahead of the op in *waits. */
static CUresult legacy_dependencies(CUstream s, FakecudaOp **waits)
{
    *waits = NULL;
    if (s->kind == FAKECUDA_STREAM_LEGACY) {
        bool implicit = false;
        pthread_mutex_lock(&streams_mu);
        for (CUstream t = all_streams; t; t = t->next) {
            if (t == s || t->device != s->device || (t->flags & CU_STREAM_NON_BLOCKING))
                continue;
            pthread_mutex_lock(&t->mu);
            if (t->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
                t->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
                implicit = true;
            }
            pthread_mutex_unlock(&t->mu);
            FakecudaOp *const w = wait_for_tail(t);
            if (w) {
                w->next = *waits;
                *waits = w;
            }
        }
        pthread_mutex_unlock(&streams_mu);
        if (implicit) {
            op_list_free(*waits);
            *waits = NULL;
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        pthread_mutex_lock(&streams_mu);
        const CUstream l = legacy[s->device];
        if (l)
            atomic_fetch_add(&l->refs, 1);
        pthread_mutex_unlock(&streams_mu);
        if (l) {
            *waits = wait_for_tail(l);
            fakecuda_stream_unref(l);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult submit(CUstream s, FakecudaOp *op, uint64_t *seq_out)
{
    op->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        CUresult r = CUDA_SUCCESS;
        const bool graphable = op->type == FAKECUDA_OP_KERNEL || op->type == FAKECUDA_OP_MEMSET ||
                               op->type == FAKECUDA_OP_HOST_FN || op->type == FAKECUDA_OP_MEM_OP ||
                               (op->type == FAKECUDA_OP_COPY && !op->u.copy.staging);
        /* A copy staged before capture began races with BeginCapture; it is refused like any
         * operation that cannot be a graph node. */
        if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (!graphable) {
            s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            const CUgraph g = s->graph;
            if (g->tail)
                g->tail->next = op;
            else
                g->head = op;
            g->tail = op;
            g->count++;
            op = NULL;
        }
        pthread_mutex_unlock(&s->mu);
        fakecuda_op_free(op);
        if (seq_out)
            *seq_out = 0;
        return r;
    }
    pthread_mutex_unlock(&s->mu);

    FakecudaOp *waits = NULL;
    const CUresult r = legacy_dependencies(s, &waits);
    if (r != CUDA_SUCCESS) {
        fakecuda_op_free(op);
        return r;
    }
    pthread_mutex_lock(&s->mu);
    while (waits) {
        FakecudaOp *const w = waits;
        waits = w->next;
        w->next = op;
        op = w;
    }
    for (FakecudaOp *o = op; o; o = o->next) {
        o->seq = ++s->enqueued;
        if (!o->next) {
            if (s->tail)
                s->tail->next = op;
            else
                s->head = op;
            s->tail = o;
            if (seq_out)
                *seq_out = o->seq;
            break;
        }
    }
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

CUresult fakecuda_stream_submit(CUstream s, FakecudaOp *op)
{
    return submit(s, op, NULL);
}

static CUresult wait_seq(CUstream s, uint64_t seq)
{
    pthread_mutex_lock(&s->mu);
    while (s->done < seq)
        pthread_cond_wait(&s->done_cv, &s->mu);
    const CUresult r = s->error;
    pthread_mutex_unlock(&s->mu);
    return r;
}

CUresult fakecuda_stream_submit_sync(CUstream s, FakecudaOp *op)
{
    if (fakecuda_stream_capturing(s)) {
        fakecuda_op_free(op);
        fakecuda_stream_invalidate_capture(s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    uint64_t seq = 0;
    const CUresult r = submit(s, op, &seq);
    if (r != CUDA_SUCCESS)
        return r;
    return wait_seq(s, seq);
}

CUresult fakecuda_device_sync(int device)
{
    CUstream snapshot[256];
    uint64_t tails[256];
    size_t n = 0;
    pthread_mutex_lock(&streams_mu);
    for (CUstream t = all_streams; t && n < 256; t = t->next) {
        if (device >= 0 && t->device != device)
            continue;
        atomic_fetch_add(&t->refs, 1);
        pthread_mutex_lock(&t->mu);
        tails[n] = t->enqueued;
        pthread_mutex_unlock(&t->mu);
        snapshot[n++] = t;
    }
    pthread_mutex_unlock(&streams_mu);
    for (size_t i = 0; i < n; i++) {
        (void)wait_seq(snapshot[i], tails[i]);
        fakecuda_stream_unref(snapshot[i]);
    }
    return atomic_load(&sticky_error);
}

/* ---- stream API ---- */

static CUresult stream_create(CUstream *out, unsigned flags, int priority)
{
    FAKECUDA_RETURN_IF_INJECTED("cuStreamCreate");
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = NULL;
    const CUresult rc = stream_new(dev, FAKECUDA_STREAM_USER, flags, priority, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    fakecuda_stream_unref(s); /* the handle is the all_streams entry until destroyed */
    *out = s;
    FAKECUDA_TRACE("cuStreamCreate(flags=%u) -> %p", flags, (void *)s);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    return stream_create(out, flags, 0);
}

FAKECUDA_EXPORT CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority)
{
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    return stream_create(out, flags, priority);
}

FAKECUDA_EXPORT CUresult cuStreamDestroy_v2(CUstream handle)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    CUstream s = NULL;
    pthread_mutex_lock(&streams_mu);
    for (CUstream t = all_streams; t; t = t->next) {
        if (t == handle && t->kind == FAKECUDA_STREAM_USER && !t->destroyed) {
            s = t;
            /* Marked under streams_mu so no lookup can find it any more. */
            pthread_mutex_lock(&s->mu);
            s->destroyed = true;
            pthread_cond_signal(&s->work_cv);
            pthread_mutex_unlock(&s->mu);
            break;
        }
    }
    pthread_mutex_unlock(&streams_mu);
    FAKECUDA_TRACE("cuStreamDestroy(%p) -> %s", (void *)handle, s ? "ok" : "invalid handle");
    return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_sync(CUstream handle, bool per_thread_default)
{
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (fakecuda_stream_capturing(s)) {
        fakecuda_stream_invalidate_capture(s);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if ((r = fakecuda_capture_check_unsafe()) != CUDA_SUCCESS) {
        /* waiting on a stream is unsafe while a capture prohibits it, as on the real runtime */
    } else if (s->kind == FAKECUDA_STREAM_LEGACY) {
        /* A marker on the legacy stream waits for every blocking stream, as the barrier does. */
        FakecudaOp *const op = fakecuda_op_new(FAKECUDA_OP_NOP);
        r = op ? fakecuda_stream_submit_sync(s, op) : CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        pthread_mutex_lock(&s->mu);
        const uint64_t tail = s->enqueued;
        pthread_mutex_unlock(&s->mu);
        r = wait_seq(s, tail);
    }
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamSynchronize(CUstream handle)
{
    return stream_sync(handle, false);
}

FAKECUDA_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream handle)
{
    return stream_sync(handle, true);
}

static bool stream_idle(CUstream s)
{
    pthread_mutex_lock(&s->mu);
    const bool idle = s->done == s->enqueued;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

static CUresult stream_query(CUstream handle, bool per_thread_default)
{
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (fakecuda_stream_capturing(s)) {
        fakecuda_stream_invalidate_capture(s);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if ((r = fakecuda_capture_check_unsafe()) != CUDA_SUCCESS) {
        /* so is asking after one */
    } else {
        bool idle = stream_idle(s);
        if (idle && s->kind == FAKECUDA_STREAM_LEGACY) {
            pthread_mutex_lock(&streams_mu);
            for (CUstream t = all_streams; t && idle; t = t->next)
                if (t->device == s->device && !(t->flags & CU_STREAM_NON_BLOCKING))
                    idle = stream_idle(t);
            pthread_mutex_unlock(&streams_mu);
        }
        pthread_mutex_lock(&s->mu);
        r = s->error != CUDA_SUCCESS ? s->error : idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
        pthread_mutex_unlock(&s->mu);
    }
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamQuery(CUstream handle)
{
    return stream_query(handle, false);
}

FAKECUDA_EXPORT CUresult cuStreamQuery_ptsz(CUstream handle)
{
    return stream_query(handle, true);
}

/* What a stream was created with, for the getters below: INVALID_VALUE when `out` (where the
 * getter's caller wants its answer) is NULL, else what looking the handle up gives. */
typedef struct StreamConsts {
    unsigned flags;
    int device;
    unsigned long long id;
} StreamConsts;

static CUresult stream_consts(CUstream handle, bool per_thread_default, const void *out, StreamConsts *c)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = NULL;
    const CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    *c = (StreamConsts){.flags = s->flags, .device = s->device, .id = s->id};
    fakecuda_stream_unref(s);
    return CUDA_SUCCESS;
}

static CUresult stream_get_flags(CUstream handle, unsigned *flags, bool per_thread_default)
{
    StreamConsts c;
    const CUresult r = stream_consts(handle, per_thread_default, flags, &c);
    if (r == CUDA_SUCCESS)
        *flags = c.flags;
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamGetFlags(CUstream handle, unsigned int *flags)
{
    return stream_get_flags(handle, flags, false);
}

FAKECUDA_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream handle, unsigned int *flags)
{
    return stream_get_flags(handle, flags, true);
}

static CUresult stream_get_ctx(CUstream handle, CUcontext *pctx, bool per_thread_default)
{
    StreamConsts c;
    const CUresult r = stream_consts(handle, per_thread_default, pctx, &c);
    if (r == CUDA_SUCCESS)
        *pctx = &fakecuda_g.ctx[c.device];
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamGetCtx(CUstream handle, CUcontext *pctx)
{
    return stream_get_ctx(handle, pctx, false);
}

FAKECUDA_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream handle, CUcontext *pctx)
{
    return stream_get_ctx(handle, pctx, true);
}

static CUresult stream_get_id(CUstream handle, unsigned long long *id, bool per_thread_default)
{
    StreamConsts c;
    const CUresult r = stream_consts(handle, per_thread_default, id, &c);
    if (r == CUDA_SUCCESS)
        *id = c.id;
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamGetId(CUstream handle, unsigned long long *id)
{
    return stream_get_id(handle, id, false);
}

FAKECUDA_EXPORT CUresult cuStreamGetId_ptsz(CUstream handle, unsigned long long *id)
{
    return stream_get_id(handle, id, true);
}

static CUresult launch_host_fn(CUstream handle, CUhostFn fn, void *arg, bool per_thread_default)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = NULL;
    const CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    FakecudaOp *const op = fakecuda_op_new(FAKECUDA_OP_HOST_FN);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (op) {
        op->u.host_fn.fn = fn;
        op->u.host_fn.arg = arg;
        rc = fakecuda_stream_submit(s, op);
    }
    fakecuda_stream_unref(s);
    return rc;
}

FAKECUDA_EXPORT CUresult cuLaunchHostFunc(CUstream handle, CUhostFn fn, void *arg)
{
    return launch_host_fn(handle, fn, arg, false);
}

FAKECUDA_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream handle, CUhostFn fn, void *arg)
{
    return launch_host_fn(handle, fn, arg, true);
}

/* A stream callback: a host function that calls it with the stream as given and success (work
 * that failed before it would have left the context sticky-failed, which the fake models so). */
typedef struct StreamCallback {
    CUstreamCallback callback;
    CUstream stream;
    void *arg;
} StreamCallback;

static void CUDA_CB run_stream_callback(void *arg)
{
    StreamCallback *const sc = arg;
    sc->callback(sc->stream, CUDA_SUCCESS, sc->arg);
    free(sc);
}

static CUresult stream_add_callback(CUstream handle, CUstreamCallback callback, void *arg, unsigned int flags,
                                    bool per_thread_default)
{
    if (!callback || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    StreamCallback *const sc = malloc(sizeof(*sc));
    if (!sc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *sc = (StreamCallback){.callback = callback, .stream = handle, .arg = arg};
    const CUresult r = launch_host_fn(handle, run_stream_callback, sc, per_thread_default);
    if (r != CUDA_SUCCESS)
        free(sc);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamAddCallback(CUstream handle, CUstreamCallback callback, void *arg,
                                             unsigned int flags)
{
    return stream_add_callback(handle, callback, arg, flags, false);
}

FAKECUDA_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream handle, CUstreamCallback callback, void *arg,
                                                  unsigned int flags)
{
    return stream_add_callback(handle, callback, arg, flags, true);
}

/* ---- events ---- */

static void event_unref(CUevent ev)
{
    if (atomic_fetch_sub(&ev->refs, 1) != 1)
        return;
    if (ev->rec_stream)
        fakecuda_stream_unref(ev->rec_stream);
    if (ev->cap_stream)
        fakecuda_stream_unref(ev->cap_stream);
    pthread_mutex_destroy(&ev->mu);
    pthread_cond_destroy(&ev->cv);
    free(ev);
}

/* Returns ev with a reference, or NULL if it is not a live event. */
static CUevent event_get(CUevent handle)
{
    CUevent found = NULL;
    pthread_mutex_lock(&objects_mu);
    for (CUevent e = all_events; e; e = e->next) {
        if (e == handle) {
            found = e;
            atomic_fetch_add(&e->refs, 1);
            break;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    return found;
}

FAKECUDA_EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!out || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    const CUevent ev = calloc(1, sizeof(*ev));
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    atomic_init(&ev->refs, 1);
    ev->flags = flags;
    pthread_mutex_lock(&objects_mu);
    ev->next = all_events;
    all_events = ev;
    pthread_mutex_unlock(&objects_mu);
    *out = ev;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuEventDestroy_v2(CUevent handle)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    CUevent found = NULL;
    pthread_mutex_lock(&objects_mu);
    for (CUevent *p = &all_events; *p; p = &(*p)->next) {
        if (*p == handle) {
            found = *p;
            *p = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    if (!found)
        return CUDA_ERROR_INVALID_HANDLE;
    event_unref(found);
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent handle, CUstream stream, bool per_thread_default)
{
    FAKECUDA_RETURN_IF_INJECTED("cuEventRecord");
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(stream, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    const CUevent ev = event_get(handle);
    if (!ev) {
        fakecuda_stream_unref(s);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&s->mu);
    const CUstreamCaptureStatus status = s->capture;
    const unsigned long long cap_id = s->capture_id;
    pthread_mutex_unlock(&s->mu);
    if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
        /* A record inside a capture orders nodes of the graph and records nothing now; the event
         * becomes a captured event until recorded outside the capture again. */
        if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            pthread_mutex_lock(&ev->mu);
            if (ev->cap_stream)
                fakecuda_stream_unref(ev->cap_stream);
            atomic_fetch_add(&s->refs, 1);
            ev->cap_stream = s;
            ev->cap_id = cap_id;
            pthread_mutex_unlock(&ev->mu);
        }
        event_unref(ev);
        fakecuda_stream_unref(s);
        return status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    FakecudaOp *const op = fakecuda_op_new(FAKECUDA_OP_EVENT);
    if (!op) {
        event_unref(ev);
        fakecuda_stream_unref(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* The event's lock is held across submit so that gen order matches queue order per event. */
    pthread_mutex_lock(&ev->mu);
    op->u.event.event = ev; /* the op keeps the reference taken by event_get */
    op->u.event.gen = ++ev->gen;
    uint64_t seq = 0;
    r = submit(s, op, &seq);
    if (r == CUDA_SUCCESS) {
        if (ev->cap_stream)
            fakecuda_stream_unref(ev->cap_stream);
        ev->cap_stream = NULL;
        if (ev->rec_stream)
            fakecuda_stream_unref(ev->rec_stream);
        atomic_fetch_add(&s->refs, 1);
        ev->rec_stream = s;
        ev->rec_seq = seq;
    } else {
        ev->gen--;
    }
    pthread_mutex_unlock(&ev->mu);
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuEventRecord(CUevent handle, CUstream stream)
{
    return event_record(handle, stream, false);
}

FAKECUDA_EXPORT CUresult cuEventRecord_ptsz(CUevent handle, CUstream stream)
{
    return event_record(handle, stream, true);
}

/* True if ev's newest record joined a capture that is still running; querying or waiting for such
 * an event from the host is illegal and invalidates that capture.  Caller holds ev->mu. */
static bool event_in_capture(CUevent ev)
{
    const CUstream s = ev->cap_stream;
    if (!s)
        return false;
    pthread_mutex_lock(&s->mu);
    const bool live = s->capture != CU_STREAM_CAPTURE_STATUS_NONE && s->capture_id == ev->cap_id;
    if (live && s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    pthread_mutex_unlock(&s->mu);
    return live;
}

FAKECUDA_EXPORT CUresult cuEventQuery(CUevent handle)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const CUevent ev = event_get(handle);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ev->mu);
    const bool captured = event_in_capture(ev);
    const bool done = ev->done_gen >= ev->gen;
    pthread_mutex_unlock(&ev->mu);
    event_unref(ev);
    if (captured)
        return CUDA_ERROR_CAPTURED_EVENT;
    const CUresult unsafe = fakecuda_capture_check_unsafe(); /* as asking after a stream */
    if (unsafe != CUDA_SUCCESS)
        return unsafe;
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKECUDA_EXPORT CUresult cuEventSynchronize(CUevent handle)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const CUevent ev = event_get(handle);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    const CUresult unsafe = fakecuda_capture_check_unsafe(); /* as waiting on a stream */
    if (unsafe != CUDA_SUCCESS) {
        event_unref(ev);
        return unsafe;
    }
    pthread_mutex_lock(&ev->mu);
    const bool captured = event_in_capture(ev);
    const uint64_t gen = ev->gen;
    while (!captured && ev->done_gen < gen)
        pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
    event_unref(ev);
    return captured ? CUDA_ERROR_CAPTURED_EVENT : CUDA_SUCCESS;
}

static CUresult event_elapsed(float *ms, CUevent start, CUevent end)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    const CUevent a = event_get(start);
    const CUevent b = event_get(end);
    CUresult rc = CUDA_SUCCESS;
    if (!a || !b) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto done;
    }
    pthread_mutex_lock(&a->mu);
    const bool a_timed = !(a->flags & CU_EVENT_DISABLE_TIMING) && a->gen > 0;
    const bool a_done = a->done_gen >= a->gen;
    const struct timespec ta = a->stamp;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    const bool b_timed = !(b->flags & CU_EVENT_DISABLE_TIMING) && b->gen > 0;
    const bool b_done = b->done_gen >= b->gen;
    const struct timespec tb = b->stamp;
    pthread_mutex_unlock(&b->mu);
    if (!a_timed || !b_timed)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!a_done || !b_done)
        rc = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(now_ms(&tb) - now_ms(&ta));
done:
    if (a)
        event_unref(a);
    if (b)
        event_unref(b);
    return rc;
}

FAKECUDA_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    return event_elapsed(ms, start, end);
}

FAKECUDA_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    return event_elapsed(ms, start, end);
}

static CUresult stream_wait_event(CUstream handle, CUevent event, unsigned flags, bool per_thread_default)
{
    FAKECUDA_RETURN_IF_INJECTED("cuStreamWaitEvent");
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    const CUevent ev = event_get(event);
    if (!ev) {
        fakecuda_stream_unref(s);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&s->mu);
    const CUstreamCaptureStatus status = s->capture;
    pthread_mutex_unlock(&s->mu);
    const bool capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    FakecudaOp *op = NULL;
    if (flags != 0 && !(flags == CU_EVENT_WAIT_EXTERNAL && capturing)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (!capturing) {
        pthread_mutex_lock(&ev->mu);
        if (ev->rec_stream && ev->done_gen < ev->gen) {
            op = fakecuda_op_new(FAKECUDA_OP_WAIT);
            if (op) {
                atomic_fetch_add(&ev->rec_stream->refs, 1);
                op->u.wait.target = ev->rec_stream;
                op->u.wait.seq = ev->rec_seq;
            } else {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        pthread_mutex_unlock(&ev->mu);
        if (op)
            r = fakecuda_stream_submit(s, op);
    }
    event_unref(ev);
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamWaitEvent(CUstream handle, CUevent event, unsigned int flags)
{
    return stream_wait_event(handle, event, flags, false);
}

FAKECUDA_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream handle, CUevent event, unsigned int flags)
{
    return stream_wait_event(handle, event, flags, true);
}

/* ---- capture and graphs ---- */

static CUgraph graph_new(void)
{
    const CUgraph g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    pthread_mutex_lock(&objects_mu);
    g->next = all_graphs;
    all_graphs = g;
    pthread_mutex_unlock(&objects_mu);
    return g;
}

/* Unlinks g from the live list; returns false if it was not there. */
static bool graph_unlink(CUgraph g)
{
    bool found = false;
    pthread_mutex_lock(&objects_mu);
    for (CUgraph *p = &all_graphs; *p; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    return found;
}

static CUresult begin_capture(CUstream handle, CUstreamCaptureMode mode, bool per_thread_default)
{
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (s->kind == FAKECUDA_STREAM_LEGACY) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else {
        const CUgraph g = graph_new();
        pthread_mutex_lock(&s->mu);
        if (!g) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
            r = CUDA_ERROR_ILLEGAL_STATE;
        } else {
            s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
            s->capture_mode = mode;
            s->capture_thread = pthread_self();
            s->capture_id = atomic_fetch_add(&capture_ids, 1) + 1;
            s->graph = g;
        }
        pthread_mutex_unlock(&s->mu);
        if (r != CUDA_SUCCESS && g) {
            graph_unlink(g);
            free(g);
        }
    }
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamBeginCapture_v2(CUstream handle, CUstreamCaptureMode mode)
{
    return begin_capture(handle, mode, false);
}

FAKECUDA_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream handle, CUstreamCaptureMode mode)
{
    return begin_capture(handle, mode, true);
}

static void graph_free(CUgraph g)
{
    op_list_free(g->head);
    free(g);
}

static CUresult end_capture(CUstream handle, CUgraph *out, bool per_thread_default)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    CUgraph dead = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
               !pthread_equal(s->capture_thread, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        dead = s->graph;
        s->graph = NULL;
        s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
        *out = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *out = s->graph;
        s->graph = NULL;
        s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    }
    pthread_mutex_unlock(&s->mu);
    if (dead) {
        graph_unlink(dead);
        graph_free(dead);
    }
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamEndCapture(CUstream handle, CUgraph *out)
{
    return end_capture(handle, out, false);
}

FAKECUDA_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream handle, CUgraph *out)
{
    return end_capture(handle, out, true);
}

static CUresult capture_info(CUstream handle, bool per_thread_default, CUstreamCaptureStatus *status,
                             cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->kind == FAKECUDA_STREAM_LEGACY) {
        /* Asking about the legacy stream while a blocking stream captures is an implicit dependency;
         * unlike issuing work there, asking does not invalidate the capture. */
        bool implicit = false;
        pthread_mutex_lock(&streams_mu);
        for (CUstream t = all_streams; t; t = t->next) {
            if (t == s || t->device != s->device || (t->flags & CU_STREAM_NON_BLOCKING))
                continue;
            pthread_mutex_lock(&t->mu);
            implicit |= t->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
            pthread_mutex_unlock(&t->mu);
        }
        pthread_mutex_unlock(&streams_mu);
        if (implicit) {
            fakecuda_stream_unref(s);
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
    }
    pthread_mutex_lock(&s->mu);
    *status = s->capture;
    const bool active = s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id && active)
        *id = s->capture_id;
    if (graph)
        *graph = active ? s->graph : NULL;
    pthread_mutex_unlock(&s->mu);
    if (deps)
        *deps = NULL;
    if (ndeps)
        *ndeps = 0;
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus *status)
{
    return capture_info(handle, false, status, NULL, NULL, NULL, NULL);
}

FAKECUDA_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream handle, CUstreamCaptureStatus *status)
{
    return capture_info(handle, true, status, NULL, NULL, NULL, NULL);
}

FAKECUDA_EXPORT CUresult cuStreamGetCaptureInfo(CUstream handle, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(handle, false, status, id, NULL, NULL, NULL);
}

FAKECUDA_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream handle, CUstreamCaptureStatus *status,
                                                     cuuint64_t *id)
{
    return capture_info(handle, true, status, id, NULL, NULL, NULL);
}

FAKECUDA_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream handle, CUstreamCaptureStatus *status,
                                                   cuuint64_t *id, CUgraph *graph,
                                                   const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(handle, false, status, id, graph, deps, ndeps);
}

FAKECUDA_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream handle, CUstreamCaptureStatus *status,
                                                        cuuint64_t *id, CUgraph *graph,
                                                        const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(handle, true, status, id, graph, deps, ndeps);
}

FAKECUDA_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream handle, CUstreamCaptureStatus *status,
                                                   cuuint64_t *id, CUgraph *graph,
                                                   const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                                   size_t *ndeps)
{
    if (edges)
        *edges = NULL;
    return capture_info(handle, false, status, id, graph, deps, ndeps);
}

FAKECUDA_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream handle, CUstreamCaptureStatus *status,
                                                        cuuint64_t *id, CUgraph *graph,
                                                        const CUgraphNode **deps,
                                                        const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (edges)
        *edges = NULL;
    return capture_info(handle, true, status, id, graph, deps, ndeps);
}

FAKECUDA_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!g || !graph_unlink(g))
        return CUDA_ERROR_INVALID_VALUE;
    graph_free(g);
    return CUDA_SUCCESS;
}

static bool graph_within(CUgraph root, CUgraph g);

/* Whether g is a live graph or one a live graph's child graph nodes own. */
static bool graph_live(CUgraph g)
{
    bool found = false;
    pthread_mutex_lock(&objects_mu);
    for (CUgraph p = all_graphs; p && !found; p = p->next)
        found = graph_within(p, g);
    pthread_mutex_unlock(&objects_mu);
    return found;
}

/* Copies a list of ops; NULL with *ok false when memory runs out.  flatten: child graph nodes
 * give way to copies of their graphs' ops (an executable graph's list). */
static FakecudaOp *op_list_clone(const FakecudaOp *head, bool flatten, bool *ok)
{
    FakecudaOp *out = NULL, **tail = &out;
    *ok = true;
    for (const FakecudaOp *o = head; o; o = o->next) {
        FakecudaOp *c = NULL;
        if (flatten && o->type == FAKECUDA_OP_CHILD) {
            c = op_list_clone(o->u.child.graph->head, true, ok);
            if (!*ok) {
                op_list_free(out);
                return NULL;
            }
        } else if (!(c = op_clone(o))) {
            op_list_free(out);
            *ok = false;
            return NULL;
        }
        *tail = c;
        while (*tail)
            tail = &(*tail)->next;
    }
    return out;
}

/* A graph owned by a child graph node: not in the live list, freed with its node. */
static CUgraph graph_clone(CUgraph g)
{
    const CUgraph c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    bool ok = true;
    c->head = op_list_clone(g->head, false, &ok);
    if (!ok) {
        free(c);
        return NULL;
    }
    for (FakecudaOp *o = c->head; o; o = o->next) {
        c->tail = o;
        c->count++;
    }
    return c;
}

/* Whether g is root or a graph owned by one of its child graph nodes, at any depth. */
static bool graph_within(CUgraph root, CUgraph g)
{
    if (root == g)
        return true;
    for (const FakecudaOp *o = root->head; o; o = o->next)
        if (o->type == FAKECUDA_OP_CHILD && graph_within(o->u.child.graph, g))
            return true;
    return false;
}

/* Ops an executable graph made from g holds for g's ops before `stop` (all with NULL). */
static size_t flat_count(CUgraph g, const FakecudaOp *stop)
{
    size_t n = 0;
    for (const FakecudaOp *o = g->head; o && o != stop; o = o->next)
        n += o->type == FAKECUDA_OP_CHILD ? flat_count(o->u.child.graph, NULL) : 1;
    return n;
}

static bool graph_has_host_fn(CUgraph g)
{
    for (const FakecudaOp *o = g->head; o; o = o->next)
        if (o->type == FAKECUDA_OP_HOST_FN ||
            (o->type == FAKECUDA_OP_CHILD && graph_has_host_fn(o->u.child.graph)))
            return true;
    return false;
}

FAKECUDA_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || (flags & ~(unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))
        return CUDA_ERROR_INVALID_VALUE;
    const CUgraphExec e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* objects_mu keeps g alive while its op list is copied. */
    pthread_mutex_lock(&objects_mu);
    bool found = false;
    for (CUgraph p = all_graphs; p; p = p->next)
        found |= p == g;
    bool ok = true;
    /* A graph the device may launch holds no host functions (the driver refuses them). */
    if (found && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) && graph_has_host_fn(g))
        found = false;
    if (found)
        e->head = op_list_clone(g->head, true, &ok);
    if (found && ok) {
        e->next = all_execs;
        all_execs = e;
    }
    pthread_mutex_unlock(&objects_mu);
    if (!found || !ok) {
        free(e);
        return found ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    *out = e;
    return CUDA_SUCCESS;
}

/* The upload flags are not modelled: refused, as flags other than the device-launch one are above
 * (whose launches from a kernel the fake cannot make: its graphs run from the host). */
static CUresult instantiate_with_params(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    const CUresult r = cuGraphInstantiateWithFlags(out, g, params->flags);
    params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    params->hErrNode_out = NULL;
    return r;
}

FAKECUDA_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph g,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    return instantiate_with_params(out, g, params);
}

FAKECUDA_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph g,
                                                           CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    return instantiate_with_params(out, g, params);
}

FAKECUDA_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    bool found = false;
    pthread_mutex_lock(&objects_mu);
    for (CUgraphExec *p = &all_execs; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    if (!found)
        return CUDA_ERROR_INVALID_VALUE;
    op_list_free(e->head);
    free(e);
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec e, CUstream handle, bool per_thread_default)
{
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    bool found = false, ok = true;
    FakecudaOp *ops = NULL;
    pthread_mutex_lock(&objects_mu);
    for (CUgraphExec p = all_execs; p; p = p->next)
        found |= p == e;
    if (found)
        ops = op_list_clone(e->head, false, &ok);
    pthread_mutex_unlock(&objects_mu);
    if (!found)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!ok)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    while (ops) {
        FakecudaOp *const op = ops;
        ops = op->next;
        if (r == CUDA_SUCCESS)
            r = fakecuda_stream_submit(s, op);
        else
            fakecuda_op_free(op);
    }
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream handle)
{
    return graph_launch(e, handle, false);
}

FAKECUDA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream handle)
{
    return graph_launch(e, handle, true);
}

/* A graph's nodes are its ops: a node handle is the op's address, valid while its graph lives. */
FAKECUDA_EXPORT CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!count || !graph_live(g))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&objects_mu);
    if (nodes) { /* as the driver: the first *count nodes, NULL past the last, *count set to all */
        const FakecudaOp *o = g->head;
        for (size_t i = 0; i < *count; i++) {
            nodes[i] = (CUgraphNode)o;
            o = o ? o->next : NULL;
        }
    }
    *count = g->count;
    pthread_mutex_unlock(&objects_mu);
    return CUDA_SUCCESS;
}

/* The op behind a node handle in g or a graph its child graph nodes own, copied out. */
static bool node_in(CUgraph g, CUgraphNode node, FakecudaOp *out)
{
    for (const FakecudaOp *o = g->head; o; o = o->next) {
        if ((CUgraphNode)o == node) {
            *out = *o;
            return true;
        }
        if (o->type == FAKECUDA_OP_CHILD && node_in(o->u.child.graph, node, out))
            return true;
    }
    return false;
}

/* The op behind a node handle, copied out; false for a handle of no live graph. */
static bool node_op(CUgraphNode node, FakecudaOp *out)
{
    bool found = false;
    pthread_mutex_lock(&objects_mu);
    for (CUgraph g = all_graphs; g && !found; g = g->next)
        found = node_in(g, node, out);
    pthread_mutex_unlock(&objects_mu);
    return found;
}

/* The op of a node of a live graph for a query with output `out`, of type `want` (or any when
 * want is FAKECUDA_OP_NOP). */
static CUresult node_query(CUgraphNode node, const void *out, FakecudaOpType want, FakecudaOp *op)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !node_op(node, op) || (want != FAKECUDA_OP_NOP && op->type != want))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    FakecudaOp op;
    const CUresult r = node_query(node, type, FAKECUDA_OP_NOP, &op);
    if (r != CUDA_SUCCESS)
        return r;
    switch (op.type) {
    case FAKECUDA_OP_COPY:
        *type = CU_GRAPH_NODE_TYPE_MEMCPY;
        break;
    case FAKECUDA_OP_MEMSET:
        *type = CU_GRAPH_NODE_TYPE_MEMSET;
        break;
    case FAKECUDA_OP_KERNEL:
        *type = CU_GRAPH_NODE_TYPE_KERNEL;
        break;
    case FAKECUDA_OP_HOST_FN:
        *type = CU_GRAPH_NODE_TYPE_HOST;
        break;
    case FAKECUDA_OP_EVENT:
        *type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
        break;
    case FAKECUDA_OP_CHILD:
        *type = CU_GRAPH_NODE_TYPE_GRAPH;
        break;
    case FAKECUDA_OP_MEM_OP:
        *type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        break;
    default: /* waits are edges in a real graph */
        *type = CU_GRAPH_NODE_TYPE_EMPTY;
        break;
    }
    return CUDA_SUCCESS;
}

/* The graph the node owns (valid while the node's graph lives). */
FAKECUDA_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *graph)
{
    FakecudaOp op;
    const CUresult r = node_query(node, graph, FAKECUDA_OP_CHILD, &op);
    if (r != CUDA_SUCCESS)
        return r;
    *graph = op.u.child.graph;
    return CUDA_SUCCESS;
}

/* Appends a node owning a copy of child to g (dependencies are not modelled: g's nodes run in the
 * order they were added). */
FAKECUDA_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                                  size_t ndeps, CUgraph child)
{
    (void)deps;
    (void)ndeps;
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !graph_live(g) || !graph_live(child))
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaOp *const op = fakecuda_op_new(FAKECUDA_OP_CHILD);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&objects_mu);
    op->u.child.graph = graph_clone(child);
    if (op->u.child.graph) {
        if (g->tail)
            g->tail->next = op;
        else
            g->head = op;
        g->tail = op;
        g->count++;
    }
    pthread_mutex_unlock(&objects_mu);
    if (!op->u.child.graph) {
        fakecuda_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUgraphNode)op;
    return CUDA_SUCCESS;
}

/* Where an address lies, as a node's parameters name it. */
static CUmemorytype memory_type_of(uintptr_t p)
{
    FakecudaPtrInfo info;
    fakecuda_mem_lookup(p, &info);
    return info.kind == FAKECUDA_MEM_DEVICE ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
}

FAKECUDA_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *params)
{
    FakecudaOp op;
    const CUresult r = node_query(node, params, FAKECUDA_OP_COPY, &op);
    if (r != CUDA_SUCCESS)
        return r;
    memset(params, 0, sizeof(*params));
    params->srcMemoryType = memory_type_of(op.u.copy.src);
    if (params->srcMemoryType == CU_MEMORYTYPE_HOST)
        params->srcHost = (const void *)op.u.copy.src;
    else
        params->srcDevice = (CUdeviceptr)op.u.copy.src;
    params->dstMemoryType = memory_type_of(op.u.copy.dst);
    if (params->dstMemoryType == CU_MEMORYTYPE_HOST)
        params->dstHost = (void *)op.u.copy.dst;
    else
        params->dstDevice = (CUdeviceptr)op.u.copy.dst;
    params->WidthInBytes = op.u.copy.n;
    params->Height = 1;
    params->Depth = 1;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *params)
{
    FakecudaOp op;
    const CUresult r = node_query(node, params, FAKECUDA_OP_MEMSET, &op);
    if (r != CUDA_SUCCESS)
        return r;
    memset(params, 0, sizeof(*params));
    params->dst = (CUdeviceptr)op.u.memset.dst;
    params->value = op.u.memset.value;
    params->elementSize = 1;
    params->width = op.u.memset.n;
    params->height = 1;
    return CUDA_SUCCESS;
}

/* The operations of a node that stream memory operations were captured into: paramArray points
 * into the node, as the driver's does. */
FAKECUDA_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode node,
                                                        CUDA_BATCH_MEM_OP_NODE_PARAMS *params)
{
    FakecudaOp op;
    const CUresult r = node_query(node, params, FAKECUDA_OP_MEM_OP, &op);
    if (r != CUDA_SUCCESS)
        return r;
    memset(params, 0, sizeof(*params));
    params->ctx = op.u.mem_op.ctx;
    params->count = op.u.mem_op.count;
    params->paramArray = op.u.mem_op.ops;
    return CUDA_SUCCESS;
}

/* A kernel node captured from a launch: its function and its arguments (kernelParams points into
 * the node, as the driver's does; the buffer form is answered the same way). */
FAKECUDA_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *params)
{
    FakecudaOp op;
    const CUresult r = node_query(node, params, FAKECUDA_OP_KERNEL, &op);
    if (r != CUDA_SUCCESS)
        return r;
    memset(params, 0, sizeof(*params));
    params->func = op.u.kernel.func;
    params->gridDimX = op.u.kernel.grid[0];
    params->gridDimY = op.u.kernel.grid[1];
    params->gridDimZ = op.u.kernel.grid[2];
    params->blockDimX = op.u.kernel.block[0];
    params->blockDimY = op.u.kernel.block[1];
    params->blockDimZ = op.u.kernel.block[2];
    params->sharedMemBytes = op.u.kernel.shared_bytes;
    params->kernelParams = op.u.kernel.params;
    return CUDA_SUCCESS;
}

/* A kernel node's one attribute here: whether the device may update it (CUDA 12.4); once set, it
 * cannot be cleared, as in the driver.  Other attributes are refused. */
FAKECUDA_EXPORT CUresult cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID attr,
                                                       CUkernelNodeAttrValue *value)
{
    FakecudaOp op;
    const CUresult r = node_query(node, value, FAKECUDA_OP_KERNEL, &op);
    if (r != CUDA_SUCCESS)
        return r;
    if (attr != CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)
        return CUDA_ERROR_INVALID_VALUE;
    memset(value, 0, sizeof(*value));
    value->deviceUpdatableKernelNode.deviceUpdatable = op.u.kernel.device_updatable;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID attr,
                                                       const CUkernelNodeAttrValue *value)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!value || attr != CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE ||
        (unsigned)value->deviceUpdatableKernelNode.deviceUpdatable > 1)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&objects_mu);
    for (CUgraph g = all_graphs; g && res != CUDA_SUCCESS; g = g->next)
        for (FakecudaOp *o = g->head; o; o = o->next)
            if ((CUgraphNode)o == node && o->type == FAKECUDA_OP_KERNEL) {
                if (o->u.kernel.device_updatable && !value->deviceUpdatableKernelNode.deviceUpdatable)
                    break;
                o->u.kernel.device_updatable = value->deviceUpdatableKernelNode.deviceUpdatable;
                res = CUDA_SUCCESS;
                break;
            }
    pthread_mutex_unlock(&objects_mu);
    return res;
}

/* Sets the copy, memset or stream memory operations of node in executable graph e, made from
 * node's graph, to `with`'s fields: the op at the node's place in e, which must be of with's type
 * (and, for memory operations, as many).  with's operations are copied. */
static CUresult exec_set_op(CUgraphExec e, CUgraphNode node, FakecudaOp *with)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    CUstreamBatchMemOpParams *ops = NULL;
    if (with->type == FAKECUDA_OP_MEM_OP &&
        !(ops = fakecuda_mem_ops_dup(with->u.mem_op.ops, with->u.mem_op.count)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&objects_mu);
    size_t at = 0;
    bool found = false;
    for (CUgraph g = all_graphs; g && !found; g = g->next)
        for (const FakecudaOp *o = g->head; o && !found; o = o->next)
            if ((CUgraphNode)o == node) {
                at = flat_count(g, o);
                found = true;
            }
    bool live = false;
    for (CUgraphExec p = all_execs; p; p = p->next)
        live |= p == e;
    if (found && live) {
        FakecudaOp *o = e->head;
        for (size_t i = 0; o && i < at; i++)
            o = o->next;
        if (o && o->type == with->type && (o->type == FAKECUDA_OP_COPY || o->type == FAKECUDA_OP_MEMSET)) {
            o->u = with->u;
            res = CUDA_SUCCESS;
        } else if (o && o->type == with->type && o->type == FAKECUDA_OP_KERNEL) {
            /* The node's arguments are swapped for with's, whose old ones with's owner frees. */
            const FakecudaOp mine = *o;
            o->u.kernel = with->u.kernel;
            with->u.kernel = mine.u.kernel;
            res = CUDA_SUCCESS;
        } else if (o && o->type == with->type && o->type == FAKECUDA_OP_MEM_OP &&
                   o->u.mem_op.count == with->u.mem_op.count) {
            CUstreamBatchMemOpParams *const old = o->u.mem_op.ops;
            o->u.mem_op.ops = ops;
            ops = old;
            res = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    free(ops);
    return res;
}

/* A kernel node's function (the same kernel), grid and arguments (copied, in the list form). */
FAKECUDA_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode node,
                                                           const CUDA_KERNEL_NODE_PARAMS *p)
{
    const FakecudaKernel *kernel = NULL;
    if (!p || p->extra || !p->func || !fakecuda_function_kernel(p->func, &kernel) ||
        (kernel->param_count && !p->kernelParams))
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaOp *const with = fakecuda_op_new(FAKECUDA_OP_KERNEL);
    if (!with)
        return CUDA_ERROR_OUT_OF_MEMORY;
    with->u.kernel.kernel = kernel;
    with->u.kernel.func = p->func;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    memcpy(with->u.kernel.grid, grid, sizeof(grid));
    memcpy(with->u.kernel.block, block, sizeof(block));
    with->u.kernel.shared_bytes = p->sharedMemBytes;
    CUresult r = fakecuda_kernel_args(kernel, p->kernelParams, with);
    if (r == CUDA_SUCCESS)
        r = exec_set_op(e, node, with);
    fakecuda_op_free(with);
    return r;
}

/* One-row copies between memory the fake knows (no staging), given by address. */
FAKECUDA_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                        const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    (void)ctx;
    if (!p || p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY ||
        p->Height != 1 || p->Depth != 1)
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaOp with = {.type = FAKECUDA_OP_COPY};
    with.u.copy.dst =
        p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->dstHost : (uintptr_t)p->dstDevice;
    with.u.copy.src =
        p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->srcHost : (uintptr_t)p->srcDevice;
    with.u.copy.dst += p->dstXInBytes;
    with.u.copy.src += p->srcXInBytes;
    with.u.copy.n = p->WidthInBytes;
    return exec_set_op(e, node, &with);
}

FAKECUDA_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                        const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    (void)ctx;
    if (!p || p->elementSize != 1 || p->height != 1)
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaOp with = {.type = FAKECUDA_OP_MEMSET};
    with.u.memset.dst = (uintptr_t)p->dst;
    with.u.memset.n = p->width;
    with.u.memset.value = (unsigned char)p->value;
    return exec_set_op(e, node, &with);
}

/* Value writes only, as many as the node has. */
FAKECUDA_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                            const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    if (!p || !p->count || !p->paramArray || p->flags)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < p->count; i++)
        if (!fakecuda_mem_op_valid(&p->paramArray[i]))
            return CUDA_ERROR_INVALID_VALUE;
    FakecudaOp with = {.type = FAKECUDA_OP_MEM_OP};
    with.u.mem_op.ops = p->paramArray;
    with.u.mem_op.count = p->count;
    return exec_set_op(e, node, &with);
}

/* Replaces the ops of child graph node `node` in executable graph e with child's: the new child
 * must hold as many ops as the old (the driver asks for the same topology). */
FAKECUDA_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraph child)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    FakecudaOp *old = NULL;
    pthread_mutex_lock(&objects_mu);
    size_t at = 0, len = 0;
    bool found = false, live = false, ok = true;
    for (CUgraph g = all_graphs; g && !found; g = g->next)
        for (const FakecudaOp *o = g->head; o && !found; o = o->next)
            if ((CUgraphNode)o == node && o->type == FAKECUDA_OP_CHILD) {
                at = flat_count(g, o);
                len = flat_count(o->u.child.graph, NULL);
                found = true;
            }
    for (CUgraphExec p = all_execs; p; p = p->next)
        live |= p == e;
    bool child_live = false;
    for (CUgraph g = all_graphs; g && !child_live; g = g->next)
        child_live = graph_within(g, child);
    if (found && live && child_live && len && flat_count(child, NULL) == len) {
        FakecudaOp **before = &e->head;
        for (size_t i = 0; *before && i < at; i++)
            before = &(*before)->next;
        FakecudaOp *last = *before;
        for (size_t i = 1; last && i < len; i++)
            last = last->next;
        FakecudaOp *const ops = last ? op_list_clone(child->head, true, &ok) : NULL;
        if (ops) {
            FakecudaOp *tail = ops;
            while (tail->next)
                tail = tail->next;
            tail->next = last->next;
            old = *before;
            last->next = NULL;
            *before = ops;
            res = CUDA_SUCCESS;
        } else if (last) {
            res = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    op_list_free(old);
    return res;
}

/* The node kinds the fake's executable graphs can change: copies, memsets, stream memory operations
 * and child graphs. */
FAKECUDA_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphExecMemcpyNodeSetParams(e, node, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS m = {.dst = p->memset.dst,
                                           .pitch = p->memset.pitch,
                                           .value = p->memset.value,
                                           .elementSize = p->memset.elementSize,
                                           .width = p->memset.width,
                                           .height = p->memset.height};
        return cuGraphExecMemsetNodeSetParams(e, node, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return cuGraphExecChildGraphNodeSetParams(e, node, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        const CUDA_BATCH_MEM_OP_NODE_PARAMS m = {.ctx = p->memOp.ctx,
                                                 .count = p->memOp.count,
                                                 .paramArray = p->memOp.paramArray,
                                                 .flags = p->memOp.flags};
        return cuGraphExecBatchMemOpNodeSetParams(e, node, &m);
    }
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* Replaces an executable graph's ops with the graph's (no check that the topologies match). */
FAKECUDA_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!info)
        return CUDA_ERROR_INVALID_VALUE;
    memset(info, 0, sizeof(*info));
    bool found_e = false, found_g = false, ok = true;
    FakecudaOp *old = NULL;
    pthread_mutex_lock(&objects_mu);
    for (CUgraphExec p = all_execs; p; p = p->next)
        found_e |= p == e;
    for (CUgraph p = all_graphs; p; p = p->next)
        found_g |= p == g;
    if (found_e && found_g) {
        FakecudaOp *const ops = op_list_clone(g->head, true, &ok);
        if (ok) {
            old = e->head;
            e->head = ops;
        }
    }
    pthread_mutex_unlock(&objects_mu);
    if (!found_e || !found_g) {
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!ok)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op_list_free(old);
    info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

/* CUDA 10-11's forms, which older programs call by these names (internal.h declares them). */
FAKECUDA_EXPORT CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode *error_node,
                                           CUgraphExecUpdateResult *result)
{
    CUgraphExecUpdateResultInfo info = {.result = CU_GRAPH_EXEC_UPDATE_ERROR};
    const CUresult r = cuGraphExecUpdate_v2(e, g, &info);
    if (error_node)
        *error_node = NULL;
    if (result)
        *result = info.result;
    return r;
}

static CUresult instantiate_v1(CUgraphExec *out, CUgraph g, CUgraphNode *error_node, char *log,
                               size_t log_size)
{
    if (error_node)
        *error_node = NULL;
    if (log && log_size)
        log[0] = 0;
    return cuGraphInstantiateWithFlags(out, g, 0);
}

FAKECUDA_EXPORT CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, CUgraphNode *error_node, char *log,
                                            size_t log_size)
{
    return instantiate_v1(out, g, error_node, log, log_size);
}

FAKECUDA_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *error_node,
                                               char *log, size_t log_size)
{
    return instantiate_v1(out, g, error_node, log, log_size);
}
