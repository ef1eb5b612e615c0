/* The safetensors reader on a memory image: mega_st_open_mem, then every tensor read with
 * mega_st_read_real and mega_st_read_i32, every lookup and the metadata. Invariants: a tensor
 * is found by its name, its bytes lie inside the image, numel * dtype size = nbytes. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mega_st_file *f = NULL;
    if (mega_st_open_mem(data, size, &f) != MEGA_OK) {
        FZ_CHECK(f == NULL);
        FZ_CHECK(mega_last_error()[0] != 0);
        return 0;
    }
    const int n = mega_st_count(f);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const mega_st_tensor *t = mega_st_at(f, i);
        FZ_CHECK(t && t->name);
        FZ_CHECK(mega_st_get(f, t->name) == t);
        FZ_CHECK(t->ndim >= 0 && t->ndim <= MEGA_ST_MAX_DIMS);
        FZ_CHECK(t->nbytes == t->numel * mega_dtype_size(t->dtype));
        FZ_CHECK(t->nbytes <= size);
        total += t->nbytes;
        FZ_CHECK(total <= size);
        mega_real *r = malloc((t->numel ? t->numel : 1) * sizeof *r);
        int32_t *k = malloc((t->numel ? t->numel : 1) * sizeof *k);
        FZ_CHECK(r && k);
        FZ_CHECK(mega_st_read_real(t, r, t->numel) == MEGA_OK);
        (void)mega_st_read_i32(t, k, t->numel); /* float dtypes and out-of-range I64 fail */
        FZ_CHECK(mega_st_read_real(t, r, t->numel + 1) == MEGA_ERR_SHAPE);
        free(r);
        free(k);
    }
    FZ_CHECK(mega_st_at(f, n) == NULL && mega_st_at(f, -1) == NULL);
    FZ_CHECK(mega_st_get(f, "__metadata__") == NULL);
    for (int i = 0; i < mega_st_meta_count(f); i++) {
        const char *key = mega_st_meta_key(f, i);
        FZ_CHECK(key && mega_st_meta(f, key));
    }
    (void)mega_st_meta(f, "config");
    mega_st_close(f);
    return 0;
}
