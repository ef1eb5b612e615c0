/* Shared by the libFuzzer targets fuzz/fuzz_*.c (fuzz/README.md): the entry point's prototype,
 * temporary files for the loaders that take a path, and a byte reader for the options some
 * targets take from the first bytes of their input. */
#ifndef MEGA_FUZZ_COMMON_H
#define MEGA_FUZZ_COMMON_H

#include "mega.h"
#include "mega_data.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- temporary files ------------------------------------------------------------------------
 * One directory per process: $MEGA_FUZZ_TMP when set (fuzz/run.sh makes one on tmpfs and removes
 * it afterwards), else a new one under /dev/shm (or $TMPDIR, /tmp) removed at exit. Files keep
 * their names from one input to the next and are rewritten once per input. */
#define FZ_MAX_FILES 8
static char fz_dir_buf[512];
static char fz_files[FZ_MAX_FILES][640];
static int fz_nfiles, fz_own_dir;

static inline void fz_cleanup(void) {
    for (int i = 0; i < fz_nfiles; i++) unlink(fz_files[i]);
    if (fz_own_dir && fz_dir_buf[0]) rmdir(fz_dir_buf);
}

static inline const char *fz_dir(void) {
    if (fz_dir_buf[0]) return fz_dir_buf;
    const char *env = getenv("MEGA_FUZZ_TMP");
    if (env && *env) {
        snprintf(fz_dir_buf, sizeof fz_dir_buf, "%s", env);
        mkdir(fz_dir_buf, 0700); /* may exist */
    } else {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : getenv("TMPDIR");
        snprintf(fz_dir_buf, sizeof fz_dir_buf, "%s/mega_fuzz_XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(fz_dir_buf)) {
            perror("mega fuzz: mkdtemp");
            abort();
        }
        fz_own_dir = 1;
    }
    atexit(fz_cleanup);
    return fz_dir_buf;
}

/* write data[0..n) to the file `name` in the temporary directory; returns its path (static) */
static inline const char *fz_write(const char *name, const void *data, size_t n) {
    const char *dir = fz_dir();
    int slot = -1;
    char path[640];
    snprintf(path, sizeof path, "%s/%d_%s", dir, (int)getpid(), name);
    for (int i = 0; i < fz_nfiles; i++)
        if (!strcmp(fz_files[i], path)) slot = i;
    if (slot < 0) {
        if (fz_nfiles == FZ_MAX_FILES) abort();
        slot = fz_nfiles++;
        memcpy(fz_files[slot], path, sizeof path);
    }
    int fd = open(fz_files[slot], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror("mega fuzz: open");
        abort();
    }
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror("mega fuzz: write");
            abort();
        }
        p += w, n -= (size_t)w;
    }
    close(fd);
    return fz_files[slot];
}

/* ---- input bytes ----------------------------------------------------------------------------
 * Options are taken from the front of the input (fz_byte: 0 once it is used up), the rest is the
 * document. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline unsigned fz_byte(fz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

/* a NUL-terminated copy of data[0..n) (the parsers that take C strings); abort on OOM */
static inline char *fz_cstr(const void *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = 0;
    return s;
}

/* an invariant of a parser was broken: report it as a crash. The message goes to stderr and, as
 * a sanitizer summary line, to where the sanitizers report (fuzz/run.sh closes the target's
 * stderr; libFuzzer and the sanitizers keep a copy of it). */
void __sanitizer_report_error_summary(const char *error_summary);
static inline void fz_fail(const char *file, int line, const char *cond) {
    char msg[1024];
    snprintf(msg, sizeof msg, "fuzz check failed: %s:%d: %s (last error: %s)", file, line, cond, mega_last_error());
    fprintf(stderr, "%s\n", msg);
    __sanitizer_report_error_summary(msg);
    abort();
}
#define FZ_CHECK(cond)                                                                           \
    do {                                                                                         \
        if (!(cond)) fz_fail(__FILE__, __LINE__, #cond);                                         \
    } while (0)

#endif
