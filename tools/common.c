#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

void fmt_rate(char *buf, size_t n, double r) {
    if (r >= 1e6) snprintf(buf, n, "%.2fM", r / 1e6);
    else if (r >= 1e3) snprintf(buf, n, "%.1fk", r / 1e3);
    else snprintf(buf, n, "%.0f", r);
}

int is_tty(FILE *f) { return isatty(fileno(f)); }

const char *path_join(char *buf, size_t n, const char *dir, const char *file) {
    snprintf(buf, n, "%s/%s", dir, file);
    return buf;
}

int ensure_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return cli_error("output path '%s' exists and is not a directory", dir);
        return 0;
    }
    if (mkdir(dir, 0755) != 0) return cli_error("cannot create directory '%s': %s", dir, strerror(errno));
    return 0;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int eval_windows(mega_lm *m, const uint8_t *text, size_t n, int B, int T, size_t max_tokens, double *loss,
                 int64_t *count) {
    if (n < 2) return cli_error("validation text is too short (%zu bytes)", n);
    if ((size_t)T + 1 > n) T = (int)(n - 1);
    size_t nwin = (n - 1) / (size_t)T;
    if (max_tokens && nwin * (size_t)T > max_tokens) nwin = max_tokens / (size_t)T > 0 ? max_tokens / (size_t)T : 1;
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t)), *tgt = malloc((size_t)B * T * sizeof(int32_t));
    if (!tok || !tgt) {
        free(tok), free(tgt);
        return cli_error("out of memory");
    }
    double tot = 0;
    int64_t cnt = 0;
    mega_lm_run run = {0, 0};
    for (size_t w0 = 0; w0 < nwin; w0 += (size_t)B) {
        int nb = (int)((nwin - w0) < (size_t)B ? (nwin - w0) : (size_t)B);
        for (int b = 0; b < nb; b++) {
            const uint8_t *s = text + (w0 + (size_t)b) * (size_t)T;
            for (int t = 0; t < T; t++) tok[(size_t)b * T + t] = s[t], tgt[(size_t)b * T + t] = s[t + 1];
        }
        double l;
        int64_t c;
        if (mega_lm_forward(m, tok, tgt, nb, T, &run, &l, &c) != MEGA_OK) {
            free(tok), free(tgt);
            return cli_error("%s", mega_last_error());
        }
        tot += l * (double)c;
        cnt += c;
    }
    free(tok), free(tgt);
    *loss = cnt ? tot / (double)cnt : 0;
    *count = cnt;
    return 0;
}

int eval_stream(mega_lm *m, const uint8_t *text, size_t n, int seg, int verbose, double *loss, int64_t *count) {
    const mega_lm_config *c = mega_lm_get_config(m);
    if (n < 2) return cli_error("evaluation text is too short (%zu bytes)", n);
    const int V = c->vocab_size;
    /* chunked Mega carries its whole state across segments (the cache resets at chunk borders);
     * full attention, and every other mixer, restarts at every segment (their caches would grow
     * with the text): their context is one segment */
    const int full = !(c->mix.mixer == MEGA_MIXER_MEGA && c->chunk_size > 0);
    int cap = full ? seg : c->chunk_size;
    mega_lm_stream *s;
    if (mega_lm_stream_new(m, 1, cap, &s) != MEGA_OK) return cli_error("%s", mega_last_error());
    int32_t *tok = malloc((size_t)seg * sizeof(int32_t));
    mega_real *lg = malloc((size_t)seg * V * sizeof(mega_real));
    if (!tok || !lg) {
        free(tok), free(lg);
        mega_lm_stream_free(s);
        return cli_error("out of memory");
    }
    double tot = 0;
    int64_t cnt = 0;
    double t0 = now_sec(), last = t0;
    const size_t N = n - 1; /* predictions */
    for (size_t p = 0; p < N; p += (size_t)seg) {
        int T = (int)((N - p) < (size_t)seg ? (N - p) : (size_t)seg);
        for (int t = 0; t < T; t++) tok[t] = text[p + (size_t)t];
        if (full) mega_lm_stream_reset(s);
        if (mega_lm_stream_feed(s, tok, T, lg) != MEGA_OK) {
            free(tok), free(lg);
            mega_lm_stream_free(s);
            return cli_error("%s", mega_last_error());
        }
        for (int t = 0; t < T; t++) {
            const mega_real *l = lg + (size_t)t * V;
            double mx = l[0], sum = 0;
            for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
            tot += mx + log(sum) - (double)l[text[p + (size_t)t + 1]];
            cnt++;
        }
        double now = now_sec();
        if (verbose && (now - last > 1.0 || p + (size_t)T >= N)) {
            char eta[32], rate[32];
            double r = (double)(p + (size_t)T) / (now - t0 + 1e-9);
            fmt_duration(eta, sizeof eta, (double)(N - p - (size_t)T) / (r + 1e-9));
            fmt_rate(rate, sizeof rate, r);
            fprintf(stderr, "\r  eval %5.1f%%  %zu/%zu bytes  bpb %.4f  %s tok/s  ETA %s   ", 100.0 * (double)(p + (size_t)T) / (double)N,
                    p + (size_t)T, N, tot / (double)cnt / log(2.0), rate, eta);
            last = now;
        }
    }
    if (verbose) fprintf(stderr, "\n");
    free(tok), free(lg);
    mega_lm_stream_free(s);
    *loss = tot / (double)cnt;
    *count = cnt;
    return 0;
}

void print_config(FILE *f, const mega_lm_config *c, const char *ind) {
    fprintf(f, "%slayers %d, embed-dim %d, z-dim %d, hidden-dim %d, n-dim %d, ffn-dim %d\n", ind, c->layers, c->embed_dim,
            c->z_dim, c->hidden_dim, c->n_dim, c->ffn_dim);
    fprintf(f, "%schunk-size %d, truncation %d, attention-activation %s, rel-pos-bias %s\n", ind, c->chunk_size,
            c->truncation, mega_attn_fn_name(c->attention_activation), c->rotary ? "rotary" : "simple");
    fprintf(f, "%snorm-type %s, %s, activation %s, %s embeddings, embedding scale %s\n", ind, mega_norm_name(c->norm_type),
            c->prenorm ? "prenorm" : "postnorm", mega_act_name(c->activation), c->tie_embeddings ? "tied" : "untied",
            c->scale_embedding ? "sqrt(D)" : "1");
    if (c->mix.mixer != MEGA_MIXER_MEGA)
        fprintf(f, "%smixer %s: heads %d, window %d, memory-size %d, max-len %d, pos %s, attn-window %d%s\n", ind,
                mega_mixer_name(c->mix.mixer), c->mix.heads, c->mix.window, c->mix.memory, c->mix.max_len,
                mega_pos_name(c->mix.pos), c->mix.attn_window, c->mix.log_n ? ", log-n scaling" : "");
    fprintf(f, "%sdropout %g, attention-dropout %g, hidden-dropout %g, activation-dropout %g, vocab %d (pad %d)\n", ind,
            c->dropout, c->attention_dropout, c->hidden_dropout, c->activation_dropout, c->vocab_size, c->padding_idx);
}
