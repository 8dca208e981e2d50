/* clockjump: an LD_PRELOAD shim that moves a server's wall clock by an offset read
 * from a file, while it runs. Monotonic clocks are left alone, as a real clock step
 * (NTP, an operator, a VM resumed) leaves them.
 *
 * Why not libfaketime (Debian's `libfaketime`): its initialisation allocates, and
 * redis-server's statically linked jemalloc calls clock_gettime() while it
 * initialises, so the two recurse and redis-server does not start
 * (wolfcw/libfaketime#130, wolfcw/libfaketime#327, wolfcw/libfaketime#478:
 * https://github.com/wolfcw/libfaketime/issues). This shim allocates nothing: the
 * offset file is read with raw system calls into a stack buffer, at most every 50 ms.
 *
 * The file (CLOCKJUMP_FILE) holds a signed number of milliseconds, e.g. "30000".
 * Built by testbed at run time: cc -shared -fPIC -O2 -o libclockjump.so clockjump.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static _Atomic long long offset_ms;
static _Atomic long long checked_at_ms = -1000000;

static long long monotonic_ms(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The current offset: the file's number, re-read at most every 50 ms. */
static long long offset(void) {
    long long now = monotonic_ms();
    if (now - atomic_load(&checked_at_ms) < 50) {
        return atomic_load(&offset_ms);
    }
    atomic_store(&checked_at_ms, now);
    const char *path = getenv("CLOCKJUMP_FILE");
    if (path == NULL) {
        return 0;
    }
    int fd = (int)syscall(SYS_open, path, O_RDONLY);
    if (fd < 0) {
        return atomic_load(&offset_ms);
    }
    char buf[32];
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0) {
        return atomic_load(&offset_ms);
    }
    buf[n] = 0;
    long long value = 0;
    int sign = 1, i = 0;
    if (buf[0] == '-') {
        sign = -1;
        i = 1;
    }
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) {
        value = value * 10 + (buf[i] - '0');
    }
    atomic_store(&offset_ms, sign * value);
    return sign * value;
}

static void shift(struct timespec *ts, long long ms) {
    long long ns = (long long)ts->tv_nsec + (ms % 1000) * 1000000;
    ts->tv_sec += ms / 1000 + ns / 1000000000;
    ns %= 1000000000;
    if (ns < 0) {
        ns += 1000000000;
        ts->tv_sec -= 1;
    }
    ts->tv_nsec = ns;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int result = (int)syscall(SYS_clock_gettime, clock, ts);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        shift(ts, offset());
    }
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    if (result == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    (void)tz;
    return result;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
