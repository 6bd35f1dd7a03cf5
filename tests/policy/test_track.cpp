/* SPDX-License-Identifier: MIT
 * ibpshim: write tracking tests (uffd and mprotect) through the real libc forwarders. */
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "track_test_util.h"

extern "C" {
#include "policy/mapping.h"
void ibp_mprot_set_budget(long pages); /* policy/track_internal.h (C11 atomics there) */
}

using namespace ibptest;

namespace {

class TrackTest : public ::testing::TestWithParam<IbpTrackBackend> {
protected:
    void SetUp() override { IBP_SKIP_IF_NO_BACKEND(GetParam()); }
};

std::string param_name(const ::testing::TestParamInfo<IbpTrackBackend> &info)
{
    return backend_name(info.param);
}

std::vector<size_t> dirty_pages(const std::vector<bool> &v)
{
    std::vector<size_t> out;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i])
            out.push_back(i);
    return out;
}

void fill_random(char *p, size_t n, std::mt19937_64 &rng)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(rng() & 0xff);
}

char *anonymous_pages(size_t len)
{
    return static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
}

/* A byte value different from the current one, so every write changes memory. */
char changed(char c)
{
    return (char)(c ^ 0x5a);
}

TEST_P(TrackTest, ReportsExactlyTheWrittenPages)
{
    Mapping m(32, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    EXPECT_EQ(t.backend, GetParam());
    memset(m.map, 1, m.len);
    /* Disarmed: everything counts as written. */
    EXPECT_EQ(dirty_pages(t.query_all(false)).size(), 32u);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    EXPECT_TRUE(dirty_pages(t.query_all(false)).empty());
    m.map[3 * page() + 17] = 2;
    memcpy(m.map + 10 * page() - 4, "abcdefgh", 8); /* straddles pages 9 and 10 */
    m.map[31 * page() + page() - 1] = 3;
    const std::vector<size_t> want = {3, 9, 10, 31};
    EXPECT_EQ(dirty_pages(t.query_all(false)), want);
    EXPECT_EQ(dirty_pages(t.query_all(false)), want) << "a plain query must not re-arm";
    EXPECT_EQ(dirty_pages(t.query_all(true)), want);
    EXPECT_TRUE(dirty_pages(t.query_all(false)).empty()) << "rearm must clear what it reported";
    m.map[9 * page()] = 4;
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{9}) << "a rearmed page must fault again";
    IbpTrackStats st;
    ibp_tracker_stats(t.tracker, &st);
    EXPECT_EQ(st.backend, GetParam());
    EXPECT_EQ(st.arms, 1u);
    EXPECT_EQ(st.pages_dirty_last, 1u);
    EXPECT_EQ(st.pages_dirty_total, 5u);
    if (GetParam() == IBP_TRACK_MPROTECT) {
        EXPECT_GE(st.faults, 5u);
    }
}

