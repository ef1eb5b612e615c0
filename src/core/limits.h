/*
 * Limits of what the library reads: files are opened without blocking and only regular files
 * are read; a file read whole must fit the memory available now (mega_memory_available).
 */
#ifndef MEGA_LIMITS_H
#define MEGA_LIMITS_H
#include "core/internal.h"

#include <sys/stat.h>

/* open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) and fstat: a FIFO without a writer, a device or
 * a directory returns at once instead of blocking. 0 with *fd open and *sb filled (the caller
 * checks S_ISREG and closes), or the errno of the failure (nothing left open). */
int mega__open_nonblock(const char *path, int *fd, struct stat *sb);
/* "a directory", "a FIFO", "a character device", "a block device", "a socket", "not a regular
 * file": what a non-regular st_mode is, for messages */
const char *mega__file_kind(mode_t mode);
/* the most bytes the library reads into memory at once: the memory available now */
uint64_t mega__read_cap(void);
/* "17 bytes", "64.0 KiB", "2.16 GiB" into buf */
/* mega_fmt_bytes is public (mega.h) */
#endif
