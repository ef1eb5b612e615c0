/* ListOps (Nangia & Bowman 2018, as generated for the Long Range Arena): the evaluator and the
 * generator. `mega listops` (tools/listops.c) writes the generator's splits to files.
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
 * _randbelow = getrandbits(bit_length(n)) with rejection), so seed S draws the same trees as
 * the published script after random.seed(S). Two differences, both invisible in the data's
 * distribution: the splits are taken in drawing order (the published script iterates a Python
 * set, whose order is arbitrary), and `mega listops` ends lines in "\n" (Python's csv writer
 * writes "\r\n"; the loaders accept both). */
#include "data/data.h"

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

/* the evaluator's stacks: the arguments of the open operators, and the open operators */
typedef struct {
    int *vals;
    size_t nv, cv;
    int *fr_op, *fr_start; /* operator and its first argument in vals */
    size_t nf, cf;
    long depth_paren;
    int ntop, top; /* the whole expression's value, once complete */
} lo_eval;

/* "]": apply the innermost open operator; its value is the next argument (*digit) */
static mega_status ev_close(lo_eval *e, size_t pos, int *digit) {
    if (!e->nf) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: ']' without an operator", pos);
    e->nf--;
    size_t st = (size_t)e->fr_start[e->nf];
    if (e->nv == st) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: %s has no arguments", pos, lo_op_str[e->fr_op[e->nf]]);
    if (e->nv - st > 0x7fffffff) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: too many arguments", pos);
    *digit = lo_apply(e->fr_op[e->nf], e->vals + st, (int)(e->nv - st));
    e->nv = st;
    return MEGA_OK;
}

/* an operator opens a list */
static mega_status ev_open(lo_eval *e, int op, size_t pos) {
    if (!e->nf && e->ntop) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: text after the end of the expression", pos);
    if (e->nf == e->cf) {
        size_t c2 = e->cf ? e->cf * 2 : 64;
        int *a = realloc(e->fr_op, c2 * sizeof *a), *b = a ? realloc(e->fr_start, c2 * sizeof *b) : NULL;
        if (a) e->fr_op = a;
        if (b) e->fr_start = b;
        if (!a || !b) MEGA_FAIL(MEGA_ERR_OOM, "listops: out of memory");
        e->cf = c2;
    }
    if (e->nv > 0x7fffffff) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: expression too large");
    e->fr_op[e->nf] = op;
    e->fr_start[e->nf] = (int)e->nv;
    e->nf++;
    return MEGA_OK;
}

/* a value: argument of the innermost open operator, or the whole expression */
static mega_status ev_value(lo_eval *e, int digit, size_t pos) {
    if (!e->nf) {
        if (e->ntop) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: text after the end of the expression", pos);
        e->ntop = 1, e->top = digit;
        return MEGA_OK;
    }
    if (e->nv == e->cv) {
        size_t c2 = e->cv ? e->cv * 2 : 256;
        int *a = realloc(e->vals, c2 * sizeof *a);
        if (!a) MEGA_FAIL(MEGA_ERR_OOM, "listops: out of memory");
        e->vals = a, e->cv = c2;
    }
    e->vals[e->nv++] = digit;
    return MEGA_OK;
}

/* token number pos, s[0..n) */
static mega_status ev_token(lo_eval *e, const char *s, size_t n, size_t pos) {
    if (n == 1 && *s == '(') {
        e->depth_paren++;
        return MEGA_OK;
    }
    if (n == 1 && *s == ')') {
        if (--e->depth_paren < 0) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: ')' without a matching '('", pos);
        return MEGA_OK;
    }
    int digit = -1;
    if (n == 1 && *s >= '0' && *s <= '9') digit = *s - '0';
    else if (n == 1 && *s == ']') MEGA_TRY(ev_close(e, pos, &digit));
    else {
        int op = -1;
        for (int k = 0; k < 6; k++)
            if (strlen(lo_op_str[k]) == n && !memcmp(lo_op_str[k], s, n)) op = k;
        if (op < 0) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: token %zu: unknown token '%.*s'", pos, (int)(n > 40 ? 40 : n), s);
        return ev_open(e, op, pos);
    }
    return ev_value(e, digit, pos);
}

