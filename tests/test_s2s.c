/*
 * The encoder–decoder (mega.h mega_s2s_*; src/model/s2s*.c, src/layers/xattn.c):
 *   (1) double build only: finite differences of the cross-attention alone (gated: softmax /
 *       relu2 / laplace, simple / rotary, pre / post norm, with and without source padding;
 *       multi-head; the bounded memories of ABC, abc-window / abc-linformer / abc-mlp, with pads,
 *       empty slots and slot-weight dropout; their output also against the ABC equations written
 *       out here) with respect to its parameters, its input x and the encoder output e; and of
 *       the whole encoder–decoder's label-smoothed loss with respect to every parameter (Mega with
 *       chunked / ragged / full attention, shared and separate embeddings, embedding norm, source
 *       and target padding; the mha mixer's Transformer encoder–decoder; an AFT decoder; bounded
 *       cross-attention with the abc-mlp, mha and Mega decoders);
 *   (2) incremental decoding == the teacher-forced forward at every non-pad position, for Mega
 *       (chunked, so cache resets are crossed; full attention) and mha, and the bounded
 *       cross-attention kinds (the step reads the memory built once per source; ABC decoders),
 *       with beam-style rows (each source replicated) and a reorder that swaps equal rows;
 *   (3) search: beam 1 == a greedy decode written here on the stream; beam 4 never ends with a
 *       lower score than greedy (the score the search maximises) on random models (Mega, mha, an
 *       abc-mlp decoder with abc-mlp cross-attention);
 *   (4) save / load round trip (bit-identical logits), config JSON round trip, the official
 *       argument names, and bad inputs (tokens outside the vocabulary, targets beyond the
 *       relative-bias length, beam 0) failing with a message; the cross-attention choice kept by
 *       save/load, a config without it meaning the old default, bad cross-memory sizes.
 * build/t64_s2s is this file built against the double-precision library (Makefile T64_FROM).
 */
#include "testlib.h"
#ifdef MEGA_F64
#include "fd.h"
#endif
#include "layers/xattn.h"
#include "model/s2s.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef mega_real rl;
#ifdef MEGA_F64
#define TOL 1e-9
#else
#define TOL 2e-4
#endif

static unsigned long long g_seed = 0x5e25eedull;

#ifdef MEGA_F64
static void randn(rl *x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = (rl)(s * tl_randn(&g_seed));
}
#endif

/* move every parameter away from its initial value (norm weights 1, biases 0, 0.02 weights) */
static void perturb(mega_params *P) {
    for (int i = 0; i < P->n; i++) {
        size_t off, n;
        unsigned fl;
        const char *nm = mega_params_info(P, i, &off, &n, &fl);
        if (fl & 2) continue;
        rl *w = P->data + off;
        const int norm = strstr(nm, "norm.") != NULL, emb = strstr(nm, "embed_tokens") != NULL;
        for (size_t j = 0; j < n; j++) {
            if (norm && (strstr(nm, "weight") || strstr(nm, "scalar")))
                w[j] = (rl)(1 + 0.2 * tl_randn(&g_seed));
            else if (emb)
                w[j] = (rl)(0.5 * tl_randn(&g_seed));
            else
                w[j] += (rl)(0.15 * tl_randn(&g_seed));
        }
    }
}

/* a batch: B rows, source lengths slen[b] <= S, target lengths tlen[b] <= L, eos-terminated and
 * right-padded; prev = eos + target shifted */
typedef struct {
    int B, S, L;
    int32_t *src, *prev, *tgt;
} batch;

static batch make_batch(const mega_s2s_config *c, int B, int S, int L, const int *slen, const int *tlen) {
    batch b = {B, S, L, malloc((size_t)B * S * 4), malloc((size_t)B * L * 4), malloc((size_t)B * L * 4)};
    const int Vs = c->src_vocab_size, Vt = c->tgt_vocab_size, P = c->padding_idx, E = c->eos_idx;
    for (int r = 0; r < B; r++) {
        for (int t = 0; t < S; t++) {
            int v;
            do v = (int)(tl_rand01(&g_seed) * Vs) % Vs;
            while (v == P || v == E);
            b.src[r * S + t] = t < slen[r] - 1 ? v : t == slen[r] - 1 ? E : P;
        }
        for (int t = 0; t < L; t++) {
            int v;
            do v = (int)(tl_rand01(&g_seed) * Vt) % Vt;
            while (v == P || v == E);
            b.tgt[r * L + t] = t < tlen[r] - 1 ? v : t == tlen[r] - 1 ? E : P;
        }
        for (int t = 0; t < L; t++) b.prev[r * L + t] = t == 0 ? E : t < tlen[r] ? b.tgt[r * L + t - 1] : P;
    }
    return b;
}
static void free_batch(batch *b) { free(b->src), free(b->prev), free(b->tgt); }

/* a small model: D 16, Z 8, E 24, N 2, F 24, two layers a side, vocabulary 20 (pad 1, eos 2) */
static void small_cfg(mega_s2s_config *c, mega_mixer_kind mixer) {
    mega_s2s_config_default(c);
    c->src_vocab_size = c->tgt_vocab_size = 20, c->padding_idx = 1, c->eos_idx = 2;
    mega_block_config *b = &c->encoder;
    b->mixer = mixer, b->embed_dim = 16, b->z_dim = 8, b->hidden_dim = 24, b->n_dim = 2, b->ffn_dim = 24;
    b->chunk_size = -1, b->max_positions = 40, b->heads = mixer == MEGA_MIXER_MEGA ? 0 : 4;
    c->decoder = *b;
    c->decoder.bidirectional = 0;
}

