/*
 * mega bench: the performance workloads of issue 6 (names are contracts), timed in this build.
 *
 *   mega bench [WORKLOAD...] [--json] [--threads N] [--repeat R] [--warmup W] [--budget S]
 *              [--no-sgemm] [--list]
 *
 * bench/run.sh (make bench) runs it and the PyTorch peer (bench/peer/peer.py) workload by
 * workload and prints one table with the ratios; docs/performance.md describes the method.
 *
 * Every workload runs in a fresh child process (this binary re-executed as
 * `mega bench --child NAME ...`), so its peak resident memory (wait4's ru_maxrss) is its own and
 * not the maximum over the run, and no OpenMP/BLAS state is shared between workloads. The parent
 * does no numerical work itself (libgomp's thread pool does not survive fork, so it never starts
 * one).
 *
 * Timing: --warmup W untimed steps, then --repeat R timed steps (fewer when the timed steps
 * already add up to --budget seconds; at least one); ms/step is the median (min and max are
 * reported too). Under bench/pair.py (make bench) the environment variable MEGA_BENCH_TURNS hands
 * the timed steps to that driver, one at a time (step_go below). For the decode workloads one
 * "run" generates 512 tokens from a reset stream; the median run is divided by 512 for ms/step
 * (one mega_lm_stream_feed of B tokens).
 *
 * Analytic FLOP count (docs/performance.md has the same text). MACs of the forward pass of one
 * sequence of L tokens through one Mega block (docs/mega.md §6, §11), D embed, Z zdim, E hdim,
 * N ndim, F ffn, c chunk (c = L for full attention), D' = 2D bidirectional, D causal:
 *     projections  L·D·(2D + Z + 3E)          (v_proj D→E, mx_proj D→2D+Z+E, h_proj E→D)
 *     EMA          3·L·D'·N                   (sequential recurrence: q·h + pβ·x, then γ·h)
 *     attention    L·c·(Z + E)                (q·kᵀ and A·v per chunk; halved when causal)
 *     FFN          2·L·D·F
 * plus, per model, the LM output layer L·D·V, or the classifier head D·H + H·C per sequence.
 * A Transformer block (mixer "mha", for lra-text-mha-train): 4·L·D² (q, k, v, out projections)
 * + 2·L²·D (bidirectional scores and values, all heads) + 2·L·D·F.
 * The megalodon-* rows count a Megalodon block instead (megalodon_block_macs): L·D·(D + Z + 3E)
 * (wv, wr, wz, wh1, wh2), 6·L·D·N for the complex EMA, the same attention, the same FFN.
 * FLOPs = 2·MACs. Training (forward + backward) = 3 × forward (backward = 2 × forward). Not
 * counted: norms, activations, gates, softmax, the loss, the embedding lookup and the AdamW update
 * (all O(L·D) or O(params)), so the GFLOP/s is a lower bound on the arithmetic done.
 * Decode, per generated token at chunk position t (cache length n = t mod c + 1): per layer
 * D·(2D + Z + 3E) + 3·D·N + n·(Z + E) + 2·D·F, plus D·V for the output layer (docs/mega.md §9).
 *
 * sgemm: cblas_sgemm through the same OpenBLAS the library links (MEGA_USE_BLAS), on a square
 * 2048³ problem and on the lm-train projection shape M=8192 (batch × tokens), N=512, K=256;
 * "% sgemm" is a training step's GFLOP/s over the 2048³ rate. Without BLAS it is skipped.
 *
 * --json prints one JSON object per line: first {"impl", "workload": "sgemm", "status", "note",
 * "threads", "gflops", "shapes": [{m, n, k, calls, gflops, gflops_best}], "peak_rss_mib"}, then one
 * per workload with, in this order: impl ("mega"), workload, status ("ok" | "n/a" | "error"), note,
 * threads, batch, seq_len, tokens_per_step, warmup, repeat, steps_timed, ms_per_step, ms_min, ms_max,
 * tokens_per_s, gflop_per_step, gflops, sgemm_gflops, sgemm_fraction, peak_rss_mib, base_rss_mib
 * (resident memory before the model is built), loss, [tokens_digest (decode)], mixer, build.
 * Numbers are null when a workload is not available.
 */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#ifdef MEGA_USE_BLAS
#include <cblas.h>
#endif

/* ---- workloads ---------------------------------------------------------------------------- */

typedef enum { WK_SGEMM, WK_LM_TRAIN, WK_CLS_TRAIN, WK_LM_DECODE, WK_CLS_INFER } wk_kind;

typedef struct {
    const char *name;
    wk_kind kind;
    int B, T;          /* batch; tokens per sequence (decode: tokens generated per sequence) */
    int chunk;         /* classifier attention chunk (-1 = full); the LM uses 256 */
    const char *mixer; /* classifier token mixer: "mega", "mha" (Transformer, 8 heads), or "abc-*:N" (N memory slots) */
    const char *what;
    int lm;            /* decode: the model (LM_BENCH, or an official size with random weights) */
    int q8;            /* decode: its matrices in q8_0 (mega quantize) */
} workload;

/* the decode workloads' models: the lm-train model; the official enwik8 base configuration
 * (mega_lm_enwik8_base, 12 x 512, 39 M parameters); the WikiText-103 one (mega_lm_adaptive_big
 * as the official README trains it, 16 x 1024 with adaptive input and softmax, 252 M) */
enum { LM_BENCH, LM_ENWIK8, LM_WT103 };

