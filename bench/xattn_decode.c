/*
 * Decode cost of the encoder-decoder's cross-attention against the source length
 * (docs/translation.md, "Cross-attention choices and decode cost"): full multi-head
 * cross-attention (mha), whose step reads all S encoder keys and values of every decoder layer,
 * against the bounded memory of ABC (abc-mlp, n slots per head), whose step reads n slots
 * whatever S. A small random model (embed-dim 128, 8 heads, FFN 256, 1 encoder and 3 decoder
 * layers, the mha mixer on both sides so that only the cross-attention differs, byte vocabulary).
 *
 * For each source length S and each kind: mega_s2s_stream_start (the encoder, then the
 * cross-attention state: mha projects S keys and values per layer, abc-mlp builds its memory) and
 * `steps` decoding steps of one row (mega_s2s_stream_step, greedy feeding of the argmax); printed:
 * the start's time, the CPU time per decoded token (CLOCK_THREAD_CPUTIME_ID, one thread: a busy
 * machine moves it less than wall time; the median of `repeat` runs), the wall time per token, and
 * the cross-attention state the decoding keeps (mega_xattn_state_size over the decoder layers, one
 * row). The stream also keeps a copy of the encoder output (S x D reals per row) that only the
 * start reads; it is not counted.
 *
 *   make MEGA_INNER=1 -j2 lib
 *   gcc -O3 -march=native -fopenmp -std=c11 -D_DEFAULT_SOURCE -Iinclude -Isrc bench/xattn_decode.c build/libmega.a \
 *       -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lpng -lsndfile -lz -lm -o /tmp/xattn_decode
 *   taskset -c 1 nice -n 5 /tmp/xattn_decode [steps=32] [repeat=3] [slots=32] > table.tsv
 * With the tool's SVG charts (tools/svg.c) compiled in, a fourth argument PREFIX also writes
 * PREFIX-time.svg and PREFIX-state.svg (docs/results/xattn-decode-*.svg):
 *   gcc ... -DWITH_SVG -Itools bench/xattn_decode.c tools/svg.c build/libmega.a ... -o /tmp/xattn_decode
 *   /tmp/xattn_decode 64 5 32 docs/results/xattn-decode
 */