TEST_P(TrackTest, SubrangeQueriesIndexFromTheFirstPage)
{
    Mapping m(40, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    /* Starts and ends mid-page. */
    ASSERT_EQ(t.open(m.map + page() + 100, 30 * page() + 5, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    t.base[0] = 1;                  /* page 0 of the span */
    t.base[5 * page()] = 1;         /* page 5 */
    t.base[t.size - 1] = 1;         /* last page (30) */
    EXPECT_EQ(t.npages(), 31u);
    EXPECT_EQ(dirty_pages(t.query(t.base + 4 * page(), 3 * page(), false)), std::vector<size_t>{1});
    EXPECT_EQ(dirty_pages(t.query(t.base + 5 * page() + 3, 1, false)), std::vector<size_t>{0});
    EXPECT_EQ(dirty_pages(t.query(t.base, t.size, false)), (std::vector<size_t>{0, 5, 30}));
    /* Out of range or bitmap too small. */
    uint64_t bm[1];
    EXPECT_EQ(ibp_tracker_query(t.tracker, m.map, 16, 0, bm, 64), -EINVAL);
    EXPECT_EQ(ibp_tracker_query(t.tracker, t.base, t.size, 0, bm, 8), -EINVAL);
    EXPECT_EQ(ibp_tracker_query(t.tracker, t.base, 0, 0, bm, 64), 0);
}

TEST_P(TrackTest, AWriteToTheSharedPartOfAnEdgePageCounts)
{
    Mapping m(8, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map + page() + 2000, 3 * page(), GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    m.map[page() + 10] = 7; /* same page as the region's first byte, outside the region */
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{0});
}

TEST_P(TrackTest, RegionsSharingAPageCannotBothBeTracked)
{
    Mapping m(8, false);
    ASSERT_TRUE(m.ok());
    Tracked a, b;
    ASSERT_EQ(a.open(m.map, page() + 100, GetParam()), 0);
    EXPECT_EQ(b.open(m.map + page() + 100, page(), GetParam()), -EBUSY);
}

TEST_P(TrackTest, ManyThreadsWritingAtOnce)
{
    const size_t np = 256;
    Mapping m(np, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    /* Eight threads hit the same odd pages at once (two threads faulting on
     * one page), even pages stay untouched. */
    std::vector<std::thread> th;
    std::atomic<int> go{0};
    for (int k = 0; k < 8; k++)
        th.emplace_back([&, k] {
            while (!go.load())
                sched_yield();
            for (size_t p = 1; p < np; p += 2)
                m.map[p * page() + (size_t)k * 8] = (char)(k + 1);
        });
    go = 1;
    for (auto &x : th)
        x.join();
    const auto d = t.query_all(true);
    for (size_t p = 0; p < np; p++)
        EXPECT_EQ(d[p], p % 2 == 1) << "page " << p;
    for (size_t p = 1; p < np; p += 2)
        for (int k = 0; k < 8; k++)
            ASSERT_EQ(m.map[p * page() + (size_t)k * 8], (char)(k + 1));
}

/* The core property under concurrency: writers never stop while the main
 * thread rearms and takes copies of what it was told changed.  At the end,
 * every page not reported written must still hold its last copy. */
void concurrent_rearm_round(IbpTrackBackend backend, int ms, uint64_t seed)
{
    const size_t np = 128;
    Mapping m(np, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, backend), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    std::vector<char> copy(m.map, m.map + m.len);
    std::atomic<bool> stop{false};
    /* Writers stay in a window of 32 pages that moves on, so that at the end
     * most pages were rearmed and copied while writes were still landing. */
    std::atomic<size_t> window{0};
    std::vector<std::thread> th;
    for (int k = 0; k < 3; k++)
        th.emplace_back([&, k] {
            std::mt19937_64 rng(seed + (uint64_t)k);
            while (!stop.load(std::memory_order_relaxed)) {
                const size_t p = (window.load(std::memory_order_relaxed) + rng() % 32) % np;
                const size_t off = rng() % page();
                m.map[p * page() + off] = changed(m.map[p * page() + off]);
                if (rng() % 64 == 0)
                    std::this_thread::yield();
            }
        });
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    size_t rounds = 0, seen = 0;
    while (std::chrono::steady_clock::now() < until) {
        const auto d = t.query_all(true);
        for (size_t p = 0; p < np; p++)
            if (d[p]) {
                memcpy(&copy[p * page()], m.map + p * page(), page());
                seen++;
            }
        if (++rounds % 16 == 0)
            window += 8;
    }
    stop = true;
    for (auto &x : th)
        x.join();
    const auto final_d = t.query_all(false);
    size_t checked = 0;
    for (size_t p = 0; p < np; p++) {
        if (final_d[p])
            continue;
        checked++;
        ASSERT_EQ(memcmp(&copy[p * page()], m.map + p * page(), page()), 0)
            << "page " << p << " changed but was never reported (round " << rounds << ")";
    }
    EXPECT_GT(rounds, 10u);
    EXPECT_GT(seen, 0u);
    EXPECT_GT(checked, 0u);
}

TEST_P(TrackTest, ConcurrentWritesAreNeverLostAcrossRearms)
{
    concurrent_rearm_round(GetParam(), 400, 1);
}

class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    ~Fd()
    {
        if (fd_ >= 0)
            close(fd_);
    }
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

/* A temporary file holding n random bytes, already unlinked. */
int random_file(size_t n, std::vector<char> &content, std::mt19937_64 &rng)
{
    char name[] = "/tmp/ibp-track-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0)
        return -1;
    unlink(name);
    content.resize(n);
    fill_random(content.data(), n, rng);
    if (pwrite(fd, content.data(), n, 0) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return fd;
}

TEST_P(TrackTest, SyscallsWriteIntoTrackedPages)
{
    std::mt19937_64 rng(7);
    Mapping m(64, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    std::vector<char> content;
    Fd file(random_file(16 * page(), content, rng));
    ASSERT_GE(file.get(), 0);

    /* read() from a file: pages 1-2 (partial). */
    ASSERT_EQ(read(file.get(), m.map + page() + 10, page()), (ssize_t)page());
    EXPECT_EQ(memcmp(m.map + page() + 10, content.data(), page()), 0);
    /* pread64 into page 5, preadv into pages 7 and 9. */
    ASSERT_EQ(pread64(file.get(), m.map + 5 * page(), 100, 50), 100);
    EXPECT_EQ(memcmp(m.map + 5 * page(), content.data() + 50, 100), 0);
    struct iovec iov[2] = {{m.map + 7 * page(), 64}, {m.map + 9 * page() + 4000, 64}};
    ASSERT_EQ(preadv(file.get(), iov, 2, 1000), 128);
    EXPECT_EQ(memcmp(m.map + 9 * page() + 4000, content.data() + 1064, 64), 0);

    /* A pipe: read() and readv() into pages 12 and 14-15. */
    int pfd[2];
    ASSERT_EQ(pipe(pfd), 0);
    Fd pr(pfd[0]), pw(pfd[1]);
    ASSERT_EQ(write(pw.get(), "pipe-data-one", 13), 13);
    ASSERT_EQ(read(pr.get(), m.map + 12 * page() + 7, 13), 13);
    EXPECT_EQ(memcmp(m.map + 12 * page() + 7, "pipe-data-one", 13), 0);
    ASSERT_EQ(write(pw.get(), content.data(), 2 * page()), (ssize_t)(2 * page()));
    struct iovec iov2[1] = {{m.map + 14 * page(), 2 * page()}};
    ASSERT_EQ(readv(pr.get(), iov2, 1), (ssize_t)(2 * page()));
    EXPECT_EQ(memcmp(m.map + 14 * page(), content.data(), 2 * page()), 0);

    /* A socketpair: recv, recvfrom, recvmsg into pages 20, 22, 24-26. */
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Fd s0(sv[0]), s1(sv[1]);
    ASSERT_EQ(send(s0.get(), "sock-one", 8, 0), 8);
    ASSERT_EQ(recv(s1.get(), m.map + 20 * page() + 1, 8, 0), 8);
    EXPECT_EQ(memcmp(m.map + 20 * page() + 1, "sock-one", 8), 0);
    ASSERT_EQ(send(s0.get(), "sock-two", 8, 0), 8);
    ASSERT_EQ(recvfrom(s1.get(), m.map + 22 * page(), 8, 0, nullptr, nullptr), 8);
    ASSERT_EQ(send(s0.get(), content.data(), page() + 10, 0), (ssize_t)page() + 10);
    struct iovec iov3[1] = {{m.map + 25 * page() - 5, page() + 10}};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov3;
    msg.msg_iovlen = 1;
    ssize_t got = 0;
    while (got < (ssize_t)page() + 10) {
        iov3[0].iov_base = m.map + 25 * page() - 5 + got;
        iov3[0].iov_len = page() + 10 - (size_t)got;
        const ssize_t r = recvmsg(s1.get(), &msg, 0);
        ASSERT_GT(r, 0);
        got += r;
    }
    EXPECT_EQ(memcmp(m.map + 25 * page() - 5, content.data(), page() + 10), 0);

    const std::vector<size_t> want = {1, 2, 5, 7, 9, 12, 14, 15, 20, 22, 24, 25, 26};
    EXPECT_EQ(dirty_pages(t.query_all(true)), want);
    if (GetParam() == IBP_TRACK_MPROTECT) {
        IbpTrackStats st;
        ibp_tracker_stats(t.tracker, &st);
        EXPECT_GE(st.kernel_writes, 8u);
    }
}

/* mprotect: a recv() blocked on a tracked page while another thread rearms it (a copy's query,
 * the recompressor's) must still land its bytes, not fail with EFAULT; the page is reported
 * written afterwards. */
TEST_P(TrackTest, ARearmDuringABlockedReadLeavesItsTargetWritable)
{
    if (GetParam() != IBP_TRACK_MPROTECT)
        GTEST_SKIP() << "uffd never makes the kernel's writes fail";
    Mapping m(16, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Fd s0(sv[0]), s1(sv[1]);
    std::atomic<ssize_t> got{-2};
    std::atomic<int> err{0};
    std::thread reader([&] {
        const ssize_t r = recv(s1.get(), m.map + 3 * page() + 100, 8, 0);
        err = errno;
        got = r;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); // blocked in recv by now
    t.query_all(true);                                           // rearms every page written
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);                    // and a re-arm of the whole span
    ASSERT_EQ(send(s0.get(), "received", 8, 0), 8);
    reader.join();
    EXPECT_EQ(got.load(), 8) << "recv failed: " << strerror(err.load());
    EXPECT_EQ(memcmp(m.map + 3 * page() + 100, "received", 8), 0);
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{3});
    m.map[3 * page()] = 1; /* protected again once the call returned and a query rearmed it */
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{3});
}

/* A recv() into dst on its own thread, for the pin tests; cancellable. */
struct BlockedRecv {
    int fd = -1;
    char *dst = nullptr;
    size_t len = 0;
    ssize_t got = -2;
    int err = 0;
    pthread_t th{};
};

void *blocked_recv_main(void *arg)
{
    auto *b = static_cast<BlockedRecv *>(arg);
    b->got = recv(b->fd, b->dst, b->len, 0);
    b->err = errno;
    return nullptr;
}

bool start_recv(BlockedRecv &b, int fd, char *dst, size_t len)
{
    b.fd = fd;
    b.dst = dst;
    b.len = len;
    return pthread_create(&b.th, nullptr, blocked_recv_main, &b) == 0;
}

/* mprotect: a recv() blocked on a page of a tracker armed only afterwards, or while every plain
 * buffer of 70 other blocked calls is in flight, still lands; one cancelled in the call leaves no
 * pin behind (its page clean after the next arm). */
TEST(TrackMprotect, PinsCoverArmsAfterTheCallAndNeverRunOut)
{
    Mapping m(16, false);
    ASSERT_TRUE(m.ok());
    memset(m.map, 0, m.len);
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, IBP_TRACK_MPROTECT), 0);
    /* 70 calls blocked on untracked buffers: they take no pin slot. */
    constexpr int kPlain = 70;
    std::vector<std::array<int, 2>> plain(kPlain);
    std::vector<BlockedRecv> plain_recv(kPlain);
    std::vector<std::vector<char>> plain_buf(kPlain, std::vector<char>(16));
    for (int i = 0; i < kPlain; i++) {
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, plain[i].data()), 0);
        ASSERT_TRUE(start_recv(plain_recv[i], plain[i][1], plain_buf[i].data(), 8));
    }
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Fd s0(sv[0]), s1(sv[1]);
    BlockedRecv tracked;
    ASSERT_TRUE(start_recv(tracked, s1.get(), m.map + 3 * page() + 100, 8));
    std::this_thread::sleep_for(std::chrono::milliseconds(150)); /* all blocked by now */
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);                    /* armed after the call began */
    t.query_all(true);
    ASSERT_EQ(send(s0.get(), "received", 8, 0), 8);
    pthread_join(tracked.th, nullptr);
    EXPECT_EQ(tracked.got, 8) << "recv failed: " << strerror(tracked.err);
    EXPECT_EQ(memcmp(m.map + 3 * page() + 100, "received", 8), 0);
    for (int i = 0; i < kPlain; i++) {
        EXPECT_EQ(send(plain[i][0], "x", 1, 0), 1);
        pthread_join(plain_recv[i].th, nullptr);
        close(plain[i][0]);
        close(plain[i][1]);
    }
    /* Cancelled while blocked: its pin goes with it. */
    BlockedRecv cancelled;
    ASSERT_TRUE(start_recv(cancelled, s1.get(), m.map + 7 * page(), 8));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(pthread_cancel(cancelled.th), 0);
    pthread_join(cancelled.th, nullptr);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    EXPECT_TRUE(dirty_pages(t.query_all(true)).empty()) << "a cancelled call's pin stayed behind";
}

