/*
 * The run directory of `mega train`: the lock, checkpoint generations, the loader's choice and
 * pruning (the layout is in ckpt.h, the reasoning in docs/checkpoints.md).
 *
 * A save at step N writes step-N.model.safetensors and step-N.state.safetensors (the caller),
 * reads both back for their sizes and checksums, writes step-N.manifest.json (the commit point),
 * then replaces model.safetensors and train_state.safetensors with copies, removes the
 * generations beyond --keep (each manifest before its files) and rewrites checkpoint.json. A generation is only
 * ever written under a step no complete generation has, and never modified once its manifest
 * exists, so a crash (or several in a row, each during a later save) can only leave incomplete
 * generations behind, which the loader skips and the next start removes.
 */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define LOCK_FILE "train.lock"
#define MODEL_FILE "model.safetensors"
#define STATE_FILE "train_state.safetensors"
#define PREV_STATE_FILE "train_state.prev.safetensors" /* the protocol of mega 0.1 */
#define INFO_FILE "checkpoint.json"
#define SFX_MODEL "model.safetensors"
#define SFX_STATE "state.safetensors"
#define SFX_MANIFEST "manifest.json"
#define FORMAT "mega-checkpoint 1"

/* ---- names ---------------------------------------------------------------------------------- */

static void gen_file(char *buf, size_t n, const char *dir, int64_t step, const char *suffix) {
    char name[64];
    snprintf(name, sizeof name, "step-%08" PRId64 ".%s", step, suffix);
    path_join(buf, n, dir, name);
}

void ckpt_paths(const char *dir, int64_t step, char *model, char *state, size_t n) {
    gen_file(model, n, dir, step, SFX_MODEL);
    gen_file(state, n, dir, step, SFX_STATE);
}

/* N of "step-N.<suffix>" as gen_file names it, or -1 */
static int64_t gen_step(const char *name, const char *suffix) {
    if (strncmp(name, "step-", 5)) return -1;
    int64_t s = 0;
    int nd = 0;
    for (const char *p = name + 5; *p >= '0' && *p <= '9' && nd < 18; p++, nd++) s = s * 10 + (*p - '0');
    char canon[64];
    snprintf(canon, sizeof canon, "step-%08" PRId64 ".%s", s, suffix);
    return nd && !strcmp(name, canon) ? s : -1;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the steps of the files "step-N.<suffix>" in dir, newest first (malloc'ed; NULL when none);
 * the count, or -1 when dir cannot be read */
static int list_steps(const char *dir, const char *suffix, int64_t **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = gen_step(e->d_name, suffix);
        if (s < 0) continue;
        if (n == cap) {
            int64_t *g = realloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) break;
            *out = g;
        }
        (*out)[n++] = s;
    }
    closedir(d);
    if (n > 1) qsort(*out, (size_t)n, sizeof **out, cmp_desc);
    return n;
}

static int has_step(const int64_t *s, int n, int64_t step) {
    for (int i = 0; i < n; i++)
        if (s[i] == step) return 1;
    return 0;
}

/* unlink, a missing file being fine; 0 or 1 after the error */
static int remove_file(const char *path) {
    if (unlink(path) == 0 || errno == ENOENT) return 0;
    return cli_error("cannot remove '%s': %s", path, strerror(errno));
}

static int remove_named(const char *dir, const char *name) {
    char p[4096];
    return remove_file(path_join(p, sizeof p, dir, name));
}

/* a generation: its manifest first, so that what remains of it after a crash is incomplete */
static int remove_gen(const char *dir, int64_t step) {
    char p[4096];
    const char *sfx[] = {SFX_MANIFEST, SFX_MODEL, SFX_STATE};
    for (int i = 0; i < 3; i++) {
        gen_file(p, sizeof p, dir, step, sfx[i]);
        if (remove_file(p)) return 1;
    }
    return 0;
}

/* model and state files whose generation has no manifest (an interrupted save's) */
static int remove_orphans(const char *dir) {
    int64_t *man, *files;
    int nm = list_steps(dir, SFX_MANIFEST, &man), rc = 0;
    const char *sfx[] = {SFX_MODEL, SFX_STATE};
    for (int k = 0; k < 2 && nm >= 0 && !rc; k++) {
        int nf = list_steps(dir, sfx[k], &files);
        for (int i = 0; i < nf && !rc; i++)
            if (!has_step(man, nm, files[i])) {
                char p[4096];
                gen_file(p, sizeof p, dir, files[i], sfx[k]);
                rc = remove_file(p);
            }
        free(files);
    }
    free(man);
    return rc;
}

