/*
 * Parity with the official Mega implementation: runs every reference case found in the fixture
 * directories (default: tests/fixtures/official and tests/fixtures/s2s, cases produced by the
 * official code (the encoder-decoder's "s2s" cases are a copy of the official fixtures-s2s set), and our
 * reference cases tests/fixtures/generated and tests/fixtures/mixers, and the official sc_raw speech
 * classifier's cases tests/fixtures/sc_raw; or the directories given on
 * the command line), driven only by each case's case.json.
 *
 *   build/test_fixtures [-v] [DIR ...]
 *
 * One line per case: "CASE <name> <kind> <dtype>: worst rel err <e> (<tensor>) PASS|FAIL".
 * A case passes when every output and gradient is within 1e-4 of the tensor's largest magnitude
 * (float64 references in the float64 build: 1e-9); noise gradients use an absolute tolerance of
 * 1e-6 x the case's largest gradient.
 */
#include "fixtures_common.h"
#include "layers/block.h"
#include "fixtures_models.h"
#include <stdlib.h>
#include <string.h>

static const char *const IGNORE[] = {"_float_tensor", NULL};

/* a block config from a "layer" case's config (official MovingAverageGatedAttention argument
 * names, and our own reference cases' mixer options, tests/ref/) */
static int layer_cfg(const fx_case *c, mega_block_config *cfg) {
    mega_block_config_default(cfg);
    cfg->embed_dim = fx_cfg_int(c, "embed_dim", 0);
    cfg->z_dim = fx_cfg_int(c, "zdim", 0);
    cfg->hidden_dim = fx_cfg_int(c, "hdim", 0);
    cfg->n_dim = fx_cfg_int(c, "ndim", 2);
    cfg->ffn_dim = fx_cfg_int(c, "ffn_hidden_dim", 0);
    cfg->chunk_size = fx_cfg_int(c, "chunk_size", -1);
    cfg->truncation = fx_cfg_int(c, "truncation", 0);
    cfg->max_positions = fx_cfg_int(c, "max_positions", 1024);
    cfg->bidirectional = fx_cfg_bool(c, "bidirectional", 0);
    cfg->prenorm = fx_cfg_bool(c, "prenorm", 1);
    cfg->norm_affine = fx_cfg_bool(c, "norm_affine", 1);
    if (mega_relpos_parse(fx_cfg_str(c, "rel_pos_bias", "simple"), &cfg->rel_pos_bias)) return -1;
    if (mega_attn_fn_parse(fx_cfg_str(c, "attention_activation", "softmax"), &cfg->attention_activation)) return -1;
    if (mega_norm_parse(fx_cfg_str(c, "norm_type", "layernorm"), &cfg->norm_type)) return -1;
    if (mega_act_parse(fx_cfg_str(c, "activation", "silu"), &cfg->activation)) return -1;
    if (mega_mixer_parse(fx_cfg_str(c, "mixer", "mega"), &cfg->mixer)) return -1;
    if (mega_pos_parse(fx_cfg_str(c, "pos", "none"), &cfg->pos)) return -1;
    cfg->heads = fx_cfg_int(c, "heads", 1);
    cfg->window = fx_cfg_int(c, "window", 0);
    cfg->memory_size = fx_cfg_int(c, "memory", 0);
    /* the reference cases write max_len 0 for "no absolute-position parameters" (the config's -1) */
    cfg->max_len = fx_cfg_int(c, "max_len", 0);
    if (cfg->max_len == 0) cfg->max_len = -1;
    cfg->attn_window = fx_cfg_int(c, "attn_window", 0);
    cfg->log_n_scaling = fx_cfg_bool(c, "log_n", 0);
    cfg->train_len = fx_cfg_int(c, "train_len", 0);
    return 0;
}