static const workload WORKLOADS[] = {
    {"sgemm", WK_SGEMM, 0, 0, 0, NULL, "OpenBLAS sgemm rate (2048^3 and the lm-train projection shape)", LM_BENCH, 0},
    {"lm-train", WK_LM_TRAIN, 8, 1024, 256, "mega", "causal LM, 4x256 (z 64, hidden 512, ffn 512), chunk 256: fwd+bwd+AdamW", LM_BENCH, 0},
    {"lra-text-train-c128", WK_CLS_TRAIN, 2, 4096, 128, "mega", "LRA text classifier, 4x128, chunk 128: fwd+bwd", LM_BENCH, 0},
    {"lra-text-train-full", WK_CLS_TRAIN, 2, 4096, -1, "mega", "LRA text classifier, 4x128, full attention: fwd+bwd", LM_BENCH, 0},
    {"lm-decode-b1", WK_LM_DECODE, 1, 512, 256, "mega", "the lm-train model generating 512 tokens, batch 1", LM_BENCH, 0},
    {"lm-decode-b8", WK_LM_DECODE, 8, 512, 256, "mega", "the lm-train model generating 512 tokens, batch 8", LM_BENCH, 0},
    {"megalodon-lm-train", WK_LM_TRAIN, 8, 1024, 256, "megalodon", "lm-train's shape as Megalodon (docs/megalodon.md): fwd+bwd+AdamW", LM_BENCH, 0},
    {"megalodon-lm-decode-b1", WK_LM_DECODE, 1, 512, 256, "megalodon", "the megalodon-lm-train model generating 512 tokens, batch 1", LM_BENCH, 0},
    {"lm-decode-b1-q8", WK_LM_DECODE, 1, 512, 256, "mega", "lm-decode-b1 with q8_0 weights", LM_BENCH, 1},
    {"enwik8-decode-b1", WK_LM_DECODE, 1, 128, 2048, "mega", "official enwik8 base size (12x512, random weights), 128 tokens, batch 1", LM_ENWIK8, 0},
    {"enwik8-decode-b1-q8", WK_LM_DECODE, 1, 128, 2048, "mega", "enwik8-decode-b1 with q8_0 weights", LM_ENWIK8, 1},
    {"enwik8-decode-b8", WK_LM_DECODE, 8, 128, 2048, "mega", "official enwik8 base size, 128 tokens, batch 8", LM_ENWIK8, 0},
    {"enwik8-decode-b8-q8", WK_LM_DECODE, 8, 128, 2048, "mega", "enwik8-decode-b8 with q8_0 weights", LM_ENWIK8, 1},
    {"wt103-decode-b1", WK_LM_DECODE, 1, 32, 1024, "mega", "official WikiText-103 size (16x1024, adaptive, 252M), 32 tokens, batch 1", LM_WT103, 0},
    {"wt103-decode-b1-q8", WK_LM_DECODE, 1, 32, 1024, "mega", "wt103-decode-b1 with q8_0 weights", LM_WT103, 1},
    {"lra-text-mha-train", WK_CLS_TRAIN, 2, 4096, -1, "mha", "the LRA text classifier with the mha mixer (8 heads): fwd+bwd", LM_BENCH, 0},
    {"scaling-1k", WK_CLS_TRAIN, 2, 1024, 128, "mega", "chunked LRA text classifier at 1K tokens", LM_BENCH, 0},
    {"scaling-4k", WK_CLS_TRAIN, 2, 4096, 128, "mega", "chunked LRA text classifier at 4K tokens", LM_BENCH, 0},
    {"scaling-16k", WK_CLS_TRAIN, 2, 16384, 128, "mega", "chunked LRA text classifier at 16K tokens", LM_BENCH, 0},
    /* the ABC paper's efficiency table (Peng et al. 2022, Table 6): text encoding, 512 tokens at
     * batch 16, inference; the classifier's 4x128 encoder with each mixer (8 heads) */
    {"abc-enc-base", WK_CLS_INFER, 16, 512, -1, "mha", "ABC Table 6: BASE (mha) encoder, 512 tokens, batch 16, inference", LM_BENCH, 0},
    {"abc-enc-lin64", WK_CLS_INFER, 16, 512, -1, "abc-linformer:64", "ABC Table 6: Linformer n=64 encoder, inference", LM_BENCH, 0},
    {"abc-enc-lin128", WK_CLS_INFER, 16, 512, -1, "abc-linformer:128", "ABC Table 6: Linformer n=128 encoder, inference", LM_BENCH, 0},
    {"abc-enc-mlp64", WK_CLS_INFER, 16, 512, -1, "abc-mlp:64", "ABC Table 6: ABC-MLP n=64 encoder, inference", LM_BENCH, 0},
    {"abc-enc-mlp128", WK_CLS_INFER, 16, 512, -1, "abc-mlp:128", "ABC Table 6: ABC-MLP n=128 encoder, inference", LM_BENCH, 0},
};
#define N_WORKLOADS ((int)(sizeof WORKLOADS / sizeof *WORKLOADS))

static const workload *find_workload(const char *name) {
    for (int i = 0; i < N_WORKLOADS; i++)
        if (!strcmp(WORKLOADS[i].name, name)) return &WORKLOADS[i];
    return NULL;
}

/* heads of the classifier's mha mixer (lra-text-mha-train) */
#define MHA_HEADS 8

static void lm_bench_config(mega_lm_config *c) {
    mega_lm_config_default(c);
    mega_block_config *k = &c->block;
    c->vocab_size = 257, c->padding_idx = 256; /* the byte vocabulary + pad */
    c->layers = 4, k->embed_dim = 256, k->z_dim = 64, k->hidden_dim = 512, k->ffn_dim = 512, k->n_dim = 16;
    k->chunk_size = 256, k->truncation = 0, k->max_positions = 1024;
    k->attention_activation = MEGA_ATTN_SOFTMAX, k->norm_type = MEGA_NORM_LAYER, k->prenorm = 1;
    k->rel_pos_bias = MEGA_RELPOS_SIMPLE, k->activation = MEGA_ACT_SILU, c->scale_embedding = 1, c->tie_embeddings = 0;
    k->dropout = k->attention_dropout = k->hidden_dropout = k->activation_dropout = 0;
}

/* the model of a decode workload: the official sizes with the settings of their training scripts
 * (examples/mega/README.lm.md: rotary positions, pre-norm, no affine final norm; enwik8 ties the
 * output to the embedding; WikiText-103 cutoffs 20000,60000 on its 267,744 words) */
static void lm_decode_config(const workload *w, mega_lm_config *c) {
    lm_bench_config(c);
    /* the megalodon-* rows: the same widths, layers and chunk with the megalodon mixer (one head,
     * its default norm groups, no SwiGLU or layer scale; the Mega-only options are not read) */
    if (!strcmp(w->mixer, "megalodon")) c->block.mixer = MEGA_MIXER_MEGALODON, mega_lm_config_resolve(c);
    if (w->lm == LM_BENCH) return;
    mega_block_config *k = &c->block;
    k->rel_pos_bias = MEGA_RELPOS_ROTARY, c->final_norm_affine = 0, k->n_dim = 16, k->chunk_size = w->chunk;
    k->max_positions = 2 * w->chunk;
    if (w->lm == LM_ENWIK8) {
        c->layers = 12, k->embed_dim = 512, k->hidden_dim = 1024, k->ffn_dim = 1024, k->z_dim = 128;
        c->tie_embeddings = 1;
        return;
    }
    c->layers = 16, k->embed_dim = 1024, k->hidden_dim = 2048, k->ffn_dim = 2048, k->z_dim = 256;
    c->vocab_size = 267744, c->padding_idx = 1;
    c->adaptive_input = 1, c->adaptive_input_factor = 4, c->adaptive_softmax_factor = 4;
    c->adaptive_input_cutoff[0] = c->adaptive_softmax_cutoff[0] = 20000;
    c->adaptive_input_cutoff[1] = c->adaptive_softmax_cutoff[1] = 60000;
    c->adaptive_input_cutoff[2] = c->adaptive_softmax_cutoff[2] = 0;
    c->tie_adaptive_weights = 1, c->tie_adaptive_proj = 1;
}