/* mprotect: a signal handler writing a tracked page while its thread holds a page-word lock (in
 * a rearm), another thread arming the tracker and writing past the budget (giving it up): none
 * of them may wait for another for good. */
char *nested_base;
size_t nested_page;

void nested_write(int)
{
    static thread_local unsigned k = 0;
    k = (k + 2) % 62;
    nested_base[(1 + k) * nested_page] ^= 1; /* an odd page of word 0 */
}

TEST(TrackMprotect, NestedFaultsNeverDeadlockWithArmsAndGiveUps)
{
    ibp_mprot_set_budget(20);
    Mapping m(128, false);
    ASSERT_TRUE(m.ok());
    memset(m.map, 0, m.len);
    nested_base = m.map;
    nested_page = page();
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, IBP_TRACK_MPROTECT), 0);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = nested_write;
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    std::atomic<bool> stop{false};
    std::atomic<long> arms{0}, queries{0};
    std::thread querier([&] {
        while (!stop) {
            t.query(m.map + 64 * page(), 64 * page(), true);
            queries++;
        }
    });
    std::thread armer([&] {
        while (!stop) {
            ibp_tracker_arm(t.tracker);
            for (size_t p = 64; p < 128; p += 2)
                m.map[p * page()] ^= 1;
            for (size_t p = 0; p < 64; p += 2)
                m.map[p * page()] ^= 1;
            arms++;
        }
    });
    const pthread_t q = querier.native_handle();
    std::thread signaller([&] {
        while (!stop) {
            pthread_kill(q, SIGUSR1);
            usleep(1);
        }
    });
    long last_arms = -1, last_queries = -1;
    for (int s = 0; s < 6; s++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const long a = arms, qn = queries;
        if (a == last_arms && qn == last_queries) {
            fprintf(stderr, "deadlock: no arm or query for 500 ms (%ld arms, %ld queries)\n", a, qn);
            _exit(1); /* the stuck threads cannot be joined */
        }
        last_arms = a;
        last_queries = qn;
    }
    stop = true;
    signaller.join();
    armer.join();
    querier.join();
    sigaction(SIGUSR1, &old, nullptr);
    ibp_mprot_set_budget(1L << 30);
    EXPECT_GT(last_arms, 0);
    EXPECT_GT(last_queries, 0);
}