static void run_layer(fx_case *c) {
    mega_block_config cfg;
    if (layer_cfg(c, &cfg)) {
        printf("FAIL %s: unsupported config value\n", c->name);
        c->failed = 1;
        return;
    }
    const int B = c->B, T = c->T;
    const size_t R = (size_t)B * T, D = (size_t)cfg.embed_dim;
    mega_params P;
    mega_params_init(&P);
    mega_block bl;
    if (mega_block_declare(&bl, &P, "", &cfg) || mega_params_alloc(&P, 1) ||
        mega_params_load(&P, P.data, c->w, "", IGNORE, 0)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
        mega_params_free(&P);
        return;
    }
    size_t n;
    mega_real *x = fx_tensor(c, "x", &n), *dout = fx_tensor(c, "dout", NULL);
    uint8_t *pad = fx_mask(c, "padding_mask", R);
    const int nt = mega_get_threads();
    size_t asz = mega_block_acts_size(&bl, B, T), ssz = mega_block_scratch_size(&bl, B, T, nt);
    mega_real *acts = calloc(asz, sizeof(mega_real)), *scr = calloc(ssz, sizeof(mega_real));
    mega_real *out = calloc(R * D, sizeof(mega_real)), *dx = calloc(R * D, sizeof(mega_real));
    mega_block_acts A;
    mega_block_acts_point(&bl, &A, acts, B, T);
    mega_run run = {1, 1, 0, nt, NULL};

    /* eval-mode forward with the stored running statistics (batchnorm cases) */
    mega_real *ref = fx_tensor(c, "eval.out", NULL);
    if (ref) {
        mega_run ev = {0, 0, 0, nt, NULL};
        if (mega_block_forward(&bl, P.data, &A, out, x, pad, B, T, &ev, scr) != MEGA_OK) {
            printf("FAIL %s: %s\n", c->name, mega_last_error());
            c->failed = 1;
        }
        fx_compare(c, "eval.out", out, ref, R * D, 0);
        free(ref);
    }
    /* training-mode forward (dropout 0) */
    if (mega_block_forward(&bl, P.data, &A, out, x, pad, B, T, &run, scr) != MEGA_OK) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
    } else {
        ref = fx_tensor(c, "out", NULL);
        fx_compare(c, "out", out, ref, R * D, 0);
        free(ref);
        /* running statistics after one training forward */
        for (int i = 0; i < mega_st_count(c->io); i++) {
            const mega_st_tensor *t = mega_st_at(c->io, i);
            if (strncmp(t->name, "buffer_after.", 13)) continue;
            const mega_pspec *s = mega_params_find(&P, t->name + 13);
            if (!s) {
                printf("FAIL %s: %s has no buffer here\n", c->name, t->name);
                c->failed = 1;
                continue;
            }
            ref = fx_tensor(c, t->name, NULL);
            fx_compare(c, t->name, P.data + s->offset, ref, s->numel, 0);
            free(ref);
        }
        /* backward: loss = sum(out * dout) */
        mega_params_zero_grad(&P);
        mega_block_backward(&bl, P.data, P.grad, &A, dx, dout, x, pad, B, T, &run, scr);
        ref = fx_tensor(c, "dx", NULL);
        fx_compare(c, "dx", dx, ref, R * D, 0);
        free(ref);
        fx_compare_grads(c, &P, "");
    }
    /* streaming decode: one position at a time, eval mode, no mask */
    ref = fx_tensor(c, "decode.out", NULL);
    if (ref) {
        /* the layer was loaded with the pre-forward running stats; decode cases have no batchnorm */
        int cap = cfg.chunk_size > 0 ? cfg.chunk_size : T;
        mega_block_state S;
        mega_real *smem = calloc(mega_block_state_size(&bl, B, cap), sizeof(mega_real));
        mega_real *sscr = calloc(mega_block_step_scratch(&bl, B, 1, cap), sizeof(mega_real));
        mega_real *xt = calloc((size_t)B * D, sizeof(mega_real)), *ot = calloc((size_t)B * D, sizeof(mega_real));
        mega_real *dec = calloc(R * D, sizeof(mega_real));
        if (mega_block_state_init(&bl, P.data, &S, smem, B, cap) != MEGA_OK) {
            printf("FAIL %s: %s\n", c->name, mega_last_error());
            c->failed = 1;
        } else {
            for (int t = 0; t < T; t++) {
                for (int b = 0; b < B; b++) memcpy(xt + b * D, x + ((size_t)b * T + t) * D, D * sizeof(mega_real));
                if (mega_block_step(&bl, P.data, &S, ot, xt, 1, sscr) != MEGA_OK) {
                    printf("FAIL %s: step: %s\n", c->name, mega_last_error());
                    c->failed = 1;
                    break;
                }
                for (int b = 0; b < B; b++) memcpy(dec + ((size_t)b * T + t) * D, ot + b * D, D * sizeof(mega_real));
            }
            fx_compare(c, "decode.out", dec, ref, R * D, 0);
        }
        free(smem), free(sscr), free(xt), free(ot), free(dec), free(ref);
    }
    free(x), free(dout), free(pad), free(acts), free(scr), free(out), free(dx);
    mega_params_free(&P);
}

static int run_case(const char *dir) {
    fx_case c;
    if (fx_open(&c, dir)) {
        tl_check(0, "case %s opens", dir);
        return 1;
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(c.json, "kind");
    const char *k = cJSON_IsString(kind) ? kind->valuestring : "?";
    int ran = 1;
    if (!strcmp(k, "layer"))
        run_layer(&c);
    else if (!strcmp(k, "lm"))
        ran = mega_fixture_run_lm(&c);
    else if (!strcmp(k, "cls"))
        ran = mega_fixture_run_cls(&c);
    else if (!strcmp(k, "s2s"))
        ran = mega_fixture_run_s2s(&c);
    else {
        printf("FAIL %s: unknown kind '%s'\n", c.name, k);
        c.failed = 1;
    }
    if (ran) {
        printf("CASE %-58s %-5s %s: worst rel err %.2e (%s) %s\n", c.name, k, c.f64 ? "f64" : "f32", c.worst,
               c.worst_name, c.failed ? "FAIL" : "PASS");
        tl_check(!c.failed, "fixture case %s", c.name);
    }
    fx_close(&c);
    return c.failed;
}

int main(int argc, char **argv) {
    static char names[512][1024];
    static char seen[1024][256];
    int nseen = 0;
    const char *defaults[] = {"tests/fixtures/official", "tests/fixtures/s2s", "tests/fixtures/generated",
                              "tests/fixtures/mixers", "tests/fixtures/sc_raw"};
    const char **roots = defaults;
    int nroots = 5, explicit = 0;
    int a = 1;
    if (a < argc && !strcmp(argv[a], "-v")) tl_verbose = 1, a++;
    if (a < argc) roots = (const char **)(argv + a), nroots = argc - a, explicit = 1;
    int total = 0;
    for (int r = 0; r < nroots; r++) {
        int n = fx_list(roots[r], names, 512);
        if (n == 0 && explicit) tl_check(0, "no fixture cases found in %s", roots[r]);
        for (int i = 0; i < n; i++) {
            const char *nm = strrchr(names[i], '/') ? strrchr(names[i], '/') + 1 : names[i];
            int dup = 0;
            for (int j = 0; j < nseen; j++)
                if (!strcmp(seen[j], nm)) dup = 1;
            if (dup) continue; /* the same case from a second root (shared copy) */
            if (nseen < 1024) snprintf(seen[nseen++], 256, "%.255s", nm);
            run_case(names[i]);
            total++;
        }
    }
    if (!explicit) tl_check(total > 0, "found fixture cases (tests/fixtures)");
    return tl_finish();
}
