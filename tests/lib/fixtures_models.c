/* Fixture runners for the model kinds: "lm" (causal language model), "cls" (classifier) and "s2s"
 * (encoder-decoder). */
#include "fixtures_models.h"
#include "model/lm.h"
#include "model/s2s.h"
#include <stdlib.h>
#include <string.h>

/* the model's hidden state i: [B, Tp, D] with Tp >= T its padded length */
typedef const mega_real *(*hidden_fn)(void *m, int i, int *Tp);
static const mega_real *lm_hidden(void *m, int i, int *Tp) {
    *Tp = ((mega_lm *)m)->Tp;
    return mega_lm_hidden(m, i);
}
static const mega_real *cls_hidden(void *m, int i, int *Tp) { return mega_cls_hidden(m, 0, i, Tp); }

/* the training forward against the case: logits (n values), loss, hidden.<i> for i <= layers */
static void compare_outputs(fx_case *c, const mega_real *logits, size_t n, double loss, int layers, int D, hidden_fn hidden,
                            void *m) {
    const int B = c->B, T = c->T;
    mega_real *ref = fx_tensor(c, "logits", NULL);
    fx_compare(c, "logits", logits, ref, n, 0);
    free(ref);
    ref = fx_tensor(c, "loss", NULL);
    const mega_real l = (mega_real)loss;
    fx_compare(c, "loss", &l, ref, 1, 0);
    free(ref);
    mega_real *h = malloc((size_t)B * T * D * sizeof(mega_real));
    for (int i = 0; i <= layers; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "hidden.%d", i);
        ref = fx_tensor(c, nm, NULL);
        if (!ref) continue;
        int Tp = 0;
        const mega_real *hid = hidden(m, i, &Tp);
        for (int b = 0; b < B; b++)
            memcpy(h + (size_t)b * T * D, hid + (size_t)b * Tp * D, (size_t)T * D * sizeof(mega_real));
        fx_compare(c, nm, h, ref, (size_t)B * T * D, 0);
        free(ref);
    }
    free(h);
}

int mega_fixture_run_lm(fx_case *c) {
    char *cfgjs = cJSON_PrintUnformatted(c->cfg);
    mega_lm_config cfg;
    mega_lm *m = NULL;
    if (mega_lm_config_from_json(cfgjs, &cfg) || mega_lm_create(&cfg, &m) ||
        mega_params_load(&m->P, m->P.data, c->w, "", (const char *const[]){"_float_tensor", NULL}, 0)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
        free(cfgjs);
        mega_lm_free(m);
        return 1;
    }
    free(cfgjs);
    const int B = c->B, T = c->T, V = cfg.vocab_size, D = cfg.block.embed_dim;
    int32_t *tok = fx_ints(c, "tokens", NULL), *tgt = fx_ints(c, "targets", NULL);
    double loss = 0;
    int64_t cnt = 0;
    mega_lm_run run = {1, 0};
    if (mega_lm_forward(m, tok, tgt, B, T, &run, &loss, &cnt)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
    } else {
        compare_outputs(c, mega_lm_logits(m), (size_t)B * T * V, loss, cfg.layers, D, lm_hidden, m); /* [B, T, V] */
        mega_real *got = malloc((size_t)B * T * V * sizeof(mega_real)), *ref;
        mega_lm_zero_grad(m);
        mega_lm_backward(m, 1.0);
        fx_compare_grads(c, &m->P, "");
        /* streaming decode, one token per call */
        ref = fx_tensor(c, "decode.logits", NULL);
        if (ref) {
            mega_lm_stream *s = NULL;
            if (mega_lm_stream_new(m, B, T, &s)) {
                printf("FAIL %s: %s\n", c->name, mega_last_error());
                c->failed = 1;
            } else {
                int32_t *col = malloc((size_t)B * sizeof(int32_t));
                mega_real *lg = malloc((size_t)B * V * sizeof(mega_real));
                for (int t = 0; t < T && !c->failed; t++) {
                    for (int b = 0; b < B; b++) col[b] = tok[(size_t)b * T + t];
                    if (mega_lm_stream_feed(s, col, 1, lg)) {
                        printf("FAIL %s: %s\n", c->name, mega_last_error());
                        c->failed = 1;
                    }
                    for (int b = 0; b < B; b++)
                        memcpy(got + ((size_t)b * T + t) * V, lg + (size_t)b * V, (size_t)V * sizeof(mega_real));
                }
                fx_compare(c, "decode.logits", got, ref, (size_t)B * T * V, 0);
                free(col), free(lg);
                mega_lm_stream_free(s);
            }
            free(ref);
        }
        free(got);
    }
    free(tok), free(tgt);
    mega_lm_free(m);
    return 1;
}