/* ---- (1) finite differences (double) ----------------------------------------------------- */
#ifdef MEGA_F64
typedef struct {
    mega_s2s *m;
    batch *b;
    double eps;
} s2s_arg;
static double s2s_loss(void *a) {
    s2s_arg *s = a;
    double l = 0;
    mega_lm_run run = {1, 0};
    mega_s2s_forward(s->m, s->b->src, s->b->S, s->b->prev, s->b->tgt, s->b->L, s->b->B, &run, s->eps, &l, NULL, NULL);
    return l;
}

typedef struct {
    const char *name;
    mega_mixer_kind mixer;
    mega_attn_fn fn;
    int rotary, prenorm, enc_chunk, dec_chunk, share_all, tie, enorm, pad;
    double eps;
    int cross, cross_memory, memory_size; /* 0: as the defaults */
} fdcase;

static void fd_model(const fdcase *fc) {
    mega_s2s_config c;
    small_cfg(&c, fc->mixer);
    mega_block_config *sides[2] = {&c.encoder, &c.decoder};
    for (int i = 0; i < 2; i++) {
        sides[i]->attention_activation = fc->fn;
        sides[i]->rel_pos_bias = fc->rotary ? MEGA_RELPOS_ROTARY : MEGA_RELPOS_SIMPLE;
        sides[i]->prenorm = fc->prenorm;
        sides[i]->chunk_size = i ? fc->dec_chunk : fc->enc_chunk;
    }
    c.decoder.z_dim = 6, c.decoder.n_dim = 3; /* the decoder's own dimensions */
    c.share_all_embeddings = fc->share_all, c.tie_embeddings = fc->tie, c.normalize_embedding = fc->enorm;
    if (!fc->share_all) c.tgt_vocab_size = 23;
    if (fc->cross) c.cross_attention = fc->cross, c.cross_memory = fc->cross_memory;
    if (fc->memory_size) c.encoder.memory_size = c.decoder.memory_size = fc->memory_size;
    mega_s2s *m = NULL;
    if (mega_s2s_create(&c, &m)) {
        tl_check(0, "fd %s: create: %s", fc->name, mega_last_error());
        return;
    }
    perturb(&m->P);
    const int B = 2, S = 11, L = 9;
    const int slen[2] = {S, fc->pad ? 6 : S}, tlen[2] = {fc->pad ? 5 : L, L};
    batch b = make_batch(&c, B, S, L, slen, tlen);
    s2s_arg a = {m, &b, fc->eps};
    double l0 = s2s_loss(&a);
    mega_params_zero_grad(&m->P);
    mega_s2s_backward(m, 1.0);
    rl *grad = malloc(m->P.total * sizeof(rl));
    memcpy(grad, m->P.grad, m->P.total * sizeof(rl));
    fd_opts o = {s2s_loss, &a, fc->fn == MEGA_ATTN_RELU2, 0, 64, 24, 7};
    double gmax = 0;
    for (size_t i = 0; i < m->P.total; i++) gmax = fmax(gmax, fabs(grad[i]));
    double worst = 0;
    const char *wn = "";
    for (int i = 0; i < m->P.n; i++) {
        size_t off, n;
        unsigned fl;
        const char *nm = mega_params_info(&m->P, i, &off, &n, &fl);
        if (fl & 2) continue;
        double e = fd_tensor_err(&o, m->P.data + off, grad + off, n, 1e-3 * gmax);
        if (e > worst) worst = e, wn = nm;
    }
    double dir = fd_directional(&o, m->P.data, grad, m->P.total, NULL);
    const double tol = fc->fn == MEGA_ATTN_RELU2 ? 1e-5 : 1e-6;
    tl_check(isfinite(l0) && worst < tol && dir < tol, "fd encoder-decoder %s: loss %.4f, worst tensor %.2e (%s), directional %.2e",
             fc->name, l0, worst, wn, dir);
    if (tl_verbose) printf("  fd %s: worst %.2e (%s) dir %.2e\n", fc->name, worst, wn, dir);
    free(grad);
    free_batch(&b);
    mega_s2s_free(m);
}

/* the cross-attention alone: loss = sum(y * dy) with y = xattn(x, e) */
typedef struct {
    const mega_xattn *X;
    mega_params *P;
    mega_xattn_acts *A;
    rl *x, *e, *y, *dy, *scr;
    const uint8_t *kpad;
    int B, Tq, Tk;
} xa_arg;
static double xa_loss(void *p) {
    xa_arg *a = p;
    mega_run run = {1, 0, 0, 1, NULL};
    mega_xattn_forward(a->X, a->P->data, a->A, a->y, a->x, a->e, a->kpad, a->B, a->Tq, a->Tk, &run, a->scr);
    double s = 0;
    for (size_t i = 0; i < (size_t)a->B * a->Tq * a->X->cfg->embed_dim; i++) s += a->y[i] * a->dy[i];
    return s;
}

/* The ABC read written out from the paper's equations (section 3, eq. 7), independently of
 * src/ops/abc.c: from the forward's projections q = A->base, k = A->k, v = A->v, per head
 *   phi_i (window: 1/|block| on the block of consecutive valid positions holding i; Linformer:
 *   E[:, i]; MLP: softmax over the valid i of W_phi e_i), pads phi_i = 0,
 *   K~ = sum_i phi^K_i k_i^T, V~ = sum_i phi^V_i v_i^T, o = V~^T softmax(K~ q / sqrt d) over the
 *   non-empty slots;
 * returns the largest difference from the forward's A->O */
