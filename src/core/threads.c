/* Thread control shared by OpenMP regions and BLAS, and the build description. */
#include "core/internal.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef MEGA_USE_BLAS
#include <cblas.h>
/* OpenBLAS extension (declared in its cblas.h; repeated here for other cblas headers) */
void openblas_set_num_threads(int);
#endif

static int g_threads;

void mega_set_threads(int n) {
#ifdef _OPENMP
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
#else
    if (n <= 0) n = 1;
#endif
#ifdef MEGA_USE_BLAS
    openblas_set_num_threads(n);
#endif
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