/* ---- files ------------------------------------------------------------------------------------ */

/* size and FNV-1a checksum of a file's bytes as read back; 0, or -1 (mega_last_error) */
static int hash_file(const char *path, uint64_t *size, uint64_t *sum) {
    mega_bytes b;
    if (mega_read_file(path, "checkpoint", &b) != MEGA_OK) return -1;
    *size = b.n;
    *sum = mega_fnv1a64(b.data, b.n);
    mega_bytes_free(&b);
    return 0;
}

static int copy_file(const char *src, const char *dst) {
    mega_bytes b;
    if (mega_read_file(src, "checkpoint", &b) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_status st = mega_write_file_atomic(dst, b.data, b.n);
    mega_bytes_free(&b);
    return st ? cli_error("%s", mega_last_error()) : 0;
}

/* dst becomes a copy of src (size and checksum known) unless it already is one */
static int sync_copy(const char *src, uint64_t size, uint64_t sum, const char *dst) {
    uint64_t n, h;
    if (file_exists(dst) && hash_file(dst, &n, &h) == 0 && n == size && h == sum) return 0;
    return copy_file(src, dst);
}

static int info_json(char *buf, size_t n, int64_t step, const char *task) {
    return snprintf(buf, n,
                    "{\"step\": %" PRId64 ", \"task\": \"%s\", \"model\": \"" MODEL_FILE "\", \"state\": \"" STATE_FILE
                    "\", \"manifest\": \"step-%08" PRId64 "." SFX_MANIFEST "\"}\n",
                    step, task, step);
}

/* checkpoint.json for generation step, unless it already says that */
static int sync_info(const char *dir, int64_t step, const char *task) {
    char want[512], p[4096];
    int len = info_json(want, sizeof want, step, task);
    path_join(p, sizeof p, dir, INFO_FILE);
    mega_bytes b;
    if (file_exists(p) && mega_read_file(p, "checkpoint", &b) == MEGA_OK) {
        int same = b.n == (size_t)len && !memcmp(b.data, want, b.n);
        mega_bytes_free(&b);
        if (same) return 0;
    }
    return mega_write_file_atomic(p, want, (size_t)len) ? cli_error("%s", mega_last_error()) : 0;
}

/* ---- the lock and the directory ------------------------------------------------------------- */

int run_link_error(const char *path) {
    return cli_error("'%s' is a symbolic link: mega train does not write through links in its run directory (remove it)",
                     path);
}

int run_open(const char *path, int flags) {
    /* O_NOFOLLOW: a link planted in the run directory would make the run truncate or append to
     * the file it points at (Linux says ELOOP, the BSDs EMLINK) */
    int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0 || (errno != ELOOP && errno != EMLINK)) return fd;
    run_link_error(path);
    errno = ELOOP;
    return -1;
}

int run_lock(const char *dir) {
    char p[4096];
    path_join(p, sizeof p, dir, LOCK_FILE);
    int fd = run_open(p, O_RDWR | O_CREAT);
    if (fd < 0 && errno == ELOOP) return 1;
    if (fd < 0) return cli_error("cannot open the lock file '%s': %s", p, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK || e == EAGAIN) {
            /* the holder writes its pid right after taking the lock */
            char buf[32] = "";
            for (int i = 0; i < 50; i++) {
                ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
                buf[r > 0 ? r : 0] = 0;
                if (r > 0 && buf[r - 1] == '\n') break;
                nanosleep(&(struct timespec){0, 10000000}, NULL);
            }
            close(fd);
            long pid = atol(buf);
            if (pid > 0) return cli_error("'%s' is in use by another mega train (pid %ld)", dir, pid);
            return cli_error("'%s' is in use by another mega train", dir);
        }
        close(fd);
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
            fprintf(stderr, "mega: warning: cannot lock '%s' (%s); make sure no other mega train writes there\n", p,
                    strerror(e));
            return 0;
        }
        return cli_error("cannot lock '%s': %s", p, strerror(e));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0) { /* the pid is only for another process' message: best effort */
        ssize_t w = pwrite(fd, pid, (size_t)len, 0);
        (void)w;
    }
    return 0; /* fd stays open (and locked) until the process ends */
}

