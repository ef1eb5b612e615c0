/*
 * Data-parallel ranks for `mega train` (docs/distributed.md): a thin layer over MPI, or a
 * single-rank stub in a build without MPI (NO_MPI=1, or no MPI found by make).
 *
 * MPI is initialised only when the process was started by an MPI launcher (mpirun, mpiexec,
 * srun: their environment variables are checked), or when MEGA_MPI=1 is set, so a plain
 * `mega train` never starts an MPI runtime. Every collective runs non-blocking and is polled
 * against a deadline (--dist-timeout): a rank that died or hangs makes the others print one
 * "mega: error:" line and end the whole job with MPI_Abort instead of waiting forever; MPI
 * errors are returned (MPI_ERRORS_RETURN), printed the same way and abort the job too. So a
 * collective that returns has succeeded; the functions return 0, or 1 in the stub never.
 */
#ifndef MEGA_TOOLS_DIST_H
#define MEGA_TOOLS_DIST_H
#include "mega.h"
#include <stddef.h>
#include <stdint.h>

/* start (before any other call; argc/argv may be given to MPI_Init); 0, or 1 after the error */
int dist_init(int *argc, char ***argv);
/* at the end of the program (a no-op when MPI was not started) */
void dist_finalize(void);
int dist_rank(void);
int dist_size(void);
/* "MPI (Open MPI v4.1.4, ...)" or "no MPI (single-rank build)" */
const char *dist_describe(void);
/* seconds a collective may wait for the other ranks before the job is aborted (0 = forever) */
void dist_set_timeout(double seconds);

/* in-place sums over the ranks (identity with one rank) */
int dist_sum_real(mega_real *buf, size_t n);
int dist_sum_f64(double *buf, size_t n);
/* in-place maxima over the ranks */
int dist_max_f64(double *buf, size_t n);
/* every rank agrees on one status: the largest of the ranks' codes */
int dist_agree(int code);
/* 1 when v is the same on every rank */
int dist_same_u64(uint64_t v);
/* a mega_sum_fn for the library: synchronized batchnorm statistics over the ranks (ctx unused) */
void dist_sum_cb(double *buf, size_t n, void *ctx);
/* end every rank of the job now with this exit code (after the error was printed) */
void dist_abort(int code);

/* seconds spent so far in the transfers of dist_sum_* (the allreduce share of a step), and in
 * dist_sum_real waiting for the slowest rank to arrive (load imbalance) */
double dist_comm_seconds(void);
double dist_wait_seconds(void);
#endif
