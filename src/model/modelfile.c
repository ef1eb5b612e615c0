/* Which file a model path names: the .safetensors file itself, or the model.safetensors of a run
 * directory (the rule of mega_lm_load, mega_lm_load_weights, mega_cls_load; public as
 * mega_model_file). */
#include "model/modelio.h"

#include <errno.h>
#include <sys/stat.h>

#define MODEL_FILE_NAME "model.safetensors"

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
        const size_t len = strlen(path);
        n = snprintf(buf, size, "%s%s" MODEL_FILE_NAME, path, len && path[len - 1] == '/' ? "" : "/");
        if (n >= 0 && (size_t)n < size && stat(buf, &sb) != 0)
            MEGA_FAIL(MEGA_ERR_IO, "%s: no " MODEL_FILE_NAME " in this directory (is it a run directory of mega train?)", path);
    } else {
        n = snprintf(buf, size, "%s", path);
    }
    if (n < 0 || (size_t)n >= size) MEGA_FAIL(MEGA_ERR_INVALID, "%s: path too long", path);
    return MEGA_OK;
}

mega_status mega__model_st_open(const char *path, mega_st_file **f) {
    *f = NULL;
    char file[4096];
    MEGA_TRY(mega_model_file(path, file, sizeof file));
    return mega_st_open(file, f);
}