static double abc_reference_err(const mega_xattn *X, const rl *W, const mega_xattn_acts *A, const rl *e,
                                const uint8_t *kpad, int B, int Tq, int Tk) {
    const int H = X->H, n = X->n, d = X->dh, D = X->cfg->embed_dim;
    double worst = 0;
    double *phk = calloc((size_t)n * Tk, sizeof(double)), *phv = calloc((size_t)n * Tk, sizeof(double));
    double *Km = calloc((size_t)n * d, sizeof(double)), *Vm = calloc((size_t)n * d, sizeof(double)), *p = calloc((size_t)n, sizeof(double));
    int *empty = calloc((size_t)n, sizeof(int));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int Sb = 0;
            for (int i = 0; i < Tk; i++) Sb += !(kpad && kpad[b * Tk + i]);
            for (int j = 0; j < n; j++) {
                empty[j] = 0;
                double zk = 0, zv = 0;
                for (int i = 0, r = 0; i < Tk; i++) {
                    const int valid = !(kpad && kpad[b * Tk + i]);
                    double fk = 0, fv = 0;
                    if (valid && X->kind == MEGA_XATTN_ABC_WINDOW) {
                        const int c = Sb > n ? (Sb + n - 1) / n : 1, lo = j * c, hi = Sb < lo + c ? Sb : lo + c;
                        fk = fv = (r >= lo && r < hi) ? 1.0 / (hi - lo) : 0;
                    } else if (valid && X->kind == MEGA_XATTN_ABC_LINFORMER) {
                        fk = W[X->c_k + (size_t)j * X->M + i], fv = W[X->c_v + (size_t)j * X->M + i];
                    } else if (valid) {
                        double lk = 0, lv = 0;
                        for (int c2 = 0; c2 < D; c2++) {
                            lk += W[X->c_k + ((size_t)h * n + j) * D + c2] * e[((size_t)b * Tk + i) * D + c2];
                            lv += W[X->c_v + ((size_t)h * n + j) * D + c2] * e[((size_t)b * Tk + i) * D + c2];
                        }
                        fk = exp(lk), fv = exp(lv), zk += fk, zv += fv;
                    }
                    phk[(size_t)j * Tk + i] = fk, phv[(size_t)j * Tk + i] = fv;
                    r += valid;
                }
                if (X->kind == MEGA_XATTN_ABC_MLP)
                    for (int i = 0; i < Tk; i++) phk[(size_t)j * Tk + i] /= zk, phv[(size_t)j * Tk + i] /= zv;
                if (X->kind == MEGA_XATTN_ABC_WINDOW) {
                    const int c = Sb > n ? (Sb + n - 1) / n : 1;
                    empty[j] = j * c >= Sb;
                }
                for (int c2 = 0; c2 < d; c2++) {
                    double sk = 0, sv = 0;
                    for (int i = 0; i < Tk; i++) {
                        sk += phk[(size_t)j * Tk + i] * A->k[((size_t)b * Tk + i) * D + h * d + c2];
                        sv += phv[(size_t)j * Tk + i] * A->v[((size_t)b * Tk + i) * D + h * d + c2];
                    }
                    Km[(size_t)j * d + c2] = sk, Vm[(size_t)j * d + c2] = sv;
                }
            }
            for (int t = 0; t < Tq; t++) {
                const rl *q = A->base + ((size_t)b * Tq + t) * D + h * d;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < n; j++) {
                    double sc = 0;
                    for (int c2 = 0; c2 < d; c2++) sc += Km[(size_t)j * d + c2] * q[c2];
                    p[j] = empty[j] ? -INFINITY : sc / sqrt((double)d);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < n; j++) z += p[j] = empty[j] ? 0 : exp(p[j] - mx);
                for (int c2 = 0; c2 < d; c2++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += p[j] / z * Vm[(size_t)j * d + c2];
                    worst = fmax(worst, fabs(o - A->O[((size_t)b * Tq + t) * D + h * d + c2]));
                }
            }
        }
    free(phk), free(phv), free(Km), free(Vm), free(p), free(empty);
    return worst;
}