int run_has_checkpoint(const char *dir) {
    int64_t *s;
    int n = list_steps(dir, SFX_MANIFEST, &s);
    free(s);
    if (n > 0) return 1;
    const char *names[] = {MODEL_FILE, STATE_FILE, PREV_STATE_FILE, INFO_FILE};
    for (int i = 0; i < 4; i++) {
        char p[4096];
        if (file_exists(path_join(p, sizeof p, dir, names[i]))) return 1;
    }
    return 0;
}

int run_wipe(const char *dir) {
    /* the stable names first, then each generation manifest first: whatever a crash leaves of
     * the old run is either still complete or not a checkpoint at all */
    const char *first[] = {INFO_FILE, MODEL_FILE, STATE_FILE, PREV_STATE_FILE, "best.safetensors"};
    for (int i = 0; i < 5; i++)
        if (remove_named(dir, first[i])) return 1;
    int64_t *s;
    int n = list_steps(dir, SFX_MANIFEST, &s), rc = n < 0;
    for (int i = 0; i < n && !rc; i++) rc = remove_gen(dir, s[i]);
    free(s);
    if (rc || remove_orphans(dir)) return 1;
    return remove_named(dir, "log.jsonl") || remove_named(dir, "curves.svg");
}

void run_clean_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *t = strstr(e->d_name, ".tmp."), *q;
        while (t && strstr(t + 1, ".tmp.")) t = strstr(t + 1, ".tmp.");
        if (!t || t == e->d_name || !t[5]) continue;
        for (q = t + 5; *q >= '0' && *q <= '9'; q++) {
        }
        if (*q) continue;
        long pid = atol(t + 5);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char p[4096];
        (void)remove_file(path_join(p, sizeof p, dir, e->d_name));
    }
    closedir(d);
}

/* ---- generations ------------------------------------------------------------------------------ */

/* one file of a manifest: {"file", "bytes", "fnv1a64"} -> its path, size and checksum */
static int manifest_file(const char *dir, const cJSON *root, const char *key, const char *expect, char *path, size_t n,
                         uint64_t *bytes, uint64_t *sum) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "file");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bytes");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "fnv1a64");
    /* the size is compared as a double before any conversion: a value beyond uint64_t (1e300)
     * must not reach the cast (undefined behaviour; found by fuzz/fuzz_manifest.c) */
    if (!cJSON_IsString(f) || strcmp(f->valuestring, expect) || !cJSON_IsNumber(b) || !(b->valuedouble >= 0) ||
        b->valuedouble >= 18446744073709551616.0 || !cJSON_IsString(h) || strlen(h->valuestring) != 16)
        return -1;
    char *end;
    *sum = strtoull(h->valuestring, &end, 16);
    if (*end) return -1;
    *bytes = (uint64_t)b->valuedouble;
    path_join(path, n, dir, f->valuestring);
    return 0;
}

/* generation `step` of dir into *g when it is complete: 0, else 1 with the reason in why */
static int gen_check(const char *dir, int64_t step, ckpt_gen *g, char *why, size_t nwhy) {
    char p[4096], mname[64], sname[64];
    memset(g, 0, sizeof *g);
    g->step = step;
    gen_file(p, sizeof p, dir, step, SFX_MANIFEST);
    snprintf(mname, sizeof mname, "step-%08" PRId64 "." SFX_MODEL, step);
    snprintf(sname, sizeof sname, "step-%08" PRId64 "." SFX_STATE, step);
    mega_bytes b;
    if (mega_read_file(p, "checkpoint manifest", &b) != MEGA_OK) return snprintf(why, nwhy, "%s", mega_last_error()), 1;
    cJSON *root = cJSON_Parse((const char *)b.data);
    mega_bytes_free(&b);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "step");
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(root, "task");
    int bad = !cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) || !cJSON_IsNumber(st) ||
              st->valuedouble != (double)step || !cJSON_IsString(tk) || /* as doubles: no cast of 1e300 */
              manifest_file(dir, root, "model", mname, g->model, sizeof g->model, &g->model_bytes, &g->model_sum) ||
              manifest_file(dir, root, "state", sname, g->state, sizeof g->state, &g->state_bytes, &g->state_sum);
    if (!bad) snprintf(g->task, sizeof g->task, "%s", tk->valuestring);
    cJSON_Delete(root);
    if (bad) return snprintf(why, nwhy, "%s is not a valid manifest", p), 1;
    const char *files[2] = {g->model, g->state};
    const uint64_t want_n[2] = {g->model_bytes, g->state_bytes}, want_h[2] = {g->model_sum, g->state_sum};
    for (int i = 0; i < 2; i++) {
        uint64_t n, h;
        if (hash_file(files[i], &n, &h)) return snprintf(why, nwhy, "%s", mega_last_error()), 1;
        if (n != want_n[i] || h != want_h[i])
            return snprintf(why, nwhy, "%s: its %s differs from the manifest's", files[i], n != want_n[i] ? "size" : "checksum"), 1;
    }
    return 0;
}

