/*
 * mega: Mega (moving-average equipped gated attention) and efficient-attention models in C.
 *
 * Public API. Everything is prefixed mega_ / MEGA_. The library never calls exit() and never
 * prints unless a log callback is installed (mega_set_log). Failing functions return a negative
 * mega_status and leave a one-line description in mega_last_error() (thread-local).
 *
 * Tensors are row-major, batch-first, PyTorch order: x is (B, T, D) with D contiguous.
 * Dimension names used throughout: B batch, T time (sequence length), D model width,
 * Z shared q/k width (zdim), E value/hidden width (hdim), N EMA expansion (ndim), F FFN width,
 * C attention chunk.
 *
 * Precision: the library is built in float (mega_real = float). The test suite also builds a
 * double-precision copy (-DMEGA_F64) for finite-difference checks and float64 fixtures; the two
 * are separate archives (libmega.a, libmega64.a) and must not be linked together.
 */
#ifndef MEGA_H
#define MEGA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEGA_VERSION "0.1.0"

#ifdef MEGA_F64
typedef double mega_real;
#define MEGA_REAL_NAME "float64"
#else
typedef float mega_real;
#define MEGA_REAL_NAME "float32"
#endif

/* ---------------------------------------------------------------------------------------------
 * status codes and errors */
typedef enum {
    MEGA_OK = 0,
    MEGA_ERR_INVALID = -1,     /* invalid argument or hyper-parameter */
    MEGA_ERR_IO = -2,          /* file could not be opened / read / written */
    MEGA_ERR_FORMAT = -3,      /* malformed or corrupt file */
    MEGA_ERR_SHAPE = -4,       /* tensor shape or dtype mismatch */
    MEGA_ERR_OOM = -5,         /* allocation failed */
    MEGA_ERR_NOT_FOUND = -6,   /* missing tensor / key / file */
    MEGA_ERR_UNSUPPORTED = -7, /* valid request this build or configuration cannot do */
    MEGA_ERR_NUMERIC = -8      /* non-finite values */
} mega_status;

const char *mega_status_str(mega_status s);
/* The detail message of the most recent failure in this thread ("" if none). */
const char *mega_last_error(void);
void mega_clear_error(void);

/* Optional log sink for progress/info messages from the library (default: silent). */
typedef void (*mega_log_fn)(int level, const char *msg, void *user);
void mega_set_log(mega_log_fn fn, void *user);

/* Threads used by the library's OpenMP regions and by BLAS (0 = all cores). */
void mega_set_threads(int n);
int mega_get_threads(void);
/* One line describing the build: precision, SIMD, OpenMP, BLAS. */
const char *mega_build_info(void);

/* ---------------------------------------------------------------------------------------------
 * safetensors (https://github.com/huggingface/safetensors): read, validate, write. */
typedef enum {
    MEGA_DT_F32 = 0, MEGA_DT_F64, MEGA_DT_F16, MEGA_DT_BF16,
    MEGA_DT_I64, MEGA_DT_I32, MEGA_DT_I16, MEGA_DT_I8, MEGA_DT_U8, MEGA_DT_BOOL
} mega_dtype;

#define MEGA_ST_MAX_DIMS 8

typedef struct {
    char *name;
    mega_dtype dtype;
    int ndim;
    int64_t shape[MEGA_ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;
    const void *data; /* points into the file image, little-endian, row-major */
} mega_st_tensor;

typedef struct mega_st_file mega_st_file;

/* Read and fully validate a safetensors file (header cap, JSON, dtypes, shapes, offsets in bounds
 * and non-overlapping, covering the data section, no duplicate names). */
mega_status mega_st_open(const char *path, mega_st_file **out);
/* Same, from a memory image (copied). */
mega_status mega_st_open_mem(const void *buf, size_t len, mega_st_file **out);
void mega_st_close(mega_st_file *f);
int mega_st_count(const mega_st_file *f);
const mega_st_tensor *mega_st_at(const mega_st_file *f, int i);
const mega_st_tensor *mega_st_get(const mega_st_file *f, const char *name); /* NULL if absent */
/* __metadata__ value for key, or NULL. */
const char *mega_st_meta(const mega_st_file *f, const char *key);
int mega_st_meta_count(const mega_st_file *f);
const char *mega_st_meta_key(const mega_st_file *f, int i);
/* Copy a tensor into a mega_real array of n elements, converting F32/F64/F16/BF16/ints.
 * Fails with MEGA_ERR_SHAPE if numel != n. */
mega_status mega_st_read_real(const mega_st_tensor *t, mega_real *dst, size_t n);
/* Copy an integer tensor (I32/I64/U8/I8/I16/BOOL) into int32. */
mega_status mega_st_read_i32(const mega_st_tensor *t, int32_t *dst, size_t n);

/* Writer: add tensors (the data is copied by mega_st_writer_add, so the caller's buffer may be
 * freed right after), then write atomically (temporary file, fsync, rename). */
typedef struct mega_st_writer mega_st_writer;
mega_st_writer *mega_st_writer_new(void);
void mega_st_writer_free(mega_st_writer *w);
mega_status mega_st_writer_add(mega_st_writer *w, const char *name, mega_dtype dtype, int ndim,
                               const int64_t *shape, const void *data);
mega_status mega_st_writer_meta(mega_st_writer *w, const char *key, const char *value);
mega_status mega_st_writer_write(mega_st_writer *w, const char *path);

size_t mega_dtype_size(mega_dtype dt);
const char *mega_dtype_name(mega_dtype dt); /* "F32", ... */

/* Atomically replace `path` with `len` bytes (temporary file in the same directory, fsync,
 * rename, fsync of the directory). */
mega_status mega_write_file_atomic(const char *path, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* MEGA_H */
