/* Data-parallel ranks over MPI, or the single-rank stub (dist.h). */
#include "dist.h"

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double g_comm, g_wait; /* seconds in the sums: transfer, and waiting for the slowest rank */

#ifdef MEGA_USE_MPI
#include <mpi.h>

static int g_mpi, g_rank, g_size = 1;
static double g_timeout = 300;
static char g_desc[MPI_MAX_LIBRARY_VERSION_STRING + 32];

/* whether an MPI launcher started this process: the variables Open MPI, PMIx, PMI-1/2 (MPICH
 * Hydra, Intel MPI, srun --mpi=pmi2) and MVAPICH set in each rank's environment. MEGA_MPI=1
 * forces MPI_Init (a launcher not in this list), MEGA_MPI=0 prevents it. */
static int launched(void) {
    const char *force = getenv("MEGA_MPI");
    if (force && *force) return strcmp(force, "0") != 0;
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static void fail(const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &n);
    fprintf(stderr, "mega: error: rank %d of %d: %s%s%s; aborting the job\n", g_rank, g_size, what, n ? ": " : "", msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2); /* not reached */
}

int dist_init(int *argc, char ***argv) {
    if (!launched()) return 0;
    int provided;
    /* only the main thread calls MPI (OpenMP threads never do) */
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return cli_error("MPI_Init failed (error %d)", rc);
    g_mpi = 1;
    /* errors come back as codes (the default handler would end the job without a word from us) */
    if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
        (rc = MPI_Comm_rank(MPI_COMM_WORLD, &g_rank)) != MPI_SUCCESS || (rc = MPI_Comm_size(MPI_COMM_WORLD, &g_size)) != MPI_SUCCESS)
        fail("setting up MPI_COMM_WORLD", rc);
    if (provided < MPI_THREAD_FUNNELED && g_rank == 0)
        fprintf(stderr, "mega: warning: this MPI gives no thread support (MPI_THREAD_FUNNELED asked): the OpenMP threads never "
                        "call MPI, which most implementations accept\n");
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(lib, &n);
    lib[strcspn(lib, ",\n")] = 0; /* the first clause: name and version */
    snprintf(g_desc, sizeof g_desc, "MPI (%s), %d ranks", lib, g_size);
    return 0;
}

void dist_finalize(void) {
    if (g_mpi) MPI_Finalize();
    g_mpi = 0;
}

int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }
const char *dist_describe(void) { return g_mpi ? g_desc : "MPI available, not started (no MPI launcher)"; }
void dist_set_timeout(double seconds) { g_timeout = seconds; }

void dist_abort(int code) {
    if (g_mpi && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* wait for a non-blocking collective, testing it (which also drives MPI's progress) until the
 * deadline: spinning for the first millisecond (small messages), then every 100 us (a long
 * transfer or a late rank, without taking a core from the compute threads) */
static void wait_for(MPI_Request *rq, const char *what) {
    const double t0 = MPI_Wtime();
    for (;;) {
        int done = 0;
        int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) fail(what, rc);
        if (done) return;
        const double el = MPI_Wtime() - t0;
        if (g_timeout > 0 && el > g_timeout) {
            char m[200];
            snprintf(m, sizeof m, "%s: no answer from the other ranks for %.0f s (--dist-timeout): a rank died or hangs", what,
                     g_timeout);
            fail(m, MPI_SUCCESS);
        }
        if (el > 1e-3) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
}

static void allreduce(void *buf, size_t n, MPI_Datatype ty, MPI_Op op, const char *what) {
    if (g_size <= 1) return;
    /* counts are int: large buffers go in pieces */
    const size_t piece = (size_t)1 << 30;
    const size_t esz = ty == MPI_FLOAT ? 4 : 8;
    for (size_t o = 0; o < n; o += piece) {
        size_t k = n - o < piece ? n - o : piece;
        MPI_Request rq;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + o * esz, (int)k, ty, op, MPI_COMM_WORLD, &rq);
        if (rc != MPI_SUCCESS) fail(what, rc);
        wait_for(&rq, what);
    }
}

int dist_sum_real(mega_real *buf, size_t n) {
    if (g_size <= 1) return 0;
    /* a barrier first (one latency) separates the time spent waiting for the slowest rank (load
     * imbalance, co-tenants) from the transfer itself, which the cost model describes */
    const double t0 = MPI_Wtime();
    MPI_Request rq;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) fail("barrier before the allreduce", rc);
    wait_for(&rq, "barrier before the allreduce of the gradients");
    const double t1 = MPI_Wtime();
    allreduce(buf, n, sizeof(mega_real) == 4 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, "allreduce of the gradients");
    g_wait += t1 - t0;
    g_comm += MPI_Wtime() - t1;
    return 0;
}

int dist_sum_f64(double *buf, size_t n) {
    const double t0 = MPI_Wtime();
    allreduce(buf, n, MPI_DOUBLE, MPI_SUM, "allreduce of the step's loss");
    g_comm += MPI_Wtime() - t0;
    return 0;
}

int dist_max_f64(double *buf, size_t n) {
    allreduce(buf, n, MPI_DOUBLE, MPI_MAX, "agreement between the ranks");
    return 0;
}

#else /* the single-rank stub */

int dist_init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}
void dist_finalize(void) {}
int dist_rank(void) { return 0; }
int dist_size(void) { return 1; }
const char *dist_describe(void) { return "no MPI (single-rank build)"; }
void dist_set_timeout(double seconds) { (void)seconds; }
void dist_abort(int code) { exit(code); }
int dist_sum_real(mega_real *buf, size_t n) { return (void)buf, (void)n, 0; }
int dist_sum_f64(double *buf, size_t n) { return (void)buf, (void)n, 0; }
int dist_max_f64(double *buf, size_t n) { return (void)buf, (void)n, 0; }
#endif

int dist_agree(int code) {
    double c = code;
    dist_max_f64(&c, 1);
    return (int)c;
}

int dist_same_u64(uint64_t v) {
    /* max(x) and max(-x) = -min(x) in one reduction; 32-bit halves are exact in a double */
    double x[4] = {(double)(v >> 32), (double)(v & 0xffffffffu), -(double)(v >> 32), -(double)(v & 0xffffffffu)};
    dist_max_f64(x, 4);
    return x[0] == -x[2] && x[1] == -x[3];
}

void dist_sum_cb(double *buf, size_t n, void *ctx) {
    (void)ctx;
    dist_sum_f64(buf, n);
}

double dist_comm_seconds(void) { return g_comm; }
double dist_wait_seconds(void) { return g_wait; }
