/*
 * A stream's rows (mega_lm_stream_row_add / row_feed / rows_step / row_remove: continuous
 * batching, each sequence at its own position). Five sequences with prompts of 1 to 11 tokens
 * join a stream of 4 rows at different steps, decode greedily one token per step all together,
 * and leave at different steps (a leaving row's place taken by the last one, so rows move while
 * the others go on); at most 4 run at once. Every logit each sequence gets (its prompt's, then
 * each step's) must be bit-identical to what it gets alone, in a stream of one sequence fed its
 * prompt in one call and then one token per call, and equal the full forward over the sequence
 * to 1e-4 of max |logit|. Models: Mega chunked (chunk 8: the sequences cross chunk borders at
 * different steps, each its own; simple bias), under full attention (rotary), and Megalodon
 * (chunk 8, two heads: each row's attention cache empties at its own chunk border and its rotary
 * positions restart there, while its timestep norms and CEMA carry on; a leaving row's place is
 * taken with all of that and the final timestep norm's state), with 1 and 2 threads. Also: a full-attention row that would pass its cache fails and feeds nothing; a row
 * not in use and a full stream are refused; mega_lm_stream_feed on a stream fed by rows is
 * refused until a reset; a model of another mixer refuses rows (MEGA_ERR_UNSUPPORTED). And
 * rows_step_n (the first rows step, the others wait) and row_swap (check_step_n).
 */
#include "mega.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NSEQ = 5, BROWS = 4, PMAX = 11, GMAX = 20, LMAX = PMAX + GMAX, V = 257 };
static const int JOIN[NSEQ] = {0, 0, 3, 5, 9}, PLEN[NSEQ] = {3, 11, 1, 9, 5}, GEN[NSEQ] = {12, 4, 20, 6, 10};

enum { MGL = 2 }; /* the model kind after chunked 0/1: Megalodon */

static void config(mega_lm_config *c, int chunked) {
    mega_lm_config_default(c);
    c->vocab_size = V, c->padding_idx = 256, c->layers = 2;
    if (chunked == MGL) {
        c->block.mixer = MEGA_MIXER_MEGALODON, c->block.embed_dim = 16, c->block.z_dim = 8, c->block.hidden_dim = 24;
        c->block.ffn_dim = 24, c->block.n_dim = 4, c->block.chunk_size = 8, c->block.heads = 2;
        c->block.norm_num_groups = 4, c->block.swiglu = 1;
        return;
    }
    c->block.embed_dim = 16, c->block.z_dim = 8, c->block.hidden_dim = 24, c->block.ffn_dim = 24, c->block.n_dim = 4;
    c->block.chunk_size = chunked ? 8 : -1, c->block.max_positions = 64;
    c->block.rel_pos_bias = chunked ? MEGA_RELPOS_SIMPLE : MEGA_RELPOS_ROTARY;
}

static int greedy(const mega_real *l) {
    int best = 0;
    for (int v = 1; v < 256; v++)
        if (l[v] > l[best]) best = v;
    return best;
}

typedef struct {
    int32_t seq[NSEQ][LMAX];  /* prompt then generated tokens */
    int n[NSEQ];              /* tokens in seq */
    mega_real *lg[NSEQ];      /* [LMAX][V]: the logits after each fed token */
    int fed[NSEQ];
} run_log;

/* one global step: the sequences joining now start (prompt in one row_feed), every row picks its
 * next token, the sequences that are done leave, the others take one step together */