/* kind -1: the mixer's default; n: ABC slots; pdrop: attention dropout (the ABC slot weights) */
static void fd_xattn_kind(const char *name, mega_mixer_kind mixer, mega_attn_fn fn, int rotary, int prenorm, int pad,
                          int kind, int nslots, float pdrop) {
    mega_block_config c;
    mega_block_config_default(&c);
    c.mixer = mixer, c.embed_dim = 12, c.z_dim = 6, c.heads = 3, c.attention_activation = fn, c.prenorm = prenorm;
    c.rel_pos_bias = rotary ? MEGA_RELPOS_ROTARY : MEGA_RELPOS_SIMPLE, c.activation = MEGA_ACT_GELU;
    c.attention_dropout = pdrop;
    const int B = 2, Tq = 5, Tk = 7, D = 12;
    mega_params P;
    mega_params_init(&P);
    mega_xattn X;
    if (mega_xattn_declare(&X, &P, "", &c, kind < 0 ? mega_xattn_default_kind(&c) : (mega_xattn_kind)kind, nslots, 9) ||
        mega_params_alloc(&P, 1)) {
        tl_check(0, "fd xattn %s: declare: %s", name, mega_last_error());
        mega_params_free(&P);
        return;
    }
    mega_rng rng;
    mega_rng_seed(&rng, 3);
    mega_xattn_init(&X, P.data, &rng);
    perturb(&P);
    mega_xattn_acts A;
    size_t na = mega_xattn_acts_view(&X, &A, NULL, B, Tq, Tk), ns = mega_xattn_scratch_size(&X, B, Tq, Tk, 1);
    rl *acts = calloc(na, sizeof(rl)), *scr = calloc(ns, sizeof(rl));
    mega_xattn_acts_view(&X, &A, acts, B, Tq, Tk);
    const size_t R = (size_t)B * Tq * D, Rs = (size_t)B * Tk * D;
    rl *x = malloc(R * sizeof(rl)), *e = malloc(Rs * sizeof(rl)), *y = malloc(R * sizeof(rl)), *dy = malloc(R * sizeof(rl));
    rl *dx = malloc(R * sizeof(rl)), *dE = calloc(Rs, sizeof(rl));
    randn(x, R, 1), randn(e, Rs, 1), randn(dy, R, 1);
    uint8_t kpad[2 * 7] = {0};
    for (int j = 4; j < Tk; j++) kpad[Tk + j] = 1; /* row 1: 4 valid keys */
    xa_arg a = {&X, &P, &A, x, e, y, dy, scr, pad ? kpad : NULL, B, Tq, Tk};
    xa_loss(&a);
    mega_params_zero_grad(&P);
    mega_run run = {1, 0, 0, 1, NULL};
    mega_xattn_backward(&X, P.data, P.grad, &A, dx, dE, dy, x, e, a.kpad, B, Tq, Tk, &run, scr);
    fd_opts o = {xa_loss, &a, fn == MEGA_ATTN_RELU2, 0, 0, 0, 11};
    double gmax = 0;
    for (size_t i = 0; i < P.total; i++) gmax = fmax(gmax, fabs(P.grad[i]));
    double worst = 0;
    const char *wn = "";
    for (int i = 0; i < P.n; i++) {
        size_t off, n;
        unsigned fl;
        const char *nm = mega_params_info(&P, i, &off, &n, &fl);
        double er = fd_tensor_err(&o, P.data + off, P.grad + off, n, 1e-3 * gmax);
        if (er > worst) worst = er, wn = nm;
    }
    double ex = fd_tensor_err(&o, x, dx, R, 1e-6), ee = fd_tensor_err(&o, e, dE, Rs, 1e-6);
    const double tol = fn == MEGA_ATTN_RELU2 ? 1e-5 : 1e-7;
    tl_check(worst < tol && ex < tol && ee < tol, "fd cross-attention %s: params %.2e (%s), dx %.2e, dE %.2e", name, worst, wn, ex,
             ee);
    if (kind >= MEGA_XATTN_ABC_WINDOW && pdrop == 0) {
        xa_loss(&a); /* the forward at the parameters themselves */
        const double err = abc_reference_err(&X, P.data, &A, e, a.kpad, B, Tq, Tk);
        tl_check(err < 1e-12, "bounded cross-attention %s == the ABC equations written out: max diff %.2e", name, err);
    }
    free(acts), free(scr), free(x), free(e), free(y), free(dy), free(dx), free(dE);
    mega_params_free(&P);
}
static void fd_xattn(const char *name, mega_mixer_kind mixer, mega_attn_fn fn, int rotary, int prenorm, int pad) {
    fd_xattn_kind(name, mixer, fn, rotary, prenorm, pad, -1, 4, 0);
}

static void test_fd(void) {
    fd_xattn("gated softmax simple prenorm pad", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 0, 1, 1);
    fd_xattn("gated softmax rotary postnorm", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 1, 0, 0);
    fd_xattn("gated laplace simple postnorm pad", MEGA_MIXER_MEGA, MEGA_ATTN_LAPLACE, 0, 0, 1);
    fd_xattn("gated relu2 rotary prenorm pad", MEGA_MIXER_MEGA, MEGA_ATTN_RELU2, 1, 1, 1);
    fd_xattn("multi-head prenorm pad", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 1, 1);
    fd_xattn("multi-head postnorm", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 0, 0);
    /* the two full kinds with the other decoder */
    fd_xattn_kind("gated with an mha decoder, prenorm pad", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 1, 1, MEGA_XATTN_GATED, 4, 0);
    fd_xattn_kind("multi-head with a mega decoder, postnorm pad", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 0, 0, 1, MEGA_XATTN_MHA,
                  4, 0);
    /* the bounded memories (ABC): 7 keys, row 1 with 4 (blocks of 2 and 1; with 9 slots some
     * stay empty), with the Mega and mha decoders, slot-weight dropout */
    fd_xattn_kind("abc-window 4 slots prenorm pad", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 1, 1, MEGA_XATTN_ABC_WINDOW, 4, 0);
    fd_xattn_kind("abc-window 9 slots (empty ones) postnorm pad", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 0, 0, 1,
                  MEGA_XATTN_ABC_WINDOW, 9, 0);
    fd_xattn_kind("abc-linformer 3 slots prenorm pad", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 0, 1, 1, MEGA_XATTN_ABC_LINFORMER, 3,
                  0);
    fd_xattn_kind("abc-linformer 5 slots postnorm dropout", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 0, 0,
                  MEGA_XATTN_ABC_LINFORMER, 5, 0.3f);
    fd_xattn_kind("abc-mlp 3 slots prenorm pad", MEGA_MIXER_ABC_MLP, MEGA_ATTN_SOFTMAX, 0, 1, 1, MEGA_XATTN_ABC_MLP, 3, 0);
    fd_xattn_kind("abc-mlp 2 slots postnorm pad dropout", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 0, 0, 1, MEGA_XATTN_ABC_MLP, 2,
                  0.3f);
    static const fdcase CASES[] = {
        {"mega softmax simple pre, enc chunk 4 (ragged), dec full, separate, pads, ls 0.1", MEGA_MIXER_MEGA,
         MEGA_ATTN_SOFTMAX, 0, 1, 4, -1, 0, 0, 0, 1, 0.1, 0, 0, 0},
        {"mega laplace rotary post, dec chunk 4 (ragged), share-all, embed norm, pads", MEGA_MIXER_MEGA, MEGA_ATTN_LAPLACE,
         1, 0, -1, 4, 1, 1, 1, 1, 0.0, 0, 0, 0},
        {"mega relu2 simple pre, chunk 3 both, tied, no pads, ls 0.2", MEGA_MIXER_MEGA, MEGA_ATTN_RELU2, 0, 1, 3, 3, 0, 1,
         0, 0, 0.2, 0, 0, 0},
        {"mha pre (Transformer encoder-decoder), separate, pads, ls 0.1", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 1, -1, -1,
         0, 0, 0, 1, 0.1, 0, 0, 0},
        {"mha post, share-all, pads", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 0, -1, -1, 1, 1, 0, 1, 0.0, 0, 0, 0},
        {"aft-full pre, tied, pads", MEGA_MIXER_AFT_FULL, MEGA_ATTN_SOFTMAX, 0, 1, -1, -1, 0, 1, 0, 1, 0.1, 0, 0, 0},
        /* bounded cross-attention (cross-attention 3 abc-window, 4 abc-linformer, 5 abc-mlp) */
        {"abc-mlp mixer (3 slots) + abc-mlp cross (4 slots), pre, separate, pads", MEGA_MIXER_ABC_MLP, MEGA_ATTN_SOFTMAX, 0,
         1, -1, -1, 0, 0, 0, 1, 0.1, 5, 4, 3},
        {"mha + abc-window cross (4 slots), post, tied, pads", MEGA_MIXER_MHA, MEGA_ATTN_SOFTMAX, 0, 0, -1, -1, 0, 1, 0, 1,
         0.0, 3, 4, 0},
        {"mega chunk 4 + abc-linformer cross (3 slots), pre, pads", MEGA_MIXER_MEGA, MEGA_ATTN_SOFTMAX, 0, 1, 4, 4, 0, 1, 0, 1,
         0.1, 4, 3, 0},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) fd_model(&CASES[i]);
}
#endif

