/*
 * The streaming step's thread team (ops.h: mega_step_team_run, mega_step_parallel).
 *
 * Why not one OpenMP region per product: a decoded token runs about 25 small parallel pieces of
 * work (five dependent products per layer, the output layer, the attention at batch > 1), each
 * worth 5-50 microseconds. A libgomp region costs a fork, a join and two futex system calls
 * (its barrier release always wakes), and on a shared machine every region end waits for a
 * descheduled thread, so with 25 regions per token the waits dominate decode time under load.
 *
 * Inside mega_step_team_run a token opens ONE region: thread 0 (the master, the caller's thread)
 * runs the step code; every mega_step_parallel it reaches is posted to the other threads, which
 * spin on an atomic word between jobs. Pieces are claimed one at a time with a compare-and-swap,
 * the master claiming too, so a worker that is descheduled simply leaves its pieces to the
 * master: the master only ever waits for pieces a worker has already started. Which thread runs
 * a piece never changes its result (each piece writes its own outputs, computed the same way).
 *
 * Protocol (one master, any number of workers):
 *   claim  = job sequence (32 bits) | pieces (16) | next piece (16): a piece is claimed by a
 *            compare-and-swap that also checks the sequence, so a worker that arrives late
 *            cannot take a piece of a finished job;
 *   fn/arg = the current job, written by the master before it publishes the claim word and read
 *            by a worker only after it has claimed a piece (the job stays current until every
 *            piece is done, so they cannot change under it);
 *   done   = pieces finished (release by the worker that ran one, acquire by the master);
 *   seq    = the latest job, which workers poll; quit ends the workers' loop.
 *
 * Why the team is sometimes not used (mega_step_tuner): the region still ends in a join, and on a
 * machine where another process keeps one core busy, the worker that shares that core is
 * descheduled for whole time slices (milliseconds, against a token's half millisecond): the join,
 * and any piece the worker had claimed when it was preempted, then wait for it. On a 2-core
 * machine with one spin loop beside it, one-token decoding on the team fell below the speed of
 * the calling thread alone (the numbers: docs/performance.md, third round). So each stream
 * times its calls in both ways (windows of at least STEP_WINDOW calls
 * and STEP_WINDOW_SECONDS, per row fed) and runs the faster one, re-measuring the other way one
 * window in STEP_EXPLORE; the exploited way is re-measured all the time, so a neighbour arriving
 * shows in the next window. A window spans several of the scheduler's time slices: one shorter
 * than a slice (8 tokens of 0.25 ms) can fall while the worker happens to run and time the team
 * as fast as on a quiet machine, and the stream then stalls on the team until the next window.
 * The way chosen never changes a result: the pieces are the same, only the thread differs.
 */
#include "ops/ops.h"

#include <time.h>

/* calls per measured window, and one window in STEP_EXPLORE measures the way not chosen (about
 * 3% of calls run the slower way: at most a third slower, or twice, under a neighbour) */
#define STEP_WINDOW 8
#define STEP_WINDOW_SECONDS 0.02
#define STEP_EXPLORE 32

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the way of the next call: 1 = team, 0 = the calling thread alone */
static int tuner_way(mega_step_tuner *tu) {
    if (tu->force == 1 || tu->force == 2) return tu->force - 1;
    if (tu->left > 0) return tu->way;
    /* a new window: first each way once (team first), then the faster, the other now and then */
    int way;
    if (tu->per_row[1] <= 0) way = 1;
    else if (tu->per_row[0] <= 0) way = 0;
    else {
        const int best = tu->per_row[0] < tu->per_row[1] ? 0 : 1;
        way = (++tu->windows % STEP_EXPLORE == 0) ? !best : best;
    }
    tu->way = way, tu->left = STEP_WINDOW, tu->seconds = 0, tu->rows = 0;
    return way;
}

static void tuner_add(mega_step_tuner *tu, double seconds, size_t rows) {
    if (tu->force == 1 || tu->force == 2) return;
    tu->seconds += seconds, tu->rows += (double)rows;
    if (--tu->left > 0) return;
    if (tu->seconds < STEP_WINDOW_SECONDS) {
        tu->left = 1; /* the window goes on, a call at a time */
        return;
    }
    if (tu->rows > 0) tu->per_row[tu->way] = tu->seconds / tu->rows;
}

#ifdef _OPENMP
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>

#define MAX_PIECES 0xffff /* the claim word's 16-bit fields */

typedef struct {
    _Alignas(64) _Atomic uint64_t claim; /* each atomic on its own cache line: polled by workers */
    _Alignas(64) _Atomic uint32_t done;
    _Alignas(64) _Atomic uint32_t seq;
    _Atomic int quit;
    mega_step_fn fn;
    void *arg;
    uint32_t next; /* master only: sequence of the next job */
    int nthreads;
    int busy; /* master only: a job is running (a piece that posted another would run it alone) */
} step_team;

