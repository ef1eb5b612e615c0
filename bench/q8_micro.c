/*
 * Micro-benchmark of the q8_0 products (src/ops/q8.c) against float32 (docs/quantization.md):
 *  1. the machine's copy bandwidth (memcpy of 256 MB, the physical limit of a decode that reads
 *     every weight once per token), by CPU time as the rest and by wall time;
 *  2. mega_linear_step, R rows (1 and 8) by a matrix of O x K weights, float32 and q8_0 (the same
 *     matrix registered as quantized blocks): CPU time per call (one thread) and weight bytes read
 *     per CPU second;
 *  3. a whole decode step of the official enwik8 base size (12 x 512, random weights), float32
 *     and after mega_model_quantize: CPU time per token (CLOCK_THREAD_CPUTIME_ID, one thread, so a
 *     busy machine moves it less than the wall-clock time mega bench reports) and wall time.
 *
 *   make MEGA_INNER=1 -j2 lib
 *   gcc -O3 -march=native -fopenmp -std=c11 -D_DEFAULT_SOURCE -Iinclude -Isrc bench/q8_micro.c build/libmega.a \
 *       -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lz -lm -o /tmp/q8_micro
 *   /tmp/q8_micro [tokens] [products]   # default 64 decoded tokens per model; 1 thread;
 *                                       # "products": sections 1 and 2 only
 */
#include "core/internal.h"
#include "ops/ops.h"
#include "ops/q8.h"
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void copy_bandwidth(void) {
    const size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n), memset(b, 2, n);
    double best = 1e30;
    double bestw = 1e30;
    for (int r = 0; r < 5; r++) {
        const double t0 = cpu(), w0 = wall();
        memcpy(b, a, n);
        best = fmin(best, cpu() - t0);
        bestw = fmin(bestw, wall() - w0);
    }
    /* read + write: 2 n bytes moved; by CPU time (as the products below) and by wall time */
    printf("copy bandwidth (memcpy 256 MB, best of 5): %.1f GB/s read per CPU second (%.1f GB/s moved); wall %.1f GB/s read\n",
           n / best / 1e9, 2.0 * n / best / 1e9, n / bestw / 1e9);
    free(a), free(b);
}

static void product(size_t O, size_t K, size_t R) {
    real *W = malloc(O * K * sizeof(real)), *X = malloc(R * K * sizeof(real)), *Y = malloc(R * O * sizeof(real));
    unsigned long long s = 1;
    for (size_t i = 0; i < O * K; i++) W[i] = (real)((double)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0 - 0.5);
    for (size_t i = 0; i < R * K; i++) X[i] = (real)(0.01 * (double)(i % 97));
    mega_q8_mat m = {W, O, K, mega_q8_blocks(K), malloc(O * mega_q8_blocks(K) * 32), malloc(O * mega_q8_blocks(K) * sizeof(float))};
    for (size_t r = 0; r < O; r++) mega_q8_quantize_row(W + r * K, K, m.qs + r * m.nb * 32, m.d + r * m.nb, 1);
    double t[2];
    for (int q = 0; q < 2; q++) {
        if (q) mega_q8_register(&m);
        int reps = (int)fmax(3, 2e8 / (double)(O * K));
        mega_linear_step(Y, X, W, NULL, R, K, O);
        const double t0 = cpu();
        for (int i = 0; i < reps; i++) mega_linear_step(Y, X, W, NULL, R, K, O);
        t[q] = (cpu() - t0) / reps;
        if (q) mega_q8_unregister(&m);
    }
    const double bf = (double)O * K * 4, bq = (double)O * m.nb * 34; /* the bytes each form reads */
    printf("  %5zu x %-5zu R %zu: float32 %8.1f us (%5.1f GB/s)   q8_0 %8.1f us (%5.1f GB/s)   %.2fx\n", O, K, R,
           1e6 * t[0], bf / t[0] / 1e9, 1e6 * t[1], bq / t[1] / 1e9, t[0] / t[1]);
    free(W), free(X), free(Y), free(m.qs), free(m.d);
}