/* classifier internals needed to address gradients and buffers */
static mega_params *cls_params(mega_cls *m) { return (mega_params *)mega_cls_paramset(m); }

int mega_fixture_run_cls(fx_case *c) {
    char *cfgjs = cJSON_PrintUnformatted(c->cfg);
    mega_cls_config cfg;
    mega_cls *m = NULL;
    if (mega_cls_config_from_json(cfgjs, &cfg) || mega_cls_create(&cfg, &m) ||
        mega_params_load(cls_params(m), cls_params(m)->data, c->w, "", (const char *const[]){"_float_tensor", NULL}, 0)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
        free(cfgjs);
        mega_cls_free(m);
        return 1;
    }
    free(cfgjs);
    const int B = c->B, T = c->T, C = cfg.classes, D = cfg.block.embed_dim;
    int32_t *tok = fx_ints(c, "tokens", NULL), *len = fx_ints(c, "lengths", NULL), *tgt = fx_ints(c, "targets", NULL);
    mega_real *vals = fx_tensor(c, "values", NULL);
    mega_cls_input in = {tok, vals, len, T};
    double loss = 0;
    int64_t ok = 0;
    mega_real *ref = fx_tensor(c, "eval.logits", NULL);
    if (ref) { /* eval mode with the stored running statistics, before they change */
        mega_lm_run ev = {0, 0};
        if (mega_cls_forward(m, &in, NULL, B, NULL, &ev, NULL, NULL)) {
            printf("FAIL %s: %s\n", c->name, mega_last_error());
            c->failed = 1;
        } else {
            fx_compare(c, "eval.logits", mega_cls_logits(m), ref, (size_t)B * C, 0);
        }
        free(ref);
    }
    mega_lm_run run = {1, 0};
    if (mega_cls_forward(m, &in, NULL, B, tgt, &run, &loss, &ok)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
    } else {
        compare_outputs(c, mega_cls_logits(m), (size_t)B * C, loss, cfg.layers, D, cls_hidden, m);
        mega_params *P = cls_params(m);
        for (int i = 0; i < mega_st_count(c->io); i++) {
            const mega_st_tensor *t = mega_st_at(c->io, i);
            if (strncmp(t->name, "buffer_after.", 13)) continue;
            const mega_pspec *s = mega_params_find(P, t->name + 13);
            if (!s) {
                printf("FAIL %s: %s has no buffer here\n", c->name, t->name);
                c->failed = 1;
                continue;
            }
            ref = fx_tensor(c, t->name, NULL);
            fx_compare(c, t->name, P->data + s->offset, ref, s->numel, 0);
            free(ref);
        }
        mega_params_zero_grad(P);
        mega_cls_backward(m, 1.0);
        fx_compare_grads(c, P, "");
    }
    free(tok), free(len), free(tgt), free(vals);
    mega_cls_free(m);
    return 1;
}

/* a hidden state [B, Tp, D] of the model against a reference [B, T, D] (the first T positions) */
static void compare_hidden(fx_case *c, const char *name, const mega_real *hid, int Tp, int T, int D) {
    mega_real *ref = fx_tensor(c, name, NULL);
    if (!ref) return;
    const int B = c->B;
    mega_real *h = malloc((size_t)B * T * D * sizeof(mega_real));
    for (int b = 0; b < B; b++) memcpy(h + (size_t)b * T * D, hid + (size_t)b * Tp * D, (size_t)T * D * sizeof(mega_real));
    fx_compare(c, name, h, ref, (size_t)B * T * D, 0);
    free(h), free(ref);
}