static void cls_bench_config(const workload *w, mega_cls_config *c) {
    mega_cls_config_default(c);
    mega_block_config *k = &c->block;
    c->layers = 4, k->embed_dim = 128, k->z_dim = 64, k->hidden_dim = 256, k->ffn_dim = 256, k->n_dim = 16;
    k->chunk_size = w->chunk, k->truncation = 0;
    k->max_positions = w->T > 4096 ? w->T : 4096;
    k->attention_activation = MEGA_ATTN_SOFTMAX, k->norm_type = MEGA_NORM_SCALE, k->prenorm = 0;
    k->rel_pos_bias = MEGA_RELPOS_SIMPLE, k->activation = MEGA_ACT_SILU;
    c->embedding = MEGA_EMBED_TOKEN, c->vocab_size = 257, c->padding_idx = 256, c->pool = MEGA_POOL_MEAN;
    c->classifier_layers = 1, c->classifier_dim = 2 * k->embed_dim, c->classes = 2;
    c->classifier_activation = MEGA_ACT_GELU;
    k->dropout = k->attention_dropout = k->hidden_dropout = k->activation_dropout = 0;
}

/* whether the mixer k reads the block option `name` (its declared options) */
static int mixer_reads(mega_mixer_kind k, const char *name) {
    int n;
    const mega_field *f = mega_block_config_fields(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].name, name)) return f[i].mixers != 0 && mega_field_applies(&f[i], k);
    return 0;
}

/* The classifier's token mixer: one config field (mix.mixer; the rest of the model is unchanged).
 * Returns 1 with the reason when this library does not have the mixer. */
static int cls_select_mixer(const workload *w, mega_cls_config *c, char *why, size_t nwhy) {
    mega_mixer_kind k;
    char name[64];
    const char *colon = strchr(w->mixer, ':'); /* "abc-mlp:64": the mixer and its memory slots */
    snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - w->mixer) : (int)strlen(w->mixer), w->mixer);
    if (mega_mixer_parse(name, &k) != 0) return snprintf(why, nwhy, "unknown mixer %s", name), 1;
    if (!mega_mixer_available(k)) return snprintf(why, nwhy, "%s mixer not built yet", name), 1;
    c->block.mixer = k;
    if (colon) c->block.memory_size = atoi(colon + 1);
    /* positions: the default (none), as nn.MultiheadAttention */
    if (mixer_reads(k, "heads")) c->block.heads = MHA_HEADS;
    return 0;
}

/* ---- analytic FLOP count (see the header comment) ------------------------------------------ */

/* c: the attention segment (mega_block_context.segment: the chunk, or L) */
static double mega_block_macs(double D, double Z, double E, double N, double F, double L, double c, int causal) {
    double proj = L * D * (2 * D + Z + 3 * E);
    double ema = 3 * L * (causal ? D : 2 * D) * N;
    double attn = L * c * (Z + E) * (causal ? 0.5 : 1.0);
    double ffn = 2 * L * D * F;
    return proj + ema + attn + ffn;
}

/* one Megalodon block (docs/megalodon.md; the official MovingAverageGatedAttention and
 * NormalizedFeedForwardNetwork): wv, wr D->E, wz D->Z, wh1 D->D, wh2 E->D; the complex EMA's
 * recurrence, about 6 real MACs per (channel, component, token) (q h + p x, then Re(g h)); chunk
 * attention as Mega's; the FFN 2·L·D·F (3·L·D·F with SwiGLU) */
static double megalodon_block_macs(const mega_block_config *k, double L, double c) {
    const double D = k->embed_dim, Z = k->z_dim, E = k->hidden_dim, N = k->n_dim, F = k->ffn_dim;
    return L * D * (D + Z + 3 * E) + 6 * L * D * N + 0.5 * L * c * (Z + E) + (k->swiglu ? 3 : 2) * L * D * F;
}

static double mha_block_macs(double D, double F, double L) { return 4 * L * D * D + 2 * L * L * D + 2 * L * D * F; }

/* the output layer's MACs per token: D x V, or the adaptive softmax's head (the first band and
 * one logit per tail) and tails (projection to D / factor^i, then the band's words) */
static double out_macs(const mega_lm_config *c) {
    const double D = c->block.embed_dim;
    if (!c->adaptive_softmax_cutoff[0]) return D * c->vocab_size;
    int n = 0;
    while (n < MEGA_INTS_MAX && c->adaptive_softmax_cutoff[n]) n++;
    double macs = D * (c->adaptive_softmax_cutoff[0] + n), d = D;
    for (int i = 0; i < n; i++) {
        const double lo = c->adaptive_softmax_cutoff[i], hi = i + 1 < n ? c->adaptive_softmax_cutoff[i + 1] : c->vocab_size;
        d /= c->adaptive_softmax_factor;
        macs += D * d + (hi - lo) * d;
    }
    return macs;
}

/* FLOPs of one timed step (training: forward + backward; decode: one whole 512-token run) */
static double workload_flops(const workload *w) {
    if (w->kind == WK_CLS_INFER) return NAN; /* not counted (the ABC rows compare times, not rates) */
    if (w->kind == WK_LM_TRAIN || w->kind == WK_LM_DECODE) {
        mega_lm_config c;
        lm_decode_config(w, &c);
        const double D = c.block.embed_dim, Z = c.block.z_dim, E = c.block.hidden_dim, N = c.block.n_dim, F = c.block.ffn_dim, V = c.vocab_size;
        mega_block_context x;
        mega_block_context_of(&c.block, w->T, &x);
        const int mg = c.block.mixer == MEGA_MIXER_MEGALODON;
        if (w->kind == WK_LM_TRAIN) {
            double blk = mg ? megalodon_block_macs(&c.block, w->T, x.segment) : mega_block_macs(D, Z, E, N, F, w->T, x.segment, 1);
            double fwd = c.layers * blk + (double)w->T * D * V;
            return 2.0 * 3.0 * fwd * w->B;
        }
        double macs = 0;
        for (int t = 0; t < w->T; t++) {
            double n = (double)(t % x.cache + 1); /* the positions cached when token t attends */
            double blk = mg ? megalodon_block_macs(&c.block, 1, 2 * n) : D * (2 * D + Z + 3 * E) + 3 * D * N + n * (Z + E) + 2 * D * F;
            macs += c.layers * blk + out_macs(&c);
        }
        return 2.0 * macs * w->B;
    }
    if (w->kind == WK_CLS_TRAIN) {
        mega_cls_config c;
        cls_bench_config(w, &c);
        const mega_block_config *k = &c.block;
        const double D = k->embed_dim, Z = k->z_dim, E = k->hidden_dim, N = k->n_dim, F = k->ffn_dim;
        mega_block_context x;
        mega_block_context_of(k, w->T, &x);
        double blk = strcmp(w->mixer, "mega") ? mha_block_macs(D, F, w->T) : mega_block_macs(D, Z, E, N, F, w->T, x.segment, 0);
        double head = D * c.classifier_dim + (double)c.classifier_dim * c.classes;
        return 2.0 * 3.0 * (c.layers * blk + head) * w->B;
    }
    return 0;
}

