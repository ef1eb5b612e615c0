#include "blocktest.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void bt_note(bt_worst *w, double e, const char *fmt, ...) {
    if (e <= w->v) return; /* NaN is noted */
    w->v = e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->where, sizeof w->where, fmt, ap);
    va_end(ap);
}

/* ---- parameters ----------------------------------------------------------------------------
 * One rule per tensor name, first match wins: a pattern ending in '.' matches anywhere in the
 * name, any other pattern matches its end. The values are those of the reference generators
 * (tests/ref/case_writer.py perturb()) for the tensors they share. */
enum { P_KEEP, P_NORMAL, P_SHIFT, P_ONE, P_UNIFORM, P_LOGU, P_CONST, P_FANIN };
typedef struct {
    const char *pat;
    int kind;
    double a, b; /* NORMAL b N; SHIFT w + b N; ONE 1 + b N; UNIFORM a + b U; LOGU log(a + b U); CONST a */
} perturb_rule;
static const perturb_rule RULES[] = {
    {"rel_pos_bias.", P_NORMAL, 0, 0.3}, /* Mega's relative position bias (table, rotary alpha / beta) */
    {"move.delta", P_NORMAL, 0, 1},
    {"move.alpha", P_NORMAL, 0, 1},
    {"move.beta", P_SHIFT, 0, 0.05},
    {"move.", P_KEEP, 0, 0}, /* EMA gamma, omega: initialised N(0, 1) */
    {"timenorm.prior_count", P_KEEP, 0, 0}, /* Megalodon's timestep-norm buffers (prior count 0) */
    {"timenorm.prior_mean", P_KEEP, 0, 0},
    {"timenorm.prior_logv", P_KEEP, 0, 0},
    {"cema.gamma", P_NORMAL, 0, 1},     /* the imaginary parts start at 0 */
    {"cema.", P_KEEP, 0, 0},            /* alpha, delta, theta, omega: random at initialisation */
    {"mega.gamma", P_NORMAL, 0, 0.5},
    {"mega.beta", P_NORMAL, 0, 0.3},
    {"nffn.alpha", P_NORMAL, 0, 0.5},
    {"norm.weight", P_ONE, 0, 0.2},
    {"norm.bias", P_NORMAL, 0, 0.1},
    {"norm.scalar", P_ONE, 0, 0.15},
    {"running_mean", P_NORMAL, 0, 0.2},
    {"running_var", P_UNIFORM, 0.5, 1},
    {"num_batches_tracked", P_CONST, 5, 0},
    {"mega_layer.gamma", P_NORMAL, 0, 1},
    {"mega_layer.beta", P_NORMAL, 0, 0.3},
    {"kerple.bias_p", P_UNIFORM, 0.3, 1.4}, /* inside the KERPLE clamp range, away from its edges */
    {"kerple.bias_a", P_UNIFORM, 0.2, 0.7},
    {"time_logw", P_SHIFT, 0, 0.3},
    {"time_logbeta", P_NORMAL, 0, 0.3},
    {"time_gamma", P_ONE, 0, 0.2},
    {"pos_bias", P_NORMAL, 0, 0.7},
    {"time_decay", P_LOGU, 0.05, 1.2},
    {"time_beta", P_NORMAL, 0, 0.4},
    {"spatial.weight", P_NORMAL, 0, 0.4},
    {"spatial.bias", P_ONE, 0, 0.3},
    {"weight", P_FANIN, 0, 0}, /* matrices: N(0, 1 / fan_in) */
    {"bias", P_NORMAL, 0, 0.1},
};

static int matches(const char *name, const char *pat) {
    const size_t a = strlen(name), b = strlen(pat);
    if (b && pat[b - 1] == '.') return strstr(name, pat) != NULL;
    return a >= b && !strcmp(name + a - b, pat);
}

