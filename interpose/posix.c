/* SPDX-License-Identifier: MIT
 * ibpshim: exported libc forwarders that keep mprotect write tracking correct. */
/* Each symbol is defined under its own name: with 64-bit file offsets the
 * headers would rename pread to pread64 and the two definitions would clash. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "policy/track.h"

#define IBP_EXPORT __attribute__((visibility("default")))

/* glibc's fortified entry points (-D_FORTIFY_SOURCE) read through its
 * internal __read, which the plain read() forwarder never sees. */
ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t count, off64_t offset, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags, struct sockaddr *addr,
                       socklen_t *addrlen);

/* The next definition after ours, looked up once per function. */
static void *real_symbol(const char *name, void *_Atomic *slot)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        atomic_store_explicit(slot, f, memory_order_release);
    }
    return f;
}

static void release_pins(void *pins)
{
    ibp_track_after_kernel_write(pins);
}

/* Calls the real function (or fails with ENOSYS if libc has none) and then releases the pins
 * the hook before it took, errno kept as the call left it; also when the thread is cancelled in
 * the call (all of these are cancellation points). */
#define IBP_FORWARD(pins, name, ...)                                                                         \
    do {                                                                                                     \
        static void *_Atomic slot;                                                                           \
        __typeof__(&name) const real = (__typeof__(&name))real_symbol(#name, &slot);                         \
        if (!real) {                                                                                         \
            ibp_track_after_kernel_write(&(pins));                                                           \
            errno = ENOSYS;                                                                                  \
            return -1;                                                                                       \
        }                                                                                                    \
        __typeof__(real(__VA_ARGS__)) result;                                                                \
        pthread_cleanup_push(release_pins, &(pins));                                                         \
        result = real(__VA_ARGS__);                                                                          \
        pthread_cleanup_pop(0);                                                                              \
        const int saved = errno;                                                                             \
        ibp_track_after_kernel_write(&(pins));                                                               \
        errno = saved;                                                                                       \
        return result;                                                                                       \
    } while (0)

IBP_EXPORT ssize_t read(int fd, void *buf, size_t count)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, count, &pins);
    IBP_FORWARD(pins, read, fd, buf, count);
}

IBP_EXPORT ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, count, &pins);
    IBP_FORWARD(pins, __read_chk, fd, buf, count, buflen);
}

IBP_EXPORT ssize_t pread(int fd, void *buf, size_t count, off_t offset)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, count, &pins);
    IBP_FORWARD(pins, pread, fd, buf, count, offset);
}

IBP_EXPORT ssize_t pread64(int fd, void *buf, size_t count, off64_t offset)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, count, &pins);
    IBP_FORWARD(pins, pread64, fd, buf, count, offset);
}

IBP_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, count, &pins);
    IBP_FORWARD(pins, __pread_chk, fd, buf, count, offset, buflen);
}

IBP_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t count, off64_t offset, size_t buflen)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, count, &pins);
    IBP_FORWARD(pins, __pread64_chk, fd, buf, count, offset, buflen);
}

IBP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write_iov(iov, iovcnt, &pins);
    IBP_FORWARD(pins, readv, fd, iov, iovcnt);
}

IBP_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write_iov(iov, iovcnt, &pins);
    IBP_FORWARD(pins, preadv, fd, iov, iovcnt, offset);
}

IBP_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int iovcnt, off64_t offset)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write_iov(iov, iovcnt, &pins);
    IBP_FORWARD(pins, preadv64, fd, iov, iovcnt, offset);
}

IBP_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write_iov(iov, iovcnt, &pins);
    IBP_FORWARD(pins, preadv2, fd, iov, iovcnt, offset, flags);
}

IBP_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, len, &pins);
    IBP_FORWARD(pins, recv, fd, buf, len, flags);
}

IBP_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, len, &pins);
    IBP_FORWARD(pins, __recv_chk, fd, buf, len, buflen, flags);
}

IBP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
                           socklen_t *addrlen)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, len, &pins);
    ibp_track_before_kernel_write(addr, addr && addrlen ? *addrlen : 0, &pins);
    IBP_FORWARD(pins, recvfrom, fd, buf, len, flags, addr, addrlen);
}

IBP_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                                  struct sockaddr *addr, socklen_t *addrlen)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write(buf, len, &pins);
    ibp_track_before_kernel_write(addr, addr && addrlen ? *addrlen : 0, &pins);
    IBP_FORWARD(pins, __recvfrom_chk, fd, buf, len, buflen, flags, addr, addrlen);
}

IBP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    IbpTrackPins pins = {0};
    ibp_track_before_kernel_write_msg(msg, &pins);
    IBP_FORWARD(pins, recvmsg, fd, msg, flags);
}

IBP_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout)
{
    IbpTrackPins pins = {0};
    for (unsigned int i = 0; vec && i < vlen; i++)
        ibp_track_before_kernel_write_msg(&vec[i].msg_hdr, &pins);
    IBP_FORWARD(pins, recvmmsg, fd, vec, vlen, flags, timeout);
}

IBP_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
    return ibp_track_sigaction(sig, act, oldact);
}

IBP_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    return ibp_track_signal(sig, handler);
}