/* the team whose master is this thread, while mega_step_team_run runs its body */
static _Thread_local step_team *g_team;
/* set while this thread runs a body alone (the tuner's choice): no region, no split */
static _Thread_local int g_solo;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* the next piece of job s, or -1 when it has none left (or s is no longer the current job) */
static int claim(step_team *tm, uint32_t s) {
    uint64_t c = atomic_load_explicit(&tm->claim, memory_order_acquire);
    for (;;) {
        const uint32_t n = (uint32_t)(c >> 16) & 0xffff, i = (uint32_t)c & 0xffff;
        if ((uint32_t)(c >> 32) != s || i >= n) return -1;
        if (atomic_compare_exchange_weak_explicit(&tm->claim, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (int)i;
    }
}

static void work(step_team *tm, uint32_t s) {
    int i;
    while ((i = claim(tm, s)) >= 0) {
        tm->fn(tm->arg, i);
        atomic_fetch_add_explicit(&tm->done, 1, memory_order_release);
    }
}

static void worker(step_team *tm) {
    uint32_t seen = 0;
    for (;;) {
        const uint32_t s = atomic_load_explicit(&tm->seq, memory_order_acquire);
        if (s != seen) {
            seen = s;
            work(tm, s);
        } else if (atomic_load_explicit(&tm->quit, memory_order_acquire)) {
            return;
        } else {
            relax();
        }
    }
}

static void run_job(step_team *tm, int n, mega_step_fn fn, void *arg) {
    if (++tm->next == 0) tm->next = 1; /* never 0, the workers' initial "seen" */
    const uint32_t s = tm->next;
    tm->fn = fn, tm->arg = arg;
    atomic_store_explicit(&tm->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tm->claim, ((uint64_t)s << 32) | ((uint64_t)n << 16), memory_order_release);
    atomic_store_explicit(&tm->seq, s, memory_order_release);
    work(tm, s);
    while (atomic_load_explicit(&tm->done, memory_order_acquire) < (uint32_t)n) relax();
}

static mega_status run_team(mega_status (*body)(void *arg), void *arg) {
    step_team tm;
    atomic_init(&tm.claim, 0);
    atomic_init(&tm.done, 0);
    atomic_init(&tm.seq, 0);
    atomic_init(&tm.quit, 0);
    tm.fn = NULL, tm.arg = NULL, tm.next = 0, tm.nthreads = 1, tm.busy = 0;
    mega_status st = MEGA_OK;
    /* the default team size: libgomp reuses its cached team (no allocation) */
#pragma omp parallel
    {
        if (omp_get_thread_num() == 0) {
            tm.nthreads = omp_get_num_threads();
            g_team = &tm;
            st = body(arg);
            g_team = NULL;
            atomic_store_explicit(&tm.quit, 1, memory_order_release);
        } else {
            worker(&tm);
        }
    }
    return st;
}

mega_status mega_step_team_run(mega_step_tuner *tu, size_t rows, mega_status (*body)(void *arg), void *arg) {
    if (g_team || g_solo || omp_in_parallel() || omp_get_max_threads() < 2) return body(arg);
    const int way = tu ? tuner_way(tu) : 1;
    const double t0 = tu ? now_seconds() : 0;
    mega_status st;
    if (way) {
        st = run_team(body, arg);
    } else {
        g_solo = 1;
        st = body(arg);
        g_solo = 0;
    }
    if (tu) tuner_add(tu, now_seconds() - t0, rows);
    return st;
}

int mega_step_threads(void) {
    if (g_team) return g_team->nthreads;
    return g_solo || omp_in_parallel() ? 1 : omp_get_max_threads();
}

int mega_step_may_fork(void) { return !g_team && !g_solo && !omp_in_parallel() && omp_get_max_threads() > 1; }

void mega_step_parallel(int n, mega_step_fn fn, void *arg, int split) {
    if (n <= 0) return;
    step_team *tm = g_team;
    if (split && n > 1 && n <= MAX_PIECES && tm && tm->nthreads > 1 && !tm->busy) {
        tm->busy = 1;
        run_job(tm, n, fn, arg);
        tm->busy = 0;
        return;
    }
    if (split && n > 1 && !tm && !g_solo && !omp_in_parallel() && omp_get_max_threads() > 1) {
        /* no team: one region (the default team size, cached by libgomp), contiguous pieces per
         * thread; a worksharing loop is avoided because LLVM's libomp allocates in its setup */
#pragma omp parallel
        {
            const int t = omp_get_thread_num(), nt = omp_get_num_threads();
            for (int i = (int)((long)n * t / nt); i < (int)((long)n * (t + 1) / nt); i++) fn(arg, i);
        }
        return;
    }
    for (int i = 0; i < n; i++) fn(arg, i);
}

#else /* no OpenMP: everything on the calling thread */

mega_status mega_step_team_run(mega_step_tuner *tu, size_t rows, mega_status (*body)(void *arg), void *arg) {
    (void)tu, (void)rows, (void)tuner_way, (void)tuner_add, (void)now_seconds;
    return body(arg);
}
int mega_step_threads(void) { return 1; }
int mega_step_may_fork(void) { return 0; }
void mega_step_parallel(int n, mega_step_fn fn, void *arg, int split) {
    (void)split;
    for (int i = 0; i < n; i++) fn(arg, i);
}

#endif