static void enwik8_config(mega_lm_config *c) {
    mega_lm_config_default(c);
    mega_block_config *k = &c->block;
    c->vocab_size = 257, c->padding_idx = 256, c->layers = 12, c->tie_embeddings = 1, c->final_norm_affine = 0;
    k->embed_dim = 512, k->hidden_dim = 1024, k->ffn_dim = 1024, k->z_dim = 128, k->n_dim = 16;
    k->chunk_size = 2048, k->max_positions = 4096, k->rel_pos_bias = MEGA_RELPOS_ROTARY, k->prenorm = 1;
    k->dropout = k->attention_dropout = k->hidden_dropout = k->activation_dropout = 0;
}

static void decode(mega_lm *m, const char *what, int tokens, int B) {
    mega_lm_stream *s;
    if (mega_lm_stream_new(m, B, tokens + 1, &s) != MEGA_OK) return;
    mega_real *logits = malloc((size_t)B * 257 * sizeof *logits);
    int32_t tok[8] = {65, 66, 67, 68, 69, 70, 71, 72};
    mega_lm_stream_feed(s, tok, 1, logits); /* warm-up: buffers, the step team */
    const double c0 = cpu(), w0 = wall();
    for (int t = 0; t < tokens; t++) mega_lm_stream_feed(s, tok, 1, logits);
    const double c1 = cpu(), w1 = wall();
    printf("  %-8s B %d: %.2f ms CPU per step (%.0f tok/s by CPU time), %.2f ms wall\n", what, B, 1e3 * (c1 - c0) / tokens,
           B * tokens / (c1 - c0), 1e3 * (w1 - w0) / tokens);
    free(logits);
    mega_lm_stream_free(s);
}

int main(int argc, char **argv) {
    const int tokens = argc > 1 ? atoi(argv[1]) : 64;
    const int only_products = argc > 2 && !strcmp(argv[2], "products");
    mega_set_threads(1);
    printf("q8_0 kernel: %s\n", mega_q8_kernel());
    copy_bandwidth();
    printf("mega_linear_step, 1 thread, CPU time:\n");
    const size_t shapes[][2] = {{1024, 512}, {2176, 512}, {512, 1024}, {4096, 4096}};
    for (int i = 0; i < (only_products ? 3 : 4); i++)
        for (size_t R = 1; R <= 8; R += 7) product(shapes[i][0], shapes[i][1], R);
    if (only_products) return 0;
    printf("decode, the enwik8 base size (random weights), 1 thread, %d tokens:\n", tokens);
    mega_lm_config c;
    enwik8_config(&c);
    mega_lm *m;
    if (mega_lm_create(&c, &m) != MEGA_OK) return 1;
    mega_lm_init_params(m, 1);
    char f32[] = "/tmp/q8_micro_f32_XXXXXX", q8[] = "/tmp/q8_micro_q8_XXXXXX";
    close(mkstemp(f32)), close(mkstemp(q8));
    const mega_load_opts o = {1, 0};
    mega_lm *q = NULL;
    if (mega_lm_save(m, f32) || mega_model_quantize(f32, q8, NULL, NULL) || mega_lm_load_ex(q8, &o, &q))
        return fprintf(stderr, "%s\n", mega_last_error()), 1;
    struct stat sf, sq;
    if (stat(f32, &sf) == 0 && stat(q8, &sq) == 0)
        printf("  files: float32 %.1f MB, q8_0 %.1f MB (%.3fx)\n", sf.st_size / 1e6, sq.st_size / 1e6,
               (double)sq.st_size / (double)sf.st_size);
    unlink(f32), unlink(q8);
    for (int B = 1; B <= 8; B += 7) {
        decode(m, "float32", tokens, B);
        decode(q, "q8_0", tokens, B);
    }
    mega_lm_free(m), mega_lm_free(q);
    return 0;
}
