/* SPDX-License-Identifier: MIT
 * ibpshim: the application's SIGSEGV handlers keep working in front of mprotect tracking. */
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "track_test_util.h"

using namespace ibptest;

namespace {

sigjmp_buf jump_back;
volatile sig_atomic_t app_hits;
void *volatile app_addr;
volatile int app_code;

void app_siginfo_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    (void)sig;
    app_hits = app_hits + 1;
    app_addr = si->si_addr;
    app_code = si->si_code;
    if (si->si_code > 0)
        siglongjmp(jump_back, 1);
}

void app_plain_handler(int sig)
{
    (void)sig;
    app_hits = app_hits + 1;
    siglongjmp(jump_back, 1);
}

char *unmapped_address()
{
    void *const p = mmap(nullptr, page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(p, page());
    return static_cast<char *>(p);
}

char *read_only_page()
{
    return static_cast<char *>(mmap(nullptr, page(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
}

/* An armed mprotect tracker: its creation installs the fault handler. */
struct ArmedRegion {
    Mapping m{8, false};
    Tracked t;
    bool ok = false;
    ArmedRegion()
    {
        ok = m.ok() && t.open(m.map, m.len, IBP_TRACK_MPROTECT) == 0 && ibp_tracker_arm(t.tracker) == 0;
    }
    bool write_is_tracked(size_t pg)
    {
        t.query_all(true);
        m.map[pg * page() + 3] = (char)(m.map[pg * page() + 3] + 1);
        const auto d = t.query_all(true);
        for (size_t i = 0; i < d.size(); i++)
            if (d[i] != (i == pg))
                return false;
        return true;
    }
};

using SigactionFn = int (*)(int, const struct sigaction *, struct sigaction *);

/* What the kernel really has, past the interposed sigaction(). */
struct sigaction kernel_disposition()
{
    struct sigaction k;
    memset(&k, 0, sizeof k);
    auto real = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
    real(SIGSEGV, nullptr, &k);
    return k;
}

/* What the process had before any tracker existed (SIG_DFL, or the
 * sanitizer's handler); every test below leaves it as it found it. */
const struct sigaction initial_disposition = kernel_disposition();

TEST(Sigchain, AppHandlerAfterTheTrackerSeesItsOwnFaults)
{
    ArmedRegion r;
    ASSERT_TRUE(r.ok);
    struct sigaction act, old, cur;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = app_siginfo_handler;
    act.sa_flags = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    ASSERT_EQ(sigaction(SIGSEGV, &act, &old), 0);
    EXPECT_EQ(old.sa_handler, initial_disposition.sa_handler)
        << "the application must see its own world, not our handler";
    ASSERT_EQ(sigaction(SIGSEGV, nullptr, &cur), 0);
    EXPECT_EQ(cur.sa_sigaction, app_siginfo_handler);
    EXPECT_NE(kernel_disposition().sa_sigaction, app_siginfo_handler) << "ours must stay first";

    app_hits = 0;
    char *const u = unmapped_address();
    if (sigsetjmp(jump_back, 1) == 0) {
        *(volatile char *)u = 1;
        ADD_FAILURE() << "the write to an unmapped page did not fault";
    }
    EXPECT_EQ(app_hits, 1);
    EXPECT_EQ(app_addr, u);
    EXPECT_EQ(app_code, SEGV_MAPERR);

    /* The application's own read-only page: an access fault that is not ours. */
    char *const ro = read_only_page();
    ASSERT_NE(ro, MAP_FAILED);
    if (sigsetjmp(jump_back, 1) == 0) {
        *(volatile char *)(ro + 5) = 1;
        ADD_FAILURE() << "the write to a read-only page did not fault";
    }
    EXPECT_EQ(app_hits, 2);
    EXPECT_EQ(app_addr, ro + 5);
    EXPECT_EQ(app_code, SEGV_ACCERR);
    munmap(ro, page());

    EXPECT_TRUE(r.write_is_tracked(3)) << "tracking must keep working beside the application's handler";
    ASSERT_EQ(sigaction(SIGSEGV, &old, nullptr), 0);
}

TEST(Sigchain, SignalReturnsThePreviousApplicationHandler)
{
    ArmedRegion r;
    ASSERT_TRUE(r.ok);
    struct sigaction before;
    ASSERT_EQ(sigaction(SIGSEGV, nullptr, &before), 0);
    EXPECT_EQ(signal(SIGSEGV, app_plain_handler), before.sa_handler);
    app_hits = 0;
    if (sigsetjmp(jump_back, 1) == 0)
        *(volatile char *)unmapped_address() = 1;
    EXPECT_EQ(app_hits, 1);
    EXPECT_EQ(signal(SIGSEGV, SIG_DFL), app_plain_handler);
    EXPECT_TRUE(r.write_is_tracked(1));
    ASSERT_EQ(sigaction(SIGSEGV, &before, nullptr), 0);
}

TEST(Sigchain, ResetHandLeavesTheDefaultBehind)
{
    ArmedRegion r;
    ASSERT_TRUE(r.ok);
    struct sigaction act, cur, before;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = app_siginfo_handler;
    act.sa_flags = SA_SIGINFO | SA_RESETHAND;
    ASSERT_EQ(sigaction(SIGSEGV, &act, &before), 0);
    app_hits = 0;
    if (sigsetjmp(jump_back, 1) == 0)
        *(volatile char *)unmapped_address() = 1;
    EXPECT_EQ(app_hits, 1);
    ASSERT_EQ(sigaction(SIGSEGV, nullptr, &cur), 0);
    EXPECT_EQ(cur.sa_handler, SIG_DFL);
    EXPECT_TRUE(r.write_is_tracked(2));
    ASSERT_EQ(sigaction(SIGSEGV, &before, nullptr), 0);
}

TEST(Sigchain, SentSignalsReachTheApplicationOrAreIgnored)
{
    ArmedRegion r;
    ASSERT_TRUE(r.ok);
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = app_siginfo_handler;
    act.sa_flags = SA_SIGINFO;
    ASSERT_EQ(sigaction(SIGSEGV, &act, &old), 0);
    app_hits = 0;
    ASSERT_EQ(raise(SIGSEGV), 0);
    EXPECT_EQ(app_hits, 1);
    EXPECT_LE(app_code, 0) << "a sent signal carries a user si_code";
    ASSERT_EQ(reinterpret_cast<void *>(signal(SIGSEGV, SIG_IGN)),
              reinterpret_cast<void *>(app_siginfo_handler));
    ASSERT_EQ(raise(SIGSEGV), 0); /* ignored: we are still here */
    EXPECT_EQ(app_hits, 1);
    ASSERT_EQ(sigaction(SIGSEGV, &old, nullptr), 0);
    EXPECT_TRUE(r.write_is_tracked(4));
}

void die_on_unmapped()
{
    ArmedRegion r;
    if (!r.ok || !r.write_is_tracked(1))
        _exit(3);
    *(volatile char *)unmapped_address() = 1;
    _exit(4);
}

void die_on_read_only()
{
    ArmedRegion r;
    if (!r.ok)
        _exit(3);
    *(volatile char *)read_only_page() = 1;
    _exit(4);
}

/* The kernel kills on a fault even when the application ignores SIGSEGV. */
void die_on_unmapped_ignored()
{
    ArmedRegion r;
    if (!r.ok)
        _exit(3);
    signal(SIGSEGV, SIG_IGN);
    *(volatile char *)unmapped_address() = 1;
    _exit(4);
}

void die_on_raise()
{
    ArmedRegion r;
    if (!r.ok)
        _exit(3);
    raise(SIGSEGV);
    _exit(4);
}

/* Killed by SIGSEGV as without the shim.  Under AddressSanitizer the
 * handler found at start-up is ASan's own, which reports and exits: that it
 * runs shows the chain reaching a handler installed before ours. */
bool died_of_segv(int status)
{
#if defined(__SANITIZE_ADDRESS__)
    if (WIFEXITED(status))
        return WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3 && WEXITSTATUS(status) != 4;
#endif
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

TEST(SigchainDeathTest, DefaultDispositionStillKills)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(die_on_unmapped(), died_of_segv, "");
    EXPECT_EXIT(die_on_read_only(), died_of_segv, "");
    EXPECT_EXIT(die_on_unmapped_ignored(), ::testing::KilledBySignal(SIGSEGV), "");
    EXPECT_EXIT(die_on_raise(), died_of_segv, "");
}

/* Runs in a fresh process: the application installs its handler before
 * tracking starts; the tracker must pick it up as the one to chain to. */
void handler_before_tracker()
{
    struct sigaction act, cur;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = app_siginfo_handler;
    act.sa_flags = SA_SIGINFO;
    if (sigaction(SIGSEGV, &act, nullptr) != 0)
        _exit(10);
    ArmedRegion r;
    if (!r.ok)
        _exit(11);
    if (kernel_disposition().sa_sigaction == app_siginfo_handler)
        _exit(12);
    if (sigaction(SIGSEGV, nullptr, &cur) != 0 || cur.sa_sigaction != app_siginfo_handler)
        _exit(13);
    if (!r.write_is_tracked(5))
        _exit(14);
    app_hits = 0;
    char *const u = unmapped_address();
    if (sigsetjmp(jump_back, 1) == 0)
        *(volatile char *)u = 1;
    if (app_hits != 1 || app_addr != u)
        _exit(15);
    _exit(0);
}

TEST(SigchainDeathTest, HandlerInstalledBeforeTheTracker)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(handler_before_tracker(), ::testing::ExitedWithCode(0), "");
}

} // namespace
