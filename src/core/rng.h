/*
 * Random numbers. Two kinds:
 *  - mega_rng: a sequential splitmix64 stream (one uint64 of state, so a checkpoint stores it
 *    exactly) used for initialisation, data sampling and generation;
 *  - mega__hash01(key, index): a counter-based uniform in [0,1) used for dropout masks, so the
 *    forward and the backward regenerate the same mask without storing it, independently of
 *    the thread schedule.
 */
#ifndef MEGA_RNG_H
#define MEGA_RNG_H
#include "core/internal.h"

typedef struct { uint64_t s; } mega_rng;

static inline uint64_t mega__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t mega_rng_u64(mega_rng *r) { return mega__mix64(r->s += 0x9E3779B97F4A7C15ull); }
/* uniform in [0, 1) with 53 random bits */
static inline double mega_rng_u01(mega_rng *r) { return (double)(mega_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline void mega_rng_seed(mega_rng *r, uint64_t seed) { r->s = mega__mix64(seed ^ 0x5DEECE66Dull); }
double mega_rng_normal(mega_rng *r); /* N(0,1) */
/* uniform integer in [0, n) without modulo bias */
uint64_t mega_rng_below(mega_rng *r, uint64_t n);

static inline double mega__hash01(uint64_t key, uint64_t idx) {
    return (double)(mega__mix64(key ^ mega__mix64(idx + 0x632BE59BD9B4E019ull)) >> 11) * (1.0 / 9007199254740992.0);
}
/* derive a sub-key for a named dropout site */
static inline uint64_t mega__subkey(uint64_t key, uint64_t site) { return mega__mix64(key + 0xD1B54A32D192ED03ull * (site + 1)); }

/* fill helpers used by the *_init functions */
void mega_fill_normal(real *x, size_t n, double mean, double std, mega_rng *r);
void mega_fill_uniform(real *x, size_t n, double lo, double hi, mega_rng *r);
void mega_fill_const(real *x, size_t n, double v);
/* xavier-uniform for a [out, in] weight: U(-b, b), b = gain sqrt(6 / (in + out)) (torch
 * nn.init.xavier_uniform_) */
void mega_fill_xavier(real *w, size_t out, size_t in, double gain, mega_rng *r);
#endif