void bt_perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        const perturb_rule *r = NULL;
        for (size_t k = 0; !r && k < sizeof RULES / sizeof RULES[0]; k++)
            if (matches(s->name, RULES[k].pat)) r = &RULES[k];
        if (!r || (r->kind == P_FANIN && s->ndim != 2)) {
            TL_CHECK(0, "perturb: no rule for %s", s->name);
            continue;
        }
        mega_real *w = P->data + s->offset;
        for (size_t j = 0; j < s->numel; j++) {
            double v = w[j];
            switch (r->kind) {
            case P_KEEP: break;
            case P_NORMAL: v = r->b * tl_randn(seed); break;
            case P_SHIFT: v += r->b * tl_randn(seed); break;
            case P_ONE: v = 1 + r->b * tl_randn(seed); break;
            case P_UNIFORM: v = r->a + r->b * tl_rand01(seed); break;
            case P_LOGU: v = log(r->a + r->b * tl_rand01(seed)); break;
            case P_CONST: v = r->a; break;
            case P_FANIN: v = tl_randn(seed) / sqrt((double)s->shape[1]); break;
            }
            w[j] = (mega_real)v;
        }
    }
}

void bt_fill_pad(uint8_t *pad, int pattern, int B, int T) {
    memset(pad, 0, (size_t)B * T);
    uint8_t *p0 = pad, *p1 = B > 1 ? pad + T : NULL;
    switch (pattern) {
    case BT_PAD_RIGHT:
        p0[T - 1] = 1;
        if (p1)
            for (int t = T - MEGA_MAX(3, T / 3); t < T; t++) p1[MEGA_MAX(t, 0)] = 1;
        break;
    case BT_PAD_ALL:
        p0[T - 1] = 1, p0[MEGA_MAX(T - 2, 0)] = 1;
        if (p1) memset(p1, 1, (size_t)T);
        break;
    case BT_PAD_LEFT:
        p0[T / 2] = 1;
        if (p1)
            for (int t = 0; t < MEGA_MIN(3, T); t++) p1[t] = 1;
        break;
    case BT_PAD_MID: /* pads with valid positions after them (and, when long, a run of two) */
        if (p1) p1[MEGA_MIN(2, T - 1)] = p1[T - 1] = p1[MEGA_MAX(T - 2, 0)] = 1;
        if (p1 && T > 20) p1[T / 2] = p1[T / 2 + 1] = 1;
        break;
    }
}

void bt_describe(const mega_block_config *cfg, char *buf, size_t n) {
    mega_block_config d;
    mega_block_config_default(&d);
    int nf;
    const mega_field *f = mega_block_config_fields(&nf);
    size_t k = (size_t)snprintf(buf, n, "%s", mega_mixer_name(cfg->mixer));
    for (int i = 0; i < nf && k < n; i++) {
        char a[64], b[64];
        if (f[i].offset == offsetof(mega_block_config, mixer) || !mega_field_applies(&f[i], cfg->mixer)) continue;
        mega_field_format(&f[i], cfg, a, sizeof a);
        mega_field_format(&f[i], &d, b, sizeof b);
        if (strcmp(a, b)) k += (size_t)snprintf(buf + k, n - k, " %s=%s", f[i].name, a);
    }
}

mega_status bt_try_declare(const mega_block_config *cfg, mega_block_config *resolved, size_t *nparams) {
    mega_block_config c = *cfg;
    mega_block_config_resolve(&c);
    mega_params P;
    mega_params_init(&P);
    mega_block bl;
    const mega_status st = mega_block_declare(&bl, &P, "", &c);
    if (nparams) {
        *nparams = 0;
        for (int i = 0; st == MEGA_OK && i < P.n; i++) *nparams += P.specs[i].numel;
    }
    if (resolved) *resolved = c;
    mega_params_free(&P);
    return st;
}