/* The mappings of /proc/self/maps that overlap [p, p + len), and whether the first is writable. */
struct MapsView {
    int count = 0;
    bool first_writable = false;
};

MapsView maps_over(const void *p, size_t len)
{
    MapsView v;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return v;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo < (uintptr_t)p + len &&
            (uintptr_t)p < hi) {
            if (v.count++ == 0)
                v.first_writable = perms[1] == 'w';
        }
    }
    fclose(f);
    return v;
}

bool page_writable(const void *p)
{
    return maps_over(p, 1).first_writable;
}

/* mprotect: arming an armed tracker while threads write it must never leave a page writable
 * with its dirty bit clear (its later writes would go unreported until the next arm). */
TEST_P(TrackTest, ArmingWhileWrittenLeavesNoPageWritableAndClean)
{
    if (GetParam() != IBP_TRACK_MPROTECT)
        GTEST_SKIP() << "uffd keeps no writable pages of its own";
    constexpr size_t kPages = 256;
    Mapping m(kPages, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    std::atomic<bool> stop{false}, paused{false};
    std::atomic<int> writing{0};
    std::vector<std::thread> writers;
    for (int i = 0; i < 16; i++)
        writers.emplace_back([&, i] {
            std::mt19937 rng(i + 1);
            while (!stop) {
                if (paused) {
                    std::this_thread::yield();
                    continue;
                }
                writing++;
                if (!paused)
                    m.map[(rng() % kPages) * page()]++;
                writing--;
            }
        });
    int bad = 0;
    for (int round = 0; round < 40 && !bad; round++) {
        for (int k = 0; k < 200; k++)
            ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
        paused = true;
        while (writing)
            std::this_thread::yield();
        const std::vector<bool> dirty = t.query_all(false);
        for (size_t p = 0; p < kPages; p++)
            if (!dirty[p] && page_writable(m.map + p * page()))
                bad++;
        paused = false;
    }
    stop = true;
    for (auto &w : writers)
        w.join();
    EXPECT_EQ(bad, 0) << "pages writable with a clear dirty bit";
}

/* mprotect: every page made writable alone splits its mapping; past the budget (a quarter of
 * vm.max_map_count, 100 pages here) the tracker gives up, its span writable whole again, so the
 * application's own mmap() never runs out of mappings; it reports everything until re-armed. */
TEST(TrackMprotect, TooManyIsolatedWritablePagesGiveTheTrackerUp)
{
    ibp_mprot_set_budget(100);
    Mapping m(1024, false);
    ASSERT_TRUE(m.ok());
    memset(m.map, 0, m.len); /* populated as filled buffers are (pieces of one mapping merge back) */
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, IBP_TRACK_MPROTECT), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    /* Device writes marked and taken first: they make no page writable, and count nothing. */
    for (int round = 0; round < 4; round++) {
        ibp_tracker_mark_dirty(t.tracker, m.map, m.len);
        t.query_all(true);
    }
    for (size_t p = 0; p < 1024; p += 2)
        m.map[p * page()] = 1; /* 512 pages, none beside another */
    EXPECT_LE(maps_over(m.map, m.len).count, 3) << "the span still split page by page";
    int64_t n = 0;
    t.query(m.map, m.len, true, &n);
    EXPECT_EQ(n, 1024) << "a tracker that gave up reports every page";
    IbpTrackStats st;
    ibp_tracker_stats(t.tracker, &st);
    EXPECT_GE(st.errors, 1u);
    ibp_mprot_set_budget(1L << 30);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    m.map[5 * page()] = 1;
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{5});
}