/* ---- child side: run one workload in this process, print one JSON line --------------------- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* resident set from /proc/self/status (kB field), in MiB; -1 if unknown */
static double proc_status_mib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            v = atof(line + n + 1) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double *ms;        /* per timed step */
    int n;
    double loss;
    double budget_ms;  /* stop timing once the timed steps add up to this (at least one step) */
    double sum_ms;
    int turn_r, turn_w; /* paired timing: the driver's pipe ends (-1: timing on our own) */
    int untimed;        /* paired timing: the driver asked for an untimed step */
    double last_ms;     /* paired timing: the last step's time, warm-up included */
} timings;

/* Paired timing (bench/pair.py, docs/performance.md). With MEGA_BENCH_TURNS="R,W" (two pipe file
 * descriptors the driver passed down), every step after the warm-up waits for its turn: the child
 * writes "ready MS" on W (MS: its last step, warm-up included, so that the driver knows how
 * long a step is) and reads one line on R; "go" runs a timed step, "warm" an untimed one (the
 * driver warms a side's caches again after the other side ran), and "done MS" follows on W;
 * anything else (or end of file) ends the timing. The driver alternates our timed steps with the
 * peer's, each side in its own process, so that the two halves of every ratio are measured
 * seconds apart, and it starts or stops the co-tenant between steps. --repeat still bounds the
 * steps (untimed ones included); --budget is the driver's business then. */
static void turns_open(timings *tm) {
    tm->turn_r = tm->turn_w = -1;
    const char *v = getenv("MEGA_BENCH_TURNS");
    int r, w;
    if (!v || sscanf(v, "%d,%d", &r, &w) != 2 || r < 0 || w < 0) return;
    tm->turn_r = r, tm->turn_w = w;
    signal(SIGPIPE, SIG_IGN); /* a driver gone: the write fails and the timing ends, no signal */
}

/* may step s run? Warm-up steps always do; timed ones while the budget lasts, or on the driver's
 * "go" */
static int step_go(timings *tm, int s, int warmup) {
    if (s < warmup) return 1;
    if (tm->turn_w < 0) return !(tm->n > 0 && tm->sum_ms >= tm->budget_ms);
    if (dprintf(tm->turn_w, "ready %.6f\n", tm->last_ms) < 0) return 0;
    char line[32];
    size_t n = 0;
    while (n + 1 < sizeof line) {
        ssize_t k = read(tm->turn_r, line + n, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0 || line[n] == '\n') break;
        n++;
    }
    line[n] = 0;
    tm->untimed = strcmp(line, "warm") == 0;
    return tm->untimed || strcmp(line, "go") == 0;
}

/* record step s (the first `warmup` are untimed) */
static void record_step(timings *tm, int s, int warmup, double sec) {
    tm->last_ms = sec * 1e3;
    if (s < warmup) return;
    if (tm->turn_w >= 0) dprintf(tm->turn_w, "done %.6f\n", sec * 1e3);
    if (tm->untimed) return;
    tm->ms[tm->n++] = sec * 1e3;
    tm->sum_ms += sec * 1e3;
}

static void put_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

#ifdef MEGA_USE_BLAS
void openblas_set_num_threads(int);
#endif

static int child_sgemm(int threads, cJSON *o) {
#ifdef MEGA_USE_BLAS
    /* the reference is OpenBLAS's own threading on the machine's threads (the library runs its
     * calls single-threaded and threads the products itself) */
    openblas_set_num_threads(threads > 0 ? threads : mega_get_threads());
    static const int shapes[][3] = {{2048, 2048, 2048}, {8192, 512, 256}};
    cJSON *arr = cJSON_AddArrayToObject(o, "shapes");
    double best = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *A = malloc((size_t)M * K * sizeof(float)), *B = malloc((size_t)K * N * sizeof(float));
        float *C = malloc((size_t)M * N * sizeof(float));
        if (!A || !B || !C) return free(A), free(B), free(C), cli_error("out of memory"), 1;
        uint64_t r = 42;
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)((double)(rng_next(&r) >> 11) * 0x1p-53 - 0.5);
        for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (float)((double)(rng_next(&r) >> 11) * 0x1p-53 - 0.5);
        memset(C, 0, (size_t)M * N * sizeof(float));
        const double flop = 2.0 * M * N * K;
        /* at least 5 calls and about 0.5 s after one warm-up call; the median call */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        double t[64];
        int n = 0;
        double t_all = now_sec();
        while (n < 64 && (n < 5 || now_sec() - t_all < 0.5)) {
            double t0 = now_sec();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
            t[n++] = now_sec() - t0;
        }
        qsort(t, (size_t)n, sizeof *t, cmp_dbl);
        double gf = flop / t[n / 2] / 1e9, gmax = flop / t[0] / 1e9;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "m", M);
        cJSON_AddNumberToObject(e, "n", N);
        cJSON_AddNumberToObject(e, "k", K);
        cJSON_AddNumberToObject(e, "calls", n);
        cJSON_AddNumberToObject(e, "gflops", gf);
        cJSON_AddNumberToObject(e, "gflops_best", gmax);
        cJSON_AddItemToArray(arr, e);
        if (s == 0) best = gf;
        free(A), free(B), free(C);
    }
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "note", "cblas_sgemm (OpenBLAS), row-major NN, median call");
    cJSON_AddNumberToObject(o, "gflops", best);
    return 0;
#else
    (void)threads;
    cJSON_AddStringToObject(o, "status", "n/a");
    cJSON_AddStringToObject(o, "note", "built without BLAS (portable GEMM): no sgemm reference");
    cJSON_AddNullToObject(o, "gflops");
    return 0;
#endif
}

