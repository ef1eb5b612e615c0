/*
 * Logits dumper for the PyTorch checkpoint check (tests/sh/test_torch_checkpoint.sh).
 *
 *   test_dump_logits MODEL.safetensors TEXT_FILE OUT.safetensors
 *       loads the model with mega_lm_load, runs the bytes of TEXT_FILE as one sequence through the
 *       full forward (eval mode, mega_lm_forward training = 0) and through the streaming path
 *       (mega_lm_stream_feed, the text in pieces of 7 tokens), and writes OUT.safetensors with
 *       "tokens" I32 [1, T], "logits" and "stream_logits" (F32, [1, T, V]).
 *   test_dump_logits --s2s MODEL EXPECTED.safetensors
 *       loads an encoder-decoder (mega_s2s_load), runs the teacher-forced forward (eval mode) on
 *       EXPECTED's src_tokens and prev_output_tokens and prints "s2s logits max relative error E"
 *       against its logits (tests/sh/test_fairseq.sh: a converted official translation model).
 *   test_dump_logits            (no arguments, as tests/run.sh runs it)
 *       self-check: a small random model saved, loaded and dumped this way; the dumped file read
 *       back must hold exactly the in-memory logits. Prints "1 passed, 0 failed".
 */
#include "testlib.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int read_text(const char *path, int32_t **tok, int *T) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "test_dump_logits: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    unsigned char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            unsigned char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb, cap *= 2;
        }
    }
    fclose(f);
    if (!b || n == 0 || n > (1u << 20)) {
        fprintf(stderr, "test_dump_logits: %s: empty, unreadable or too long\n", path);
        free(b);
        return -1;
    }
    *tok = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) (*tok)[i] = b[i];
    *T = (int)n;
    free(b);
    return 0;
}

/* logits of the full forward and of the stream over tokens [1, T]; caller frees */
static mega_status run_model(mega_lm *m, const int32_t *tok, int T, float **full, float **strm) {
    const int V = mega_lm_get_config(m)->vocab_size;
    const size_t n = (size_t)T * V;
    *full = malloc(n * sizeof(float));
    *strm = malloc(n * sizeof(float));
    mega_real *tmp = malloc(n * sizeof(mega_real));
    mega_lm_run run = {0, 0};
    mega_status st = mega_lm_forward(m, tok, NULL, 1, T, &run, NULL, NULL);
    if (!st) {
        const mega_real *lg = mega_lm_logits(m);
        for (size_t i = 0; i < n; i++) (*full)[i] = (float)lg[i];
    }
    mega_lm_stream *s = NULL;
    if (!st) st = mega_lm_stream_new(m, 1, T, &s);
    for (int a = 0; a < T && !st; a += 7) {
        int k = T - a < 7 ? T - a : 7;
        st = mega_lm_stream_feed(s, tok + a, k, tmp + (size_t)a * V);
    }
    if (!st)
        for (size_t i = 0; i < n; i++) (*strm)[i] = (float)tmp[i];
    mega_lm_stream_free(s);
    free(tmp);
    return st;
}

static mega_status write_dump(const char *path, const int32_t *tok, int T, int V, const float *full, const float *strm) {
    mega_st_writer *w = mega_st_writer_new();
    if (!w) return MEGA_ERR_OOM;
    int64_t s2[2] = {1, T}, s3[3] = {1, T, V};
    mega_status st = mega_st_writer_add(w, "tokens", MEGA_DT_I32, 2, s2, tok);
    if (!st) st = mega_st_writer_add(w, "logits", MEGA_DT_F32, 3, s3, full);
    if (!st) st = mega_st_writer_add(w, "stream_logits", MEGA_DT_F32, 3, s3, strm);
    if (!st) st = mega_st_writer_write(w, path);
    mega_st_writer_free(w);
    return st;
}

static int dump(const char *model, const char *text, const char *out) {
    mega_lm *m = NULL;
    int32_t *tok = NULL;
    int T = 0;
    if (mega_lm_load(model, &m) != MEGA_OK) {
        fprintf(stderr, "test_dump_logits: %s\n", mega_last_error());
        return 1;
    }
    if (read_text(text, &tok, &T)) {
        mega_lm_free(m);
        return 1;
    }
    float *full = NULL, *strm = NULL;
    mega_status st = run_model(m, tok, T, &full, &strm);
    if (!st) st = write_dump(out, tok, T, mega_lm_get_config(m)->vocab_size, full, strm);
    if (st) fprintf(stderr, "test_dump_logits: %s\n", mega_last_error());
    else printf("wrote %s: %d tokens, vocab %d\n", out, T, mega_lm_get_config(m)->vocab_size);
    free(full), free(strm), free(tok);
    mega_lm_free(m);
    return st ? 1 : 0;
}