/* ---- (2) incremental decoding == teacher forcing ------------------------------------------ */

static void test_incremental_x(const char *name, mega_mixer_kind mixer, int dec_chunk, mega_attn_fn fn, int prenorm,
                               int cross, int cross_memory) {
    mega_s2s_config c;
    small_cfg(&c, mixer);
    c.cross_attention = cross, c.cross_memory = cross_memory;
    c.decoder.chunk_size = dec_chunk, c.decoder.attention_activation = fn, c.encoder.attention_activation = fn;
    c.encoder.prenorm = c.decoder.prenorm = prenorm;
    c.encoder.chunk_size = mixer == MEGA_MIXER_MEGA ? 4 : -1;
    mega_s2s *m = NULL;
    if (mega_s2s_create(&c, &m)) {
        tl_check(0, "incremental %s: %s", name, mega_last_error());
        return;
    }
    perturb(&m->P);
    const int B = 3, S = 10, L = 13, K = 2, V = c.tgt_vocab_size;
    const int slen[3] = {10, 7, 3}, tlen[3] = {13, 9, 5};
    batch b = make_batch(&c, B, S, L, slen, tlen);
    mega_lm_run run = {0, 0};
    double loss;
    mega_status st = mega_s2s_forward(m, b.src, S, b.prev, b.tgt, L, B, &run, 0, &loss, NULL, NULL);
    rl *full = malloc((size_t)B * L * V * sizeof(rl));
    if (!st) memcpy(full, mega_s2s_logits(m), (size_t)B * L * V * sizeof(rl));
    /* K rows per source (beam layout); rows of a source get the same tokens, and a reorder that
     * swaps them (equal states) must change nothing */
    mega_s2s_stream *s = NULL;
    if (!st) st = mega_s2s_stream_new(m, B * K, S, L, &s);
    if (!st) st = mega_s2s_stream_start(s, b.src, S, K);
    rl *lg = malloc((size_t)B * K * V * sizeof(rl));
    int32_t tok[6];
    int idx[6];
    double worst = 0, lmax = 0;
    for (int t = 0; t < L && !st; t++) {
        for (int r = 0; r < B * K; r++) tok[r] = b.prev[(r / K) * L + t], idx[r] = (r / K) * K + (K - 1 - r % K);
        st = mega_s2s_stream_step(s, tok, lg);
        if (!st && mixer != MEGA_MIXER_AFT_FULL) st = mega_s2s_stream_reorder(s, idx);
        for (int r = 0; r < B * K && !st; r++) {
            const int bb = r / K;
            if (t >= tlen[bb]) continue; /* target pads: the paths differ there by design */
            for (int v = 0; v < V; v++) {
                double f = full[((size_t)bb * L + t) * V + v], g = lg[(size_t)r * V + v];
                worst = fmax(worst, fabs(f - g)), lmax = fmax(lmax, fabs(f));
            }
        }
    }
    tl_check(!st && worst <= TOL * fmax(lmax, 1), "incremental decoding == teacher forcing, %s: max diff %.2e of %.2e%s%s", name,
             worst, lmax, st ? ": " : "", st ? mega_last_error() : "");
    mega_s2s_stream_free(s);
    free(full), free(lg);
    free_batch(&b);
    mega_s2s_free(m);
}

static void test_incremental(const char *name, mega_mixer_kind mixer, int dec_chunk, mega_attn_fn fn, int prenorm) {
    test_incremental_x(name, mixer, dec_chunk, fn, prenorm, 0, 32);
}

/* ---- (3) search ------------------------------------------------------------------------------ */

/* greedy written out on the stream: argmax over the non-pad tokens until eos or the limit */
static void greedy(mega_s2s *m, const int32_t *src, int S, int slen, const mega_s2s_search *p, int32_t *out, int *n,
                   double *score) {
    const mega_s2s_config *c = &m->cfg;
    const int V = c->tgt_vocab_size;
    int maxlen = (int)(p->max_len_a * slen + p->max_len_b);
    mega_s2s_stream *s = NULL;
    rl *lg = malloc((size_t)V * sizeof(rl));
    mega_s2s_stream_new(m, 1, S, maxlen + 1, &s);
    mega_s2s_stream_start(s, src, S, 1);
    int32_t tok = c->eos_idx;
    double sc = 0;
    *n = 0;
    for (int t = 0; t <= maxlen; t++) {
        mega_s2s_stream_step(s, &tok, lg);
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, lg[v]);
        for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
        int best = -1;
        for (int v = 0; v < V; v++)
            if (v != c->padding_idx && (t < maxlen || v == c->eos_idx) && (best < 0 || lg[v] > lg[best])) best = v;
        sc += lg[best] - mx - log(sum);
        if (best == c->eos_idx) break;
        out[(*n)++] = best;
        tok = best;
    }
    *score = sc / pow(*n + 1, p->lenpen);
    mega_s2s_stream_free(s);
    free(lg);
}