static int child_lm_train(const workload *w, int warmup, int repeat, timings *tm) {
    mega_lm_config c;
    lm_decode_config(w, &c); /* lm_bench_config, with the row's mixer */
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_lm_init_params(m, 1);
    const size_t n = (size_t)w->B * w->T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    mega_adamw *opt = NULL;
    if (!tok || !tgt || mega_adamw_new(mega_lm_param_total(m), &opt) != MEGA_OK) {
        free(tok), free(tgt), mega_lm_free(m);
        return cli_error("out of memory");
    }
    uint64_t r = 7;
    for (size_t i = 0; i < n; i++) tok[i] = (int32_t)(rng_next(&r) % 256);
    for (size_t i = 0; i < n; i++) tgt[i] = (i + 1) % (size_t)w->T ? tok[i + 1] : (int32_t)(rng_next(&r) % 256);
    mega_paramset *ps = mega_lm_paramset(m);
    const mega_adamw_hp hp = {0.9, 0.98, 1e-8, 0.01, 0};
    int rc = 0;
    for (int s = 0; s < warmup + repeat && !rc && step_go(tm, s, warmup); s++) {
        double t0 = now_sec(), loss;
        int64_t cnt;
        mega_lm_run run = {1, (uint64_t)s};
        mega_ps_zero_grad(ps);
        if (mega_lm_forward(m, tok, tgt, w->B, w->T, &run, &loss, &cnt) != MEGA_OK) {
            rc = cli_error("%s", mega_last_error());
            break;
        }
        mega_lm_backward(m, 1.0);
        double gn = mega_ps_grad_norm(ps);
        if (gn > 1.0) mega_ps_scale_grad(ps, 1.0 / (gn + 1e-12));
        mega_adamw_step(opt, ps, &hp, 1e-3);
        record_step(tm, s, warmup, now_sec() - t0);
        tm->loss = loss;
    }
    mega_adamw_free(opt);
    free(tok), free(tgt);
    mega_lm_free(m);
    return rc;
}

/* the classifier workloads' batch: bytes from a fixed seed, full lengths, labels alternating */
typedef struct {
    int32_t *tok, *len, *y;
} cls_batch;

static void cls_batch_free(cls_batch *b) { free(b->tok), free(b->len), free(b->y); }

static int cls_batch_make(const workload *w, cls_batch *b) {
    const size_t n = (size_t)w->B * w->T;
    b->tok = malloc(n * sizeof *b->tok), b->len = malloc((size_t)w->B * sizeof *b->len), b->y = malloc((size_t)w->B * sizeof *b->y);
    if (!b->tok || !b->len || !b->y) return cls_batch_free(b), -1;
    uint64_t r = 11;
    for (size_t i = 0; i < n; i++) b->tok[i] = (int32_t)(rng_next(&r) % 256);
    for (int i = 0; i < w->B; i++) b->len[i] = w->T, b->y[i] = i & 1;
    return 0;
}

static int child_cls_train(const workload *w, int warmup, int repeat, timings *tm, char *why, size_t nwhy) {
    mega_cls_config c;
    cls_bench_config(w, &c);
    if (cls_select_mixer(w, &c, why, nwhy)) return -1; /* not available */
    mega_cls *m = NULL;
    if (mega_cls_create(&c, &m) != MEGA_OK) {
        return cli_error("%s", mega_last_error());
    }
    mega_cls_init_params(m, 1);
    cls_batch cb;
    if (cls_batch_make(w, &cb)) return mega_cls_free(m), cli_error("out of memory");
    mega_cls_input in = {cb.tok, NULL, cb.len, w->T};
    const int32_t *y = cb.y;
    mega_paramset *ps = mega_cls_paramset(m);
    int rc = 0;
    for (int s = 0; s < warmup + repeat && step_go(tm, s, warmup); s++) {
        double t0 = now_sec(), loss;
        int64_t correct;
        mega_lm_run run = {1, (uint64_t)s};
        mega_ps_zero_grad(ps);
        if (mega_cls_forward(m, &in, NULL, w->B, y, &run, &loss, &correct) != MEGA_OK) {
            rc = cli_error("%s", mega_last_error());
            break;
        }
        if (mega_cls_backward(m, 1.0) != MEGA_OK) {
            rc = cli_error("%s", mega_last_error());
            break;
        }
        record_step(tm, s, warmup, now_sec() - t0);
        tm->loss = loss;
    }
    cls_batch_free(&cb);
    mega_cls_free(m);
    return rc;
}

/* forward only, on a model without gradients (the ABC efficiency rows: text encoding at inference) */
static int child_cls_infer(const workload *w, int warmup, int repeat, timings *tm, char *why, size_t nwhy) {
    mega_cls_config c;
    cls_bench_config(w, &c);
    if (cls_select_mixer(w, &c, why, nwhy)) return -1; /* not available */
    mega_cls *m = NULL;
    const mega_load_opts lo = {1, 0};
    if (mega_cls_create_ex(&c, &lo, &m) != MEGA_OK) return cli_error("%s", mega_last_error());
    cls_batch cb;
    if (cls_batch_make(w, &cb)) return mega_cls_free(m), cli_error("out of memory");
    mega_cls_input in = {cb.tok, NULL, cb.len, w->T};
    const int32_t *y = cb.y;
    int rc = 0;
    for (int s = 0; s < warmup + repeat && step_go(tm, s, warmup); s++) {
        double t0 = now_sec(), loss;
        int64_t correct;
        mega_lm_run run = {0, (uint64_t)s};
        if (mega_cls_forward(m, &in, NULL, w->B, y, &run, &loss, &correct) != MEGA_OK) {
            rc = cli_error("%s", mega_last_error());
            break;
        }
        record_step(tm, s, warmup, now_sec() - t0);
        tm->loss = loss;
    }
    cls_batch_free(&cb);
    mega_cls_free(m);
    return rc;
}

/* m with its matrices in q8_0: written to a temporary file, quantized (mega_model_quantize) and
 * loaded for inference, as `mega quantize` then `mega generate` would; m is freed */