static int rows_tick(mega_lm_stream *s, run_log *g, int t, int *rowseq, mega_real *buf) {
    int ok = 1;
    for (int k = 0; k < NSEQ && ok; k++) {
        if (JOIN[k] != t) continue;
        int r = -1;
        ok = mega_lm_stream_row_add(s, &r) == MEGA_OK && r == mega_lm_stream_rows(s) - 1 &&
             mega_lm_stream_row_feed(s, r, g->seq[k], PLEN[k], g->lg[k]) == MEGA_OK;
        rowseq[r] = k, g->n[k] = g->fed[k] = PLEN[k];
    }
    int nr = mega_lm_stream_rows(s);
    for (int r = 0; r < nr && ok; r++) {
        const int k = rowseq[r];
        g->seq[k][g->n[k]] = greedy(g->lg[k] + (size_t)(g->fed[k] - 1) * V);
        g->n[k]++;
    }
    for (int r = nr - 1; r >= 0 && ok; r--) /* from the last: a row moved into r is one already seen */
        if (g->n[rowseq[r]] == PLEN[rowseq[r]] + GEN[rowseq[r]]) {
            ok = mega_lm_stream_row_remove(s, r) == MEGA_OK;
            rowseq[r] = rowseq[--nr];
        }
    int32_t tok[BROWS];
    for (int r = 0; r < nr; r++) tok[r] = g->seq[rowseq[r]][g->n[rowseq[r]] - 1];
    ok = ok && nr == mega_lm_stream_rows(s) && mega_lm_stream_rows_step(s, tok, buf) == MEGA_OK;
    for (int r = 0; r < nr && ok; r++) {
        const int k = rowseq[r];
        memcpy(g->lg[k] + (size_t)g->fed[k] * V, buf + (size_t)r * V, V * sizeof *buf);
        g->fed[k]++;
        ok = mega_lm_stream_row_pos(s, r) == g->fed[k];
    }
    return ok;
}

static void check_model(int chunked, int threads) {
    mega_lm_config c;
    config(&c, chunked);
    mega_lm *m = NULL;
    mega_lm_stream *s = NULL, *one = NULL;
    run_log g = {0};
    mega_real *buf = malloc((size_t)PMAX * V * sizeof *buf), *l1 = malloc((size_t)LMAX * V * sizeof *l1);
    int ok = buf && l1 && mega_lm_create(&c, &m) == MEGA_OK;
    if (ok) mega_lm_init_params(m, 7);
    mega_set_threads(threads);
    ok = ok && mega_lm_stream_new(m, BROWS, 64, &s) == MEGA_OK && mega_lm_stream_new(m, 1, 64, &one) == MEGA_OK;
    unsigned long long seed = 0x7077;
    for (int k = 0; k < NSEQ; k++) {
        ok = ok && (g.lg[k] = malloc((size_t)LMAX * V * sizeof(mega_real)));
        for (int i = 0; i < PLEN[k]; i++) g.seq[k][i] = (int32_t)(tl_rand01(&seed) * 256);
    }
    int rowseq[BROWS], most = 0;
    for (int t = 0; ok && (t == 0 || mega_lm_stream_rows(s) > 0 || t <= JOIN[NSEQ - 1]); t++) {
        ok = rows_tick(s, &g, t, rowseq, buf);
        most = ok && mega_lm_stream_rows(s) > most ? mega_lm_stream_rows(s) : most;
    }
    TL_CHECK(ok, "chunked %d threads %d: rows run: %s", chunked, threads, ok ? "" : mega_last_error());
    TL_CHECK(most == BROWS, "chunked %d threads %d: %d rows at once at most (the schedule fills the stream)", chunked, threads, most);
    int differ = 0, steps = 0;
    double worst = 0;
    for (int k = 0; k < NSEQ && ok; k++) {
        TL_CHECK(g.n[k] == PLEN[k] + GEN[k] && g.fed[k] == g.n[k] - 1, "sequence %d: %d tokens, %d fed", k, g.n[k], g.fed[k]);
        mega_lm_stream_reset(one);
        ok = mega_lm_stream_feed(one, g.seq[k], PLEN[k], l1) == MEGA_OK;
        for (int i = PLEN[k]; i < g.fed[k] && ok; i++)
            ok = mega_lm_stream_feed(one, g.seq[k] + i, 1, l1 + (size_t)i * V) == MEGA_OK;
        for (int i = 0; i < g.fed[k] && ok; i++, steps++)
            differ += memcmp(l1 + (size_t)i * V, g.lg[k] + (size_t)i * V, V * sizeof *l1) != 0;
        const mega_lm_run run = {0, 0};
        ok = ok && mega_lm_forward(m, g.seq[k], NULL, 1, g.fed[k], &run, NULL, NULL) == MEGA_OK;
        const mega_real *f = ok ? mega_lm_logits(m) : NULL;
        double mx = 0, d = 0;
        for (size_t i = 0; f && i < (size_t)g.fed[k] * V; i++)
            mx = fmax(mx, fabs((double)f[i])), d = fmax(d, fabs((double)f[i] - (double)g.lg[k][i]));
        worst = fmax(worst, mx > 0 ? d / mx : d);
    }
    TL_CHECK(ok && !differ, "chunked %d threads %d: each sequence's logits in the rows are the bits it has alone (%d of %d differ)",
             chunked, threads, differ, steps);
    printf("NOTE rows vs full forward, chunked %d, threads %d: worst %.2e of max |logit|\n", chunked, threads, worst);
    TL_CHECK(ok && worst < 1e-4, "chunked %d threads %d: rows == full forward (%.2e)", chunked, threads, worst);

    if (ok) { /* refusals, on the stream left with no row in use */
        int r = -1;
        const int32_t tk[2] = {1, 2};
        TL_CHECK(mega_lm_stream_row_feed(s, 0, tk, 1, NULL) == MEGA_ERR_INVALID, "a row not in use is refused");
        TL_CHECK(mega_lm_stream_feed(s, tk, 1, NULL) == MEGA_ERR_INVALID, "a stream fed by rows refuses a whole feed");
        for (int i = 0; i < BROWS; i++) mega_lm_stream_row_add(s, &r);
        TL_CHECK(mega_lm_stream_row_add(s, &r) == MEGA_ERR_INVALID && r == -1, "a full stream refuses a row");
        if (!chunked) { /* full attention, capacity 64: a row at 63 takes one more token, not two */
            int32_t *big = calloc(64, sizeof *big);
            const mega_status a = big ? mega_lm_stream_row_feed(s, 1, big, 63, NULL) : MEGA_ERR_OOM;
            const mega_status b = big ? mega_lm_stream_row_feed(s, 1, big, 2, NULL) : MEGA_ERR_OOM;
            TL_CHECK(a == MEGA_OK && b == MEGA_ERR_INVALID && mega_lm_stream_row_pos(s, 1) == 63,
                     "full attention: a row past its cache is refused and fed nothing (%s)", mega_last_error());
            free(big);
        }
        mega_lm_stream_reset(s);
        TL_CHECK(mega_lm_stream_rows(s) == 0 && mega_lm_stream_feed(s, (const int32_t[BROWS]){1, 2, 3, 4}, 1, NULL) == MEGA_OK,
                 "after a reset the stream is fed as a whole again");
    }
    for (int k = 0; k < NSEQ; k++) free(g.lg[k]);
    free(buf), free(l1);
    mega_lm_stream_free(s), mega_lm_stream_free(one);
    mega_lm_free(m);
    mega_set_threads(0);
}

