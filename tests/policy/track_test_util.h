/* SPDX-License-Identifier: MIT
 * ibpshim: helpers shared by the write-tracking tests: mappings, tracked regions, queries. */
#ifndef IBP_TESTS_POLICY_TRACK_TEST_UTIL_H
#define IBP_TESTS_POLICY_TRACK_TEST_UTIL_H

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "policy/registry.h"
#include "policy/track.h"

namespace ibptest {

inline size_t page()
{
    return ibp_track_page_size();
}

/* Anonymous private memory, or a memfd mapped twice: the second view writes
 * the same pages without going through the tracked mapping, like a DMA. */
struct Mapping {
    char *map = nullptr;
    char *alias = nullptr;
    size_t len = 0;
    int fd = -1;

    Mapping(size_t npages, bool shared)
    {
        len = npages * page();
        if (shared) {
            fd = memfd_create("ibp-track-test", MFD_CLOEXEC);
            if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
                return;
            map = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
            alias = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        } else {
            map = static_cast<char *>(
                mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        }
        if (map == MAP_FAILED)
            map = nullptr;
        if (alias == MAP_FAILED)
            alias = nullptr;
    }
    ~Mapping()
    {
        if (map)
            munmap(map, len);
        if (alias)
            munmap(alias, len);
        if (fd >= 0)
            close(fd);
    }
    Mapping(const Mapping &) = delete;
    Mapping &operator=(const Mapping &) = delete;
    bool ok() const { return map && (fd < 0 || alias); }
    /* The alias of a byte of the tracked view. */
    char *alias_of(const char *p) const { return alias + (p - map); }
};

/* A registered, tracked region [base, base + size). */
struct Tracked {
    IbpRegion *region = nullptr;
    IbpTracker *tracker = nullptr;
    char *base = nullptr;
    size_t size = 0;
    IbpTrackBackend backend = IBP_TRACK_NONE;
    uintptr_t span_start = 0;

    /* Returns 0 or the -errno of the step that failed. */
    int open(char *b, size_t s, IbpTrackBackend want)
    {
        base = b;
        size = s;
        const int64_t id = ibp_registry_add(b, s, IBP_REGION_PINNED_ALLOC, 0x5175, &region);
        if (id < 0)
            return (int)id;
        int rc = ibp_track_region(region, want, &backend);
        if (rc)
            return rc;
        tracker = ibp_region_tracker(region);
        uintptr_t end;
        ibp_tracker_span(tracker, &span_start, &end);
        return 0;
    }
    void close()
    {
        if (region) {
            ibp_registry_remove(base);
            ibp_region_put(&region);
        }
        tracker = nullptr;
    }
    ~Tracked() { close(); }

    size_t page_of(const char *p) const { return ((uintptr_t)p - span_start) / page(); }
    size_t npages() const { return page_of(base + size - 1) + 1; }

    /* Dirty flags of the pages touching [a, a + len), indexed from a's page. */
    std::vector<bool> query(const char *a, size_t len, bool rearm, int64_t *count = nullptr) const
    {
        const size_t np = len ? (((uintptr_t)a + len - 1) / page() - (uintptr_t)a / page() + 1) : 0;
        std::vector<uint64_t> bm(np / 64 + 1, 0);
        const int64_t n = ibp_tracker_query(tracker, a, len, rearm ? IBP_TRACK_QUERY_REARM : 0, bm.data(),
                                            bm.size() * 64);
        EXPECT_GE(n, 0);
        std::vector<bool> out(np);
        int64_t set = 0;
        for (size_t i = 0; i < np; i++) {
            out[i] = (bm[i / 64] >> (i % 64)) & 1;
            set += out[i];
        }
        EXPECT_EQ(set, n);
        if (count)
            *count = n;
        return out;
    }
    std::vector<bool> query_all(bool rearm) const { return query(base, size, rearm); }
};

inline std::string backend_name(IbpTrackBackend b)
{
    return ibp_track_backend_name(b);
}

/* Skips a uffd test where the kernel or sandbox does not allow it. */
#define IBP_SKIP_IF_NO_BACKEND(backend)                                                             \
    do {                                                                                            \
        const char *why_ = nullptr;                                                                 \
        if ((backend) == IBP_TRACK_UFFD && !ibp_track_uffd_available(&why_))                        \
            GTEST_SKIP() << "uffd write tracking unavailable here: " << why_;                       \
    } while (0)

} // namespace ibptest

#endif /* IBP_TESTS_POLICY_TRACK_TEST_UTIL_H */