static mega_lm *lm_quantized(mega_lm *m) {
    const char *tmp = getenv("TMPDIR");
    char dir[4096], f32[4200], q8[4200];
    snprintf(dir, sizeof dir, "%s/mega-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    mega_lm *q = NULL;
    if (!mkdtemp(dir)) {
        mega_lm_free(m);
        return cli_error("cannot create a temporary directory in %s", tmp && *tmp ? tmp : "/tmp"), NULL;
    }
    snprintf(f32, sizeof f32, "%s/f32.safetensors", dir);
    snprintf(q8, sizeof q8, "%s/q8.safetensors", dir);
    const mega_load_opts o = {1, 0};
    mega_status st = mega_lm_save(m, f32);
    mega_lm_free(m);
    if (!st) st = mega_model_quantize(f32, q8, "q8_0", NULL);
    if (!st) st = mega_lm_load_ex(q8, &o, &q);
    if (st) cli_error("%s", mega_last_error());
    unlink(f32), unlink(q8), rmdir(dir);
    return q;
}

static int child_lm_decode(const workload *w, int warmup, int repeat, timings *tm, uint64_t *digest) {
    mega_lm_config c;
    lm_decode_config(w, &c);
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_lm_init_params(m, 1);
    if (w->q8 && !(m = lm_quantized(m))) return 1;
    const int B = w->B, V = c.vocab_size;
    mega_lm_stream *s = NULL;
    if (mega_lm_stream_new(m, B, w->T + 1, &s) != MEGA_OK) {
        mega_lm_free(m);
        return cli_error("%s", mega_last_error());
    }
    mega_real *logits = malloc((size_t)B * V * sizeof *logits);
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    if (!logits || !tok) {
        free(logits), free(tok), mega_lm_stream_free(s), mega_lm_free(m);
        return cli_error("out of memory");
    }
    int rc = 0;
    for (int run = 0; run < warmup + repeat && !rc && step_go(tm, run, warmup); run++) {
        mega_lm_stream_reset(s);
        for (int b = 0; b < B; b++) tok[b] = (int32_t)('A' + b);
        uint64_t h = 1469598103934665603ull;
        double t0 = now_sec();
        for (int t = 0; t < w->T; t++) {
            if (mega_lm_stream_feed(s, tok, 1, logits) != MEGA_OK) {
                rc = cli_error("%s", mega_last_error());
                break;
            }
            /* greedy: the next input is the argmax over the bytes (never the pad token) */
            for (int b = 0; b < B; b++) {
                const mega_real *l = logits + (size_t)b * V;
                int best = 0;
                for (int v = 1; v < 256; v++)
                    if (l[v] > l[best]) best = v;
                tok[b] = best;
                h = (h ^ (uint64_t)best) * 1099511628211ull;
            }
        }
        record_step(tm, run, warmup, now_sec() - t0);
        *digest = h;
    }
    free(logits), free(tok);
    mega_lm_stream_free(s);
    mega_lm_free(m);
    return rc;
}

static int run_child(const char *name, int threads, int warmup, int repeat, double budget) {
    const workload *w = find_workload(name);
    if (!w) return cli_error("unknown workload '%s'", name), 2;
    mega_set_threads(threads);
    const double base = proc_status_mib("VmRSS");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "workload", w->name);
    int rc = 0;
    if (w->kind == WK_SGEMM) {
        rc = child_sgemm(threads, o);
    } else {
        timings tm = {calloc((size_t)repeat + 1, sizeof(double)), 0, NAN, budget * 1e3, 0, -1, -1, 0, NAN};
        turns_open(&tm);
        char why[512] = "";
        uint64_t digest = 0;
        int r;
        if (!tm.ms) return cli_error("out of memory"), 2;
        switch (w->kind) {
        case WK_LM_TRAIN: r = child_lm_train(w, warmup, repeat, &tm); break;
        case WK_CLS_TRAIN: r = child_cls_train(w, warmup, repeat, &tm, why, sizeof why); break;
        case WK_CLS_INFER: r = child_cls_infer(w, warmup, repeat, &tm, why, sizeof why); break;
        default: r = child_lm_decode(w, warmup, repeat, &tm, &digest); break;
        }
        if (r > 0) {
            free(tm.ms);
            cJSON_Delete(o);
            return 2;
        }
        if (r == 0 && tm.n == 0) { /* the driver ended the timing before the first timed step */
            r = -1;
            snprintf(why, sizeof why, "no timed step");
        }
        if (r < 0) {
            cJSON_AddStringToObject(o, "status", "n/a");
            cJSON_AddStringToObject(o, "note", why);
        } else {
            cJSON_AddStringToObject(o, "status", "ok");
            qsort(tm.ms, (size_t)tm.n, sizeof *tm.ms, cmp_dbl);
            const int per_run = w->kind == WK_LM_DECODE ? w->T : 1; /* feeds per timed unit */
            double med = tm.ms[tm.n / 2];
            if (tm.n % 2 == 0) med = 0.5 * (tm.ms[tm.n / 2 - 1] + tm.ms[tm.n / 2]);
            const double tokens = (double)w->B * w->T; /* per timed unit */
            const double flops = workload_flops(w);
            put_num(o, "ms_per_step", med / per_run);
            put_num(o, "ms_min", tm.ms[0] / per_run);
            put_num(o, "ms_max", tm.ms[tm.n - 1] / per_run);
            put_num(o, "tokens_per_s", tokens / (med * 1e-3));
            put_num(o, "gflop_per_step", flops / per_run / 1e9);
            put_num(o, "gflops", flops / (med * 1e-3) / 1e9);
            put_num(o, "loss", tm.loss);
            cJSON_AddNumberToObject(o, "steps_timed", tm.n);
            if (w->kind == WK_LM_DECODE) {
                char hx[32];
                snprintf(hx, sizeof hx, "%016llx", (unsigned long long)digest);
                cJSON_AddStringToObject(o, "tokens_digest", hx);
            }
        }
        free(tm.ms);
    }
    put_num(o, "base_rss_mib", base);
    put_num(o, "self_peak_rss_mib", proc_status_mib("VmHWM"));
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s ? s : "{}");
    fflush(stdout);
    free(s);
    cJSON_Delete(o);
    return rc ? 2 : 0;
}

/* ---- parent side -------------------------------------------------------------------------- */

/* run `mega bench --child NAME` in a fresh process; the child's JSON object (or NULL) and its
 * peak resident memory in MiB from wait4 */
