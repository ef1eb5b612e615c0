/* Available memory, non-blocking opens of regular files, sizes for messages (limits.h). */
#include "core/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* the first number after `key` in a small text file (/proc/meminfo, cgroup files); 0 if none */
static int read_number(const char *path, const char *key, uint64_t *out) {
    FILE *f = fopen(path, "r"); /* /proc and /sys only: never a FIFO */
    if (!f) return 0;
    char line[256];
    int found = 0;
    const size_t kl = key ? strlen(key) : 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (kl && strncmp(line, key, kl)) continue;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(line + kl, &end, 10);
        if (end != line + kl && !errno) *out = v, found = 1;
        if (!kl) break; /* a file holding one number */
    }
    fclose(f);
    return found;
}

/* MemAvailable of /proc/meminfo (the kernel's estimate of what can be allocated without
 * swapping), else the free physical pages; lowered to what a cgroup limit leaves (containers) */
size_t mega_memory_available(void) {
    uint64_t kb = 0, avail = 0;
    if (read_number("/proc/meminfo", "MemAvailable:", &kb)) avail = kb * 1024;
    if (!avail) {
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0) avail = (uint64_t)pages * (uint64_t)psz;
    }
    /* cgroup v2, then v1: limit - usage, when a limit is set */
    static const char *const lim[][2] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                         {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                          "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (int i = 0; i < 2; i++) {
        uint64_t l = 0, u = 0;
        if (!read_number(lim[i][0], NULL, &l) || l >= ((uint64_t)1 << 60)) continue; /* "max" or unlimited */
        read_number(lim[i][1], NULL, &u);
        const uint64_t left = l > u ? l - u : 0;
        if (!avail || left < avail) avail = left;
        break;
    }
    if (!avail) avail = (uint64_t)1 << 30; /* nothing readable: assume a modest machine */
    return avail > (uint64_t)SIZE_MAX ? SIZE_MAX : (size_t)avail;
}

uint64_t mega__read_cap(void) { return (uint64_t)mega_memory_available(); }

int mega__open_nonblock(const char *path, int *fd, struct stat *sb) {
    *fd = -1;
    int f;
    do f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    while (f < 0 && errno == EINTR);
    if (f < 0) return errno ? errno : EIO;
    if (fstat(f, sb) != 0) {
        int e = errno ? errno : EIO;
        close(f);
        return e;
    }
    /* reads of a regular file never block; clear the flag so that they behave as usual */
    if (S_ISREG(sb->st_mode)) {
        int fl = fcntl(f, F_GETFL);
        if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    }
    *fd = f;
    return 0;
}

const char *mega__file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

const char *mega_fmt_bytes(char *buf, size_t n, uint64_t b) {
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b < 1024) {
        snprintf(buf, n, "%llu bytes", (unsigned long long)b);
        return buf;
    }
    double v = (double)b / 1024;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, unit[u]);
    return buf;
}