TEST_P(TrackTest, MarkDirtyCoversDeviceWrites)
{
    Mapping m(16, true);
    ASSERT_TRUE(m.ok());
    Tracked t;
    const int rc = t.open(m.map, m.len, GetParam());
    if (rc == -ENOTSUP)
        GTEST_SKIP() << "backend cannot track shared memory here";
    ASSERT_EQ(rc, 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    /* A "DMA" through the second mapping: invisible to page protection. */
    memset(m.alias_of(m.map + 3 * page()), 9, 2 * page());
    EXPECT_TRUE(dirty_pages(t.query_all(false)).empty()) << "the alias write must be invisible";
    ibp_tracker_mark_dirty(t.tracker, m.map + 3 * page(), 2 * page());
    EXPECT_EQ(dirty_pages(t.query_all(true)), (std::vector<size_t>{3, 4}));
    EXPECT_TRUE(dirty_pages(t.query_all(false)).empty());
    /* Clipped to the span. */
    ibp_tracker_mark_dirty(t.tracker, m.map - page(), 2 * page());
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{0});
}

TEST_P(TrackTest, StopMakesTheRegionPlainMemory)
{
    Mapping m(16, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    m.map[0] = 1;
    ASSERT_EQ(ibp_track_region_stop(t.region), 0);
    IbpTrackStats before, after;
    ibp_tracker_stats(t.tracker, &before);
    memset(m.map, 2, m.len);
    ibp_tracker_stats(t.tracker, &after);
    EXPECT_EQ(after.faults, before.faults) << "untracked pages must not fault";
    EXPECT_FALSE(after.armed);
    EXPECT_EQ(dirty_pages(t.query_all(false)).size(), 16u) << "untracked reports everything";
    EXPECT_EQ(ibp_track_region_stop(t.region), -ENOENT);
    /* read() into it still works. */
    int pfd[2];
    ASSERT_EQ(pipe(pfd), 0);
    Fd pr(pfd[0]), pw(pfd[1]);
    ASSERT_EQ(write(pw.get(), "x", 1), 1);
    EXPECT_EQ(read(pr.get(), m.map + 5, 1), 1);
}

TEST_P(TrackTest, FreeAndReallocationAtTheSameAddress)
{
    const size_t len = 16 * page();
    char *p = anonymous_pages(len);
    ASSERT_NE(p, MAP_FAILED);
    {
        Tracked t;
        ASSERT_EQ(t.open(p, len, GetParam()), 0);
        ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
        p[0] = 1;
        t.close(); /* what cudaFreeHost does: remove, then the memory goes */
        p[page()] = 1; /* writable again at once */
    }
    ASSERT_EQ(munmap(p, len), 0);
    char *q = static_cast<char *>(
        mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
    ASSERT_EQ(q, p);
    Tracked t2;
    ASSERT_EQ(t2.open(q, len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t2.tracker), 0);
    EXPECT_TRUE(dirty_pages(t2.query_all(false)).empty());
    q[3 * page()] = 5;
    EXPECT_EQ(dirty_pages(t2.query_all(true)), std::vector<size_t>{3});
    t2.close();
    munmap(q, len);
}

TEST(TrackUffd, DetectsAMappingReplacedBehindItsBack)
{
    IBP_SKIP_IF_NO_BACKEND(IBP_TRACK_UFFD);
    const size_t len = 8 * page();
    char *p = anonymous_pages(len);
    ASSERT_NE(p, MAP_FAILED);
    Tracked t;
    ASSERT_EQ(t.open(p, len, IBP_TRACK_UFFD), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    /* The application frees and maps anew without telling anyone. */
    char *q = static_cast<char *>(
        mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    ASSERT_EQ(q, p);
    q[0] = 1;
    EXPECT_EQ(dirty_pages(t.query_all(true)).size(), 8u) << "nothing can be trusted after a remap";
    t.close();
    munmap(p, len);
}

/* hugetlb memory: a write-protecting scan of part of a huge page backs out without a page; the
 * query must not take that for "nothing written".  Needs free huge pages (vm.nr_hugepages). */
TEST(TrackUffd, APartialQueryOfAHugetlbPageReportsItsWrite)
{
    IBP_SKIP_IF_NO_BACKEND(IBP_TRACK_UFFD);
    const size_t len = 4u << 20;
    char *p = static_cast<char *>(
        mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0));
    if (p == MAP_FAILED)
        GTEST_SKIP() << "no free 2 MiB huge pages (vm.nr_hugepages): " << strerror(errno);
    memset(p, 0, len);
    char why[128] = "";
    EXPECT_EQ(ibp_mapping_private_anon((uintptr_t)p, len, why, sizeof why), 0)
        << "hugetlb taken as trackable";
    EXPECT_NE(strstr(why, "hugetlb"), nullptr) << why;
    Tracked t;
    ASSERT_EQ(t.open(p, len, IBP_TRACK_UFFD), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    p[3u << 20] = 1;
    const std::vector<bool> d = t.query(p + (5u << 19), 1u << 20, true); /* [2.5 MiB, 3.5 MiB) */
    EXPECT_TRUE(d[(3u << 20) / page() - (5u << 19) / page()]) << "the write at 3 MiB went unreported";
    t.close();
    munmap(p, len);
}

/* Pinned host memory is often backed by transparent huge pages.  A write to one 4 KiB page of a
 * huge page must cost one page, not 512: a table with a few rows rewritten between epochs would
 * otherwise see every 2 MiB around each row go stale. */
TEST_P(TrackTest, AWriteInAHugePageReportsOnePage)
{
    IBP_SKIP_IF_NO_BACKEND(GetParam());
    const size_t huge = (size_t)2 << 20;
    const size_t len = 2 * huge;
    char *raw = static_cast<char *>(
        mmap(nullptr, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(raw, MAP_FAILED);
    char *p = reinterpret_cast<char *>(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (madvise(p, len, MADV_HUGEPAGE) != 0) {
        munmap(raw, len + huge);
        GTEST_SKIP() << "no transparent huge pages here: " << strerror(errno);
    }
    memset(p, 1, len);
    Tracked t;
    ASSERT_EQ(t.open(p, len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    p[huge + 5 * page() + 3] = 2;
    p[17 * page()] = 3;
    const std::vector<size_t> want = {17, huge / page() + 5};
    EXPECT_EQ(dirty_pages(t.query_all(true)), want);
    p[huge + 5 * page() + 3] = 4;
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{huge / page() + 5});
    t.close();
    munmap(raw, len + huge);
}

TEST(TrackNone, ReportsOnlyMarks)
{
    Mapping m(8, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, IBP_TRACK_NONE), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    memset(m.map, 3, m.len);
    EXPECT_TRUE(dirty_pages(t.query_all(false)).empty()) << "none promises there are no host writes";
    ibp_tracker_mark_dirty(t.tracker, m.map + 2 * page(), 1);
    EXPECT_EQ(dirty_pages(t.query_all(true)), std::vector<size_t>{2});
}

TEST(TrackAuto, PicksUffdWhereAvailable)
{
    Mapping m(4, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, IBP_TRACK_AUTO), 0);
    EXPECT_EQ(t.backend, ibp_track_uffd_available(nullptr) ? IBP_TRACK_UFFD : IBP_TRACK_MPROTECT);
    EXPECT_EQ(ibp_track_backend_parse("MProtect"), IBP_TRACK_MPROTECT);
    EXPECT_EQ(ibp_track_backend_parse("bogus"), -EINVAL);
}

TEST(TrackRemove, ArmAfterRemoveIsRefused)
{
    Mapping m(4, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, IBP_TRACK_MPROTECT), 0);
    IbpRegion *held = t.region;
    ibp_region_get(held);
    IbpTracker *const tr = t.tracker;
    t.close();
    /* A compressor still holding the region must not protect freed memory. */
    EXPECT_EQ(ibp_tracker_arm(tr), -ESTALE);
    m.map[0] = 1;
    ibp_region_put(&held);
}

/* Exit codes of forked children: 0 = all good. */
enum { CHILD_OK = 0, CHILD_NOT_FORKED = 10, CHILD_QUERY = 11, CHILD_ARM = 12 };

int child_body(const Tracked &t, char *p, size_t np)
{
    if (!ibp_track_forked_child())
        return CHILD_NOT_FORKED;
    uint64_t bm[4] = {0, 0, 0, 0};
    /* Would re-protect the parent's pages if it went through the inherited descriptors. */
    if (ibp_tracker_query(t.tracker, p, np * page(), IBP_TRACK_QUERY_REARM, bm, 256) != (int64_t)np)
        return CHILD_QUERY;
    if (ibp_tracker_arm(t.tracker) != -ECHILD)
        return CHILD_ARM;
    for (size_t i = 0; i < np; i++)
        p[i * page() + 1] = 'c';
    return CHILD_OK;
}

TEST_P(TrackTest, ForkChildWritesDoNotConfuseTheParent)
{
    const size_t np = 16;
    Mapping m(np, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    m.map[2 * page()] = 1; /* before the fork */
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0)
        _exit(child_body(t, m.map, np));
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), CHILD_OK);
    m.map[7 * page()] = 1; /* after the child is gone */
    EXPECT_EQ(dirty_pages(t.query_all(true)), (std::vector<size_t>{2, 7}));
    EXPECT_EQ(m.map[5 * page() + 1], 0) << "the child's writes are its own";
    EXPECT_FALSE(ibp_track_forked_child());
}

/* A raw clone skips the fork handlers: the child must still work and still
 * never trust a query. */
TEST_P(TrackTest, RawCloneChildIsStillSafe)
{
    const size_t np = 8;
    Mapping m(np, false);
    ASSERT_TRUE(m.ok());
    Tracked t;
    ASSERT_EQ(t.open(m.map, m.len, GetParam()), 0);
    ASSERT_EQ(ibp_tracker_arm(t.tracker), 0);
    m.map[page()] = 1;
    const long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    ASSERT_GE(pid, 0);
    if (pid == 0)
        syscall(SYS_exit_group, child_body(t, m.map, np));
    int status = 0;
    ASSERT_EQ(waitpid((pid_t)pid, &status, 0), (pid_t)pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), CHILD_OK);
    m.map[6 * page()] = 1;
    EXPECT_EQ(dirty_pages(t.query_all(true)), (std::vector<size_t>{1, 6}));
}

/* ---- Randomised interleavings against a shadow copy. ---- */

struct Shadow {
    std::vector<char> armed; /* region bytes as of each page's last (re)arm */
};

void shadow_take_page(const Tracked &t, Shadow &s, size_t pg)
{
    const uintptr_t lo = t.span_start + pg * page();
    const uintptr_t a = lo > (uintptr_t)t.base ? lo : (uintptr_t)t.base;
    const uintptr_t e = std::min<uintptr_t>(lo + page(), (uintptr_t)t.base + t.size);
    memcpy(&s.armed[a - (uintptr_t)t.base], (const void *)a, e - a);
}

/* Pages reported clean must hold exactly their armed bytes. */
::testing::AssertionResult check_clean(const Tracked &t, const Shadow &s, const char *a, size_t len,
                                       const std::vector<bool> &d)
{
    const size_t first = t.page_of(a);
    for (size_t i = 0; i < d.size(); i++) {
        if (d[i])
            continue;
        const size_t pg = first + i;
        const uintptr_t lo = t.span_start + pg * page();
        const uintptr_t pa = lo > (uintptr_t)t.base ? lo : (uintptr_t)t.base;
        const uintptr_t pe = std::min<uintptr_t>(lo + page(), (uintptr_t)t.base + t.size);
        if (memcmp(&s.armed[pa - (uintptr_t)t.base], (const void *)pa, pe - pa) != 0)
            return ::testing::AssertionFailure()
                   << "page " << pg << " reported clean but changed (query at +" << (a - t.base) << ", len "
                   << len << ")";
    }
    return ::testing::AssertionSuccess();
}

struct Channels {
    int pipe_r = -1, pipe_w = -1, sock_a = -1, sock_b = -1, file = -1;
    std::vector<char> file_content;
    ~Channels()
    {
        for (int fd : {pipe_r, pipe_w, sock_a, sock_b, file})
            if (fd >= 0)
                close(fd);
    }
};

/* One random sequence over a fresh region.  Returns false (with a failure
 * recorded) as soon as the property breaks. */
bool run_sequence(IbpTrackBackend backend, std::mt19937_64 &rng, Channels &ch, int nops)
{
    const bool shared = rng() % 2;
    const size_t npg = 3 + rng() % 24;
    Mapping m(npg, shared);
    if (!m.ok()) {
        ADD_FAILURE() << "mapping failed";
        return false;
    }
    const size_t lead = rng() % 3 == 0 ? 0 : rng() % page();
    const size_t avail = m.len - lead - (rng() % 2 ? rng() % page() : 0);
    const size_t size = 1 + rng() % avail;
    Tracked t;
    const int rc = t.open(m.map + lead, size, backend);
    if (rc == -ENOTSUP && shared)
        return true;
    if (rc != 0) {
        ADD_FAILURE() << "open: " << rc;
        return false;
    }
    fill_random(t.base, size, rng);
    Shadow s;
    s.armed.assign(t.base, t.base + size);
    bool armed = false;
    auto rnd_range = [&](size_t cap, char **a, size_t *n) {
        const size_t off = rng() % size;
        size_t len = 1 + rng() % std::min(size - off, cap);
        if (rng() % 8 == 0)
            len = std::min<size_t>(size - off, 1);
        *a = t.base + off;
        *n = len;
    };
    std::vector<char> buf(64 * 1024);
    for (int op = 0; op < nops; op++) {
        char *a;
        size_t n;
        const unsigned kind = (unsigned)(rng() % 16);
        switch (kind) {
        case 0: /* (re)arm everything */
            if (ibp_tracker_arm(t.tracker) != 0) {
                ADD_FAILURE() << "arm failed";
                return false;
            }
            s.armed.assign(t.base, t.base + size);
            armed = true;
            break;
        case 1:
        case 2: { /* query, maybe rearm */
            rnd_range(size, &a, &n);
            const bool rearm = rng() % 2;
            const auto d = t.query(a, n, rearm);
            if (!armed) {
                for (bool b : d)
                    if (!b) {
                        ADD_FAILURE() << "disarmed tracker reported a clean page";
                        return false;
                    }
                break;
            }
            auto r = check_clean(t, s, a, n, d);
            if (!r) {
                ADD_FAILURE() << r.message() << " [" << backend_name(backend) << ", op " << op << "]";
                return false;
            }
            if (rearm)
                for (size_t i = 0; i < d.size(); i++)
                    if (d[i])
                        shadow_take_page(t, s, t.page_of(a) + i);
            break;
        }
        case 3:
        case 4: /* plain stores */
            rnd_range(3 * page(), &a, &n);
            fill_random(buf.data(), n, rng);
            memcpy(a, buf.data(), n);
            break;
        case 5: /* a store from another thread */
            rnd_range(2 * page(), &a, &n);
            fill_random(buf.data(), n, rng);
            std::thread([&] { memcpy(a, buf.data(), n); }).join();
            break;
        case 6: { /* read() from a pipe */
            rnd_range(16 * 1024, &a, &n);
            fill_random(buf.data(), n, rng);
            if (write(ch.pipe_w, buf.data(), n) != (ssize_t)n) {
                ADD_FAILURE() << "pipe write";
                return false;
            }
            for (size_t got = 0; got < n;) {
                const ssize_t r = read(ch.pipe_r, a + got, n - got);
                if (r <= 0) {
                    ADD_FAILURE() << "read from pipe into tracked memory: " << strerror(errno);
                    return false;
                }
                got += (size_t)r;
            }
            if (memcmp(a, buf.data(), n) != 0) {
                ADD_FAILURE() << "pipe bytes differ";
                return false;
            }
            break;
        }
        case 7: { /* pread / preadv from a file */
            rnd_range(ch.file_content.size() / 2, &a, &n);
            const off_t off = (off_t)(rng() % (ch.file_content.size() - n));
            ssize_t r;
            if (rng() % 2) {
                r = pread(ch.file, a, n, off);
            } else {
                const size_t h = n / 2;
                struct iovec iov[2] = {{a, h}, {a + h, n - h}};
                r = preadv(ch.file, iov, 2, off);
            }
            if (r != (ssize_t)n || memcmp(a, &ch.file_content[(size_t)off], n) != 0) {
                ADD_FAILURE() << "pread into tracked memory: " << r << " " << strerror(errno);
                return false;
            }
            break;
        }
        case 8: { /* recv / recvmsg from a socket */
            rnd_range(16 * 1024, &a, &n);
            fill_random(buf.data(), n, rng);
            if (send(ch.sock_a, buf.data(), n, 0) != (ssize_t)n) {
                ADD_FAILURE() << "send";
                return false;
            }
            const bool use_msg = rng() % 2;
            for (size_t got = 0; got < n;) {
                ssize_t r;
                if (use_msg) {
                    struct iovec iov = {a + got, n - got};
                    struct msghdr msg;
                    memset(&msg, 0, sizeof msg);
                    msg.msg_iov = &iov;
                    msg.msg_iovlen = 1;
                    r = recvmsg(ch.sock_b, &msg, 0);
                } else {
                    r = recv(ch.sock_b, a + got, n - got, 0);
                }
                if (r <= 0) {
                    ADD_FAILURE() << "recv into tracked memory: " << strerror(errno);
                    return false;
                }
                got += (size_t)r;
            }
            break;
        }
        case 9: /* a device-to-host copy: marked at call time, lands through the alias */
            if (!shared)
                break;
            rnd_range(4 * page(), &a, &n);
            ibp_tracker_mark_dirty(t.tracker, a, n);
            fill_random(m.alias_of(a), n, rng);
            ibp_tracker_mark_dirty(t.tracker, a, n);
            break;
        case 10: /* mark without a write: must only over-report */
            rnd_range(size, &a, &n);
            ibp_tracker_mark_dirty(t.tracker, a, n);
            break;
        case 11: /* disarm, sometimes */
            if (rng() % 4 == 0) {
                ibp_tracker_disarm(t.tracker);
                armed = false;
            }
            break;
        default: /* writes touching a single byte, the most common fault */
            rnd_range(1, &a, &n);
            *a = changed(*a);
            break;
        }
    }
    /* Final full check. */
    const auto d = t.query_all(false);
    if (armed) {
        auto r = check_clean(t, s, t.base, t.size, d);
        if (!r) {
            ADD_FAILURE() << r.message() << " [final, " << backend_name(backend) << "]";
            return false;
        }
    }
    return true;
}

bool open_channels(Channels &ch, std::mt19937_64 &rng)
{
    int p[2], s[2];
    if (pipe(p) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0)
        return false;
    ch.pipe_r = p[0];
    ch.pipe_w = p[1];
    ch.sock_a = s[0];
    ch.sock_b = s[1];
    const int big = 1 << 20;
    setsockopt(ch.sock_a, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(ch.sock_b, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    fcntl(ch.pipe_w, F_SETPIPE_SZ, 1 << 20);
    ch.file = random_file(64 * 1024, ch.file_content, rng);
    return ch.file >= 0;
}

TEST_P(TrackTest, RandomInterleavingsKeepCleanPagesExact)
{
    std::mt19937_64 rng(0x1b9 + (unsigned)GetParam());
    Channels ch;
    ASSERT_TRUE(open_channels(ch, rng));
    const int sequences = 1500;
    for (int i = 0; i < sequences; i++)
        ASSERT_TRUE(run_sequence(GetParam(), rng, ch, 40)) << "sequence " << i;
}

/* Runs for IBPSHIM_STRESS_SECONDS per backend: random sequences with longer
 * op lists, interleaved with rounds of the concurrent rearm race. */
TEST_P(TrackTest, Stress)
{
    const char *env = getenv("IBPSHIM_STRESS_SECONDS");
    if (!env)
        GTEST_SKIP() << "set IBPSHIM_STRESS_SECONDS to run (the 'stress' suite does)";
    const double seconds = atof(env) > 0 ? atof(env) : 90.0;
    std::mt19937_64 rng((uint64_t)std::chrono::steady_clock::now().time_since_epoch().count());
    Channels ch;
    ASSERT_TRUE(open_channels(ch, rng));
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    size_t n = 0;
    while (std::chrono::steady_clock::now() < until) {
        ASSERT_TRUE(run_sequence(GetParam(), rng, ch, 200)) << "sequence " << n;
        if (++n % 200 == 0) {
            concurrent_rearm_round(GetParam(), 300, rng());
            if (HasFatalFailure())
                return;
        }
    }
    RecordProperty("sequences", (int)n);
    std::cout << "[ stress ] " << backend_name(GetParam()) << ": " << n << " random sequences\n";
}

INSTANTIATE_TEST_SUITE_P(Backends, TrackTest, ::testing::Values(IBP_TRACK_UFFD, IBP_TRACK_MPROTECT),
                         param_name);

} // namespace