/* ---- the block under test ------------------------------------------------------------------ */
int bt_open(bt_ctx *c, const mega_block_config *cfg, const bt_opts *o) {
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    mega_block_config_resolve(&c->cfg);
    const int B = o->B > 0 ? o->B : 2, T = o->T, nt = o->nthreads > 0 ? o->nthreads : mega_get_threads();
    static const char *const padname[] = {"none", "right", "all", "left", "mid"};
    c->B = B, c->T = T, c->core = o->core;
    bt_describe(&c->cfg, c->name, sizeof c->name);
    const size_t k = strlen(c->name);
    snprintf(c->name + k, sizeof c->name - k, " | B=%d T=%d pad=%s%s%s", B, T, padname[o->pad], o->core ? " core" : "",
             o->tag ? o->tag : "");
    mega_params_init(&c->P);
    mega_status st = mega_block_declare(&c->bl, &c->P, o->prefix ? o->prefix : "", &c->cfg);
    if (st == MEGA_OK) st = mega_params_alloc(&c->P, 1);
    if (st != MEGA_OK) {
        TL_CHECK(0, "%s: declare: %s", c->name, mega_last_error());
        mega_params_free(&c->P);
        return -1;
    }
    if (o->setup) o->setup(mega_block_mixer(&c->bl), o->setup_arg);
    mega_rng rng;
    mega_rng_seed(&rng, o->seed);
    mega_block_init(&c->bl, c->P.data, &rng);
    unsigned long long ps = o->seed * 7919u + 1;
    if (!o->keep_init) bt_perturb(&c->P, &ps);
    c->RD = (size_t)B * T * c->cfg.embed_dim;
    /* scratch for this run's thread count and for mega_get_threads() (bt_threads_check) */
    const size_t scr = MEGA_MAX(mega_block_scratch_size(&c->bl, B, T, nt),
                                mega_block_scratch_size(&c->bl, B, T, mega_get_threads()));
    c->acts = calloc(mega_block_acts_size(&c->bl, B, T), sizeof(mega_real));
    c->scr = calloc(scr, sizeof(mega_real));
    mega_block_acts_point(&c->bl, &c->A, c->acts, B, T);
    c->x = calloc(c->RD, sizeof(mega_real)), c->R = calloc(c->RD, sizeof(mega_real));
    c->out = calloc(c->RD, sizeof(mega_real)), c->dx = calloc(c->RD, sizeof(mega_real));
    c->pad = calloc((size_t)B * T, 1);
    bt_fill_pad(c->pad, o->pad, B, T);
    c->pm = o->pad != BT_PAD_NONE ? c->pad : NULL;
    /* x and R from the seed alone: configurations that differ in other ways see the same data */
    c->rs = 0x9E3779B97F4A7C15ull * (o->seed + 1);
    for (size_t i = 0; i < c->RD; i++) c->R[i] = (mega_real)tl_randn(&c->rs), c->x[i] = (mega_real)tl_randn(&c->rs);
    c->run = (mega_run){1, 0, 0x1234567890abcdefull ^ o->seed, nt, NULL};
    return 0;
}

void bt_close(bt_ctx *c) {
    free(c->acts), free(c->scr), free(c->x), free(c->R), free(c->out), free(c->dx), free(c->pad);
    mega_params_free(&c->P);
    c->acts = c->scr = c->x = c->R = c->out = c->dx = NULL, c->pad = NULL;
}

mega_status bt_forward(bt_ctx *c) {
    if (c->core)
        return c->bl.ops->forward(mega_block_mixer(&c->bl), c->P.data, c->A.mixer, c->out, c->x, c->pm, c->B, c->T,
                                  &c->run, c->scr);
    return mega_block_forward(&c->bl, c->P.data, &c->A, c->out, c->x, c->pm, c->B, c->T, &c->run, c->scr);
}

double bt_loss(bt_ctx *c) {
    if (bt_forward(c) != MEGA_OK) return NAN;
    double s = 0;
    for (size_t i = 0; i < c->RD; i++) s += (double)c->out[i] * c->R[i];
    return s;
}

