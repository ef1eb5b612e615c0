/* Thread control shared by OpenMP regions and BLAS, and the build description. */
#include "core/internal.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* The calling thread's setting: OpenMP keeps its thread count per thread (a thread the program
 * creates starts with the default, OMP_NUM_THREADS or every core), so this does too. */
static _Thread_local int g_threads;


/* the default: OMP_NUM_THREADS when it is set to a positive number (its first entry, as OpenMP
 * reads a list), else every core */
static int default_threads(void) {
    const char *e = getenv("OMP_NUM_THREADS");
    long v = e ? strtol(e, NULL, 10) : 0;
    if (v > 0) return v > 4096 ? 4096 : (int)v;
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

void mega_set_threads(int n) {
#ifdef _OPENMP
    if (n <= 0) n = default_threads();
    omp_set_num_threads(n);
#else
    if (n <= 0) n = default_threads(); /* OMP_NUM_THREADS, else 1 (no OpenMP: our loops are serial) */
#endif
    /* BLAS itself stays single-threaded: the library threads its products (src/ops/gemm.c) */
    g_threads = n;
}

int mega_get_threads(void) {
#ifdef _OPENMP
    if (g_threads <= 0) return omp_get_max_threads();
    return g_threads;
#else
    return 1;
#endif
}

/* activation recomputation (mega_train.h): per thread, as the thread count, since both say how a
 * model runs rather than what it is */
static _Thread_local mega_recompute g_recompute;

void mega_set_recompute(mega_recompute r) {
    g_recompute = r > MEGA_RECOMPUTE_NONE && r < MEGA_RECOMPUTE_COUNT ? r : MEGA_RECOMPUTE_NONE;
}

mega_recompute mega_get_recompute(void) { return g_recompute; }

const char *mega_recompute_name(mega_recompute r) {
    static const char *const names[MEGA_RECOMPUTE_COUNT] = {"none", "blocks"};
    return r >= 0 && r < MEGA_RECOMPUTE_COUNT ? names[r] : NULL;
}

const char *mega_build_info(void) {
    return "mega " MEGA_VERSION " " MEGA_REAL_NAME
#if defined(__AVX512F__)
           " avx512"
#elif defined(__AVX2__)
           " avx2"
#endif
#ifdef _OPENMP
           " openmp"
#else
           " no-openmp"
#endif
#ifdef MEGA_USE_BLAS
           " openblas"
#else
           " portable-gemm"
#endif
        ;
}