static cJSON *spawn_child(const char *self, const char *name, int threads, int warmup, int repeat, double budget,
                          double *peak_mib, char *err, size_t nerr) {
    int fd[2];
    *peak_mib = NAN;
    if (pipe(fd) != 0) return snprintf(err, nerr, "pipe: %s", strerror(errno)), NULL;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        snprintf(err, nerr, "fork: %s", strerror(errno));
        return NULL;
    }
    if (pid == 0) {
        char ts[16], ws[16], rs[16], bs[32];
        snprintf(bs, sizeof bs, "%g", budget);
        snprintf(ts, sizeof ts, "%d", threads);
        snprintf(ws, sizeof ws, "%d", warmup);
        snprintf(rs, sizeof rs, "%d", repeat);
        dup2(fd[1], 1);
        close(fd[0]), close(fd[1]);
        char *av[] = {(char *)"mega", (char *)"bench", (char *)"--child", (char *)name, (char *)"--threads", ts,
                      (char *)"--warmup", ws, (char *)"--repeat", rs, (char *)"--budget", bs, NULL};
        execv(self, av);
        fprintf(stderr, "mega bench: cannot re-execute %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1024 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        ssize_t r = read(fd[0], buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    *peak_mib = (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
    if (!buf) return snprintf(err, nerr, "out of memory"), NULL;
    buf[n] = 0;
    cJSON *o = NULL;
    char *line = strstr(buf, "{\"workload\"");
    if (line) o = cJSON_Parse(line);
    free(buf);
    if (WIFSIGNALED(status)) {
        snprintf(err, nerr, "child killed by signal %d", WTERMSIG(status));
        cJSON_Delete(o);
        return NULL;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !o) {
        snprintf(err, nerr, "child exited with status %d (its error is above)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static cJSON *workload_record(const workload *w, const cJSON *child, const char *err, int threads, int warmup,
                              int repeat, double peak, double sgemm) {
    cJSON *o = cJSON_CreateObject();
    const int decode = w->kind == WK_LM_DECODE;
    cJSON_AddStringToObject(o, "impl", "mega");
    cJSON_AddStringToObject(o, "workload", w->name);
    const char *st = child ? jstr(child, "status") : "error";
    cJSON_AddStringToObject(o, "status", st);
    cJSON_AddStringToObject(o, "note", child ? jstr(child, "note") : err);
    cJSON_AddNumberToObject(o, "threads", threads);
    cJSON_AddNumberToObject(o, "batch", w->B);
    cJSON_AddNumberToObject(o, "seq_len", w->T);
    cJSON_AddNumberToObject(o, "tokens_per_step", decode ? w->B : (double)w->B * w->T);
    cJSON_AddNumberToObject(o, "warmup", warmup);
    cJSON_AddNumberToObject(o, "repeat", repeat);
    const int ok = child && !strcmp(st, "ok");
    put_num(o, "steps_timed", ok ? jnum(child, "steps_timed") : NAN);
    const char *nums[] = {"ms_per_step", "ms_min", "ms_max", "tokens_per_s", "gflop_per_step", "gflops"};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) put_num(o, nums[i], ok ? jnum(child, nums[i]) : NAN);
    put_num(o, "sgemm_gflops", sgemm);
    put_num(o, "sgemm_fraction", ok && sgemm > 0 ? jnum(child, "gflops") / sgemm : NAN);
    put_num(o, "peak_rss_mib", child ? peak : NAN);
    put_num(o, "base_rss_mib", child ? jnum(child, "base_rss_mib") : NAN);
    put_num(o, "loss", ok ? jnum(child, "loss") : NAN);
    if (ok && decode) cJSON_AddStringToObject(o, "tokens_digest", jstr(child, "tokens_digest"));
    cJSON_AddStringToObject(o, "mixer", w->mixer);
    cJSON_AddStringToObject(o, "build", mega_build_info());
    return o;
}

static void fmt_num(char *b, size_t n, double v, const char *fmt) {
    if (isfinite(v)) snprintf(b, n, fmt, v);
    else snprintf(b, n, "-");
}

/* the selection from the positional names, in table order (duplicates collapse); "all" or
 * nothing = every workload; the sgemm reference is part of every run unless no_sgemm */
static int select_workloads(const char **names, int nnames, int no_sgemm, int *sel) {
    int any = 0;
    for (int i = 0; i < nnames; i++) {
        if (!strcmp(names[i], "all")) {
            for (int k = 0; k < N_WORKLOADS; k++) sel[k] = 1;
            any = 1;
            continue;
        }
        const workload *w = find_workload(names[i]);
        if (!w) return cli_error("unknown workload '%s' (see 'mega bench --list')", names[i]);
        sel[w - WORKLOADS] = 1, any = 1;
    }
    if (!any)
        for (int k = 0; k < N_WORKLOADS; k++) sel[k] = 1;
    if (!no_sgemm) sel[0] = 1;
    return 0;
}

/* the record of the sgemm reference workload */
static cJSON *sgemm_record(const cJSON *c, const char *err, int threads, double peak, double *sgemm) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "impl", "mega");
    cJSON_AddStringToObject(o, "workload", "sgemm");
    cJSON_AddStringToObject(o, "status", c ? jstr(c, "status") : "error");
    cJSON_AddStringToObject(o, "note", c ? jstr(c, "note") : err);
    cJSON_AddNumberToObject(o, "threads", threads);
    *sgemm = c ? jnum(c, "gflops") : NAN;
    put_num(o, "gflops", *sgemm);
    const cJSON *sh = c ? cJSON_GetObjectItemCaseSensitive(c, "shapes") : NULL;
    if (sh) cJSON_AddItemToObject(o, "shapes", cJSON_Duplicate(sh, 1));
    put_num(o, "peak_rss_mib", c ? peak : NAN);
    return o;
}

/* The ABC rows against BASE measured in the same run, beside the paper's Table 6 (Peng et al. 2022,
 * on a GPU): speed = BASE's ms/step over the row's; memory = the row's peak resident memory over
 * BASE's, each less the process's resident memory before the model was built (base_rss_mib) */
static void print_abc_relative(cJSON *const *recs) {
    static const struct {
        const char *name, *speed, *mem;
    } P[] = {{"abc-enc-base", "1.0", "1.0"}, {"abc-enc-lin64", "1.7", "0.5"}, {"abc-enc-lin128", "1.5", "0.6"},
             {"abc-enc-mlp64", "1.5", "0.5"}, {"abc-enc-mlp128", "1.3", "0.6"}};
    const cJSON *base = NULL;
    for (int k = 1; k < N_WORKLOADS; k++)
        if (recs[k] && !strcmp(WORKLOADS[k].name, P[0].name) && !strcmp(jstr(recs[k], "status"), "ok")) base = recs[k];
    if (!base) return;
    const double bms = jnum(base, "ms_per_step"), bmem = jnum(base, "peak_rss_mib") - jnum(base, "base_rss_mib");
    printf("\nABC Table 6 (encoding 512 tokens at batch 16, inference), relative to BASE in this run:\n");
    printf("%-16s %8s %12s %8s %12s\n", "workload", "speed", "paper speed", "memory", "paper memory");
    for (int k = 1; k < N_WORKLOADS; k++) {
        for (size_t i = 0; i < sizeof P / sizeof *P; i++) {
            const cJSON *o = recs[k];
            if (!o || strcmp(WORKLOADS[k].name, P[i].name) || strcmp(jstr(o, "status"), "ok")) continue;
            char a[32], b[32];
            fmt_num(a, sizeof a, bms / jnum(o, "ms_per_step"), "%.2fx");
            fmt_num(b, sizeof b, (jnum(o, "peak_rss_mib") - jnum(o, "base_rss_mib")) / bmem, "%.2fx");
            printf("%-16s %8s %11sx %8s %11sx\n", P[i].name, a, P[i].speed, b, P[i].mem);
        }
    }
}