static void self_check(void) {
    char dir[256], mp[320], tp[320], op[320];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/mega_dump_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        TL_CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    snprintf(mp, sizeof mp, "%s/model.safetensors", dir);
    snprintf(tp, sizeof tp, "%s/text.txt", dir);
    snprintf(op, sizeof op, "%s/logits.safetensors", dir);
    mega_lm_config c;
    mega_lm_config_default(&c);
    c.layers = 2, c.block.embed_dim = 16, c.block.z_dim = 8, c.block.hidden_dim = 24, c.block.n_dim = 4, c.block.ffn_dim = 20, c.block.chunk_size = 8;
    mega_lm *m = NULL;
    int ok = mega_lm_create(&c, &m) == MEGA_OK;
    if (ok) {
        mega_lm_init_params(m, 11);
        ok = mega_lm_save(m, mp) == MEGA_OK;
    }
    const char *text = "A small text of thirty-seven bytes.\n";
    FILE *f = fopen(tp, "wb");
    ok = ok && f && fwrite(text, 1, strlen(text), f) == strlen(text);
    if (f) fclose(f);
    int rc = ok ? dump(mp, tp, op) : 1;
    /* recompute in memory and compare with the file */
    int32_t tok[64];
    const int T = (int)strlen(text), V = c.vocab_size;
    for (int i = 0; i < T; i++) tok[i] = (unsigned char)text[i];
    float *full = NULL, *strm = NULL;
    mega_status st = ok ? run_model(m, tok, T, &full, &strm) : MEGA_ERR_INVALID;
    mega_st_file *sf = NULL;
    int same = 0;
    if (!rc && !st && mega_st_open(op, &sf) == MEGA_OK) {
        const mega_st_tensor *tl = mega_st_get(sf, "logits"), *ts = mega_st_get(sf, "stream_logits"), *tt = mega_st_get(sf, "tokens");
        same = tl && ts && tt && tl->numel == (size_t)T * V && ts->numel == (size_t)T * V && tt->numel == (size_t)T &&
               !memcmp(tl->data, full, (size_t)T * V * sizeof(float)) && !memcmp(ts->data, strm, (size_t)T * V * sizeof(float)) &&
               !memcmp(tt->data, tok, (size_t)T * sizeof(int32_t));
        mega_st_close(sf);
    }
    TL_CHECK(ok && !rc && !st && same, "dump of a saved model holds exactly the in-memory full and streamed logits (%s)",
             mega_last_error());
    free(full), free(strm);
    mega_lm_free(m);
    unlink(mp), unlink(tp), unlink(op), rmdir(dir);
}

static int s2s_compare(const char *model, const char *expected) {
    mega_s2s *m = NULL;
    mega_st_file *f = NULL;
    int rc = 2;
    int32_t *src = NULL, *prev = NULL;
    mega_real *want = NULL;
    if (mega_s2s_load(model, &m) || mega_st_open(expected, &f)) {
        fprintf(stderr, "test_dump_logits: %s\n", mega_last_error());
        goto done;
    }
    const mega_st_tensor *ts = mega_st_get(f, "src_tokens"), *tp = mega_st_get(f, "prev_output_tokens"),
                         *tl = mega_st_get(f, "logits");
    if (!ts || !tp || !tl || ts->ndim != 2 || tp->ndim != 2 || tl->ndim != 3) {
        fprintf(stderr, "test_dump_logits: %s lacks src_tokens [B,S], prev_output_tokens [B,L], logits [B,L,V]\n", expected);
        goto done;
    }
    const int B = (int)ts->shape[0], S = (int)ts->shape[1], L = (int)tp->shape[1];
    src = malloc(ts->numel * sizeof *src), prev = malloc(tp->numel * sizeof *prev), want = malloc(tl->numel * sizeof *want);
    if (!src || !prev || !want || mega_st_read_i32(ts, src, ts->numel) || mega_st_read_i32(tp, prev, tp->numel) ||
        mega_st_read_real(tl, want, tl->numel)) {
        fprintf(stderr, "test_dump_logits: %s\n", mega_last_error());
        goto done;
    }
    mega_lm_run run = {0, 0};
    if (mega_s2s_forward(m, src, S, prev, NULL, L, B, &run, 0, NULL, NULL, NULL)) {
        fprintf(stderr, "test_dump_logits: %s\n", mega_last_error());
        goto done;
    }
    const mega_real *got = mega_s2s_logits(m);
    double d = 0, mx = 0;
    for (size_t i = 0; i < tl->numel; i++) d = fmax(d, fabs((double)got[i] - (double)want[i])), mx = fmax(mx, fabs((double)want[i]));
    printf("s2s logits max relative error %.3e\n", mx > 0 ? d / mx : d);
    rc = 0;
done:
    free(src);
    free(prev);
    free(want);
    mega_st_close(f);
    mega_s2s_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--s2s")) return s2s_compare(argv[2], argv[3]);
    if (argc == 4) return dump(argv[1], argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_dump_logits [MODEL.safetensors TEXT_FILE OUT.safetensors]\n");
        return 2;
    }
    mega_set_threads(1);
    self_check();
    return tl_finish();
}