mega_status bt_backward(bt_ctx *c) {
    mega_params_zero_grad(&c->P);
    MEGA_TRY(bt_forward(c));
    if (c->core)
        c->bl.ops->backward(mega_block_mixer(&c->bl), c->P.data, c->P.grad, c->A.mixer, c->dx, c->R, c->x, c->pm, c->B,
                            c->T, &c->run, c->scr);
    else
        mega_block_backward(&c->bl, c->P.data, c->P.grad, &c->A, c->dx, c->R, c->x, c->pm, c->B, c->T, &c->run, c->scr);
    return MEGA_OK;
}

int bt_redraw_x(bt_ctx *c, int (*ok)(bt_ctx *), int tries) {
    int good = 0;
    for (int k = 0; k < tries && !good; k++) {
        if (k)
            for (size_t i = 0; i < c->RD; i++) c->x[i] = (mega_real)tl_randn(&c->rs);
        good = bt_forward(c) == MEGA_OK && ok(c);
    }
    return good;
}

double bt_rel_diff(const mega_real *a, const mega_real *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

mega_real *bt_param(const mega_params *P, const char *suffix) {
    for (int i = 0; i < P->n; i++)
        if (matches(P->specs[i].name, suffix)) return P->data + P->specs[i].offset;
    return NULL;
}

void bt_linear(double *y, const mega_real *x, const mega_real *W, const mega_real *b, size_t R, int In, int O) {
    for (size_t r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < In; i++) s += (double)x[r * In + i] * W[(size_t)o * In + i];
            y[r * O + o] = s;
        }
}

/* ---- finite differences --------------------------------------------------------------------- */
static double loss_cb(void *arg) { return bt_loss(arg); }

/* the tensors with a gradient: every trainable one (core: the mixer's own) */
static int fd_checked(const bt_ctx *c, const mega_pspec *s) {
    return !(s->flags & MEGA_P_BUFFER) && (!c->core || strstr(s->name, "mixer.") != NULL);
}

static int all_finite(const mega_real *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite((double)a[i])) return 0;
    return 1;
}

static double largest_grad(const bt_ctx *c) {
    double g = 0;
    for (size_t i = 0; i < c->RD; i++) g = fmax(g, fabs((double)c->dx[i]));
    for (int t = 0; t < c->P.n; t++)
        if (fd_checked(c, &c->P.specs[t]))
            for (size_t j = 0; j < c->P.specs[t].numel; j++) g = fmax(g, fabs((double)c->P.grad[c->P.specs[t].offset + j]));
    return g;
}

/* with a dropout set, the loss is a smooth function of the parameters for a fixed key: check
 * that the masks are live (another key changes the loss) and a function of the key */
static void check_dropout(bt_ctx *c, double L0) {
    const mega_block_config *k = &c->cfg;
    if (!c->run.training || !(k->dropout > 0 || k->attention_dropout > 0 || k->hidden_dropout > 0 || k->activation_dropout > 0))
        return;
    const uint64_t k0 = c->run.key;
    c->run.key = k0 ^ 0x55;
    const double L1 = bt_loss(c);
    c->run.key = k0;
    TL_CHECK(fabs(L1 - L0) > 1e-6 * fabs(L0) && bt_loss(c) == L0,
             "%s: dropout active and deterministic for a fixed key (L %.6f, other key %.6f)", c->name, L0, L1);
}

