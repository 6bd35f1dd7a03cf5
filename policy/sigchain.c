/* SPDX-License-Identifier: MIT
 * ibpshim: the SIGSEGV handler of mprotect tracking, kept first and chaining to the application's. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "policy/track_internal.h"

typedef int (*IbpSigactionFn)(int sig, const struct sigaction *act, struct sigaction *oldact);
typedef sighandler_t (*IbpSignalFn)(int sig, sighandler_t handler);

static IbpSigactionFn real_sigaction;
static IbpSignalFn real_signal;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t app_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool installed;

/* The application's SIGSEGV disposition, as it believes it to be.  Written by
 * the interposed sigaction() and (SA_RESETHAND) by the handler, read by the
 * handler: a sequence lock, odd while a writer copies. */
static _Atomic unsigned app_seq;
static struct sigaction app_action;

/* Last unclaimed write fault of this thread (see segv_handler). */
static __thread void *last_unclaimed __attribute__((tls_model("initial-exec")));

/* Resolved past ourselves: inside libibpshim.so a plain call to sigaction()
 * would reach our own exported forwarder. */
static void resolve_real(void)
{
    real_sigaction = (IbpSigactionFn)dlsym(RTLD_NEXT, "sigaction");
    real_signal = (IbpSignalFn)dlsym(RTLD_NEXT, "signal");
}

static void app_write(const struct sigaction *act)
{
    unsigned s;
    do {
        s = atomic_load(&app_seq) & ~1u;
    } while (!atomic_compare_exchange_weak(&app_seq, &s, s + 1));
    memcpy(&app_action, act, sizeof app_action);
    atomic_store(&app_seq, s + 2);
}

static void app_read(struct sigaction *out)
{
    for (;;) {
        const unsigned s1 = atomic_load(&app_seq);
        if (s1 & 1u)
            continue;
        memcpy(out, &app_action, sizeof *out);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load(&app_seq) == s1)
            return;
    }
}

static void set_default(void)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    real_sigaction(SIGSEGV, &dfl, NULL);
    atomic_store(&installed, false);
}

/* Does for a fault that is not ours what the kernel would have done with the
 * application's disposition. */
static void chain(int sig, siginfo_t *si, void *ucv)
{
    struct sigaction act;
    app_read(&act);
    const bool user_sent = !si || si->si_code <= 0;
    if (act.sa_handler == SIG_IGN && user_sent)
        return;
    if (act.sa_handler == SIG_DFL || act.sa_handler == SIG_IGN) {
        /* The kernel kills on a fault whose signal is ignored, too.  With the
         * default restored, the faulting instruction runs again and the
         * process ends exactly as it would have; a sent signal is sent again
         * and stays pending until this handler returns. */
        set_default();
        if (user_sent)
            syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
        return;
    }
    if (act.sa_flags & SA_RESETHAND) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        app_write(&dfl);
    }
    /* The mask the application's handler would have run with. */
    sigset_t mask;
    if (ucv)
        mask = ((const ucontext_t *)ucv)->uc_sigmask;
    else
        sigemptyset(&mask);
    sigorset(&mask, &mask, &act.sa_mask);
    if (!(act.sa_flags & SA_NODEFER))
        sigaddset(&mask, sig);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    if (act.sa_flags & SA_SIGINFO)
        act.sa_sigaction(sig, si, ucv);
    else
        act.sa_handler(sig);
}

/* A write fault on a page that no tracker claims may still be ours: its
 * tracker may have been disarmed (page made writable) and unpublished between
 * the fault and this lookup.  So once mprotect tracking has existed, an
 * unclaimed write fault is retried once; if the same thread faults on the same
 * address again, it goes to the application. */
static void segv_handler(int sig, siginfo_t *si, void *ucv)
{
    const int saved_errno = errno;
    if (si && si->si_code == SEGV_ACCERR) {
        if (ibp_mprot_fault((uintptr_t)si->si_addr)) {
            last_unclaimed = NULL;
            errno = saved_errno;
            return;
        }
        if (atomic_load(&ibp_mprot_ever) && last_unclaimed != si->si_addr) {
            last_unclaimed = si->si_addr;
            errno = saved_errno;
            return;
        }
    }
    last_unclaimed = NULL;
    chain(sig, si, ucv);
    errno = saved_errno;
}

/* SA_ONSTACK: applications that catch stack overflows run their SIGSEGV
 * handler on an alternate stack, and ours runs in front of it.  All signals
 * blocked while ours runs; the application's handler gets its own mask. */
int ibp_sigchain_install(void)
{
    pthread_once(&resolve_once, resolve_real);
    if (!real_sigaction)
        return -ENOSYS;
    if (atomic_load(&installed))
        return 0;
    int ret = 0;
    pthread_mutex_lock(&app_mutex);
    if (!atomic_load(&installed)) {
        struct sigaction ours, prev;
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = segv_handler;
        ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigfillset(&ours.sa_mask);
        if (real_sigaction(SIGSEGV, &ours, &prev) != 0) {
            ret = -errno;
        } else {
            if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction == segv_handler) {
                memset(&prev, 0, sizeof prev);
                prev.sa_handler = SIG_DFL;
            }
            app_write(&prev);
            atomic_store(&installed, true);
        }
    }
    pthread_mutex_unlock(&app_mutex);
    return ret;
}

int ibp_track_sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
    pthread_once(&resolve_once, resolve_real);
    if (!real_sigaction) {
        errno = ENOSYS;
        return -1;
    }
    if (sig != SIGSEGV || !atomic_load(&installed))
        return real_sigaction(sig, act, oldact);
    pthread_mutex_lock(&app_mutex);
    if (!atomic_load(&installed)) {
        pthread_mutex_unlock(&app_mutex);
        return real_sigaction(sig, act, oldact);
    }
    struct sigaction prev;
    app_read(&prev);
    if (act)
        app_write(act);
    pthread_mutex_unlock(&app_mutex);
    if (oldact)
        *oldact = prev;
    return 0;
}

/* glibc's signal(): BSD semantics (handler stays, SA_RESTART, the signal
 * blocked while its handler runs). */
sighandler_t ibp_track_signal(int sig, sighandler_t handler)
{
    pthread_once(&resolve_once, resolve_real);
    if (sig != SIGSEGV || !atomic_load(&installed)) {
        if (!real_signal) {
            errno = ENOSYS;
            return SIG_ERR;
        }
        return real_signal(sig, handler);
    }
    if (handler == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    sigaddset(&act.sa_mask, sig);
    if (ibp_track_sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}