static void test_search_x(mega_mixer_kind mixer, double lenpen, int cross) {
    mega_s2s_config c;
    small_cfg(&c, mixer);
    c.cross_attention = cross, c.cross_memory = 4, c.encoder.memory_size = c.decoder.memory_size = 3;
    c.decoder.chunk_size = mixer == MEGA_MIXER_MEGA ? 4 : -1;
    mega_s2s *m = NULL;
    if (mega_s2s_create(&c, &m)) {
        tl_check(0, "search: %s", mega_last_error());
        return;
    }
    const int N = 12, S = 8, cap = 64;
    int same = 0, below = 0, better = 0, rounding = 0;
    double worst_gap = 0;
    for (int trial = 0; trial < 4; trial++) {
        mega_s2s_init_params(m, 100 + trial);
        perturb(&m->P);
        /* sharpen the output distribution so that hypotheses end at varied lengths */
        int slen[12], tlen[12];
        for (int i = 0; i < N; i++) slen[i] = 2 + (i * 5 + trial) % (S - 1), tlen[i] = 1;
        batch b = make_batch(&c, N, S, 1, slen, tlen);
        mega_s2s_search p;
        mega_s2s_search_default(&p);
        p.lenpen = lenpen, p.max_len_a = 1, p.max_len_b = 3;
        int32_t out1[12 * 64], out4[12 * 64], g[64];
        int n1[12], n4[12], ng;
        double s1[12], s4[12], sg;
        p.beam = 1;
        mega_status st = mega_s2s_translate(m, b.src, N, S, &p, out1, n1, cap, s1);
        p.beam = 4;
        if (!st) st = mega_s2s_translate(m, b.src, N, S, &p, out4, n4, cap, s4);
        if (st) {
            tl_check(0, "search: %s", mega_last_error());
            free_batch(&b);
            break;
        }
        for (int i = 0; i < N; i++) {
            greedy(m, b.src + i * S, S, slen[i], &p, g, &ng, &sg);
            same += ng == n1[i] && !memcmp(g, out1 + i * cap, (size_t)ng * 4) && fabs(sg - s1[i]) < 1e-4;
            /* The beam re-decodes the greedy hypothesis in an extra row of a larger batch, where
             * the BLAS may round its log-probabilities differently (OpenBLAS's AVX2 kernels do,
             * by the row's place in the call): the same hypothesis can come back up to float32
             * rounding below the greedy run's score. Below means a different hypothesis scoring
             * lower, or a gap beyond that rounding. */
            const int same_hyp = n4[i] == n1[i] && !memcmp(out4 + i * cap, out1 + i * cap, (size_t)n1[i] * 4);
            const double gap = s1[i] - s4[i];
            if (gap > 1e-9 && (!same_hyp || gap > 1e-5 * fmax(1, fabs(s1[i]))))
                below++, worst_gap = fmax(worst_gap, gap);
            rounding += gap > 1e-9 && same_hyp && gap <= 1e-5 * fmax(1, fabs(s1[i]));
            better += s4[i] > s1[i] + 1e-9;
        }
        free_batch(&b);
    }
    const char *xn = cross ? " + bounded cross-attention" : "";
    tl_check(same == 4 * N, "%s%s lenpen %g: beam 1 == greedy on %d/%d sentences", mega_mixer_name(mixer), xn, lenpen, same,
             4 * N);
    tl_check(below == 0,
             "%s%s lenpen %g: beam 4 never scores below greedy (%d below, worst gap %.3g; %d strictly better, %d the "
             "greedy hypothesis within rounding)",
             mega_mixer_name(mixer), xn, lenpen, below, worst_gap, better, rounding);
    mega_s2s_free(m);
}
static void test_search(mega_mixer_kind mixer, double lenpen) { test_search_x(mixer, lenpen, 0); }

/* ---- (4) files, configs, errors ---------------------------------------------------------------- */