/* one check per tensor: x, then every parameter tensor with a gradient */
static double check_entries(bt_ctx *c, fd_opts *f, double gmax, const bt_fd_opts *o) {
    const double floor_ = 1e-3 * gmax;
    double worst = fd_tensor_err(f, c->x, c->dx, c->RD, floor_);
    TL_CHECK(worst < BT_FD_TOL && gmax > 0 && all_finite(c->dx, c->RD), "FD %s: x (%zu entries): rel err %.2e", c->name,
             c->RD, worst);
    if (o->worst) bt_note(o->worst, worst, "%s: x", c->name);
    for (int t = 0; t < c->P.n; t++) {
        const mega_pspec *s = &c->P.specs[t];
        if (!fd_checked(c, s)) continue;
        const double e = fd_tensor_err(f, c->P.data + s->offset, c->P.grad + s->offset, s->numel, floor_);
        TL_CHECK(e < BT_FD_TOL && all_finite(c->P.grad + s->offset, s->numel), "FD %s: %s (%zu entries): rel err %.2e",
                 c->name, s->name, s->numel, e);
        if (o->worst) bt_note(o->worst, e, "%s: %s", c->name, s->name);
        if (!(e <= worst)) worst = e;
    }
    if (o->canary) { /* the comparison flags a gradient wrong by 1e-5 of the largest one */
        const size_t i = MEGA_MIN((size_t)3, c->RD - 1);
        const mega_real keep = c->dx[i];
        c->dx[i] += (mega_real)(1e-5 * gmax);
        const double e = fd_tensor_err(f, c->x, c->dx, c->RD, floor_);
        c->dx[i] = keep;
        TL_CHECK(e > 5 * BT_FD_TOL, "canary: a gradient off by 1e-5 of the largest is flagged (%.2e)", e);
    }
    return worst;
}

/* three random directions over the parameters with a gradient, one over x */
static double check_directional(bt_ctx *c, fd_opts *f) {
    uint8_t *mask = calloc(c->P.total, 1);
    for (int t = 0; t < c->P.n; t++)
        if (fd_checked(c, &c->P.specs[t])) memset(mask + c->P.specs[t].offset, 1, c->P.specs[t].numel);
    double worst = 0;
    for (int rep = 0; rep < 3; rep++) worst = fmax(worst, fd_directional(f, c->P.data, c->P.grad, c->P.total, mask));
    worst = fmax(worst, fd_directional(f, c->x, c->dx, c->RD, NULL));
    free(mask);
    TL_CHECK(worst < BT_FD_TOL, "FD %s: directional derivatives (3 over W, 1 over x): worst %.2e", c->name, worst);
    return worst;
}

double bt_fd_check(bt_ctx *c, const bt_fd_opts *o) {
    fd_opts f = {loss_cb, c, o->two_point, 0, o->sample_above, o->samples, 0x5eedfdull ^ c->run.key};
    const double L0 = bt_loss(c);
    TL_CHECK(isfinite(L0), "%s: forward runs (%s)", c->name, isfinite(L0) ? "ok" : mega_last_error());
    if (!isfinite(L0)) return INFINITY;
    mega_real *w0 = malloc(c->P.total * sizeof(mega_real));
    memcpy(w0, c->P.data, c->P.total * sizeof(mega_real));
    check_dropout(c, L0);
    bt_backward(c);
    double worst = 0;
    if (o->entries) worst = check_entries(c, &f, largest_grad(c), o);
    if (o->directional) {
        const double d = check_directional(c, &f);
        if (o->worst_dir) bt_note(o->worst_dir, d, "%s", c->name);
    }
    /* update_stats is 0: the many forwards left every tensor (batchnorm buffers included) as it was */
    TL_CHECK(!memcmp(w0, c->P.data, c->P.total * sizeof(mega_real)), "%s: parameters and buffers unchanged by the forwards",
             c->name);
    free(w0);
    return worst;
}

void bt_threads_check(bt_ctx *c) {
    const int nt = mega_get_threads(), keep = c->run.nthreads;
    if (nt < 2) return;
    const size_t n = c->P.total;
    mega_real *y1 = malloc(c->RD * sizeof(mega_real)), *dx1 = malloc(c->RD * sizeof(mega_real));
    mega_real *g1 = malloc(n * sizeof(mega_real));
    c->run.nthreads = 1;
    bt_backward(c);
    memcpy(y1, c->out, c->RD * sizeof(mega_real)), memcpy(dx1, c->dx, c->RD * sizeof(mega_real));
    memcpy(g1, c->P.grad, n * sizeof(mega_real));
    c->run.nthreads = nt;
    bt_backward(c);
    c->run.nthreads = keep;
    const double d = fmax(fmax(bt_rel_diff(c->out, y1, c->RD), bt_rel_diff(c->dx, dx1, c->RD)), bt_rel_diff(c->P.grad, g1, n));
    TL_CHECK(d == 0, "%s: 1 thread and %d threads give bit-identical outputs and gradients (rel %.1e)", c->name, nt, d);
    free(y1), free(dx1), free(g1);
}

