/* ListOps (Nangia & Bowman 2018, as generated for the Long Range Arena): the generator, the
 * evaluator and `mega listops`.
 *
 * The generator follows google-research/long-range-arena lra_benchmarks/data/listops.py:
 *   generate_tree(depth): if depth < max_depth draw r = random.random(), else r = 1;
 *     r > 0.25 -> a leaf random.choice(range(10)), length 1;
 *     else k = random.randint(2, max_args) children generate_tree(depth + 1) in order, then the
 *     operator random.choice([MIN, MAX, MED, SM]); length = 2 + sum of the children's lengths.
 *   The root is drawn at depth 1; a tree is kept when min_length < length < max_length (strict)
 *   and it was not kept before (a set of trees); the first n_train are the training split, the
 *   next n_valid validation, the rest test.
 *   to_string nests binary tuples: an operator with k arguments prints as
 *     "( " * (k+1) + op + " " + a0 + " )" + for each later a_i: " " + a_i + " )" + " ] )"
 *   and the target is the value: min, max, int(numpy.median(...)), numpy.sum(...) % 10.
 * The random numbers are a bit-exact copy of CPython's random module (MT19937 seeded by
 * init_by_array of the seed's 32-bit words; random() = (a>>5, b>>6) / 2^53; randint/choice via
 * _randbelow = getrandbits(bit_length(n)) with rejection), so --seed S draws the same trees as
 * the published script after random.seed(S). Two differences, both invisible in the data's
 * distribution: the splits are taken in drawing order (the published script iterates a Python
 * set, whose order is arbitrary), and lines end in "\n" (Python's csv writer writes "\r\n"; the
 * loaders accept both). */
#include "cls_data.h"
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

/* ---------------------------------------------------------------------------------------------
 * CPython's random module */
typedef struct {
    uint32_t mt[624];
    int mti;
} lo_mt;

static void lo_mt_init_genrand(lo_mt *r, uint32_t s) {
    r->mt[0] = s;
    for (int i = 1; i < 624; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = 624;
}

/* random.seed(n) for an integer n >= 0: init_by_array over its 32-bit words, least significant first */
static void lo_mt_seed(lo_mt *r, uint64_t seed) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int klen = key[1] ? 2 : 1;
    lo_mt_init_genrand(r, 19650218u);
    int i = 1, j = 0;
    for (int k = 624 > klen ? 624 : klen; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++, j++;
        if (i >= 624) r->mt[0] = r->mt[623], i = 1;
        if (j >= klen) j = 0;
    }
    for (int k = 623; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= 624) r->mt[0] = r->mt[623], i = 1;
    }
    r->mt[0] = 0x80000000u;
}