static void test_io(void) {
    char dir[256], path[300];
    if (tl_mkdtemp(dir, sizeof dir, "mega_s2s_")) return;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    mega_s2s_config c;
    small_cfg(&c, MEGA_MIXER_MEGA);
    c.decoder.chunk_size = 4;
    mega_s2s *m = NULL, *m2 = NULL;
    mega_status st = mega_s2s_create(&c, &m);
    if (!st) perturb(&m->P), st = mega_s2s_save_ex(m, path, NULL);
    if (!st) st = mega_s2s_load(path, &m2);
    tl_check(!st, "s2s save/load: %s", st ? mega_last_error() : "ok");
    if (!st) {
        const int slen[2] = {6, 4}, tlen[2] = {5, 3};
        batch b = make_batch(&c, 2, 6, 5, slen, tlen);
        mega_lm_run run = {0, 0};
        double l1, l2;
        mega_s2s_forward(m, b.src, 6, b.prev, b.tgt, 5, 2, &run, 0, &l1, NULL, NULL);
        mega_s2s_forward(m2, b.src, 6, b.prev, b.tgt, 5, 2, &run, 0, &l2, NULL, NULL);
        tl_check(!memcmp(mega_s2s_logits(m), mega_s2s_logits(m2), 2 * 5 * 20 * sizeof(rl)) && l1 == l2,
                 "s2s logits bit-identical after a save/load round trip");
        /* bad inputs */
        int32_t bad = b.src[0];
        b.src[0] = 99;
        tl_check(mega_s2s_forward(m, b.src, 6, b.prev, b.tgt, 5, 2, &run, 0, &l1, NULL, NULL) == MEGA_ERR_INVALID &&
                     strstr(mega_last_error(), "outside the vocabulary"),
                 "a source token outside the vocabulary is an error: %s", mega_last_error());
        b.src[0] = bad;
        tl_check(mega_s2s_forward(m, b.src, 6, b.prev, b.tgt, 5, 2, &run, 1.5, &l1, NULL, NULL) == MEGA_ERR_INVALID,
                 "label smoothing 1.5 is an error: %s", mega_last_error());
        mega_s2s_search p;
        mega_s2s_search_default(&p);
        p.beam = 0;
        int32_t o[2 * 32];
        int n[2];
        tl_check(mega_s2s_translate(m, b.src, 2, 6, &p, o, n, 32, NULL) == MEGA_ERR_INVALID, "beam 0 is an error: %s",
                 mega_last_error());
        free_batch(&b);
        /* a target longer than the simple relative bias allows (full-attention encoder, 40) */
        const int sl2[1] = {45}, tl2[1] = {3};
        batch lb = make_batch(&c, 1, 45, 3, sl2, tl2);
        tl_check(mega_s2s_forward(m, lb.src, 45, lb.prev, lb.tgt, 3, 1, &run, 0, &l1, NULL, NULL) == MEGA_ERR_INVALID,
                 "a source beyond max-positions is an error: %s", mega_last_error());
        free_batch(&lb);
    }
    /* config JSON round trip and the official argument names */
    char *js = mega_s2s_config_to_json(&c);
    mega_s2s_config c2;
    st = mega_s2s_config_from_json(js, &c2);
    mega_s2s_config_resolve(&c);
    tl_check(!st && !memcmp(&c.encoder, &c2.encoder, sizeof c.encoder) && !memcmp(&c.decoder, &c2.decoder, sizeof c.decoder) &&
                 c2.tgt_vocab_size == c.tgt_vocab_size && c2.decoder_layers == c.decoder_layers,
             "s2s config JSON round trip");
    free(js);
    st = mega_s2s_config_from_json("{\"encoder_layers\":3,\"encoder_embed_dim\":32,\"decoder_z_dim\":12,"
                                   "\"share_all_embeddings\":true,\"src_vocab_size\":50,\"tgt_vocab_size\":50,"
                                   "\"max_source_positions\":64,\"activation_fn\":\"swish\",\"truncation_length\":null}",
                                   &c2);
    tl_check(!st && c2.encoder_layers == 3 && c2.decoder.embed_dim == 32 && c2.decoder.z_dim == 12 &&
                 c2.encoder.z_dim == 64 /* ours: absent keys keep our defaults */ && c2.tie_embeddings && c2.encoder.max_positions == 64 &&
                 c2.decoder.max_positions == 1024 && c2.padding_idx == 1 && c2.eos_idx == 2 && !c2.encoder.prenorm &&
                 c2.encoder.truncation == 0,
             "official MegaModel arguments are read (%s)", st ? mega_last_error() : "ok");
    st = mega_s2s_config_from_json("{\"encoder_layers\":2,\"encoder_embed_dim\":32,\"decoder_embed_dim\":48}", &c2);
    tl_check(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "embed-dim"), "different encoder/decoder widths: %s",
             mega_last_error());
    st = mega_s2s_config_from_json("{\"model\":\"mega_lm\"}", &c2);
    tl_check(st == MEGA_ERR_FORMAT, "a language-model config is not an encoder-decoder: %s", mega_last_error());
    mega_s2s_free(m), mega_s2s_free(m2);
    tl_rm_rf(dir);
}

/* the cross-attention choice: stored and restored; a config without it (older checkpoints) means
 * what it meant before; a bad memory size is one message */