/* rows_step_n and row_swap (a server feeding a prompt block by block while the other rows
 * decode): row 1 is fed its prompt in two blocks with 6 steps of row 0 alone between them, then
 * the rows swap places and step together; every logit of both is the bits it has alone (the same
 * blocks), and the rows' positions follow the swap */
static void check_step_n(int chunked) {
    enum { P0 = 5, P1A = 4, P1B = 5, S0 = 6, S2 = 4 };
    mega_lm_config c;
    config(&c, chunked);
    mega_lm *m = NULL;
    mega_lm_stream *s = NULL, *one = NULL;
    int32_t q[2][LMAX];
    mega_real *lg[2], *l1 = malloc((size_t)LMAX * V * sizeof *l1), *buf = malloc((size_t)PMAX * V * sizeof *buf);
    lg[0] = malloc((size_t)LMAX * V * sizeof *l1), lg[1] = malloc((size_t)LMAX * V * sizeof *l1);
    int ok = l1 && buf && lg[0] && lg[1] && mega_lm_create(&c, &m) == MEGA_OK, n[2] = {P0, P1A + P1B}, r = -1;
    if (ok) mega_lm_init_params(m, 11);
    ok = ok && mega_lm_stream_new(m, BROWS, 64, &s) == MEGA_OK && mega_lm_stream_new(m, 1, 64, &one) == MEGA_OK;
    unsigned long long seed = 0x5eed;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n[k]; i++) q[k][i] = (int32_t)(tl_rand01(&seed) * 256);
    ok = ok && mega_lm_stream_row_add(s, &r) == MEGA_OK && mega_lm_stream_row_feed(s, 0, q[0], P0, lg[0]) == MEGA_OK &&
         mega_lm_stream_row_add(s, &r) == MEGA_OK && mega_lm_stream_row_feed(s, 1, q[1], P1A, lg[1]) == MEGA_OK;
    for (int t = 0; t < S0 && ok; t++, n[0]++) {
        q[0][n[0]] = greedy(lg[0] + (size_t)(n[0] - 1) * V);
        ok = mega_lm_stream_rows_step_n(s, 1, &q[0][n[0]], lg[0] + (size_t)n[0] * V) == MEGA_OK;
    }
    ok = ok && mega_lm_stream_row_pos(s, 1) == P1A &&
         mega_lm_stream_row_feed(s, 1, q[1] + P1A, P1B, lg[1] + (size_t)P1A * V) == MEGA_OK;
    ok = ok && mega_lm_stream_row_swap(s, 0, 1) == MEGA_OK && mega_lm_stream_row_pos(s, 0) == n[1] &&
         mega_lm_stream_row_pos(s, 1) == n[0];
    for (int t = 0; t < S2 && ok; t++) {
        int32_t tk[2];
        for (int k = 0; k < 2; k++) tk[1 - k] = q[k][n[k]] = greedy(lg[k] + (size_t)(n[k] - 1) * V);
        ok = mega_lm_stream_rows_step(s, tk, buf) == MEGA_OK;
        for (int k = 0; k < 2 && ok; k++) memcpy(lg[k] + (size_t)n[k]++ * V, buf + (size_t)(1 - k) * V, V * sizeof *buf);
    }
    TL_CHECK(ok, "chunked %d: rows_step_n and row_swap run (%s)", chunked, ok ? "" : mega_last_error());
    int differ = 0;
    for (int k = 0; k < 2 && ok; k++) { /* alone: the same blocks, then a token per call */
        const int first = k ? P1A : P0;
        mega_lm_stream_reset(one);
        ok = mega_lm_stream_feed(one, q[k], first, l1) == MEGA_OK &&
             (!k || mega_lm_stream_feed(one, q[k] + P1A, P1B, l1 + (size_t)P1A * V) == MEGA_OK);
        for (int i = k ? P1A + P1B : P0; i < n[k] && ok; i++)
            ok = mega_lm_stream_feed(one, q[k] + i, 1, l1 + (size_t)i * V) == MEGA_OK;
        differ += ok ? memcmp(l1, lg[k], (size_t)n[k] * V * sizeof *l1) != 0 : 1;
    }
    TL_CHECK(ok && !differ, "chunked %d: a row fed between steps of the others, then swapped, has the bits it has alone", chunked);
    const int32_t tk[3] = {1, 2, 3};
    TL_CHECK(mega_lm_stream_rows_step_n(s, 3, tk, NULL) == MEGA_ERR_INVALID && mega_lm_stream_row_swap(s, 0, 2) == MEGA_ERR_INVALID &&
                 mega_lm_stream_rows_step_n(s, -1, tk, NULL) == MEGA_ERR_INVALID,
             "chunked %d: a step of more rows than in use, a swap with a row not in use are refused", chunked);
    free(lg[0]), free(lg[1]), free(l1), free(buf);
    mega_lm_stream_free(s), mega_lm_stream_free(one);
    mega_lm_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int th = 1; th <= 2; th++) check_model(1, th), check_model(0, th), check_model(MGL, th);
    check_step_n(1), check_step_n(0), check_step_n(MGL);
    mega_lm_config c;
    config(&c, 1);
    c.block.mixer = MEGA_MIXER_MHA;
    mega_lm *m = NULL;
    mega_lm_stream *s = NULL;
    int r = 0;
    const int made = mega_lm_create(&c, &m) == MEGA_OK && mega_lm_stream_new(m, 2, 64, &s) == MEGA_OK;
    TL_CHECK(made && mega_lm_stream_row_add(s, &r) == MEGA_ERR_UNSUPPORTED && r == -1,
             "another mixer refuses rows (%s)", made ? mega_last_error() : "setup failed");
    mega_lm_stream_free(s);
    mega_lm_free(m);
    return tl_finish();
}
