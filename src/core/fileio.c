/* Atomic file replacement: write "<path>.tmp.<pid>" in the same directory, fsync it, rename it
 * over path, then fsync the directory so the rename itself is durable. On failure the temporary
 * file is removed and path is left as it was.
 *
 * Fault injection (for tests; tests/sh/test_checkpoint_faults.sh): the environment variable
 * MEGA_FAULT, read at every file operation, is
 *   kill:N     the process ends (_exit(137), as if killed: no cleanup, no stdio flush) just before
 *              its Nth file operation;
 *   enospc:N   the Nth data write of the process fails with ENOSPC (the temporary file is removed
 *              and the call returns MEGA_ERR_IO, as on a full disk).
 * The file operations, numbered from 1 in each process across every call, are the five steps of
 * each atomic write: create the temporary file, write, fsync, rename, fsync the directory. So
 * "kill:N" for every N from 1 on stops the process before and after each of them in turn. */
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef O_NOFOLLOW
#define O_NOFOLLOW 0
#endif

/* ---- fault injection -------------------------------------------------------------------- */

static atomic_long fault_ops, fault_writes; /* operations and data writes of this process so far */

/* the N of "NAME:N" in MEGA_FAULT, or 0 */
static long fault_arg(const char *name) {
    const char *v = getenv("MEGA_FAULT");
    size_t n = strlen(name);
    if (!v || strncmp(v, name, n) || v[n] != ':') return 0;
    return strtol(v + n + 1, NULL, 10);
}

/* called before each file operation (write: it is the data write); -1 with errno = ENOSPC when
 * the write is to fail */
static int fault_point(int write) {
    const long op = atomic_fetch_add(&fault_ops, 1) + 1;
    const long kill_at = fault_arg("kill");
    if (kill_at > 0 && op == kill_at) _exit(137);
    if (write) {
        const long w = atomic_fetch_add(&fault_writes, 1) + 1;
        const long fail_at = fault_arg("enospc");
        if (fail_at > 0 && w == fail_at) {
            errno = ENOSPC;
            return -1;
        }
    }
    return 0;
}

static int write_all(int fd, const unsigned char *p, size_t len) {
    while (len) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* fsync the directory containing path; 0 on success (or when the file system cannot sync a
 * directory), -1 with errno set otherwise */
static int sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) {
        dir = malloc(2);
        if (dir) memcpy(dir, ".", 2);
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(n + 1);
        if (dir) {
            memcpy(dir, path, n);
            dir[n] = 0;
        }
    }
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_CLOEXEC
#ifdef O_DIRECTORY
                           | O_DIRECTORY
#endif
    );
    free(dir);
    if (fd < 0) return -1;
    int rc = 0;
    while ((rc = fsync(fd)) != 0 && errno == EINTR) {
    }
    if (rc != 0 && (errno == EINVAL || errno == ENOTSUP || errno == EROFS)) rc = 0;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

mega_status mega_write_file_atomic(const char *path, const void *data, size_t len) {
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "mega_write_file_atomic: empty path");
    if (len && !data) MEGA_FAIL(MEGA_ERR_INVALID, "%s: NULL data", path);
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 32);
    if (!tmp) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory", path);
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());

    fault_point(0);
    /* a new file, never one found at the name: the name is predictable (the pid), and a hard link
     * (or a link) planted there would otherwise have its target written; what an earlier process
     * of the same pid left there goes first */
    (void)unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        MEGA_FAIL(MEGA_ERR_IO, "%s: cannot create temporary file: %s", path, strerror(e));
    }
    /* keep the permissions of the file being replaced (best effort) */
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) (void)fchmod(fd, sb.st_mode & 07777);

    const char *what = "write";
    int rc = fault_point(1);
    if (rc == 0) rc = write_all(fd, data, len);
    if (rc == 0) {
        what = "fsync";
        fault_point(0);
        while ((rc = fsync(fd)) != 0 && errno == EINTR) {
        }
    }
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        what = "close";
        rc = -1;
        e = errno;
    }
    if (rc == 0) fault_point(0);
    if (rc == 0 && rename(tmp, path) != 0) {
        what = "rename";
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        free(tmp);
        MEGA_FAIL(MEGA_ERR_IO, "%s: %s failed: %s", path, what, strerror(e));
    }
    free(tmp);
    fault_point(0);
    if (sync_parent_dir(path) != 0)
        MEGA_FAIL(MEGA_ERR_IO, "%s: fsync of the directory failed: %s", path, strerror(errno));
    return MEGA_OK;
}