static void test_cross_io(void) {
    char dir[256], path[300];
    if (tl_mkdtemp(dir, sizeof dir, "mega_s2s_x_")) return;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    mega_s2s_config c;
    small_cfg(&c, MEGA_MIXER_ABC_MLP);
    c.encoder.memory_size = c.decoder.memory_size = 3;
    c.cross_attention = 5, c.cross_memory = 6; /* abc-mlp, 6 slots */
    mega_s2s *m = NULL, *m2 = NULL;
    mega_status st = mega_s2s_create(&c, &m);
    if (!st) perturb(&m->P), st = mega_s2s_save_ex(m, path, NULL);
    if (!st) st = mega_s2s_load(path, &m2);
    tl_check(!st && m2->cfg.cross_attention == 5 && m2->cfg.cross_memory == 6 && m2->dl[0].x.kind == MEGA_XATTN_ABC_MLP &&
                 m2->dl[1].x.n == 6,
             "abc-mlp cross-attention (6 slots) kept by a save/load round trip%s%s", st ? ": " : "", st ? mega_last_error() : "");
    if (!st) {
        const int slen[2] = {6, 4}, tlen[2] = {5, 3};
        batch b = make_batch(&c, 2, 6, 5, slen, tlen);
        mega_lm_run run = {0, 0};
        double l1, l2;
        mega_s2s_forward(m, b.src, 6, b.prev, b.tgt, 5, 2, &run, 0, &l1, NULL, NULL);
        mega_s2s_forward(m2, b.src, 6, b.prev, b.tgt, 5, 2, &run, 0, &l2, NULL, NULL);
        tl_check(!memcmp(mega_s2s_logits(m), mega_s2s_logits(m2), 2 * 5 * 20 * sizeof(rl)) && l1 == l2,
                 "bounded cross-attention: logits bit-identical after the round trip");
        free_batch(&b);
    }
    char buf[64];
    tl_check(!strcmp(mega_s2s_cross_attention_name(&m->cfg, buf, sizeof buf), "abc-mlp (6 slots)"), "described as '%s'", buf);
    mega_s2s_free(m), mega_s2s_free(m2);
    /* a config written before the choice existed: no cross-attention keys */
    mega_s2s_config o[2];
    const mega_mixer_kind mx[2] = {MEGA_MIXER_MEGA, MEGA_MIXER_MHA};
    for (int i = 0; i < 2; i++) {
        small_cfg(&o[i], mx[i]);
        char *js = mega_s2s_config_to_json(&o[i]);
        /* cut ,"cross-attention":"..." and ,"cross-memory":N out of the JSON */
        char *k = strstr(js, ",\"cross-attention\":\"");
        if (k) {
            char *e = strchr(k + 20, '"');
            memmove(k, e + 1, strlen(e + 1) + 1);
        }
        char *q = strstr(js, ",\"cross-memory\":");
        if (q) {
            char *e = q + 16;
            while (*e >= '0' && *e <= '9') e++;
            memmove(q, e, strlen(e) + 1);
        }
        mega_s2s_config r;
        st = mega_s2s_config_from_json(js, &r);
        mega_s2s *mm = NULL;
        if (!st) st = mega_s2s_create(&r, &mm);
        const mega_xattn_kind want = i ? MEGA_XATTN_MHA : MEGA_XATTN_GATED;
        tl_check(k && q && !strstr(js, "cross-") && !st && mm->dl[0].x.kind == want && mm->cfg.cross_attention == (int)want + 1,
                 "a config without cross-attention keys (%s decoder) gets the %s cross-attention as before%s%s",
                 mega_mixer_name(mx[i]), i ? "multi-head" : "gated", st ? ": " : "", st ? mega_last_error() : "");
        mega_s2s_free(mm);
        free(js);
    }
    /* the full kinds ignore the memory size: a zero (a config filled without the defaults) is fine */
    {
        mega_s2s_config z;
        small_cfg(&z, MEGA_MIXER_MEGA);
        z.cross_memory = 0;
        mega_s2s *mz = NULL;
        st = mega_s2s_create(&z, &mz);
        tl_check(!st, "gated cross-attention with cross-memory 0 is accepted%s%s", st ? ": " : "", st ? mega_last_error() : "");
        mega_s2s_free(mz);
    }
    /* bad memory sizes: one message naming the option */
    const int bad[2] = {0, 1 << 30};
    for (int i = 0; i < 2; i++) {
        c.cross_memory = bad[i];
        mega_s2s *mb = NULL;
        st = mega_s2s_create(&c, &mb);
        tl_check(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "cross-memory") && !strchr(mega_last_error(), '\n'),
                 "cross-memory %d is an error: %s", bad[i], mega_last_error());
        mega_s2s_free(mb);
    }
    tl_rm_rf(dir);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    mega_set_threads(2);
#ifdef MEGA_F64
    test_fd();
#endif
    test_incremental("mega softmax, decoder chunk 4", MEGA_MIXER_MEGA, 4, MEGA_ATTN_SOFTMAX, 1);
    test_incremental("mega laplace post-norm, full attention", MEGA_MIXER_MEGA, -1, MEGA_ATTN_LAPLACE, 0);
    test_incremental("mega relu2, decoder chunk 5", MEGA_MIXER_MEGA, 5, MEGA_ATTN_RELU2, 1);
    test_incremental("mha (Transformer)", MEGA_MIXER_MHA, -1, MEGA_ATTN_SOFTMAX, 1);
    test_incremental("mha post-norm", MEGA_MIXER_MHA, -1, MEGA_ATTN_SOFTMAX, 0);
    test_incremental("aft-full", MEGA_MIXER_AFT_FULL, -1, MEGA_ATTN_SOFTMAX, 1);
    test_search(MEGA_MIXER_MEGA, 1.0);
    test_search(MEGA_MIXER_MEGA, 0.0);
    test_search(MEGA_MIXER_MHA, 1.0);
    /* bounded cross-attention (3 abc-window, 4 abc-linformer, 5 abc-mlp): the step reads the
     * memory built once per source */
    test_incremental_x("mha + gated cross", MEGA_MIXER_MHA, -1, MEGA_ATTN_SOFTMAX, 1, 1, 32);
    test_incremental_x("mega chunk 4 + mha cross", MEGA_MIXER_MEGA, 4, MEGA_ATTN_SOFTMAX, 1, 2, 32);
    test_incremental_x("mha + abc-window cross (4 slots: sources of 10, 7, 3 tokens)", MEGA_MIXER_MHA, -1, MEGA_ATTN_SOFTMAX,
                       1, 3, 4);
    test_incremental_x("mega chunk 4 + abc-linformer cross (5 slots)", MEGA_MIXER_MEGA, 4, MEGA_ATTN_SOFTMAX, 1, 4, 5);
    test_incremental_x("mega post-norm + abc-mlp cross (3 slots)", MEGA_MIXER_MEGA, -1, MEGA_ATTN_SOFTMAX, 0, 5, 3);
    test_incremental_x("abc-mlp mixer + abc-mlp cross (32 slots)", MEGA_MIXER_ABC_MLP, -1, MEGA_ATTN_SOFTMAX, 1, 5, 32);
    test_incremental_x("abc-linformer mixer + abc-window cross (8 slots)", MEGA_MIXER_ABC_LINFORMER, -1,
                       MEGA_ATTN_SOFTMAX, 1, 3, 8);
    test_search_x(MEGA_MIXER_ABC_MLP, 1.0, 5);
    test_io();
    test_cross_io();
    return tl_finish();
}
