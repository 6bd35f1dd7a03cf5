/* SPDX-License-Identifier: MIT
 * ibpshim: uffd write tracking: userfaultfd async write-protect and the PAGEMAP_SCAN ioctl. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/userfaultfd.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "policy/track_internal.h"

/* Kernel ABI (linux/userfaultfd.h and linux/fs.h of Linux >= 6.7) for
 * headers older than the running kernel. */
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1ull << 12)
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1ull << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1ull << 15)
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
#ifndef PAGE_IS_WRITTEN
#define PAGE_IS_WRITTEN (1ull << 1)
#endif
#ifndef PM_SCAN_WP_MATCHING
#define PM_SCAN_WP_MATCHING (1ull << 0)
#endif
#ifndef PM_SCAN_CHECK_WPASYNC
#define PM_SCAN_CHECK_WPASYNC (1ull << 1)
#endif

/* struct page_region and struct pm_scan_arg, under our own names so that
 * newer headers that do define them cannot clash. */
typedef struct IbpPageRegion {
    uint64_t start;
    uint64_t end;
    uint64_t categories;
} IbpPageRegion;

typedef struct IbpPmScanArg {
    uint64_t size;
    uint64_t flags;
    uint64_t start;
    uint64_t end;
    uint64_t walk_end;
    uint64_t vec;
    uint64_t vec_len;
    uint64_t max_pages;
    uint64_t category_inverted;
    uint64_t category_mask;
    uint64_t category_anyof_mask;
    uint64_t return_mask;
} IbpPmScanArg;

_Static_assert(sizeof(IbpPmScanArg) == 96, "struct pm_scan_arg is 96 bytes in the kernel ABI");
#define IBP_PAGEMAP_SCAN _IOWR('f', 16, IbpPmScanArg)
#ifdef PAGEMAP_SCAN
_Static_assert(IBP_PAGEMAP_SCAN == PAGEMAP_SCAN, "PAGEMAP_SCAN ioctl number");
#endif

/* One userfaultfd context and one pagemap descriptor per process.  The
 * context only mediates registration: in async mode the kernel resolves write
 * faults itself and nothing is ever read from the descriptor. */
static int uffd_fd = -1;
static int pagemap_fd = -1;

static int open_uffd_once(int flags)
{
    const long fd = syscall(SYS_userfaultfd, flags);
    if (fd >= 0)
        return (int)fd;
    const int err = errno;
    const int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev < 0)
        return -err;
    const int fd2 = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
    const int err2 = errno;
    close(dev);
    return fd2 >= 0 ? fd2 : -err2;
}

/* User-mode-only needs no privilege and is all async write-protect needs: the
 * kernel resolves those faults itself, kernel-mode writes (read() into the
 * buffer) included. */
static int open_uffd(uint64_t want, uint64_t *got, const char **why)
{
    static const int modes[] = {O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY, O_CLOEXEC | O_NONBLOCK};
    int last = -ENOSYS;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const int probe = open_uffd_once(modes[i]);
        if (probe < 0) {
            last = probe;
            continue;
        }
        struct uffdio_api api = {.api = UFFD_API, .features = 0};
        const int rc = ioctl(probe, UFFDIO_API, &api);
        close(probe);
        if (rc != 0) {
            last = -errno;
            continue;
        }
        if (!(api.features & UFFD_FEATURE_WP_ASYNC)) {
            *why = "kernel lacks UFFD_FEATURE_WP_ASYNC (needs Linux >= 6.7)";
            return -ENOTSUP;
        }
        const int fd = open_uffd_once(modes[i]);
        if (fd < 0) {
            last = fd;
            continue;
        }
        struct uffdio_api api2 = {.api = UFFD_API, .features = want & api.features};
        if (ioctl(fd, UFFDIO_API, &api2) != 0) {
            last = -errno;
            close(fd);
            continue;
        }
        *got = api2.features;
        return fd;
    }
    *why = last == -EPERM ? "userfaultfd not permitted (seccomp or vm.unprivileged_userfaultfd)"
           : last == -ENOSYS ? "userfaultfd not available (kernel config or seccomp)"
                             : "userfaultfd could not be opened";
    return last;
}

static int scan(uintptr_t start, uintptr_t end, bool rearm, uintptr_t first, uint64_t *out);

/* Registers a two-page scratch mapping, writes one page and checks that the
 * scan reports exactly that page: proves the whole path, not only the ioctls. */
static int self_test(const char **why)
{
    const size_t len = 2 * ibp_track_page;
    char *const p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        *why = "mmap of a probe page failed";
        return 0;
    }
    p[0] = 1;
    struct uffdio_register reg = {.range = {(uintptr_t)p, len}, .mode = UFFDIO_REGISTER_MODE_WP};
    struct uffdio_writeprotect wp = {.range = {(uintptr_t)p, len}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    uint64_t seen = 0;
    int ok = 0;
    if (ioctl(uffd_fd, UFFDIO_REGISTER, &reg) != 0) {
        *why = "UFFDIO_REGISTER with write-protect mode refused on anonymous memory";
        goto out;
    }
    if (ioctl(uffd_fd, UFFDIO_WRITEPROTECT, &wp) != 0) {
        *why = "UFFDIO_WRITEPROTECT failed";
        goto unregister;
    }
    p[ibp_track_page] = 2;
    if (scan((uintptr_t)p, (uintptr_t)p + len, true, (uintptr_t)p, &seen) != 0) {
        *why = "PAGEMAP_SCAN ioctl not supported (needs Linux >= 6.7)";
        goto unregister;
    }
    if (seen != 2) {
        *why = "PAGEMAP_SCAN reported unexpected pages";
        goto unregister;
    }
    seen = 0;
    if (scan((uintptr_t)p, (uintptr_t)p + len, false, (uintptr_t)p, &seen) != 0 || seen != 0) {
        *why = "PAGEMAP_SCAN did not re-protect the written page";
        goto unregister;
    }
    ok = 1;
unregister:
    ioctl(uffd_fd, UFFDIO_UNREGISTER, &reg.range);
out:
    munmap(p, len);
    return ok;
}