static void print_table(cJSON *const *recs, int threads, int warmup, int repeat) {
    if (recs[0]) {
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(recs[0], "shapes");
        if (cJSON_IsArray(sh)) {
            printf("sgemm (OpenBLAS, %d threads):", threads);
            const cJSON *e;
            cJSON_ArrayForEach(e, sh) printf("  %gx%gx%g %.1f GFLOP/s", jnum(e, "m"), jnum(e, "n"), jnum(e, "k"), jnum(e, "gflops"));
            printf("\n");
        } else {
            printf("sgemm: %s\n", jstr(recs[0], "note"));
        }
    }
    printf("\n%-20s %11s %10s %10s %9s %8s %9s\n", "workload", "tok/s", "ms/step", "GFLOP/step", "GFLOP/s", "% sgemm",
           "peak MiB");
    for (int k = 1; k < N_WORKLOADS; k++) {
        if (!recs[k]) continue;
        const cJSON *o = recs[k];
        if (strcmp(jstr(o, "status"), "ok")) {
            printf("%-20s %s (%s)\n", WORKLOADS[k].name, jstr(o, "status"), jstr(o, "note"));
            continue;
        }
        char a[32], b[32], c[32], d[32], e[32], f[32];
        fmt_num(a, sizeof a, jnum(o, "tokens_per_s"), "%.0f");
        fmt_num(b, sizeof b, jnum(o, "ms_per_step"), "%.3f");
        fmt_num(c, sizeof c, jnum(o, "gflop_per_step"), "%.3f");
        fmt_num(d, sizeof d, jnum(o, "gflops"), "%.1f");
        fmt_num(e, sizeof e, 100 * jnum(o, "sgemm_fraction"), "%.0f%%");
        fmt_num(f, sizeof f, jnum(o, "peak_rss_mib"), "%.0f");
        printf("%-20s %11s %10s %10s %9s %8s %9s\n", WORKLOADS[k].name, a, b, c, d, e, f);
    }
    printf("\n(tok/s and ms/step: median of %d timed steps after %d warm-up; decode: per generated token, one "
           "feed of the whole batch. GFLOP: analytic count, see docs/performance.md. Peak: each workload in a "
           "fresh process.)\n",
           repeat, warmup);
    print_abc_relative(recs);
}

/* split the positional workload names from the flags (flags with a value take the next word) */
static int split_args(int argc, char **argv, const cli_flag *fl, char **fargv, int *fargc, const char **names) {
    int nnames = 0;
    *fargc = 2;
    fargv[0] = argv[0], fargv[1] = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--", 2) || !strcmp(a, "-h")) {
            fargv[(*fargc)++] = argv[i];
            const cli_flag *f = NULL;
            for (const cli_flag *g = fl; g->name; g++)
                if (!strcmp(g->name, a + 2)) f = g;
            if (f && f->kind != F_SET && f->kind != F_CLEAR && f->kind != F_BOOL && i + 1 < argc) fargv[(*fargc)++] = argv[++i];
        } else {
            names[nnames++] = a;
        }
    }
    return nnames;
}

/* every selected workload, each in a fresh child process; returns the number that failed */
static int run_selected(const int *sel, const char *self, int threads, int warmup, int repeat, double budget, int json,
                        cJSON **recs) {
    int total = 0, done = 0, failed = 0;
    for (int k = 0; k < N_WORKLOADS; k++) total += sel[k];
    double sgemm = NAN;
    for (int k = 0; k < N_WORKLOADS; k++) {
        if (!sel[k]) continue;
        const workload *w = &WORKLOADS[k];
        double peak, t0 = now_sec();
        char err[256] = "";
        fprintf(stderr, "bench [%d/%d] %-20s ...", ++done, total, w->name);
        fflush(stderr);
        cJSON *c = spawn_child(self, w->name, threads, warmup, repeat, budget, &peak, err, sizeof err);
        const char *st = c ? jstr(c, "status") : "error";
        fprintf(stderr, " %s (%.1f s)%s%s\n", st, now_sec() - t0, c ? "" : ": ", c ? "" : err);
        if (!c || !strcmp(st, "error")) failed++;
        recs[k] = w->kind == WK_SGEMM ? sgemm_record(c, err, threads, peak, &sgemm)
                                      : workload_record(w, c, err, threads, warmup, repeat, peak, sgemm);
        cJSON_Delete(c);
        if (json) {
            char *s = cJSON_PrintUnformatted(recs[k]);
            printf("%s\n", s ? s : "{}");
            free(s);
            fflush(stdout);
        }
    }
    return failed;
}

int cmd_bench(int argc, char **argv) {
    int json = 0, threads = 0, repeat = 3, warmup = 1, no_sgemm = 0, list = 0;
    double budget = 12;
    const char *child = NULL;
    cli_flag fl[] = {
        {"json", F_SET, &json, "one JSON object per line (stable keys) instead of the table", NULL, 1, 0, 0},
        {"threads", F_INT, &threads, "threads for our OpenMP loops and OpenBLAS (0 = all cores)", NULL, 0, 4096, 0},
        {"repeat", F_INT, &repeat, "timed steps (decode: timed 512-token runs); ms/step is their median", NULL, 1, 1000, 0},
        {"warmup", F_INT, &warmup, "untimed steps before timing", NULL, 0, 1000, 0},
        {"budget", F_DBL, &budget, "seconds: stop timing a workload early once its timed steps add up to this (at least one step)",
         NULL, 0, 1e6, 0},
        {"no-sgemm", F_SET, &no_sgemm, "skip the sgemm reference measurement", NULL, 1, 0, 0},
        {"list", F_SET, &list, "list the workloads and exit", NULL, 1, 0, 0},
        {"child", F_STR, &child, "internal: run one workload in this process and print its JSON", NULL, 1, 0, 0},
        FL_END};
    const char *usage = "[WORKLOAD...] [--json] [--threads N] [--repeat R] [--warmup W]   (no workload = all; 'mega bench --list')";
    char **fargv = calloc((size_t)argc + 1, sizeof *fargv);
    const char **names = calloc((size_t)argc + 1, sizeof *names);
    if (!fargv || !names) return free(fargv), free(names), cli_error("out of memory"), 2;
    int fargc, nnames = split_args(argc, argv, fl, fargv, &fargc, names);
    int r = cli_parse("bench", usage, fl, fargc, fargv, 2);
    free(fargv);
    if (r) return free(names), r == 1 ? 0 : 2;
    if (child) return free(names), run_child(child, threads, warmup, repeat, budget);
    if (list) {
        for (int i = 0; i < N_WORKLOADS; i++) printf("%-22s %s\n", WORKLOADS[i].name, WORKLOADS[i].what);
        return free(names), 0;
    }
    int sel[N_WORKLOADS] = {0};
    r = select_workloads(names, nnames, no_sgemm, sel);
    free(names);
    if (r) return 2;
    if (threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc > 0 ? (int)nc : 1;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl > 0) self[sl] = 0;
    else snprintf(self, sizeof self, "%s", argv[0]);
    if (!json) {
        printf("mega bench: %s, %d threads, warm-up %d, repeat %d (median)\n", mega_build_info(), threads, warmup, repeat);
        fflush(stdout);
    }
    cJSON *recs[N_WORKLOADS] = {0};
    const int failed = run_selected(sel, self, threads, warmup, repeat, budget, json, recs);
    if (!json) print_table(recs, threads, warmup, repeat);
    for (int k = 0; k < N_WORKLOADS; k++) cJSON_Delete(recs[k]);
    return failed ? 1 : 0;
}