/* ---- streaming ---------------------------------------------------------------------------- */
enum { GUARD = 64 };
static const mega_real GUARD_VAL = 777;

mega_status bt_stream_start(bt_ctx *c, bt_stream *s, int cap, int maxT, const bt_split *sp, int a1) {
    memset(s, 0, sizeof *s);
    s->cap = cap, s->maxT = maxT;
    s->full = malloc(c->RD * sizeof(mega_real)), s->out = calloc(c->RD, sizeof(mega_real));
    s->nmem = mega_block_state_size(&c->bl, c->B, cap);
    s->nscr = mega_block_step_scratch(&c->bl, c->B, maxT, cap);
    s->mem = calloc(s->nmem + GUARD, sizeof(mega_real)), s->scr = calloc(s->nscr + GUARD, sizeof(mega_real));
    for (int i = 0; i < GUARD; i++) s->mem[s->nmem + i] = s->scr[s->nscr + i] = GUARD_VAL;
    const size_t piece = (size_t)c->B * maxT * c->cfg.embed_dim;
    s->xt = malloc(piece * sizeof(mega_real)), s->ot = malloc(piece * sizeof(mega_real));
    MEGA_TRY(bt_eval_forward(c, s->full));
    MEGA_TRY(mega_block_state_init(&c->bl, c->P.data, &s->S, s->mem, c->B, cap));
    return bt_stream_feed(c, s, sp, s->out, 0, a1);
}

void bt_stream_close(bt_stream *s) {
    free(s->mem), free(s->scr), free(s->xt), free(s->ot), free(s->full), free(s->out);
    memset(s, 0, sizeof *s);
}

double bt_stream_err(const bt_ctx *c, const bt_stream *s, int a0, int a1) {
    const size_t D = (size_t)c->cfg.embed_dim;
    double d = 0, m = 0;
    for (int b = 0; b < c->B; b++)
        for (size_t i = ((size_t)b * c->T + a0) * D; i < ((size_t)b * c->T + a1) * D; i++) {
            const double e = fabs((double)s->out[i] - (double)s->full[i]);
            if (!(e <= d)) d = e;
            m = fmax(m, fabs((double)s->full[i]));
        }
    return m > 0 ? d / m : d;
}

int bt_stream_guards_ok(const bt_stream *s) {
    int ok = s->mem && s->scr;
    for (int i = 0; ok && i < GUARD; i++) ok &= s->mem[s->nmem + i] == GUARD_VAL && s->scr[s->nscr + i] == GUARD_VAL;
    return ok;
}

mega_status bt_stream_feed(bt_ctx *c, bt_stream *s, const bt_split *sp, mega_real *out, int a0, int a1) {
    const int B = c->B, T = c->T;
    const size_t D = (size_t)c->cfg.embed_dim;
    mega_status st = MEGA_OK;
    int a = a0, k = 0;
    while (a < a1 && st == MEGA_OK) {
        int L = sp && k < 8 && sp->sizes[k] ? sp->sizes[k++] : sp && sp->rest ? sp->rest : 1;
        L = MEGA_MIN(L, MEGA_MIN(a1 - a, s->maxT));
        for (int b = 0; b < B; b++) memcpy(s->xt + b * L * D, c->x + ((size_t)b * T + a) * D, L * D * sizeof(mega_real));
        st = mega_block_step(&c->bl, c->P.data, &s->S, s->ot, s->xt, L, s->scr);
        if (st == MEGA_OK)
            for (int b = 0; b < B; b++) memcpy(out + ((size_t)b * T + a) * D, s->ot + b * L * D, L * D * sizeof(mega_real));
        a += L;
    }
    return st;
}