int mega_fixture_run_s2s(fx_case *c) {
    char *cfgjs = cJSON_PrintUnformatted(c->cfg);
    mega_s2s_config cfg;
    mega_s2s *m = NULL;
    if (mega_s2s_config_from_json(cfgjs, &cfg) || mega_s2s_create(&cfg, &m) ||
        mega_params_load(&m->P, m->P.data, c->w, "", (const char *const[]){"_float_tensor", NULL}, 0)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
        free(cfgjs);
        mega_s2s_free(m);
        return 1;
    }
    free(cfgjs);
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(c->json, "src_len");
    const int B = c->B, L = c->T, S = cJSON_IsNumber(sl) ? sl->valueint : 0, V = cfg.tgt_vocab_size, D = cfg.decoder.embed_dim;
    int32_t *src = fx_ints(c, "src_tokens", NULL), *prev = fx_ints(c, "prev_output_tokens", NULL);
    int32_t *tgt = fx_ints(c, "targets", NULL);
    double loss = 0, nll = 0;
    int64_t cnt = 0;
    mega_lm_run run = {1, 0};
    if (!src || !prev || !tgt || S < 1) {
        printf("FAIL %s: the case lacks src_tokens, prev_output_tokens, targets or src_len\n", c->name);
        c->failed = 1;
    } else if (mega_s2s_forward(m, src, S, prev, tgt, L, B, &run, 0.0, &loss, &nll, &cnt)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
    } else {
        mega_real *ref = fx_tensor(c, "logits", NULL);
        fx_compare(c, "logits", mega_s2s_logits(m), ref, (size_t)B * L * V, 0);
        free(ref);
        ref = fx_tensor(c, "loss", NULL);
        const mega_real l = (mega_real)loss;
        fx_compare(c, "loss", &l, ref, 1, 0);
        free(ref);
        char nm[48];
        for (int side = 0; side < 2; side++)
            for (int i = 0; i <= (side ? cfg.decoder_layers : cfg.encoder_layers); i++) {
                int Tp = 0;
                const mega_real *h = mega_s2s_hidden(m, side, i, &Tp);
                snprintf(nm, sizeof nm, "%s.hidden.%d", side ? "dec" : "enc", i);
                compare_hidden(c, nm, h, Tp, side ? L : S, D);
            }
        compare_hidden(c, "encoder_out", mega_s2s_encoder_out(m), S, S, D);
        mega_params_zero_grad(&m->P);
        mega_s2s_backward(m, 1.0);
        fx_compare_grads(c, &m->P, "");
        /* incremental decoding: the encoder once, then one target token per call */
        ref = fx_tensor(c, "decode.logits", NULL);
        if (ref) {
            mega_s2s_stream *s = NULL;
            mega_real *got = calloc((size_t)B * L * V, sizeof(mega_real)), *lg = malloc((size_t)B * V * sizeof(mega_real));
            int32_t *col = malloc((size_t)B * sizeof(int32_t));
            if (mega_s2s_stream_new(m, B, S, L, &s) || mega_s2s_stream_start(s, src, S, 1)) {
                printf("FAIL %s: %s\n", c->name, mega_last_error());
                c->failed = 1;
            } else {
                for (int t = 0; t < L && !c->failed; t++) {
                    for (int b = 0; b < B; b++) col[b] = prev[(size_t)b * L + t];
                    if (mega_s2s_stream_step(s, col, lg)) {
                        printf("FAIL %s: step %d: %s\n", c->name, t, mega_last_error());
                        c->failed = 1;
                    }
                    for (int b = 0; b < B; b++)
                        memcpy(got + ((size_t)b * L + t) * V, lg + (size_t)b * V, (size_t)V * sizeof(mega_real));
                }
                fx_compare(c, "decode.logits", got, ref, (size_t)B * L * V, 0);
            }
            mega_s2s_stream_free(s);
            free(got), free(lg), free(col), free(ref);
        }
    }
    free(src), free(prev), free(tgt);
    mega_s2s_free(m);
    return 1;
}