#include "model/s2s.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef WITH_SVG
#include "svg.h"
/* svg.c reports a failed write through the tool's cli_error */
int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("xattn_decode: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}
/* y[kind][length] against the source lengths, one series per kind, log-log */
static int chart(const char *path, const char *title, const char *ylabel, const double *x, double y[2][5], int slots) {
    char l1[64];
    snprintf(l1, sizeof l1, "abc-mlp, %d slots (bounded)", slots);
    svg_series s[2] = {{"mha (full)", x, y[0], 5, 1, 0}, {l1, x, y[1], 5, 1, 1}};
    svg_chart c = {title, "source tokens", ylabel, 1, 1, 1};
    sbuf b = {0};
    svg_line_chart(&b, &c, s, 2);
    const int rc = sbuf_write(&b, path);
    sbuf_free(&b);
    return rc;
}
#endif

static double now(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 32, repeat = argc > 2 ? atoi(argv[2]) : 3;
    const int slots = argc > 3 ? atoi(argv[3]) : 32;
    const int lens[] = {32, 128, 512, 1024, 4096};
    double xs_len[5], t_us[2][5], st_kib[2][5];
    for (int i = 0; i < 5; i++) xs_len[i] = lens[i];
    const int kinds[2] = {2, 5}; /* mha, abc-mlp (mega_s2s_config.cross_attention) */
    mega_set_threads(1);
    printf("kind\tslots\tsource_tokens\tstart_ms\tcpu_us_per_token\twall_us_per_token\tcross_state_bytes\n");
    for (int ki = 0; ki < 2; ki++) {
        mega_s2s_config c;
        mega_s2s_config_default(&c);
        mega_block_config *b = &c.encoder;
        b->mixer = MEGA_MIXER_MHA, b->embed_dim = 128, b->heads = 8, b->ffn_dim = 256, b->max_positions = 4096;
        b->chunk_size = -1;
        c.decoder = *b;
        c.encoder_layers = 1, c.decoder_layers = 3;
        c.cross_attention = kinds[ki], c.cross_memory = slots;
        mega_s2s *m;
        if (mega_s2s_create(&c, &m)) {
            fprintf(stderr, "create: %s\n", mega_last_error());
            return 1;
        }
        mega_s2s_init_params(m, 1);
        const int V = m->cfg.tgt_vocab_size;
        mega_real *lg = malloc((size_t)V * sizeof(mega_real));
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int S = lens[li];
            int32_t *src = malloc((size_t)S * sizeof(int32_t));
            uint64_t s = 7;
            for (int t = 0; t < S; t++) s = s * 6364136223846793005ull + 1442695040888963407ull, src[t] = (int32_t)(s >> 33) % 256;
            src[S - 1] = m->cfg.eos_idx;
            mega_s2s_stream *st;
            if (mega_s2s_stream_new(m, 1, S, steps + 1, &st)) {
                fprintf(stderr, "stream: %s\n", mega_last_error());
                return 1;
            }
            double cpu[16], wl[16], start = 0;
            const int R = repeat < 16 ? repeat : 16;
            for (int r = 0; r < R; r++) {
                const double w0 = now(CLOCK_MONOTONIC);
                if (mega_s2s_stream_start(st, src, S, 1)) {
                    fprintf(stderr, "start: %s\n", mega_last_error());
                    return 1;
                }
                const double w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
                int32_t tok = m->cfg.eos_idx;
                for (int t = 0; t < steps; t++) {
                    mega_s2s_stream_step(st, &tok, lg);
                    int best = 0;
                    for (int v = 1; v < V; v++)
                        if (lg[v] > lg[best]) best = v;
                    tok = best == m->cfg.padding_idx ? m->cfg.eos_idx : best;
                }
                const double w2 = now(CLOCK_MONOTONIC), c2 = now(CLOCK_THREAD_CPUTIME_ID);
                cpu[r] = (c2 - c1) / steps, wl[r] = (w2 - w1) / steps;
                start = r ? fmin(start, w1 - w0) : w1 - w0;
            }
            qsort(cpu, (size_t)R, sizeof *cpu, cmp);
            qsort(wl, (size_t)R, sizeof *wl, cmp);
            const size_t xs = mega_xattn_state_size(&m->dl[0].x, 1, S, steps + 1) * (size_t)c.decoder_layers * sizeof(mega_real);
            t_us[ki][li] = 1e6 * cpu[R / 2], st_kib[ki][li] = (double)xs / 1024;
            printf("%s\t%d\t%d\t%.2f\t%.1f\t%.1f\t%zu\n", kinds[ki] == 2 ? "mha" : "abc-mlp", kinds[ki] == 2 ? 0 : slots, S,
                   1e3 * start, 1e6 * cpu[R / 2], 1e6 * wl[R / 2], xs);
            fflush(stdout);
            mega_s2s_stream_free(st);
            free(src);
        }
        free(lg);
        mega_s2s_free(m);
    }
#ifdef WITH_SVG
    if (argc > 4) {
        char p1[512], p2[512];
        snprintf(p1, sizeof p1, "%s-time.svg", argv[4]);
        snprintf(p2, sizeof p2, "%s-state.svg", argv[4]);
        if (chart(p1, "decode cost per token against the source length", "CPU time per token (us)", xs_len, t_us, slots) ||
            chart(p2, "cross-attention state kept while decoding", "state, 3 layers, one row (KiB)", xs_len, st_kib, slots))
            return 1;
    }
#else
    (void)xs_len, (void)t_us, (void)st_kib;
#endif
    return 0;
}
