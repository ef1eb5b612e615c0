/* `mega experiment abc-mlm`: the ABC paper's pretrain-then-fine-tune setting (Peng et al. 2022,
 * "ABC: Attention with Bounded-memory Control", Table 5) at CPU scale: a bidirectional byte encoder
 * per mixer pretrained as a masked language model on GCIDE (mega train --task mlm), then
 * fine-tuned on two byte-level classification tasks built from this machine's dictionaries
 * (mega train --task classify --init-from), each also trained from scratch with the same
 * fine-tuning budget (docs/pretraining.md). */
#include "experiment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the FreeDict languages of the language-identification task (Latin script, so that the script
 * alone does not give the answer) */
static const char *const LANGS[] = {"deu", "fra", "ita", "spa", "por", "nld", "swe", "fin"};
enum { NLANG = sizeof LANGS / sizeof *LANGS };
/* the parts of speech of the GCIDE task: n., v. (t. and i.), a., adv. */
static const char *const POS[] = {"noun", "verb", "adjective", "adverb"};
enum { NPOS = sizeof POS / sizeof *POS };

typedef struct {
    char **s;
    int n, cap;
} strs;

static int strs_add(strs *v, const char *s, size_t len) {
    if (v->n == v->cap) {
        int nc = v->cap ? 2 * v->cap : 1024;
        char **p = realloc(v->s, (size_t)nc * sizeof *p);
        if (!p) return -1;
        v->s = p, v->cap = nc;
    }
    char *d = malloc(len + 1);
    if (!d) return -1;
    memcpy(d, s, len), d[len] = 0;
    v->s[v->n++] = d;
    return 0;
}