static uint32_t lo_mt_next(lo_mt *r) {
    static const uint32_t mag01[2] = {0u, 0x9908b0dfu};
    if (r->mti >= 624) {
        int kk;
        uint32_t y;
        for (kk = 0; kk < 624 - 397; kk++) {
            y = (r->mt[kk] & 0x80000000u) | (r->mt[kk + 1] & 0x7fffffffu);
            r->mt[kk] = r->mt[kk + 397] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; kk < 623; kk++) {
            y = (r->mt[kk] & 0x80000000u) | (r->mt[kk + 1] & 0x7fffffffu);
            r->mt[kk] = r->mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        y = (r->mt[623] & 0x80000000u) | (r->mt[0] & 0x7fffffffu);
        r->mt[623] = r->mt[396] ^ (y >> 1) ^ mag01[y & 1u];
        r->mti = 0;
    }
    uint32_t y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static double lo_random(lo_mt *r) { /* random.random() */
    uint32_t a = lo_mt_next(r) >> 5, b = lo_mt_next(r) >> 6;
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

static uint32_t lo_randbelow(lo_mt *r, uint32_t n) { /* Random._randbelow_with_getrandbits, 1 <= n < 2^32 */
    int k = 0;
    while (k < 32 && (n >> k)) k++; /* n.bit_length() */
    uint32_t v;
    do v = lo_mt_next(r) >> (32 - k);
    while (v >= n);
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * evaluator */
enum { LO_OP_MIN = 0, LO_OP_MAX, LO_OP_MED, LO_OP_SM, LO_OP_FIRST, LO_OP_LAST };
static const char *const lo_op_str[] = {"[MIN", "[MAX", "[MED", "[SM", "[FIRST", "[LAST"};

static int lo_cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* value of op over v[0..n) (n >= 1); v may be reordered */
static int lo_apply(int op, int *v, int n) {
    int r = v[0];
    switch (op) {
    case LO_OP_MIN:
        for (int i = 1; i < n; i++) r = v[i] < r ? v[i] : r;
        return r;
    case LO_OP_MAX:
        for (int i = 1; i < n; i++) r = v[i] > r ? v[i] : r;
        return r;
    case LO_OP_MED: /* int(numpy.median(v)): the mean of the two middle values for an even count, truncated */
        qsort(v, (size_t)n, sizeof *v, lo_cmp_int);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    case LO_OP_SM: {
        long long s = 0;
        for (int i = 0; i < n; i++) s += v[i];
        return (int)(s % 10);
    }
    case LO_OP_FIRST: return v[0];
    default: return v[n - 1];
    }
}

int listops_eval(const char *expr, int *value) {
    if (!expr) return cls_fail("listops: NULL expression");
    int *vals = NULL, *fr_op = NULL, *fr_start = NULL;
    size_t nv = 0, cv = 0, nf = 0, cf = 0;
    long depth_paren = 0;
    int ntop = 0, top = 0, rc = 0;
    size_t pos = 0;
    const char *p = expr;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\v' || *p == '\f') p++;
        if (!*p) break;
        const char *s = p;
        while (*p && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\v' || *p == '\f')) p++;
        size_t n = (size_t)(p - s);
        pos++;
        if (n == 1 && *s == '(') {
            depth_paren++;
            continue;
        }
        if (n == 1 && *s == ')') {
            if (--depth_paren < 0) {
                rc = cls_fail("listops: token %zu: ')' without a matching '('", pos);
                goto done;
            }
            continue;
        }
        int op = -1, digit = -1;
        if (n == 1 && *s >= '0' && *s <= '9') digit = *s - '0';
        else if (n == 1 && *s == ']') {
            if (!nf) {
                rc = cls_fail("listops: token %zu: ']' without an operator", pos);
                goto done;
            }
            nf--;
            size_t st = (size_t)fr_start[nf];
            if (nv == st) {
                rc = cls_fail("listops: token %zu: %s has no arguments", pos, lo_op_str[fr_op[nf]]);
                goto done;
            }
            if (nv - st > 0x7fffffff) {
                rc = cls_fail("listops: token %zu: too many arguments", pos);
                goto done;
            }
            digit = lo_apply(fr_op[nf], vals + st, (int)(nv - st));
            nv = st;
        } else {
            for (int k = 0; k < 6; k++)
                if (strlen(lo_op_str[k]) == n && !memcmp(lo_op_str[k], s, n)) op = k;
            if (op < 0) {
                rc = cls_fail("listops: token %zu: unknown token '%.*s'", pos, (int)(n > 40 ? 40 : n), s);
                goto done;
            }
        }
        if (op >= 0) {
            if (!nf && ntop) {
                rc = cls_fail("listops: token %zu: text after the end of the expression", pos);
                goto done;
            }
            if (nf == cf) {
                size_t c2 = cf ? cf * 2 : 64;
                int *a = realloc(fr_op, c2 * sizeof *a), *b = a ? realloc(fr_start, c2 * sizeof *b) : NULL;
                if (a) fr_op = a;
                if (b) fr_start = b;
                if (!a || !b) {
                    rc = cls_fail("listops: out of memory");
                    goto done;
                }
                cf = c2;
            }
            fr_op[nf] = op;
            fr_start[nf] = (int)nv;
            if (nv > 0x7fffffff) {
                rc = cls_fail("listops: expression too large");
                goto done;
            }
            nf++;
            continue;
        }
        /* a value: argument of the innermost open operator, or the whole expression */
        if (!nf) {
            if (ntop) {
                rc = cls_fail("listops: token %zu: text after the end of the expression", pos);
                goto done;
            }
            ntop = 1, top = digit;
            continue;
        }
        if (nv == cv) {
            size_t c2 = cv ? cv * 2 : 256;
            int *a = realloc(vals, c2 * sizeof *a);
            if (!a) {
                rc = cls_fail("listops: out of memory");
                goto done;
            }
            vals = a, cv = c2;
        }
        vals[nv++] = digit;
    }
    if (nf) rc = cls_fail("listops: %s is not closed by ']'", lo_op_str[fr_op[nf - 1]]);
    else if (!ntop) rc = cls_fail("listops: empty expression");
    else if (depth_paren) rc = cls_fail("listops: %ld '(' without a matching ')'", depth_paren);
    else *value = top;
done:
    free(vals), free(fr_op), free(fr_start);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * generator */
#define LO_TREE_BUDGET 100000000LL /* nodes: a larger tree is abandoned (only absurd depth/args get there) */
/* no new example in this many draws or nodes: sampling is stuck (about 5 s of work at most) */
#define LO_STALL_ATTEMPTS 5000000LL
#define LO_STALL_NODES 200000000LL

struct listops_gen {
    listops_params p;
    lo_mt rng;
    /* the tree being drawn, in pre-order: sym 0..9 = digit, 10 + op; nargs 0 for a leaf */
    uint8_t *sym, *nargs;
    int cap, nn, overflow;
    int64_t tree_nodes;
    char *buf;
    size_t bufcap;
    /* hashes of the accepted examples (open addressing, 0 = empty) */
    uint64_t *set;
    size_t set_cap, set_n;
    int64_t attempts, stall_attempts, stall_nodes, longest_seen;
};

listops_params listops_defaults(void) {
    listops_params p = {96000, 2000, 2000, 500, 2000, 10, 10, 0};
    return p;
}

/* the longest tree (published length) reachable from depth 1 */
static int64_t lo_max_length(int max_depth, int max_args) {
    int64_t L = 1;
    for (int d = max_depth - 1; d >= 1; d--) {
        if (L > (INT64_C(1) << 50) / max_args) return INT64_C(1) << 50;
        L = 2 + (int64_t)max_args * L;
    }
    return L;
}

/* Is some length in (min_len, max_len) reachable at all? Exact, by the sets of reachable lengths
 * per depth (bitsets up to max_len): R(max_depth) = {1}, R(d) = {1} u {2 + r_1 + ... + r_k :
 * 2 <= k <= max_args, r_i in R(d+1)}. Returns 1 yes, 0 no, -1 when too costly to decide (then
 * the stall detector of listops_gen_next decides). */
static int lo_reachable(const listops_params *p, int *longest) {
    const int M = p->max_len; /* lengths 0..M-1 */
    const size_t W = ((size_t)M + 63) / 64;
    if ((double)p->max_depth * p->max_args * M * (double)W > 2e8) return -1;
    uint64_t *R = calloc(W, 8), *S = calloc(W, 8), *T = calloc(W, 8), *U = calloc(W, 8);
    int *el = malloc((size_t)M * sizeof *el);
    if (!R || !S || !T || !U || !el) {
        free(R), free(S), free(T), free(U), free(el);
        return -1;
    }
    R[0] = 2; /* {1} */
    for (int d = p->max_depth - 1; d >= 1; d--) {
        int ne = 0;
        for (int l = 0; l < M; l++)
            if (R[l >> 6] >> (l & 63) & 1) el[ne++] = l;
        memcpy(S, R, W * 8); /* sums of 1 */
        memset(U, 0, W * 8);
        for (int k = 2; k <= p->max_args; k++) {
            memset(T, 0, W * 8);
            for (int e = 0; e < ne; e++) { /* T |= S << el[e] */
                int sh = el[e], ws = sh >> 6, bs = sh & 63;
                for (size_t w = W; w-- > (size_t)ws;) {
                    uint64_t v = S[w - (size_t)ws] << bs;
                    if (bs && w > (size_t)ws) v |= S[w - (size_t)ws - 1] >> (64 - bs);
                    T[w] |= v;
                }
            }
            if (M & 63) T[W - 1] &= (UINT64_C(1) << (M & 63)) - 1;
            int any = 0;
            for (size_t w = 0; w < W; w++) U[w] |= T[w], any |= T[w] != 0;
            memcpy(S, T, W * 8);
            if (!any) break;
        }
        memset(R, 0, W * 8);
        R[0] = 2;
        for (int l = 0; l + 2 < M; l++)
            if (U[l >> 6] >> (l & 63) & 1) R[(l + 2) >> 6] |= UINT64_C(1) << ((l + 2) & 63);
    }
    int ok = 0;
    *longest = 0;
    for (int l = 0; l < M; l++)
        if (R[l >> 6] >> (l & 63) & 1) {
            *longest = l;
            if (l > p->min_len) ok = 1;
        }
    free(R), free(S), free(T), free(U), free(el);
    return ok;
}

int listops_check(const listops_params *p) {
    if (p->n_train < 1 || p->n_valid < 1 || p->n_test < 1)
        return cls_fail("every split needs at least one example (--train %lld --valid %lld --test %lld)", (long long)p->n_train,
                        (long long)p->n_valid, (long long)p->n_test);
    if (p->n_train + p->n_valid + p->n_test > 100000000)
        return cls_fail("%lld examples in all is more than the limit of 100000000",
                        (long long)(p->n_train + p->n_valid + p->n_test));
    if (p->min_len < 0) return cls_fail("--min-len must be >= 0, got %d", p->min_len);
    if (p->max_len > 10000000) return cls_fail("--max-len must be <= 10000000, got %d", p->max_len);
    if (p->min_len >= p->max_len - 1)
        return cls_fail("--min-len %d must be at most --max-len - 2 = %d: the lengths kept lie strictly between --min-len and "
                        "--max-len (as in the published generator)",
                        p->min_len, p->max_len - 2);
    if (p->max_args < 2) return cls_fail("--max-args must be at least 2 (an operator takes 2 or more arguments), got %d", p->max_args);
    if (p->max_args > 100) return cls_fail("--max-args must be at most 100, got %d", p->max_args);
    if (p->max_depth < 1 || p->max_depth > 64) return cls_fail("--max-depth must be in [1, 64], got %d", p->max_depth);
    if (p->seed < 0) return cls_fail("--seed must be >= 0, got %lld", (long long)p->seed);
    int64_t lmax = lo_max_length(p->max_depth, p->max_args);
    if (lmax <= p->min_len)
        return cls_fail("--min-len %d is unreachable: with --max-depth %d and --max-args %d the longest expression has %lld "
                        "tokens (raise --max-depth or --max-args, or lower --min-len)",
                        p->min_len, p->max_depth, p->max_args, (long long)lmax);
    int longest;
    if (lo_reachable(p, &longest) == 0)
        return cls_fail("no expression has %d < length < %d with --max-depth %d and --max-args %d (the longest below %d has %d "
                        "tokens; lengths 2 and 3 never occur): change --min-len/--max-len or the tree limits",
                        p->min_len, p->max_len, p->max_depth, p->max_args, p->max_len, longest);
    return 0;
}

listops_gen *listops_gen_new(const listops_params *p) {
    if (listops_check(p)) return NULL;
    listops_gen *g = calloc(1, sizeof *g);
    if (!g) return cls_fail("out of memory"), NULL;
    g->p = *p;
    lo_mt_seed(&g->rng, (uint64_t)p->seed);
    g->cap = p->max_len;
    g->sym = malloc((size_t)g->cap);
    g->nargs = malloc((size_t)g->cap);
    g->bufcap = (size_t)g->cap * 16 + 64;
    g->buf = malloc(g->bufcap);
    int64_t want = p->n_train + p->n_valid + p->n_test;
    g->set_cap = 1024;
    while (g->set_cap < (size_t)want * 2) g->set_cap *= 2;
    g->set = calloc(g->set_cap, sizeof *g->set);
    if (!g->sym || !g->nargs || !g->buf || !g->set) {
        listops_gen_free(g);
        return cls_fail("out of memory"), NULL;
    }
    return g;
}

void listops_gen_free(listops_gen *g) {
    if (!g) return;
    free(g->sym), free(g->nargs), free(g->buf), free(g->set);
    free(g);
}

int64_t listops_gen_attempts(const listops_gen *g) { return g ? g->attempts : 0; }

/* generate_tree(depth); returns the published length (saturating) */
static int64_t lo_gen(listops_gen *g, int depth) {
    if (++g->tree_nodes > LO_TREE_BUDGET) return INT64_C(1) << 40;
    int idx = -1;
    if (g->nn < g->cap) idx = g->nn++;
    else g->overflow = 1;
    double r = depth < g->p.max_depth ? lo_random(&g->rng) : 1.0;
    if (r > 0.25) {
        int v = (int)lo_randbelow(&g->rng, 10);
        if (idx >= 0) g->sym[idx] = (uint8_t)v, g->nargs[idx] = 0;
        return 1;
    }
    int k = 2 + (int)lo_randbelow(&g->rng, (uint32_t)(g->p.max_args - 1));
    int64_t length = 2;
    for (int i = 0; i < k; i++) {
        length += lo_gen(g, depth + 1);
        if (g->tree_nodes > LO_TREE_BUDGET) return INT64_C(1) << 40;
    }
    int op = (int)lo_randbelow(&g->rng, 4);
    if (idx >= 0) g->sym[idx] = (uint8_t)(10 + op), g->nargs[idx] = (uint8_t)k;
    return length;
}

static char *lo_emit(const listops_gen *g, int *i, char *o) {
    int n = *i;
    (*i)++;
    if (g->nargs[n] == 0) {
        *o++ = (char)('0' + g->sym[n]);
        return o;
    }
    int k = g->nargs[n];
    for (int j = 0; j <= k; j++) *o++ = '(', *o++ = ' ';
    const char *op = lo_op_str[g->sym[n] - 10];
    size_t l = strlen(op);
    memcpy(o, op, l), o += l;
    for (int j = 0; j < k; j++) {
        *o++ = ' ';
        o = lo_emit(g, i, o);
        *o++ = ' ', *o++ = ')';
    }
    memcpy(o, " ] )", 4);
    return o + 4;
}

/* to_value over the stored pre-order tree */
static int lo_value(const listops_gen *g, int *i, int depth) {
    int n = (*i)++;
    if (g->nargs[n] == 0) return g->sym[n];
    int k = g->nargs[n]; /* <= max_args <= 100 */
    int vals[128];
    for (int j = 0; j < k; j++) vals[j] = lo_value(g, i, depth + 1);
    return lo_apply(g->sym[n] - 10, vals, k);
}

static uint64_t lo_hash(const char *s, size_t n) {
    uint64_t h = fnv1a64((const uint8_t *)s, n);
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
    return h ? h : 1;
}

/* insert; 1 if new, 0 if present */
static int lo_set_add(listops_gen *g, uint64_t h) {
    size_t m = g->set_cap - 1, i = (size_t)h & m;
    while (g->set[i]) {
        if (g->set[i] == h) return 0;
        i = (i + 1) & m;
    }
    if ((g->set_n + 1) * 2 > g->set_cap) { /* grow (only when more is drawn than announced) */
        size_t nc = g->set_cap * 2;
        uint64_t *ns = calloc(nc, sizeof *ns);
        if (!ns) return -1;
        for (size_t j = 0; j < g->set_cap; j++)
            if (g->set[j]) {
                size_t q = (size_t)g->set[j] & (nc - 1);
                while (ns[q]) q = (q + 1) & (nc - 1);
                ns[q] = g->set[j];
            }
        free(g->set);
        g->set = ns, g->set_cap = nc, m = nc - 1;
        i = (size_t)h & m;
        while (g->set[i]) i = (i + 1) & m;
    }
    g->set[i] = h;
    g->set_n++;
    return 1;
}

int listops_gen_next(listops_gen *g, const char **src, int *length, int *target) {
    for (;;) {
        g->nn = 0, g->overflow = 0, g->tree_nodes = 0;
        int64_t len = lo_gen(g, 1);
        g->attempts++;
        g->stall_attempts++;
        g->stall_nodes += g->tree_nodes;
        if (len < g->p.max_len && len > g->longest_seen) g->longest_seen = len;
        if (len > g->p.min_len && len < g->p.max_len && !g->overflow) {
            int i = 0;
            char *e = lo_emit(g, &i, g->buf);
            *e = 0;
            int added = lo_set_add(g, lo_hash(g->buf, (size_t)(e - g->buf)));
            if (added < 0) return cls_fail("out of memory");
            if (added) {
                i = 0;
                *target = lo_value(g, &i, 0);
                *src = g->buf;
                *length = (int)len;
                g->stall_attempts = 0, g->stall_nodes = 0;
                return 0;
            }
        }
        if (g->stall_attempts >= LO_STALL_ATTEMPTS || g->stall_nodes >= LO_STALL_NODES) {
            if (g->set_n == 0)
                return cls_fail("no expression with %d < length < %d in %lld draws (the longest below %d had %lld tokens): "
                                "these lengths are (practically) unreachable with --max-depth %d --max-args %d; "
                                "raise --max-depth/--max-args or change --min-len/--max-len",
                                g->p.min_len, g->p.max_len, (long long)g->attempts, g->p.max_len, (long long)g->longest_seen,
                                g->p.max_depth, g->p.max_args);
            return cls_fail("sampling made no progress: %zu distinct expressions with %d < length < %d found, then none new "
                            "in %lld draws; fewer distinct examples exist than requested (ask for fewer, or widen "
                            "--min-len/--max-len, or raise --max-depth/--max-args)",
                            g->set_n, g->p.min_len, g->p.max_len, (long long)g->stall_attempts);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * mega listops */
typedef struct {
    const char *name;
    char path[4096], tmp[4200];
    FILE *f;
    int64_t n;
} lo_out;

static int lo_open(lo_out *o, const char *dir, const char *name) {
    o->name = name;
    path_join(o->path, sizeof o->path, dir, name);
    size_t l = strlen(o->path); /* < 4096 */
    memcpy(o->tmp, o->path, l);
    snprintf(o->tmp + l, sizeof o->tmp - l, ".tmp.%ld", (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) return cli_error("cannot create '%s': %s", o->tmp, strerror(errno));
    static char bufs[3][1 << 20];
    static int nb;
    setvbuf(o->f, bufs[nb++ % 3], _IOFBF, sizeof bufs[0]);
    if (fputs("Source\tTarget\n", o->f) == EOF) {
        int e = errno;
        fclose(o->f);
        o->f = NULL;
        unlink(o->tmp);
        return cli_error("write error on '%s': %s", o->tmp, strerror(e));
    }
    o->n = 0;
    return 0;
}

static int lo_close(lo_out *o) {
    int rc = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) rc = cli_error("write error on '%s': %s", o->tmp, strerror(errno));
    else {
        int r;
        while ((r = fsync(fileno(o->f))) != 0 && errno == EINTR) {
        }
        if (r != 0) rc = cli_error("fsync '%s': %s", o->tmp, strerror(errno));
    }
    if (fclose(o->f) != 0 && !rc) rc = cli_error("close '%s': %s", o->tmp, strerror(errno));
    o->f = NULL;
    return rc;
}

int cmd_listops(int argc, char **argv) {
    listops_params p = listops_defaults();
    const char *out = NULL;
    int quiet = 0;
    cli_flag fl[] = {
        {"out", F_STR, &out, "output directory: writes train.tsv, valid.tsv, test.tsv (created if missing)", NULL, 1, 0, 0},
        {"train", F_I64, &p.n_train, "training examples", NULL, 1, 1e8, 0},
        {"valid", F_I64, &p.n_valid, "validation examples", NULL, 1, 1e8, 0},
        {"test", F_I64, &p.n_test, "test examples", NULL, 1, 1e8, 0},
        {"min-len", F_INT, &p.min_len, "keep expressions longer than this (tokens, parentheses not counted)", NULL, 0, 1e7, 0},
        {"max-len", F_INT, &p.max_len, "keep expressions shorter than this", NULL, 2, 1e7, 0},
        {"max-depth", F_INT, &p.max_depth, "maximum tree depth (the root is depth 1)", NULL, 1, 64, 0},
        {"max-args", F_INT, &p.max_args, "maximum arguments of an operator (at least 2)", NULL, 2, 100, 0},
        {"seed", F_I64, &p.seed, "seed; S draws what the published script draws after Python's random.seed(S)", NULL, 0,
         9007199254740991.0, 0},
        {"quiet", F_SET, &quiet, "no progress on stderr", NULL, 1, 0, 0},
        FL_END};
    const char *usage = "--out DIR [--train N --valid N --test N --min-len L --max-len L --max-depth D --max-args A --seed S]\n\n"
                        "Writes the ListOps task of the Long Range Arena (lra_benchmarks/data/listops.py): nested\n"
                        "[MIN/[MAX/[MED/[SM lists of digits 0-9, TSV with the header Source<TAB>Target. The defaults\n"
                        "are the published ones.";
    int r = cli_parse("listops", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!out || !*out) return cli_error("--out DIR is required (see 'mega listops --help')"), 2;
    if (strlen(out) > 4000) return cli_error("--out: path too long"), 2;
    if (listops_check(&p)) return cli_error("%s", cls_last_error()), 2;
    listops_gen *g = listops_gen_new(&p);
    if (!g) return cli_error("%s", cls_last_error()), 2;
    if (ensure_dir(out)) {
        listops_gen_free(g);
        return 2;
    }
    lo_out o[3];
    const char *names[3] = {"train.tsv", "valid.tsv", "test.tsv"};
    int64_t want[3] = {p.n_train, p.n_valid, p.n_test};
    int nopen = 0, rc = 0;
    for (; nopen < 3; nopen++)
        if (lo_open(&o[nopen], out, names[nopen])) {
            rc = 2;
            break;
        }
    const int64_t total = p.n_train + p.n_valid + p.n_test;
    int64_t done = 0, lsum = 0, lmin = INT64_MAX, lmax = 0, hist[10] = {0};
    double t0 = now_sec(), next_report = t0 + 1.0;
    int shown = 0, tty = is_tty(stderr);
    for (int s = 0; s < 3 && !rc; s++) {
        for (int64_t i = 0; i < want[s]; i++) {
            const char *src;
            int len, tgt;
            if (listops_gen_next(g, &src, &len, &tgt)) {
                if (shown) fprintf(stderr, "\n");
                shown = 0;
                rc = cli_error("%s", cls_last_error()), rc = 2;
                break;
            }
            if (fprintf(o[s].f, "%s\t%d\n", src, tgt) < 0) {
                rc = cli_error("write error on '%s': %s", o[s].tmp, strerror(errno)), rc = 2;
                break;
            }
            o[s].n++, done++;
            lsum += len, hist[tgt]++;
            lmin = len < lmin ? len : lmin, lmax = len > lmax ? len : lmax;
            if (!quiet && (done & 63) == 0) {
                double now = now_sec();
                if (now >= next_report) {
                    char eta[32], rate[32];
                    double rt = (double)done / (now - t0);
                    fmt_duration(eta, sizeof eta, (double)(total - done) / (rt + 1e-9));
                    fmt_rate(rate, sizeof rate, rt);
                    fprintf(stderr, "%slistops: %lld/%lld examples (%.1f%%)  %s examples/s  ETA %s   %s", tty ? "\r" : "",
                            (long long)done, (long long)total, 100.0 * (double)done / (double)total, rate, eta, tty ? "" : "\n");
                    next_report = now + (tty ? 0.25 : 10.0), shown = tty;
                }
            }
        }
    }
    if (shown) fprintf(stderr, "\n");
    for (int s = 0; s < nopen; s++)
        if (lo_close(&o[s])) rc = 2;
    if (!rc)
        for (int s = 0; s < 3; s++)
            if (rename(o[s].tmp, o[s].path) != 0) {
                rc = cli_error("cannot rename '%s' to '%s': %s", o[s].tmp, o[s].path, strerror(errno)), rc = 2;
                break;
            }
    if (rc) {
        for (int s = 0; s < nopen; s++) unlink(o[s].tmp);
        listops_gen_free(g);
        return rc;
    }
    int dfd = open(out, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    double dt = now_sec() - t0;
    printf("wrote %s/{train,valid,test}.tsv: %lld/%lld/%lld examples in %.1fs (%lld draws, seed %lld)\n", out,
           (long long)o[0].n, (long long)o[1].n, (long long)o[2].n, dt, (long long)listops_gen_attempts(g), (long long)p.seed);
    printf("length (tokens without parentheses) min %lld, mean %.1f, max %lld; targets 0-9:", (long long)lmin,
           (double)lsum / (double)done, (long long)lmax);
    for (int i = 0; i < 10; i++) printf(" %lld", (long long)hist[i]);
    printf("\n");
    listops_gen_free(g);
    return 0;
}
