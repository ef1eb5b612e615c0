/* Which file a model path names: the .safetensors file itself, or for a run directory of
 * `mega train` the model of its newest complete checkpoint generation (the rule of mega_lm_load,
 * mega_lm_load_weights, mega_cls_load; public as mega_model_file).
 *
 * A run directory (docs/checkpoints.md) holds checkpoint generations step-<N>.model.safetensors,
 * step-<N>.state.safetensors and step-<N>.manifest.json; the manifest, written last, names both
 * files with their sizes and FNV-1a checksums. The newest generation whose manifest parses and
 * whose model file has the recorded size and checksum is the run's model. Without one (a run of an
 * older version, or a directory made by hand) it is model.safetensors, which a save keeps equal
 * to the newest generation. */
#include "model/modelio.h"
#include "core/json.h"
#include "mega_data.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>


#define MODEL_FILE_NAME "model.safetensors"
#define BEST_FILE_NAME "best.safetensors"
#define MANIFEST_SUFFIX ".manifest.json"

/* N of "step-N.manifest.json" as mega train names it (N zero-padded to 8 digits), or -1 */
static int64_t manifest_step(const char *name) {
    if (strncmp(name, "step-", 5)) return -1;
    const char *p = name + 5;
    int64_t s = 0;
    int nd = 0;
    for (; *p >= '0' && *p <= '9' && nd < 18; p++, nd++) s = s * 10 + (*p - '0');
    char canon[64];
    snprintf(canon, sizeof canon, "step-%08" PRId64 MANIFEST_SUFFIX, s);
    return nd && !strcmp(name, canon) ? s : -1;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* whether the manifest of generation `step` in dir names a model file whose size and checksum
 * match; its path into buf */
static int generation_model(const char *dir, int64_t step, char *buf, size_t size) {
    char path[4096];
    const size_t len = strlen(dir);
    const char *sep = len && dir[len - 1] == '/' ? "" : "/";
    int n = snprintf(path, sizeof path, "%s%sstep-%08" PRId64 MANIFEST_SUFFIX, dir, sep, step);
    if (n < 0 || (size_t)n >= sizeof path) return 0;
    mega_bytes mb;
    if (mega_read_file(path, "checkpoint manifest", &mb) != MEGA_OK) return 0;
    cJSON *root = cJSON_Parse((const char *)mb.data);
    mega_bytes_free(&mb);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(m, "file");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(m, "bytes");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(m, "fnv1a64");
    int ok = cJSON_IsString(file) && file->valuestring[0] && !strchr(file->valuestring, '/') && cJSON_IsNumber(bytes) &&
             cJSON_IsString(sum);
    if (ok) {
        n = snprintf(buf, size, "%s%s%s", dir, sep, file->valuestring);
        ok = n >= 0 && (size_t)n < size;
    }
    if (ok) {
        char want[32], got[32];
        snprintf(want, sizeof want, "%s", sum->valuestring);
        mega_bytes fb;
        ok = mega_read_file(buf, "model", &fb) == MEGA_OK;
        if (ok) {
            snprintf(got, sizeof got, "%016" PRIx64, mega_fnv1a64(fb.data, fb.n));
            ok = (double)fb.n == bytes->valuedouble && !strcmp(want, got);
            mega_bytes_free(&fb);
        }
    }
    cJSON_Delete(root);
    return ok;
}

/* the model of the newest complete generation in dir into buf; 0 if there is none */
static int newest_generation(const char *dir, char *buf, size_t size) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t *steps = NULL;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = manifest_step(e->d_name);
        if (s < 0) continue;
        int64_t *g = mega__grow(steps, &cap, n, sizeof *steps, 8);
        if (!g) break;
        steps = g;
        steps[n++] = s;
    }
    closedir(d);
    if (n > 1) qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    int found = 0;
    for (int i = 0; i < n && !found; i++) found = generation_model(dir, steps[i], buf, size);
    free(steps);
    return found;
}

mega_status mega_model_file(const char *path, char *buf, size_t size) {
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "model path is empty");
    if (!buf || !size) MEGA_FAIL(MEGA_ERR_INVALID, "mega_model_file: no output buffer");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            MEGA_FAIL(MEGA_ERR_IO, "%s: no such file or directory (expected a run directory or a model .safetensors file)",
                      path);
        MEGA_FAIL(MEGA_ERR_IO, "%s: %s", path, strerror(errno));
    }
    int n;
    if (S_ISDIR(sb.st_mode)) {
        if (newest_generation(path, buf, size)) return MEGA_OK;
        const size_t len = strlen(path);
        n = snprintf(buf, size, "%s%s" MODEL_FILE_NAME, path, len && path[len - 1] == '/' ? "" : "/");
        if (n >= 0 && (size_t)n < size && stat(buf, &sb) != 0) {
            /* a directory we may not read or search is not one without a model */
            if (errno != ENOENT) MEGA_FAIL(MEGA_ERR_IO, "%s: cannot read the directory: %s", path, strerror(errno));
            MEGA_FAIL(MEGA_ERR_IO, "%s: no " MODEL_FILE_NAME " in this directory (is it a run directory of mega train?)", path);
        }
    } else {
        n = snprintf(buf, size, "%s", path);
    }
    if (n < 0 || (size_t)n >= size) MEGA_FAIL(MEGA_ERR_INVALID, "%s: path too long", path);
    return MEGA_OK;
}

/* "best" (the default): the run directory's best.safetensors, the model with the best validation
 * figure that mega train keeps, when there is one; "last" (or a run without a best): the newest
 * complete generation, as mega_model_file. A file path is used as given. */
mega_status mega_model_file_which(const char *path, const char *which, char *buf, size_t size) {
    const int best = !which || !strcmp(which, "best");
    if (!best && strcmp(which, "last")) MEGA_FAIL(MEGA_ERR_INVALID, "which model of a run: '%s' is neither best nor last", which);
    struct stat sb;
    if (best && path && *path && buf && size && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        const size_t len = strlen(path);
        const int n = snprintf(buf, size, "%s%s" BEST_FILE_NAME, path, len && path[len - 1] == '/' ? "" : "/");
        if (n >= 0 && (size_t)n < size && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode)) return MEGA_OK;
    }
    return mega_model_file(path, buf, size);
}

mega_status mega__model_st_open(const char *path, mega_st_file **f) {
    *f = NULL;
    char file[4096];
    MEGA_TRY(mega_model_file(path, file, sizeof file));
    return mega_st_open(file, f);
}