mega_status bt_eval_forward(bt_ctx *c, mega_real *out) {
    const mega_run keep = c->run;
    c->run.training = 0, c->run.update_stats = 0;
    const mega_status st = bt_forward(c);
    c->run = keep;
    if (out) memcpy(out, c->out, c->RD * sizeof(mega_real));
    TL_CHECK(st == MEGA_OK, "%s: eval forward (%s)", c->name, st == MEGA_OK ? "ok" : mega_last_error());
    return st;
}

/* the standard splits: every mixer is streamed in all of them */
static int std_splits(const bt_ctx *c, bt_split *sp) {
    const int T = c->T, ch = c->cfg.chunk_size;
    /* the first piece ends at a chunk border (Mega), else 4 */
    const int first = c->cfg.mixer == MEGA_MIXER_MEGA && ch > 0 && ch < T ? ch : 4;
    /* a piece straddling the wrap-around of a ring buffer (a window's or a memory's slots) */
    const int m = c->cfg.memory_size > 0 ? c->cfg.memory_size : c->cfg.window > 0 ? c->cfg.window : c->cfg.attn_window;
    const bt_split all[] = {
        {{first, 3, 5}, T}, {{2, 5, 6}, 1}, {{2, 5, 6}, 6}, {{T}, 0}, {{1, 7, 2, 2, 1}, 1}, {{1, 7, 2, 2, 1}, 9},
        {{1, 7, 2, 2, 1, 64}, 1}, {{(m > 0 ? m : 4) + 1, 3}, 1},
    };
    memcpy(sp, all, sizeof all);
    return (int)(sizeof all / sizeof all[0]);
}

static void split_name(const bt_split *sp, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "{");
    for (int i = 0; i < 8 && sp->sizes[i] && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? ",%d" : "%d", sp->sizes[i]);
    if (k < n) snprintf(buf + k, n - k, " then %d}", sp->rest ? sp->rest : 1);
}

double bt_stream_check(bt_ctx *c, const bt_stream_opts *o) {
    const int T = c->T;
    const size_t bytes = c->RD * sizeof(mega_real);
    bt_stream s;
    mega_status st = bt_stream_start(c, &s, o && o->cap > 0 ? o->cap : T, T, NULL, T);
    double worst = st == MEGA_OK ? bt_stream_err(c, &s, 0, T) : INFINITY;
    TL_CHECK(worst < BT_STOL, "%s: token-by-token step == full forward: rel err %.2e (%s)", c->name, worst,
             st == MEGA_OK ? "ok" : mega_last_error());
    mega_real *o1 = malloc(bytes);
    memcpy(o1, s.out, bytes);
    if (st == MEGA_OK) {
        mega_block_state_reset(&c->bl, &s.S);
        st = bt_stream_feed(c, &s, NULL, s.out, 0, T);
        TL_CHECK(st == MEGA_OK && !memcmp(o1, s.out, bytes), "%s: reset + re-stream gives identical outputs", c->name);
        bt_split std[8];
        const bt_split *sp = o && o->splits ? o->splits : std;
        const int ns = o && o->splits ? o->nsplits : std_splits(c, std);
        for (int k = 0; k < ns; k++) {
            char nm[64];
            split_name(&sp[k], nm, sizeof nm);
            mega_block_state_reset(&c->bl, &s.S);
            memset(s.out, 0, bytes);
            st = bt_stream_feed(c, &s, &sp[k], s.out, 0, T);
            const double e = st == MEGA_OK ? bt_stream_err(c, &s, 0, T) : INFINITY;
            if (!(e <= worst)) worst = e;
            TL_CHECK(e < BT_STOL, "%s: split %s == full forward: rel err %.2e (%s)", c->name, nm, e,
                     st == MEGA_OK ? "ok" : mega_last_error());
        }
        TL_CHECK(bt_stream_guards_ok(&s), "%s: the step stays inside its state and scratch sizes", c->name);
    }
    if (o && o->worst) bt_note(o->worst, worst, "%s", c->name);
    free(o1);
    bt_stream_close(&s);
    return worst;
}