/* the end of the expression: every list closed, one value */
static mega_status ev_end(const lo_eval *e, int *value) {
    if (e->nf) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: %s is not closed by ']'", lo_op_str[e->fr_op[e->nf - 1]]);
    if (!e->ntop) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: empty expression");
    if (e->depth_paren) MEGA_FAIL(MEGA_ERR_FORMAT, "listops: %ld '(' without a matching ')'", e->depth_paren);
    *value = e->top;
    return MEGA_OK;
}

static int lo_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

mega_status mega_listops_eval(const char *expr, int *value) {
    if (!expr) MEGA_FAIL(MEGA_ERR_INVALID, "listops: NULL expression");
    lo_eval e;
    memset(&e, 0, sizeof e);
    mega_status st = MEGA_OK;
    size_t pos = 0;
    for (const char *p = expr; st == MEGA_OK;) {
        while (lo_space(*p)) p++;
        if (!*p) break;
        const char *s = p;
        while (*p && !lo_space(*p)) p++;
        st = ev_token(&e, s, (size_t)(p - s), ++pos);
    }
    if (st == MEGA_OK) st = ev_end(&e, value);
    free(e.vals), free(e.fr_op), free(e.fr_start);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * generator */
#define LO_TREE_BUDGET 100000000LL /* nodes: a larger tree is abandoned (only absurd depth/args get there) */
/* no new example in this many draws or nodes: sampling is stuck (about 5 s of work at most) */
#define LO_STALL_ATTEMPTS 5000000LL
#define LO_STALL_NODES 200000000LL

struct mega_listops_gen {
    mega_listops_params p;
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

mega_listops_params mega_listops_defaults(void) {
    mega_listops_params p = {96000, 2000, 2000, 500, 2000, 10, 10, 0};
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
 * the stall detector of mega_listops_gen_next decides). */
static int lo_reachable(const mega_listops_params *p, int *longest) {
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

mega_status mega_listops_check(const mega_listops_params *p) {
    if (p->n_train < 1 || p->n_valid < 1 || p->n_test < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "every split needs at least one example (--train %lld --valid %lld --test %lld)",
                  (long long)p->n_train, (long long)p->n_valid, (long long)p->n_test);
    if (p->n_train + p->n_valid + p->n_test > 100000000)
        MEGA_FAIL(MEGA_ERR_INVALID, "%lld examples in all is more than the limit of 100000000",
                  (long long)(p->n_train + p->n_valid + p->n_test));
    if (p->min_len < 0) MEGA_FAIL(MEGA_ERR_INVALID, "--min-len must be >= 0, got %d", p->min_len);
    if (p->max_len > 10000000) MEGA_FAIL(MEGA_ERR_INVALID, "--max-len must be <= 10000000, got %d", p->max_len);
    if (p->min_len >= p->max_len - 1)
        MEGA_FAIL(MEGA_ERR_INVALID,
                  "--min-len %d must be at most --max-len - 2 = %d: the lengths kept lie strictly between --min-len and "
                  "--max-len (as in the published generator)",
                  p->min_len, p->max_len - 2);
    if (p->max_args < 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "--max-args must be at least 2 (an operator takes 2 or more arguments), got %d", p->max_args);
    if (p->max_args > 100) MEGA_FAIL(MEGA_ERR_INVALID, "--max-args must be at most 100, got %d", p->max_args);
    if (p->max_depth < 1 || p->max_depth > 64)
        MEGA_FAIL(MEGA_ERR_INVALID, "--max-depth must be in [1, 64], got %d", p->max_depth);
    if (p->seed < 0) MEGA_FAIL(MEGA_ERR_INVALID, "--seed must be >= 0, got %lld", (long long)p->seed);
    int64_t lmax = lo_max_length(p->max_depth, p->max_args);
    if (lmax <= p->min_len)
        MEGA_FAIL(MEGA_ERR_INVALID,
                  "--min-len %d is unreachable: with --max-depth %d and --max-args %d the longest expression has %lld "
                  "tokens (raise --max-depth or --max-args, or lower --min-len)",
                  p->min_len, p->max_depth, p->max_args, (long long)lmax);
    int longest;
    if (lo_reachable(p, &longest) == 0)
        MEGA_FAIL(MEGA_ERR_INVALID,
                  "no expression has %d < length < %d with --max-depth %d and --max-args %d (the longest below %d has %d "
                  "tokens; lengths 2 and 3 never occur): change --min-len/--max-len or the tree limits",
                  p->min_len, p->max_len, p->max_depth, p->max_args, p->max_len, longest);
    return MEGA_OK;
}

mega_status mega_listops_gen_new(const mega_listops_params *p, mega_listops_gen **out) {
    *out = NULL;
    MEGA_TRY(mega_listops_check(p));
    mega_listops_gen *g = calloc(1, sizeof *g);
    if (!g) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
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
        mega_listops_gen_free(g);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    *out = g;
    return MEGA_OK;
}

void mega_listops_gen_free(mega_listops_gen *g) {
    if (!g) return;
    free(g->sym), free(g->nargs), free(g->buf), free(g->set);
    free(g);
}

int64_t mega_listops_gen_attempts(const mega_listops_gen *g) { return g ? g->attempts : 0; }

/* generate_tree(depth); returns the published length (saturating) */
static int64_t lo_gen(mega_listops_gen *g, int depth) {
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

static char *lo_emit(const mega_listops_gen *g, int *i, char *o) {
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
static int lo_value(const mega_listops_gen *g, int *i, int depth) {
    int n = (*i)++;
    if (g->nargs[n] == 0) return g->sym[n];
    int k = g->nargs[n]; /* <= max_args <= 100 */
    int vals[128];
    for (int j = 0; j < k; j++) vals[j] = lo_value(g, i, depth + 1);
    return lo_apply(g->sym[n] - 10, vals, k);
}

static uint64_t lo_hash(const char *s, size_t n) {
    uint64_t h = mega_fnv1a64(s, n);
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
    return h ? h : 1;
}

/* insert; 1 if new, 0 if present */
static int lo_set_add(mega_listops_gen *g, uint64_t h) {
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

mega_status mega_listops_gen_next(mega_listops_gen *g, const char **src, int *length, int *target) {
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
            if (added < 0) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
            if (added) {
                i = 0;
                *target = lo_value(g, &i, 0);
                *src = g->buf;
                *length = (int)len;
                g->stall_attempts = 0, g->stall_nodes = 0;
                return MEGA_OK;
            }
        }
        if (g->stall_attempts >= LO_STALL_ATTEMPTS || g->stall_nodes >= LO_STALL_NODES) {
            if (g->set_n == 0)
                MEGA_FAIL(MEGA_ERR_INVALID,
                          "no expression with %d < length < %d in %lld draws (the longest below %d had %lld tokens): "
                          "these lengths are (practically) unreachable with --max-depth %d --max-args %d; "
                          "raise --max-depth/--max-args or change --min-len/--max-len",
                          g->p.min_len, g->p.max_len, (long long)g->attempts, g->p.max_len, (long long)g->longest_seen,
                          g->p.max_depth, g->p.max_args);
            MEGA_FAIL(MEGA_ERR_INVALID,
                      "sampling made no progress: %zu distinct expressions with %d < length < %d found, then none new "
                      "in %lld draws; fewer distinct examples exist than requested (ask for fewer, or widen "
                      "--min-len/--max-len, or raise --max-depth/--max-args)",
                      g->set_n, g->p.min_len, g->p.max_len, (long long)g->stall_attempts);
        }
    }
}