int ckpt_latest(const char *dir, ckpt_gen *g, int *n_manifests) {
    int64_t *s;
    int n = list_steps(dir, SFX_MANIFEST, &s), rc = 1;
    *n_manifests = n > 0 ? n : 0;
    for (int i = 0; i < n && rc; i++) {
        char why[4400];
        rc = gen_check(dir, s[i], g, why, sizeof why);
        if (rc) fprintf(stderr, "mega: note: skipping the checkpoint at step %" PRId64 ": %s\n", s[i], why);
    }
    free(s);
    return rc;
}

/* with generation `step` the current one: remove the newer generations (an abandoned
 * continuation), the older ones beyond `keep` (the current one counts), files of no generation
 * and mega 0.1's previous state */
static int prune(const char *dir, int64_t step, int keep) {
    int64_t *s;
    int n = list_steps(dir, SFX_MANIFEST, &s), rc = 0;
    for (int i = 0, kept = 0; i < n && !rc; i++) /* newest first */
        if (s[i] > step || (s[i] < step && ++kept >= keep)) rc = remove_gen(dir, s[i]);
    free(s);
    return rc || remove_orphans(dir) || remove_named(dir, PREV_STATE_FILE);
}

int ckpt_adopt(const char *dir, const ckpt_gen *g, int keep) {
    if (prune(dir, g->step, keep)) return 1;
    char p[4096];
    if (sync_copy(g->model, g->model_bytes, g->model_sum, path_join(p, sizeof p, dir, MODEL_FILE))) return 1;
    if (sync_copy(g->state, g->state_bytes, g->state_sum, path_join(p, sizeof p, dir, STATE_FILE))) return 1;
    return sync_info(dir, g->step, g->task);
}

int ckpt_commit(const char *dir, int64_t step, const char *task, const char *train_json, int keep) {
    ckpt_gen g;
    memset(&g, 0, sizeof g);
    ckpt_paths(dir, step, g.model, g.state, sizeof g.model);
    /* the bytes on disk, read back: what the manifest vouches for */
    if (hash_file(g.model, &g.model_bytes, &g.model_sum) || hash_file(g.state, &g.state_bytes, &g.state_sum))
        return cli_error("%s", mega_last_error());
    const char *mname = strrchr(g.model, '/') ? strrchr(g.model, '/') + 1 : g.model;
    const char *sname = strrchr(g.state, '/') ? strrchr(g.state, '/') + 1 : g.state;
    const char *tj = train_json ? train_json : "{}";
    size_t cap = strlen(tj) + 1024;
    char *man = malloc(cap);
    if (!man) return cli_error("out of memory");
    int len = snprintf(man, cap,
                       "{\"format\": \"" FORMAT "\", \"step\": %" PRId64 ", \"task\": \"%s\", "
                       "\"model\": {\"file\": \"%s\", \"bytes\": %" PRIu64 ", \"fnv1a64\": \"%016" PRIx64 "\"}, "
                       "\"state\": {\"file\": \"%s\", \"bytes\": %" PRIu64 ", \"fnv1a64\": \"%016" PRIx64 "\"}, "
                       "\"train\": %s}\n",
                       step, task, mname, g.model_bytes, g.model_sum, sname, g.state_bytes, g.state_sum, tj);
    char p[4096];
    gen_file(p, sizeof p, dir, step, SFX_MANIFEST);
    mega_status st = mega_write_file_atomic(p, man, (size_t)len);
    free(man);
    if (st) return cli_error("%s", mega_last_error());
    /* committed: the stable names follow, the old generations go, and checkpoint.json says so */
    if (copy_file(g.model, path_join(p, sizeof p, dir, MODEL_FILE))) return 1;
    if (copy_file(g.state, path_join(p, sizeof p, dir, STATE_FILE))) return 1;
    return prune(dir, step, keep) || sync_info(dir, step, task);
}