static void strs_free(strs *v) {
    for (int i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    v->s = NULL, v->n = v->cap = 0;
}

/* Fisher-Yates with the experiment's seed stream */
static void shuffle(strs *v, uint64_t *st) {
    for (int i = v->n - 1; i > 0; i--) {
        int j = (int)(u01(st) * (i + 1));
        if (j > i) j = i;
        char *t = v->s[i];
        v->s[i] = v->s[j], v->s[j] = t;
    }
}

/* per[k] examples of class k, shuffled, cut into train / valid / test of n[0..2] each (fewer when
 * the class has fewer), written as label<TAB>text; got[s] counts each split's examples, and
 * *major is the test accuracy of always answering the class with the most training examples */
static int write_splits(const char *dir, const char *task, strs *per, const char *const *names, int k, const int n[3], int got[3],
                        double *major) {
    int tr[16] = {0}, te[16] = {0}, best = 0;
    static const char *const SPL[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; s++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%.16s-%.8s.tsv", dir, task, SPL[s]);
        FILE *f = fopen(p, "w");
        if (!f) return cli_error("%s: cannot write", p), -1;
        got[s] = 0;
        /* interleaved by class, so that no class is a block of the file */
        for (int i = 0; i < n[s]; i++)
            for (int j = 0; j < k; j++) {
                const int at = (s > 0 ? n[0] : 0) + (s > 1 ? n[1] : 0) + i;
                if (at < per[j].n && per[j].s[at][0]) {
                    fprintf(f, "%s\t%s\n", names[j], per[j].s[at]), got[s]++;
                    if (s != 1) (s ? te : tr)[j]++;
                }
            }
        if (fclose(f)) return cli_error("%s: write failed", p), -1;
    }
    for (int j = 1; j < k; j++)
        if (tr[j] > tr[best]) best = j;
    *major = got[2] ? (double)te[best] / got[2] : NAN;
    return 0;
}

/* language identification of FreeDict headwords (the first field of each dictionary's index) */
static int langid_data(xctx *c, const char *dir, const int n[3], int got[3], double *major) {
    strs per[NLANG] = {{0}};
    uint64_t st = (uint64_t)c->seed * 0x9E3779B97F4A7C15ull + 1;
    int rc = 0;
    for (int l = 0; l < NLANG && !rc; l++) {
        char p[256], line[4096], prev[4096] = "";
        snprintf(p, sizeof p, "/usr/share/dictd/freedict-%s-eng.index", LANGS[l]);
        FILE *f = fopen(p, "r");
        if (!f) {
            rc = cli_error("%s: not found (Debian's freedict-%s-eng)", p, LANGS[l]);
            break;
        }
        while (!rc && fgets(line, sizeof line, f)) {
            char *tab = strchr(line, '\t');
            if (!tab || tab - line < 2 || tab - line > 40 || !strncmp(line, "00", 2)) continue;
            *tab = 0;
            if (!strcmp(line, prev)) continue; /* one headword, several entries */
            snprintf(prev, sizeof prev, "%s", line);
            if (strs_add(&per[l], line, strlen(line))) rc = cli_error("out of memory");
        }
        fclose(f);
        shuffle(&per[l], &st);
    }
    if (!rc) rc = write_splits(dir, "langid", per, LANGS, NLANG, n, got, major);
    for (int l = 0; l < NLANG; l++) strs_free(&per[l]);
    return rc;
}

/* the part of speech of a GCIDE header line "Word \pro*nun"ci*a`tion\, POS ..." (-1: none of
 * the four), and where the text after it starts */
static int header_pos(const char *line, const char **rest) {
    const char *b = strchr(line, '\\');
    const char *e = b ? strchr(b + 1, '\\') : NULL;
    if (!e || strncmp(e + 1, ", ", 2)) return -1;
    const char *p = e + 3;
    static const struct {
        const char *tag;
        int k;
    } T[] = {{"n.", 0}, {"v. t.", 1}, {"v. i.", 1}, {"v.", 1}, {"a.", 2}, {"adv.", 3}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (!strncmp(p, T[i].tag, strlen(T[i].tag)) && (p[strlen(T[i].tag)] == ' ' || p[strlen(T[i].tag)] == '\n'))
            return *rest = p + strlen(T[i].tag), T[i].k;
    return -1;
}

/* the definitions of the GCIDE entries of one text, by part of speech: the entry's text after
 * its part of speech, bracketed etymologies and "[1913 Webster]" removed, spaces collapsed, cut
 * to maxlen bytes (the headword and its pronunciation are not part of it) */
static int pos_entries(const char *path, int maxlen, strs per[NPOS]) {
    mega_bytes t;
    if (mega_read_file(path, "corpus", &t) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    const char *s = (const char *)t.data, *end = s + t.n;
    char *def = malloc((size_t)maxlen + 1);
    int rc = def ? 0 : cli_error("out of memory");
    for (const char *line = s; line < end && !rc;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl ? nl : end, *rest;
        const int k = line[0] != ' ' && line[0] != '\n' ? header_pos(line, &rest) : -1;
        if (k < 0 || rest > le) {
            line = le + 1;
            continue;
        }
        /* the entry: the rest of its header line and the indented lines after it */
        const char *q = rest, *stop = le;
        while (stop < end && stop + 1 < end && (stop[1] == ' ' || (stop[1] == '\n' && stop + 2 < end && stop[2] == ' '))) {
            const char *n2 = memchr(stop + 1, '\n', (size_t)(end - stop - 1));
            stop = n2 ? n2 : end;
        }
        int n = 0, depth = 0, space = 1;
        for (; q < stop && n < maxlen; q++) {
            const char ch = *q == '\n' ? ' ' : *q;
            if (ch == '[') depth++;
            else if (ch == ']' && depth > 0) depth--;
            else if (depth == 0 && !(ch == ' ' && space)) def[n++] = ch, space = ch == ' ';
        }
        while (n > 0 && def[n - 1] == ' ') n--;
        if (n >= 12 && strs_add(&per[k], def, (size_t)n)) rc = cli_error("out of memory");
        line = stop < end ? stop + 1 : end;
    }
    free(def);
    mega_bytes_free(&t);
    return rc;
}

/* the part-of-speech task: training entries from the pretraining text, validation and test ones
 * from its held-out part (text the encoder never saw) */
static int pos_data(xctx *c, const char *dir, const char *train_txt, const char *valid_txt, int maxlen, const int n[3], int got[3],
                    double *major) {
    strs tr[NPOS] = {{0}}, ho[NPOS] = {{0}}, per[NPOS] = {{0}};
    uint64_t st = (uint64_t)c->seed * 0xD1B54A32D192ED03ull + 7;
    int rc = pos_entries(train_txt, maxlen, tr) || pos_entries(valid_txt, maxlen, ho);
    for (int k = 0; k < NPOS && !rc; k++) {
        shuffle(&tr[k], &st), shuffle(&ho[k], &st);
        /* per[k]: n[0] training entries, then the held-out ones */
        for (int i = 0; i < n[0] && i < tr[k].n && !rc; i++) rc = strs_add(&per[k], tr[k].s[i], strlen(tr[k].s[i]));
        for (int i = per[k].n; i < n[0] && !rc; i++) rc = strs_add(&per[k], "", 0); /* too few: empty, not written */
        for (int i = 0; i < ho[k].n && !rc; i++) rc = strs_add(&per[k], ho[k].s[i], strlen(ho[k].s[i]));
    }
    if (!rc) rc = write_splits(dir, "pos", per, POS, NPOS, n, got, major);
    for (int k = 0; k < NPOS; k++) strs_free(&tr[k]), strs_free(&ho[k]), strs_free(&per[k]);
    return rc ? -1 : 0;
}

/* masked-byte accuracy and bits per masked byte of a pretrained run on the held-out text */
static void mlm_figures(xctx *c, const char *id, const char *valid, int seq, double *acc, double *bits) {
    char log[128], run[4096];
    snprintf(log, sizeof log, "%s-eval", id);
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    xargv a = {0};
    xrun r;
    *acc = *bits = NAN;
    xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xaf(&a, "--data=%s", valid), xaf(&a, "--seq-len=%d", seq);
    xaf(&a, "--max-bytes=%d", c->quick ? 4096 : 131072), xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
    if (!xrun_ok(c, log, &a, &r)) log_number(c, log, "masked accuracy ", acc), log_number(c, log, "| bits ", bits);
}

int exp_abc_mlm(xctx *c) {
    static const xmodel M[] = {
        {"base", "BASE (Transformer: mha, RoPE)", "--mixer mha --pos rope"},
        {"lin64", "Linformer n=64", "--mixer abc-linformer --memory-size 64"},
        {"lin128", "Linformer n=128", "--mixer abc-linformer --memory-size 128"},
        {"abc64", "ABC-MLP n=64", "--mixer abc-mlp --memory-size 64"},
        {"abc128", "ABC-MLP n=128", "--mixer abc-mlp --memory-size 128"},
        {"mega", "Mega", "--mixer mega"},
    };
    enum { NM = sizeof M / sizeof *M };
    const int q = c->quick, seq = q ? 32 : 256, cls_len = q ? 32 : 64;
    const int pre_steps = q ? 3 : 300, ft_steps = q ? 3 : 200, pre_batch = q ? 4 : 8, ft_batch = q ? 8 : 16;
    char model[512], train[4096], valid[4096], dir[4096];
    snprintf(model, sizeof model, "%s --max-len %d",
             q ? "--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 4 --ffn-dim 32"
               : "--layers 2 --embed-dim 64 --z-dim 32 --hidden-dim 128 --n-dim 16 --ffn-dim 128",
             seq);
    if (corpus(c, train, valid, sizeof train)) return -1;
    path_join(dir, sizeof dir, c->dir, "data");
    if (ensure_dir(dir)) return -1;
    const int nl[3] = {q ? 20 : 1500, q ? 4 : 100, q ? 4 : 250}, np[3] = {q ? 20 : 1500, q ? 4 : 100, q ? 4 : 250};
    int gl[3], gp[3];
    double ml = NAN, mp = NAN;
    if (langid_data(c, dir, nl, gl, &ml) || pos_data(c, dir, train, valid, cls_len, np, gp, &mp)) return -1;
    if (gp[0] < NPOS || gp[2] < NPOS)
        return cli_error("%s: too few GCIDE entries with a part of speech (%d training, %d test): the part-of-speech task reads "
                         "GCIDE's text (dict-gcide, or make run's data/gcide.*)", train, gp[0], gp[2]), -1;
    xtask T[2] = {{.id = "langid", .label = "language identification of FreeDict headwords (8 languages)", .nclass = NLANG},
                  {.id = "pos", .label = "part of speech of a GCIDE entry from its definition (4 classes)", .nclass = NPOS}};
    for (int k = 0; k < 2; k++) {
        snprintf(T[k].common, sizeof T[k].common,
                 "--task classify --data %s/%s-train.tsv --valid %s/%s-valid.tsv --seq-len %d --batch %d --warmup %d --steps %d "
                 "--eval-every %d %s",
                 dir, T[k].id, dir, T[k].id, seq, ft_batch, q ? 1 : 20, ft_steps, q ? 3 : ft_steps / 4, model);
        snprintf(T[k].test_args, sizeof T[k].test_args, "--data %s/%s-test.tsv", dir, T[k].id);
        T[k].majority = k ? mp : ml;
    }
    char pre_common[9000];
    snprintf(pre_common, sizeof pre_common,
             "--task mlm --data %s --valid %s --seq-len %d --batch %d --warmup %d --steps %d --eval-every %d --eval-tokens %d %s", train,
             valid, seq, pre_batch, q ? 1 : 30, pre_steps, q ? 3 : pre_steps / 3, q ? 2048 : 32768, model);
    double acc[NM][2][2], macc[NM], bits[NM], params[NM], pre_s[NM];
    for (int i = 0; i < NM; i++) {
        char id[64], flags[4096];
        xlog g;
        xrun r;
        snprintf(id, sizeof id, "pre-%s", M[i].id);
        if (train_model(c, id, pre_common, M[i].flags, "acc", &g, &params[i], &r)) macc[i] = bits[i] = NAN;
        else mlm_figures(c, id, valid, seq, &macc[i], &bits[i]);
        pre_s[i] = g.train_s;
        for (int k = 0; k < 2; k++)
            for (int p = 0; p < 2; p++) {
                double prm;
                snprintf(id, sizeof id, "%s-%s-%s", T[k].id, p ? "pre" : "scratch", M[i].id);
                if (p) snprintf(flags, sizeof flags, "%s --init-from %s/runs/pre-%s", M[i].flags, c->dir, M[i].id);
                else snprintf(flags, sizeof flags, "%s", M[i].flags);
                acc[i][k][p] = train_model(c, id, T[k].common, flags, "acc", &g, &prm, &r) ? NAN : test_accuracy(c, &T[k], id);
            }
    }
    sbuf_printf(&c->md,
                "Each mixer's encoder (the same %s; a classifier's bidirectional stack over bytes, no absolute position "
                "embedding: BASE has RoPE, Linformer its length-%d projections, Mega its EMA, and ABC-MLP no positional "
                "information at all) is pretrained as a masked language model for %d steps of %d x %d bytes of GCIDE "
                "(15%% of the bytes predicted: 80%% masked, 10%% random, 10%% kept), then fine-tuned on each task for %d steps "
                "(batch %d) from those weights (`--init-from`) and, with the same %d steps, from scratch. %d thread%s.%s\n\n",
                model, seq, pre_steps, pre_batch, seq, ft_steps, ft_batch, ft_steps, c->threads, c->threads == 1 ? "" : "s",
                q ? " Quick mode: toy sizes, meaningless numbers." : "");
    sbuf_printf(&c->md,
                "Tasks: %s (%d / %d / %d training / validation / test words; majority %.1f %%), and %s (training definitions "
                "from the pretraining text, validation and test ones from its held-out part; %d / %d / %d; majority %.1f %%; "
                "the first %d bytes of each definition).\n\n",
                T[0].label, gl[0], gl[1], gl[2], 100 * T[0].majority, T[1].label, gp[0], gp[1], gp[2], 100 * T[1].majority, cls_len);
    sbuf_printf(&c->md, "| model | parameters | pretraining s | masked-byte accuracy | bits per masked byte | language id: scratch | "
                        "language id: pretrained | part of speech: scratch | part of speech: pretrained |\n"
                        "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < NM; i++) {
        char b[8][32];
        fmt_num(b[0], 32, params[i], "%.0f"), fmt_num(b[1], 32, pre_s[i], "%.0f"), fmt_num(b[2], 32, 100 * macc[i], "%.1f %%");
        fmt_num(b[3], 32, bits[i], "%.3f");
        for (int k = 0; k < 2; k++)
            for (int p = 0; p < 2; p++) fmt_num(b[4 + 2 * k + p], 32, 100 * acc[i][k][p], "%.1f %%");
        sbuf_printf(&c->md, "| %s (`%s`) | %s | %s | %s | %s | %s | %s | %s | %s |\n", M[i].label, M[i].flags, b[0], b[1], b[2], b[3],
                    b[4], b[5], b[6], b[7]);
    }
    sbuf_printf(&c->md, "\nCommands (pretraining, then fine-tuning and from scratch):\n\n");
    for (int i = 0; i < NM; i++) {
        char id[64];
        snprintf(id, sizeof id, "pre-%s", M[i].id);
        md_cmd(c, id);
        for (int k = 0; k < 2; k++)
            for (int p = 0; p < 2; p++) {
                snprintf(id, sizeof id, "%s-%s-%s", T[k].id, p ? "pre" : "scratch", M[i].id);
                md_cmd(c, id);
            }
    }
    sbuf_printf(&c->md, "\n");
    return 0;
}
