/* mega eval / generate / info: using a trained language model. */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --model accepts a checkpoint directory or a .safetensors file */
static const char *model_path(const char *m, char *buf, size_t n) {
    struct stat st;
    if (stat(m, &st) == 0 && S_ISDIR(st.st_mode)) return path_join(buf, n, m, "model.safetensors");
    snprintf(buf, n, "%s", m);
    return buf;
}

static int load_model(const char *arg, int chunk_override, mega_lm **out) {
    char p[4096];
    model_path(arg, p, sizeof p);
    if (!file_exists(p)) return cli_error("no model at '%s' (expected a checkpoint directory or a .safetensors file)", arg);
    if (mega_lm_load(p, out) != MEGA_OK) return cli_error("%s", mega_last_error());
    if (chunk_override != 0 && chunk_override != mega_lm_get_config(*out)->chunk_size) {
        /* train short, test long: rebuild with another attention chunk and reload the weights */
        mega_lm_config c = *mega_lm_get_config(*out);
        mega_lm_free(*out);
        *out = NULL;
        if (!c.rotary)
            return cli_error("--chunk-size %d: this model has a simple relative-position bias, whose table is sized by the "
                             "training chunk (%d); only rotary-bias models can change the chunk at evaluation",
                             chunk_override, c.chunk_size);
        c.chunk_size = chunk_override;
        if (mega_lm_create(&c, out) != MEGA_OK || mega_lm_load_weights(*out, p) != MEGA_OK) {
            mega_lm_free(*out);
            *out = NULL;
            return cli_error("%s", mega_last_error());
        }
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL;
    int seq_len = 0, chunk = 0, threads = 0, quiet = 0;
    int64_t max_bytes = 0;
    cli_flag fl[] = {
        {"model", F_STR, &model, "checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
        {"data", F_STR, &data, "text to score (bytes)", NULL, 1, 0, 0},
        {"seq-len", F_INT, &seq_len, "segment length fed per call, state carried across segments (0 = the chunk size, or 2048 for full attention, where each segment restarts)", NULL, 0, 1 << 24, 0},
        {"chunk-size", F_INT, &chunk, "attention chunk at evaluation (0 = as trained; rotary models only)", NULL, -1, 1 << 20, 0},
        {"max-bytes", F_I64, &max_bytes, "score only the first N bytes (0 = all)", NULL, 0, 1e15, 0},
        {"threads", F_INT, &threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"quiet", F_SET, &quiet, "no progress output", NULL, 1, 0, 0},
        FL_END};
    int r = cli_parse("eval", "--model DIR --data FILE [--seq-len L] [--chunk-size C]", fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model || !data) return cli_error("--model and --data are required (see 'mega eval --help')"), 2;
    mega_set_threads(threads);
    mega_lm *m;
    if (load_model(model, chunk, &m)) return 2;
    bytes_t txt;
    if (read_bytes(data, &txt, "--data")) {
        mega_lm_free(m);
        return 2;
    }
    size_t n = txt.n;
    if (max_bytes > 0 && (size_t)max_bytes < n) n = (size_t)max_bytes;
    const mega_lm_config *c = mega_lm_get_config(m);
    if (seq_len <= 0) seq_len = c->chunk_size > 0 ? c->chunk_size : 2048;
    double t0 = now_sec(), loss;
    int64_t cnt;
    if (!quiet)
        fprintf(stderr, "mega eval: %s, %zu bytes, segments of %d, chunk %d (%s)\n", data, n, seq_len, c->chunk_size,
                c->chunk_size > 0 ? "state carried across segments" : "full attention: each segment restarts");
    int rc = eval_stream(m, txt.buf, n, seq_len, !quiet, &loss, &cnt);
    if (!rc) {
        double dt = now_sec() - t0;
        printf("loss %.6f nats/byte | bits per byte %.6f | %lld bytes scored | %.1f s (%.0f tok/s)\n", loss, loss / M_LN2,
               (long long)cnt, dt, (double)cnt / (dt > 0 ? dt : 1e-9));
    }
    free(txt.buf);
    mega_lm_free(m);
    return rc ? 2 : 0;
}

/* sample a byte from logits with temperature, top-k and top-p (nucleus); temperature 0 = argmax */
static int sample(const mega_real *lg, int V, int pad, double temp, int topk, double topp, uint64_t *rs, double *prob,
                  int *idx) {
    int best = -1;
    for (int v = 0; v < V; v++)
        if (v != pad && (best < 0 || lg[v] > lg[best])) best = v;
    if (temp <= 0) return best;
    int n = 0;
    for (int v = 0; v < V; v++)
        if (v != pad) idx[n++] = v;
    /* sort candidates by logit (descending): insertion sort over at most V = 257 entries */
    for (int i = 1; i < n; i++) {
        int x = idx[i], j = i - 1;
        while (j >= 0 && lg[idx[j]] < lg[x]) idx[j + 1] = idx[j], j--;
        idx[j + 1] = x;
    }
    if (topk > 0 && topk < n) n = topk;
    double mx = lg[idx[0]], s = 0;
    for (int i = 0; i < n; i++) s += (prob[i] = exp(((double)lg[idx[i]] - mx) / temp));
    for (int i = 0; i < n; i++) prob[i] /= s;
    if (topp > 0 && topp < 1) {
        double c = 0;
        int k = 0;
        while (k < n && c < topp) c += prob[k++];
        n = k;
        for (int i = 0; i < n; i++) prob[i] /= c;
    }
    *rs += 0x9E3779B97F4A7C15ull;
    uint64_t z = *rs;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = (double)(z >> 11) / 9007199254740992.0, c = 0;
    for (int i = 0; i < n; i++) {
        c += prob[i];
        if (u < c) return idx[i];
    }
    return idx[n - 1];
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = "\n";
    int tokens = 256, topk = 0, threads = 0, quiet = 0;
    double temp = 0.8, topp = 0.95;
    int64_t seed = 0;
    cli_flag fl[] = {
        {"model", F_STR, &model, "checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
        {"prompt", F_STR, &prompt, "text to start from (bytes)", NULL, 1, 0, 0},
        {"tokens", F_INT, &tokens, "bytes to generate", NULL, 0, 1 << 30, 0},
        {"temperature", F_DBL, &temp, "sampling temperature (0 = greedy argmax)", NULL, 0, 100, 0},
        {"top-k", F_INT, &topk, "sample among the k most likely bytes (0 = all)", NULL, 0, 1 << 20, 0},
        {"top-p", F_DBL, &topp, "nucleus sampling mass (1 = off)", NULL, 0, 1, 0},
        {"seed", F_I64, &seed, "sampling seed", NULL, 0, 9e15, 0},
        {"threads", F_INT, &threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"quiet", F_SET, &quiet, "print only the generated text (no prompt, no statistics)", NULL, 1, 0, 0},
        FL_END};
    int r = cli_parse("generate", "--model DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]", fl,
                      argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model) return cli_error("--model is required (see 'mega generate --help')"), 2;
    if (!*prompt) return cli_error("--prompt must not be empty (Mega has no start token; use e.g. a newline)"), 2;
    mega_set_threads(threads);
    mega_lm *m;
    if (load_model(model, 0, &m)) return 2;
    const mega_lm_config *c = mega_lm_get_config(m);
    const int V = c->vocab_size;
    size_t np = strlen(prompt);
    mega_lm_stream *s;
    if (mega_lm_stream_new(m, 1, (int)(np + (size_t)tokens + 1), &s) != MEGA_OK) {
        mega_lm_free(m);
        return cli_error("%s", mega_last_error()), 2;
    }
    int32_t *pt = malloc(np * sizeof(int32_t));
    mega_real *lg = malloc((size_t)V * sizeof(mega_real));
    mega_real *lgp = malloc((size_t)(c->chunk_size > 0 ? c->chunk_size : 256) * V * sizeof(mega_real));
    double *prob = malloc((size_t)V * sizeof(double));
    int *idx = malloc((size_t)V * sizeof(int));
    for (size_t i = 0; i < np; i++) pt[i] = (uint8_t)prompt[i];
    if (!quiet) fwrite(prompt, 1, np, stdout);
    fflush(stdout);
    double t0 = now_sec();
    /* ingest the prompt in chunk-sized blocks (projections batched), keep the last logits */
    size_t blk = (size_t)(c->chunk_size > 0 ? c->chunk_size : 256);
    int rc = 0;
    for (size_t p = 0; p < np && !rc; p += blk) {
        int T = (int)((np - p) < blk ? (np - p) : blk);
        if (mega_lm_stream_feed(s, pt + p, T, lgp) != MEGA_OK) rc = cli_error("%s", mega_last_error());
        else memcpy(lg, lgp + (size_t)(T - 1) * V, (size_t)V * sizeof(mega_real));
    }
    double t1 = now_sec();
    uint64_t rs = (uint64_t)seed * 0xD1B54A32D192ED03ull + 11;
    for (int i = 0; i < tokens && !rc; i++) {
        int32_t b = sample(lg, V, c->padding_idx, temp, topk, topp, &rs, prob, idx);
        unsigned char ch = (unsigned char)b;
        fwrite(&ch, 1, 1, stdout);
        fflush(stdout);
        if (i + 1 < tokens && mega_lm_stream_feed(s, &b, 1, lg) != MEGA_OK) rc = cli_error("%s", mega_last_error());
    }
    double t2 = now_sec();
    if (!quiet && !rc)
        fprintf(stderr, "\n[prompt %zu bytes in %.2f s; %d bytes generated in %.2f s (%.1f tok/s)]\n", np, t1 - t0, tokens,
                t2 - t1, tokens / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
    else if (!rc)
        printf("\n");
    free(pt), free(lg), free(lgp), free(prob), free(idx);
    mega_lm_stream_free(s);
    mega_lm_free(m);
    return rc ? 2 : 0;
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    int tensors = 0;
    cli_flag fl[] = {{"model", F_STR, &model, "checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
                     {"tensors", F_SET, &tensors, "also list every tensor with its shape", NULL, 1, 0, 0},
                     FL_END};
    int r = cli_parse("info", "--model DIR [--tensors]", fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model) return cli_error("--model is required (see 'mega info --help')"), 2;
    mega_lm *m;
    if (load_model(model, 0, &m)) return 2;
    char p[4096];
    model_path(model, p, sizeof p);
    mega_st_file *f = NULL;
    const char *step = NULL;
    if (mega_st_open(p, &f) == MEGA_OK) step = mega_st_meta(f, "step");
    printf("model      %s\n", p);
    printf("kind       mega_lm (causal byte-level language model)\n");
    if (step) printf("step       %s\n", step);
    printf("parameters %zu\n", mega_lm_num_params(m));
    print_config(stdout, mega_lm_get_config(m), "           ");
    char *js = mega_lm_config_to_json(mega_lm_get_config(m));
    printf("config     %s\n", js ? js : "");
    free(js);
    if (tensors && f)
        for (int i = 0; i < mega_st_count(f); i++) {
            const mega_st_tensor *t = mega_st_at(f, i);
            printf("  %-60s %s [", t->name, mega_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) printf(d ? ", %lld" : "%lld", (long long)t->shape[d]);
            printf("]\n");
        }
    mega_st_close(f);
    mega_lm_free(m);
    return 0;
}