int ibp_uffd_probe(const char **why)
{
    uint64_t got = 0;
    *why = "ok";
    const int fd = open_uffd(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED |
                                 UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
                             &got, why);
    if (fd < 0)
        return 0;
    uffd_fd = fd;
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap_fd < 0) {
        *why = "cannot open /proc/self/pagemap";
        goto fail;
    }
    if (!self_test(why))
        goto fail;
    if (!(got & UFFD_FEATURE_WP_UNPOPULATED))
        IBP_DEBUG("uffd: no WP_UNPOPULATED; never-touched pages are protected on first touch only");
    return 1;

fail:
    close(uffd_fd);
    uffd_fd = -1;
    if (pagemap_fd >= 0)
        close(pagemap_fd);
    pagemap_fd = -1;
    return 0;
}

int ibp_uffd_register(IbpTracker *t)
{
    struct uffdio_register reg = {.range = {t->start, t->end - t->start}, .mode = UFFDIO_REGISTER_MODE_WP};
    if (uffd_fd < 0)
        return -ENOTSUP;
    if (ioctl(uffd_fd, UFFDIO_REGISTER, &reg) != 0) {
        const int err = errno;
        IBP_DEBUG("uffd: registering [%#lx, %#lx) failed: %s", (unsigned long)t->start, (unsigned long)t->end,
                  strerror(err));
        return err == ENOMEM ? -ENOMEM : -ENOTSUP;
    }
    if (!(reg.ioctls & (1ull << _UFFDIO_WRITEPROTECT))) {
        ioctl(uffd_fd, UFFDIO_UNREGISTER, &reg.range);
        return -ENOTSUP;
    }
    t->uffd_registered = true;
    return 0;
}

/* Also drops the write protection: an unregistered range is plain memory. */
void ibp_uffd_unregister(IbpTracker *t)
{
    struct uffdio_range range = {t->start, t->end - t->start};
    if (uffd_fd >= 0 && ioctl(uffd_fd, UFFDIO_UNREGISTER, &range) != 0)
        IBP_DEBUG("uffd: unregistering [%#lx, %#lx) failed: %s", (unsigned long)t->start,
                  (unsigned long)t->end, strerror(errno));
    t->uffd_registered = false;
}

int ibp_uffd_protect(IbpTracker *t, bool wp)
{
    struct uffdio_writeprotect arg = {.range = {t->start, t->end - t->start},
                                      .mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    return ioctl(uffd_fd, UFFDIO_WRITEPROTECT, &arg) == 0 ? 0 : -errno;
}

/* PM_SCAN_CHECK_WPASYNC makes the scan fail (EPERM) on any page not under
 * async write-protect, e.g. a mapping replaced since it was registered. */
static int scan(uintptr_t start, uintptr_t end, bool rearm, uintptr_t first, uint64_t *out)
{
    IbpPageRegion vec[64];
    IbpPmScanArg arg = {
        .size = sizeof arg,
        .flags = PM_SCAN_CHECK_WPASYNC | (rearm ? PM_SCAN_WP_MATCHING : 0),
        .start = start,
        .end = end,
        .vec = (uintptr_t)vec,
        .vec_len = sizeof vec / sizeof vec[0],
        .category_mask = PAGE_IS_WRITTEN,
        .return_mask = PAGE_IS_WRITTEN,
    };
    for (;;) {
        const int n = ioctl(pagemap_fd, IBP_PAGEMAP_SCAN, &arg);
        if (n < 0)
            return -errno;
        for (int i = 0; i < n; i++)
            ibp_bitmap_set_range(out, (vec[i].start - first) >> ibp_track_page_shift,
                                 (vec[i].end - vec[i].start) >> ibp_track_page_shift);
        if (arg.walk_end >= end)
            return 0;
        /* Stopped short without a page: a hugetlb page only partly inside the range, which a
         * write-protecting scan backs out of.  Nothing past it was looked at. */
        if (n == 0 && arg.walk_end <= arg.start)
            return -EAGAIN;
        arg.start = arg.walk_end;
    }
}

int ibp_uffd_scan(IbpTracker *t, uintptr_t first, uintptr_t last, bool rearm, uint64_t *out)
{
    (void)t;
    return scan(first, last + ibp_track_page, rearm, first, out);
}

void ibp_uffd_forget_in_child(void)
{
    if (uffd_fd >= 0)
        close(uffd_fd);
    if (pagemap_fd >= 0)
        close(pagemap_fd);
    uffd_fd = -1;
    pagemap_fd = -1;
}
