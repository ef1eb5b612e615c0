/* The data library (include/mega_data.h): the ListOps generator (parity with the published
 * procedure under Python's random.seed, determinism, evaluator agreement, lengths, no
 * duplicates), the ListOps / text / pairs / IDX loaders (round trips, label maps, every malformed
 * input rejected with the file and line), format detection and the load-any entry point,
 * vocabulary and class-list JSON, padded batches, the language-model text helpers (whole-file
 * reads, fingerprints, the data-order sampler pinned to its checkpointed sequence, random byte
 * windows), `mega listops` run as a program, and a no-crash fuzz pass. */
#include "mega_data.h"
#include "testlib.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

static const char *tpath(const char *name) { return tl_path(tmpdir, name); }

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static int write_str(const char *name, const char *s) { return write_file(tpath(name), s, strlen(s)); }

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* the loader fails and the message contains every needle */
static void expect_fail(int rc, const char *what, const char *n1, const char *n2) {
    const char *m = mega_last_error();
    int ok = rc != 0 && (!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2));
    TL_CHECK(ok, "%s: rejected with a message containing '%s'%s%s (rc %d, got: %s)", what, n1 ? n1 : "", n2 ? " and " : "",
             n2 ? n2 : "", rc, m);
}

/* a generator for p, or NULL (the reason in mega_last_error) */
static mega_listops_gen *gen_new(const mega_listops_params *p) {
    mega_listops_gen *g = NULL;
    return mega_listops_gen_new(p, &g) == MEGA_OK ? g : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * evaluator */
static void test_eval(void) {
    struct {
        const char *e;
        int v;
    } ok[] = {
        {"7", 7},
        {"[MIN 3 1 2 ]", 1},
        {"[MAX 3 1 2 ]", 3},
        {"[MED 3 1 2 ]", 2},
        {"[MED 3 4 ]", 3},          /* int(numpy.median([3, 4])) = int(3.5) = 3 */
        {"[MED 1 2 6 9 ]", 4},      /* (2+6)/2 */
        {"[MED 9 8 ]", 8},          /* int(8.5) */
        {"[MED 0 9 ]", 4},          /* int(4.5) */
        {"[SM 5 7 ]", 2},
        {"[SM 9 9 9 9 ]", 6},
        {"[FIRST 4 5 6 ]", 4},
        {"[LAST 4 5 6 ]", 6},
        {"( ( ( [SM 5 ) 7 ) ] )", 2},
        {"( ( ( ( [MED 0 ) 9 ) 2 ) ] )", 2},
        /* from the published generator under random.seed(3) (see tests: parity) */
        {"( ( ( ( ( [MED ( ( ( [SM 4 ) 7 ) ] ) ) 6 ) 9 ) 2 ) ] )", 4},
        {"( ( ( ( ( [MAX ( ( ( ( ( [MIN 7 ) 9 ) 1 ) 9 ) ] ) ) 7 ) 3 ) ( ( ( ( ( [SM 7 ) 8 ) 8 ) 7 ) ] ) ) ] )", 7},
        {"  [MAX\t2 [MIN 5 3 ]\n1 ]  ", 3},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char e[256];
        snprintf(e, sizeof e, "%s", ok[i].e);
        int v = -1, rc = mega_listops_eval(e, &v);
        TL_CHECK(rc == 0 && v == ok[i].v, "mega_listops_eval '%s' = %d (got %d, rc %d: %s)", e, ok[i].v, v, rc, mega_last_error());
    }
    const char *bad[] = {"", "   ", "[MIN ]", "[MIN 1 2", "1 2", ")", "( [MAX 1 2 ]", "[MAX 1 2 ] )", "[FOO 1 ]", "]",
                         "[MIN 1 ] 3", "[MIN 1 ] [MAX 2 ]", "10", "[MIN 1 x ]", "[min 1 2 ]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int v = -1;
        int rc = mega_listops_eval(bad[i], &v);
        TL_CHECK(rc != 0 && strlen(mega_last_error()) > 0, "mega_listops_eval rejects '%s' (%s)", bad[i], mega_last_error());
    }
    int v;
    TL_CHECK(mega_listops_eval(NULL, &v) != 0, "mega_listops_eval(NULL) fails");
    /* deep nesting: no recursion limit in the evaluator */
    size_t D = 20000;
    char *deep = malloc(D * 8 + 16), *p = deep;
    for (size_t i = 0; i < D; i++) memcpy(p, "[MAX ", 5), p += 5;
    *p++ = '4';
    for (size_t i = 0; i < D; i++) memcpy(p, " ]", 2), p += 2;
    *p = 0;
    TL_CHECK(mega_listops_eval(deep, &v) == 0 && v == 4, "mega_listops_eval: 20000 nested operators");
    free(deep);
}

/* ---------------------------------------------------------------------------------------------
 * generator */
static uint64_t fnv_str(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* the first n examples as the published script's lines "src\ttarget\n"; FNV-1a of it all */
static uint64_t gen_hash(const mega_listops_params *p, int n, char *first, size_t firstn) {
    mega_listops_gen *g = gen_new(p);
    if (!g) return 0;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        const char *s;
        int len, t;
        if (mega_listops_gen_next(g, &s, &len, &t)) {
            mega_listops_gen_free(g);
            return 0;
        }
        if (i == 0 && first) snprintf(first, firstn, "%s", s);
        char tb[8];
        snprintf(tb, sizeof tb, "\t%d\n", t);
        h = fnv_str(fnv_str(h, s), tb);
    }
    mega_listops_gen_free(g);
    return h;
}

static void test_parity(void) {
    /* Reference: the published generate_tree / to_string / to_value (lra_benchmarks/data/listops.py,
     * numpy-free copy) run under CPython 3.11 after random.seed(S), keeping accepted distinct trees
     * in drawing order; FNV-1a 64 of the lines "Source\tTarget\n". */
    mega_listops_params p = mega_listops_defaults();
    p.min_len = 20, p.max_len = 100, p.max_depth = 4, p.max_args = 10, p.seed = 1;
    char first[4096];
    uint64_t h = gen_hash(&p, 240, first, sizeof first);
    TL_CHECK(h == 0xd63c592e4f9b2b0bull, "parity with the published generator, seed 1, 240 examples of lengths (20,100), depth 4 "
                                         "(hash %016llx)", (unsigned long long)h);
    TL_CHECK(!strncmp(first, "( ( ( ( ( ( ( ( ( ( ( [SM ( ( ( ( ( ( ( ( ( [SM 6 ) 8 ) ( ( ( ( ( ( ( ( ( ( [SM 7 ) 8 ) 3 ) 5 )", 90),
             "parity: first example of seed 1");
    p = mega_listops_defaults();
    p.seed = 7;
    h = gen_hash(&p, 30, NULL, 0);
    TL_CHECK(h == 0x6c5eccc270086aa6ull, "parity with the published generator at the published defaults, seed 7, 30 examples "
                                         "(hash %016llx)", (unsigned long long)h);
    p = mega_listops_defaults();
    p.min_len = 4, p.max_len = 30, p.max_depth = 3, p.max_args = 4, p.seed = 3;
    mega_listops_gen *g = gen_new(&p);
    const char *want[] = {"( ( ( ( ( [MAX ( ( ( ( ( [MIN 7 ) 9 ) 1 ) 9 ) ] ) ) 7 ) 3 ) ( ( ( ( ( [SM 7 ) 8 ) 8 ) 7 ) ] ) ) ] )",
                          "( ( ( ( ( [MED ( ( ( [SM 4 ) 7 ) ] ) ) 6 ) 9 ) 2 ) ] )", "( ( ( ( [MED 0 ) 9 ) 2 ) ] )",
                          "( ( ( ( ( [SM 1 ) 1 ) 2 ) ( ( ( ( [MIN 6 ) 1 ) 0 ) ] ) ) ] )",
                          "( ( ( ( ( [SM ( ( ( [MED 6 ) 4 ) ] ) ) ( ( ( [MED 5 ) 5 ) ] ) ) 6 ) 8 ) ] )"};
    int wantv[] = {7, 4, 2, 4, 4};
    for (int i = 0; i < 5 && g; i++) {
        const char *s = "";
        int len = 0, t = -1;
        int rc = mega_listops_gen_next(g, &s, &len, &t);
        TL_CHECK(rc == 0 && !strcmp(s, want[i]) && t == wantv[i], "parity seed 3 example %d: %s -> %d", i, s, t);
    }
    mega_listops_gen_free(g);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* count tokens without parentheses */
static int published_length(const char *s) {
    int n = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *w = p;
        while (*p && *p != ' ') p++;
        if (!(p - w == 1 && (*w == '(' || *w == ')'))) n++;
    }
    return n;
}

/* the generator's examples (sources, targets, lengths): they evaluate to their targets, have the
 * published lengths, cover every target and are distinct */
static void check_generated(const mega_listops_params *pp, mega_listops_gen *g, int N, char **src, int *tgt, int *lens) {
    const mega_listops_params p = *pp;
    int bad_eval = 0, bad_len = 0, fails = 0, hist[10] = {0};
    for (int i = 0; i < N; i++) {
        const char *s;
        if (mega_listops_gen_next(g, &s, &lens[i], &tgt[i])) {
            fails++;
            continue;
        }
        src[i] = strdup(s);
        int v = -1;
        if (mega_listops_eval(s, &v) || v != tgt[i]) bad_eval++;
        if (published_length(s) != lens[i] || lens[i] <= p.min_len || lens[i] >= p.max_len) bad_len++;
        if (tgt[i] >= 0 && tgt[i] < 10) hist[tgt[i]]++;
    }
    TL_CHECK(fails == 0, "2000 examples generated");
    TL_CHECK(bad_eval == 0, "the evaluator agrees with the generator's target on all 2000 examples (%d disagree)", bad_eval);
    TL_CHECK(bad_len == 0, "every length is the published one (no parentheses) and min < length < max (%d bad)", bad_len);
    int allc = 1;
    for (int c = 0; c < 10; c++) allc &= hist[c] > 0;
    TL_CHECK(allc, "every target 0-9 occurs");
    char **sorted = malloc((size_t)N * sizeof *sorted);
    memcpy(sorted, src, (size_t)N * sizeof *sorted);
    int dup = 0;
    if (!fails) {
        qsort(sorted, (size_t)N, sizeof *sorted, cmp_str);
        for (int i = 1; i < N; i++) dup += !strcmp(sorted[i - 1], sorted[i]);
    }
    TL_CHECK(!fails && dup == 0, "no duplicate examples (%d)", dup);
    free(sorted);
}

/* the same seed gives the same examples, another seed others */
static void check_gen_seed(mega_listops_params p, int N, char **src, const int *tgt) {
    mega_listops_gen *g2 = gen_new(&p);
    int same = 1;
    for (int i = 0; i < N && g2; i++) {
        const char *s;
        int l, t;
        if (mega_listops_gen_next(g2, &s, &l, &t) || !src[i] || strcmp(s, src[i]) || t != tgt[i]) same = 0;
    }
    mega_listops_gen_free(g2);
    TL_CHECK(same, "same seed, same 2000 examples");
    p.seed = 43;
    g2 = gen_new(&p);
    int differ = 0;
    for (int i = 0; i < 20 && g2; i++) {
        const char *s;
        int l, t;
        if (!mega_listops_gen_next(g2, &s, &l, &t) && src[i] && strcmp(s, src[i])) differ++;
    }
    mega_listops_gen_free(g2);
    TL_CHECK(differ >= 15, "another seed, other examples (%d/20 differ)", differ);
}

/* the examples written as a ListOps TSV parse back: labels, tokens, lengths, parentheses, limits */
static void check_gen_parse_back(int N, char **src, const int *tgt, const int *lens) {
    FILE *f = fopen(tpath("gen.tsv"), "wb");
    fprintf(f, "Source\tTarget\n");
    for (int i = 0; i < N; i++) fprintf(f, "%s\t%d\n", src[i] ? src[i] : "0", tgt[i]);
    fclose(f);
    mega_dataset d;
    mega_data_opts o = {0};
    int rc = mega_dataset_load_listops(tpath("gen.tsv"), &o, &d);
    TL_CHECK(rc == 0 && d.n == N, "generated TSV parses back (%d examples; %s)", rc ? -1 : d.n, mega_last_error());
    if (!rc) {
        int okl = 1, okt = 1, okp = 1;
        for (int i = 0; i < N; i++) {
            if (d.label[i] != tgt[i] || strcmp(d.classes.names[d.label[i]], (char[]){(char)('0' + tgt[i]), 0})) okl = 0;
            if (d.len[i] != lens[i]) okt = 0;
            /* tokens map back to the source's non-parenthesis tokens */
            const char *s = src[i];
            int t = 0;
            while (s && *s && okt) {
                while (*s == ' ') s++;
                const char *w = s;
                while (*s && *s != ' ') s++;
                if (s - w == 1 && (*w == '(' || *w == ')')) continue;
                const char *name = mega_listops_token(d.tok[i][t++]);
                if (!name || strlen(name) != (size_t)(s - w) || memcmp(name, w, (size_t)(s - w))) okt = 0;
            }
            for (int k = 0; k < d.len[i]; k++)
                if (d.tok[i][k] == MEGA_LISTOPS_LPAREN || d.tok[i][k] == MEGA_LISTOPS_RPAREN || d.tok[i][k] == MEGA_LISTOPS_UNK) okp = 0;
        }
        TL_CHECK(okl, "labels are the targets, classes \"0\"..\"9\"");
        TL_CHECK(okt, "token ids map back to the source tokens; lengths = published lengths");
        TL_CHECK(okp, "parentheses dropped by default, no <unk>");
        TL_CHECK(d.classes.n == 10 && d.vocab.size == MEGA_LISTOPS_VOCAB && d.vocab.pad == 0 && d.vocab.unk == 1 && d.n_unk == 0,
                 "ListOps dataset: 10 classes, vocab 21, pad 0, unk 1");
        TL_CHECK(d.line[0] == 2 && d.line[N - 1] == N + 1, "line numbers recorded");
        mega_dataset_free(&d);
    }
    o.keep_parens = 1;
    rc = mega_dataset_load_listops(tpath("gen.tsv"), &o, &d);
    if (!rc) {
        int ok = 1;
        for (int i = 0; i < N; i++) {
            int t = 0;
            const char *s = src[i];
            while (s && *s) {
                while (*s == ' ') s++;
                if (!*s) break;
                while (*s && *s != ' ') s++;
                t++;
            }
            if (d.len[i] != t) ok = 0;
        }
        TL_CHECK(ok && d.vocab.keep_parens, "keep_parens keeps every token");
        mega_dataset_free(&d);
    } else TL_CHECK(0, "keep_parens load: %s", mega_last_error());
    o.keep_parens = 0, o.max_len = 15, o.max_examples = 100;
    rc = mega_dataset_load_listops(tpath("gen.tsv"), &o, &d);
    if (!rc) {
        int ok = d.n == 100 && d.max_len <= 15 && d.n_truncated > 0;
        TL_CHECK(ok, "max_len truncates, max_examples stops (%d examples, longest %d, %d cut)", d.n, d.max_len, d.n_truncated);
        mega_dataset_free(&d);
    } else TL_CHECK(0, "truncated load: %s", mega_last_error());
}

static void test_generator(void) {
    mega_listops_params p = mega_listops_defaults();
    p.n_train = 1600, p.n_valid = 200, p.n_test = 200;
    p.min_len = 10, p.max_len = 200, p.max_depth = 6, p.max_args = 8, p.seed = 42;
    const int N = 2000;
    mega_listops_gen *g = gen_new(&p);
    TL_CHECK(g != NULL, "mega_listops_gen_new");
    if (!g) return;
    char **src = calloc((size_t)N, sizeof *src);
    int *tgt = calloc((size_t)N, sizeof *tgt), *lens = calloc((size_t)N, sizeof *lens);
    check_generated(&p, g, N, src, tgt, lens);
    mega_listops_gen_free(g);
    check_gen_seed(p, N, src, tgt);
    check_gen_parse_back(N, src, tgt, lens);
    for (int i = 0; i < N; i++) free(src[i]);
    free(src), free(tgt), free(lens);

    /* the published defaults, a few examples */
    p = mega_listops_defaults();
    TL_CHECK(p.n_train == 96000 && p.n_valid == 2000 && p.n_test == 2000 && p.min_len == 500 && p.max_len == 2000 &&
                 p.max_depth == 10 && p.max_args == 10,
             "published defaults 96000/2000/2000, lengths 500-2000, depth 10, args 10");
    g = gen_new(&p);
    int okd = g != NULL;
    for (int i = 0; i < 20 && g; i++) {
        const char *s;
        int l, t, v = -1;
        if (mega_listops_gen_next(g, &s, &l, &t) || mega_listops_eval(s, &v) || v != t || l <= 500 || l >= 2000 ||
            published_length(s) != l)
            okd = 0;
    }
    mega_listops_gen_free(g);
    TL_CHECK(okd, "default settings: 20 examples, lengths in (500, 2000), evaluator agrees");
}

static void test_generator_errors(void) {
    mega_listops_params p = mega_listops_defaults();
#define BAD(expr, needle)                                                                       \
    do {                                                                                        \
        p = mega_listops_defaults();                                                            \
        expr;                                                                                   \
        int rc_ = mega_listops_check(&p);                                                       \
        expect_fail(rc_, "mega_listops_check " #expr, needle, NULL);                            \
        mega_listops_gen *g_ = (mega_listops_gen *)&p;                                          \
        int st_ = mega_listops_gen_new(&p, &g_);                                                \
        TL_CHECK(st_ == MEGA_ERR_INVALID && g_ == NULL, "mega_listops_gen_new refuses " #expr); \
        mega_listops_gen_free(g_);                                                              \
    } while (0)
    BAD(p.min_len = 3000, "--min-len");
    BAD((p.min_len = 10, p.max_len = 11), "--max-len");
    BAD(p.n_train = 0, "at least one example");
    BAD(p.n_test = -5, "at least one example");
    BAD(p.max_args = 1, "--max-args");
    BAD(p.max_depth = 0, "--max-depth");
    BAD((p.max_depth = 2, p.max_args = 3, p.min_len = 5, p.max_len = 100), "unreachable");
    BAD((p.min_len = 1, p.max_len = 4), "no expression has 1 < length < 4");
    BAD(p.seed = -1, "--seed");
#undef BAD
    /* exhausting the distinct examples fails instead of looping */
    p = mega_listops_defaults();
    p.max_depth = 2, p.max_args = 2, p.min_len = 0, p.max_len = 100, p.n_train = 500, p.n_valid = 1, p.n_test = 1;
    mega_listops_gen *g = gen_new(&p);
    int got = 0, rc = 0;
    while (g && !(rc = mega_listops_gen_next(g, &(const char *){0}, &(int){0}, &(int){0}))) got++;
    TL_CHECK(g && rc != 0 && got == 410 && strstr(mega_last_error(), "no progress"),
             "depth 2, 2 args: exactly 410 distinct expressions, then a clear failure (%d; %s)", got, mega_last_error());
    mega_listops_gen_free(g);
    /* depth 1: only single digits */
    p = mega_listops_defaults();
    p.max_depth = 1, p.min_len = 0, p.max_len = 2;
    g = gen_new(&p);
    int digits_ok = g != NULL;
    for (int i = 0; i < 10 && g; i++) {
        const char *s;
        int l, t;
        if (mega_listops_gen_next(g, &s, &l, &t) || strlen(s) != 1 || s[0] - '0' != t || l != 1) digits_ok = 0;
    }
    TL_CHECK(digits_ok, "depth 1 draws the 10 digits");
    mega_listops_gen_free(g);
}

/* the mega program next to this test binary (the Makefile builds both into $(BUILD)) */
static char mega_bin[1024];

/* run mega with argv (argv[0] ignored), stdout discarded; its exit status, or -1 */
static int run_mega(char **argv) {
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        argv[0] = mega_bin;
        execv(mega_bin, argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* mega listops as a program: files, atomic outputs, parse back */
static void test_cmd(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/lo", tmpdir);
    char *av[] = {"mega", "listops", "--out", dir, "--train", "60", "--valid", "7", "--test", "9", "--min-len", "20", "--max-len",
                  "100", "--max-depth", "4", "--seed", "5", "--quiet", NULL};
    int rc = run_mega(av);
    TL_CHECK(rc == 0, "mega listops runs (%s, exit %d)", mega_bin, rc);
    const char *names[3] = {"train.tsv", "valid.tsv", "test.tsv"};
    int want[3] = {60, 7, 9};
    for (int s = 0; s < 3; s++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", dir, names[s]);
        mega_dataset d;
        int r = mega_dataset_load_listops(p, NULL, &d);
        TL_CHECK(r == 0 && d.n == want[s], "%s: %d examples (%s)", names[s], want[s], r ? mega_last_error() : "ok");
        if (!r) mega_dataset_free(&d);
    }
    /* no temporary files left */
    DIR *dd = opendir(dir);
    int tmp = 0, files = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        if (e->d_name[0] != '.') files++, tmp += strstr(e->d_name, ".tmp") != NULL;
    if (dd) closedir(dd);
    TL_CHECK(files == 3 && tmp == 0, "exactly the three files, no temporaries (%d files)", files);
    /* same seed, same bytes */
    char dir2[512];
    snprintf(dir2, sizeof dir2, "%s/lo2", tmpdir);
    av[3] = dir2;
    rc = run_mega(av);
    mega_bytes a = {0}, b = {0};
    char pa[700], pb[700];
    snprintf(pa, sizeof pa, "%s/train.tsv", dir), snprintf(pb, sizeof pb, "%s/train.tsv", dir2);
    int same = rc == 0 && mega_read_file(pa, "x", &a) == MEGA_OK && mega_read_file(pb, "x", &b) == MEGA_OK && a.n == b.n &&
               !memcmp(a.data, b.data, a.n);
    TL_CHECK(same, "mega listops is deterministic in --seed");
    mega_bytes_free(&a), mega_bytes_free(&b);
    /* a failure leaves no file behind */
    char dir3[512];
    snprintf(dir3, sizeof dir3, "%s/lo3", tmpdir);
    char *av3[] = {"mega", "listops", "--out", dir3, "--train", "1000", "--max-depth", "2", "--max-args", "2", "--min-len", "0",
                   "--max-len", "50", "--quiet", NULL};
    fprintf(stderr, "(expected error follows)\n");
    rc = run_mega(av3);
    char p3[700];
    struct stat st;
    snprintf(p3, sizeof p3, "%s/train.tsv", dir3);
    dd = opendir(dir3);
    files = 0;
    while (dd && (e = readdir(dd)))
        if (e->d_name[0] != '.') files++;
    if (dd) closedir(dd);
    TL_CHECK(rc == 2 && stat(p3, &st) != 0 && files == 0, "failed generation: exit 2 and no file written (%d left)", files);
}

/* ---------------------------------------------------------------------------------------------
 * malformed ListOps TSV */
static void test_listops_malformed(void) {
    mega_dataset d;
    struct {
        const char *content, *n1, *n2;
    } c[] = {
        {"", "empty file", NULL},
        {"Src\tTarget\n[MIN 1 2 ]\t1\n", "lo.tsv:1:", "header"},
        {"[MIN 1 2 ]\t1\n", "lo.tsv:1:", "Source<TAB>Target"},
        {"Source\tTarget\n[MIN 1 2 ]\t1\n[MAX 1 2 ]\n", "lo.tsv:3:", "2 tab-separated fields"},
        {"Source\tTarget\n[MIN 1 2 ]\t1\t5\n", "lo.tsv:2:", "found 3"},
        {"Source\tTarget\n[MIN 1 2 ]\t1\n\n[MAX 1 2 ]\t12\n", "lo.tsv:4:", "digit 0-9"},
        {"Source\tTarget\n[MIN 1 2 ]\tx\n", "lo.tsv:2:", "digit"},
        {"Source\tTarget\n[MIN 1 2 ]\t\n", "lo.tsv:2:", "digit"},
        {"Source\tTarget\n\t3\n", "lo.tsv:2:", "empty Source"},
        {"Source\tTarget\n( ( ) )\t3\n", "lo.tsv:2:", "empty Source"},
        {"Source\tTarget\n", "no examples", NULL},
        {"Source\tTarget\n\n\n", "no examples", NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        write_str("lo.tsv", c[i].content);
        int rc = mega_dataset_load_listops(tpath("lo.tsv"), NULL, &d);
        if (!rc) mega_dataset_free(&d);
        char what[64];
        snprintf(what, sizeof what, "malformed ListOps case %zu", i);
        expect_fail(rc, what, c[i].n1, c[i].n2);
    }
    /* CRLF (as Python's csv writer), unknown tokens -> <unk>, blank lines skipped */
    write_str("lo.tsv", "Source\tTarget\r\n( ( [MIN 1 ) 2 ) ] )\t1\r\n\r\n[MAX 1 [FOO 3 ]\t3\r\n");
    int rc = mega_dataset_load_listops(tpath("lo.tsv"), NULL, &d);
    TL_CHECK(rc == 0 && d.n == 2 && d.len[0] == 4 && d.tok[0][0] == MEGA_LISTOPS_MIN && d.tok[0][1] == MEGA_LISTOPS_DIGIT0 + 1 &&
                 d.tok[0][3] == MEGA_LISTOPS_END && d.n_unk == 1 && d.tok[1][2] == MEGA_LISTOPS_UNK && d.label[1] == 3 && d.line[1] == 4,
             "CRLF, <unk>, blank lines (%s)", rc ? mega_last_error() : "");
    if (!rc) mega_dataset_free(&d);
    expect_fail(mega_dataset_load_listops(tpath("missing.tsv"), NULL, &d), "missing file", "missing.tsv", "No such file");
    expect_fail(mega_dataset_load_listops(tmpdir, NULL, &d), "directory", "is a directory", NULL);
}

/* ---------------------------------------------------------------------------------------------
 * text and pairs */
/* text: numeric labels sort numerically; header skipped; raw bytes kept; eval with the training classes */
static void text_numeric_labels(void) {
    mega_dataset d;
    mega_data_opts o = {0};
    const char txt[] = "label\ttext\n10\thello\n9\tw\xc3\xa9\xff\n2\tab\r\n10\tx\n";
    write_file(tpath("t.tsv"), txt, sizeof txt - 1);
    int rc = mega_dataset_load_text(tpath("t.tsv"), &o, &d);
    TL_CHECK(rc == 0 && d.n == 4, "text TSV loads (%s)", rc ? mega_last_error() : "");
    if (!rc) {
        TL_CHECK(d.classes.n == 3 && !strcmp(d.classes.names[0], "2") && !strcmp(d.classes.names[1], "9") &&
                     !strcmp(d.classes.names[2], "10"),
                 "numeric labels sort numerically: 2, 9, 10");
        TL_CHECK(d.label[0] == 2 && d.label[1] == 1 && d.label[2] == 0 && d.label[3] == 2, "labels mapped");
        TL_CHECK(d.len[0] == 5 && d.tok[0][0] == 'h' && d.len[1] == 4 && d.tok[1][1] == 0xc3 && d.tok[1][3] == 0xff && d.len[2] == 2,
                 "bytes are tokens 0-255, CR stripped at the end of a line");
        TL_CHECK(d.vocab.size == 257 && d.vocab.pad == 256 && d.line[0] == 2, "byte vocabulary: 257 ids, pad 256");
        /* eval with the training classes */
        mega_classes tr;
        mega_classes_copy(&tr, &d.classes);
        mega_dataset_free(&d);
        write_str("e.tsv", "9\tabc\n2.0\tdef\n");
        o.classes = &tr;
        rc = mega_dataset_load_text(tpath("e.tsv"), &o, &d);
        TL_CHECK(rc == 0 && d.label[0] == 1 && d.label[1] == 0 && d.classes.n == 3,
                 "eval uses the training classes (numeric equality \"2.0\" = \"2\") (%s)", rc ? mega_last_error() : "");
        if (!rc) mega_dataset_free(&d);
        write_str("e.tsv", "9\tabc\n\n7\tdef\n");
        rc = mega_dataset_load_text(tpath("e.tsv"), &o, &d);
        if (!rc) mega_dataset_free(&d);
        expect_fail(rc, "label unknown at eval time", "e.tsv:3:", "unknown label '7'");
        o.classes = NULL;
        mega_classes_free(&tr);
    }
}

/* text: string labels sort bytewise; the class list as JSON */
static void text_string_labels(void) {
    mega_dataset d;
    mega_data_opts o = {0};
    write_str("s.tsv", "pos\tgood\nneg\tbad\nneutral\tmeh\nneg\tugh\n");
    int rc = mega_dataset_load_text(tpath("s.tsv"), &o, &d);
    TL_CHECK(rc == 0 && d.classes.n == 3 && !strcmp(d.classes.names[0], "neg") && !strcmp(d.classes.names[1], "neutral") &&
                 !strcmp(d.classes.names[2], "pos") && d.label[0] == 2 && d.label[3] == 0,
             "string labels sort bytewise: neg, neutral, pos");
    if (!rc) {
        char *js = mega_classes_to_json(&d.classes);
        mega_classes back;
        int r2 = mega_classes_from_json(js, &back);
        TL_CHECK(js && r2 == 0 && back.n == 3 && !strcmp(back.names[1], "neutral"), "class list JSON round trip: %s", js ? js : "");
        if (!r2) mega_classes_free(&back);
        free(js);
        mega_dataset_free(&d);
    }
    mega_classes bc;
    expect_fail(mega_classes_from_json("[\"a\",\"a\"]", &bc), "class JSON duplicate", "twice", NULL);
    expect_fail(mega_classes_from_json("{}", &bc), "class JSON object", "array", NULL);
    expect_fail(mega_classes_from_json("[1]", &bc), "class JSON number", "not a string", NULL);
    expect_fail(mega_classes_from_json("[", &bc), "class JSON broken", NULL, NULL);
}

/* text: NUL bytes in the text are bytes; truncation; malformed files */
static void text_malformed(void) {
    mega_dataset d;
    mega_data_opts o = {0};
    const char nul[] = "1\ta\0b\n0\tlong text here\n";
    write_file(tpath("n.tsv"), nul, sizeof nul - 1);
    o.max_len = 4;
    int rc = mega_dataset_load_text(tpath("n.tsv"), &o, &d);
    TL_CHECK(rc == 0 && d.len[0] == 3 && d.tok[0][1] == 0 && d.len[1] == 4 && d.n_truncated == 1,
             "NUL is a byte like any other; --seq-len truncates (%s)", rc ? mega_last_error() : "");
    if (!rc) mega_dataset_free(&d);
    o.max_len = 0;
    struct {
        const char *content, *n1, *n2;
    } c[] = {
        {"1\tabc\n2\n", "x.tsv:2:", "2 tab-separated fields"},
        {"1\tabc\n2\tx\ty\n", "x.tsv:2:", "found 3"},
        {"1\tabc\n2\t\n", "x.tsv:2:", "empty text"},
        {"1\tabc\n\tabc\n", "x.tsv:2:", "empty label"},
        {"1\tabc\n  \tabc\n", "x.tsv:2:", "empty label"},
        {"", "no examples", NULL},
        {"label\ttext\n", "no examples", NULL},
        {"this is a long line of text that was meant to be the text but came first and has no label at all, it goes on and on "
         "and on for quite a while so that it exceeds the limit of two hundred and fifty six bytes for a label, which is plenty "
         "for any real class name\t1\n",
         "x.tsv:1:", "label<TAB>text order"},
        /* class names are stored as text in the model: refused when read, not at the first save */
        {"1\tabc\n\377\tabc\n", "x.tsv:2:", "is not valid UTF-8 (byte 0xff at column 1)"},
        {"1\tabc\nb\303\tabc\n", "x.tsv:2:", "is not valid UTF-8 (byte 0xc3 at column 2)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        write_str("x.tsv", c[i].content);
        rc = mega_dataset_load_text(tpath("x.tsv"), NULL, &d);
        if (!rc) mega_dataset_free(&d);
        char what[64];
        snprintf(what, sizeof what, "malformed text case %zu", i);
        expect_fail(rc, what, c[i].n1, c[i].n2);
    }
    const char nl[] = "1\tabc\na\0b\tabc\n";
    write_file(tpath("x.tsv"), nl, sizeof nl - 1);
    rc = mega_dataset_load_text(tpath("x.tsv"), NULL, &d);
    if (!rc) mega_dataset_free(&d);
    expect_fail(rc, "NUL in a label", "x.tsv:2:", "NUL");
}

/* pairs: 3 fields and the AAN 5-field layout; batches; malformed files */
static void pairs_tsv(void) {
    mega_dataset d;
    int rc;
    write_str("p.tsv", "label\ttext1\ttext2\n1\tabc\tde\n0\tx\tyz w\n");
    rc = mega_dataset_load_pairs(tpath("p.tsv"), NULL, &d);
    TL_CHECK(rc == 0 && d.pairs && d.n == 2 && d.len[0] == 3 && d.len2[0] == 2 && d.tok2[1][0] == 'y' && d.len2[1] == 4 &&
                 d.label[0] == 1 && d.max_len2 == 4,
             "pairs TSV (%s)", rc ? mega_last_error() : "");
    if (!rc) {
        mega_batch b;
        int idx[2] = {1, 0};
        int r1 = mega_batch_init(&b, 3, 2, 3, 0), r2 = r1 ? -1 : mega_batch_fill(&b, &d, idx, 2);
        TL_CHECK(r2 == 0 && b.tok[0] == 'x' && b.tok[1] == 256 && b.len[0] == 1 && b.tok[2] == 'a' && b.tok[3] == 'b' && b.len[1] == 2 &&
                     b.tok2[0] == 'y' && b.tok2[2] == ' ' && b.len2[0] == 3 && b.tok2[3] == 'd' && b.tok2[5] == 256 && b.len2[1] == 2 &&
                     b.len[2] == 0 && b.label[2] == -1 && b.tok[4] == 256 && b.label[0] == 0 && b.label[1] == 1,
                 "pairs batch: right padding with 256, truncation at L, empty rows");
        mega_batch_free(&b);
        mega_batch_init(&b, 2, 8, 0, 0);
        expect_fail(mega_batch_fill(&b, &d, idx, 2), "pairs into a single-sequence batch", "L2", NULL);
        mega_batch_free(&b);
        mega_dataset_free(&d);
    }
    write_str("p.tsv", "0.0\t7\t8\tfirst doc\tsecond\n1.0\t9\t10\tthird\tfourth doc\n");
    rc = mega_dataset_load_pairs(tpath("p.tsv"), NULL, &d);
    TL_CHECK(rc == 0 && d.n == 2 && d.len[0] == 9 && d.len2[0] == 6 && d.len[1] == 5 && d.classes.n == 2 &&
                 !strcmp(d.classes.names[0], "0.0") && d.label[1] == 1,
             "pairs: AAN label/id1/id2/text1/text2 layout (%s)", rc ? mega_last_error() : "");
    if (!rc) mega_dataset_free(&d);
    struct {
        const char *content, *n1, *n2;
    } pc[] = {
        {"1\tabc\n", "y.tsv:1:", "found 2"},
        {"1\tabc\tdef\n1\ta\tb\tc\n", "y.tsv:2:", "found 4"},
        {"1\tabc\t\n", "y.tsv:1:", "empty text2"},
        {"1\t\tabc\n", "y.tsv:1:", "empty text1"},
    };
    for (size_t i = 0; i < sizeof pc / sizeof *pc; i++) {
        write_str("y.tsv", pc[i].content);
        rc = mega_dataset_load_pairs(tpath("y.tsv"), NULL, &d);
        if (!rc) mega_dataset_free(&d);
        char what[64];
        snprintf(what, sizeof what, "malformed pairs case %zu", i);
        expect_fail(rc, what, pc[i].n1, pc[i].n2);
    }
}

static void test_text(void) {
    text_numeric_labels();
    text_string_labels();
    text_malformed();
    pairs_tsv();
}

/* ---------------------------------------------------------------------------------------------
 * IDX */
static size_t idx_images(uint8_t *b, uint32_t magic, uint32_t n, uint32_t r, uint32_t c) {
    uint32_t h[4] = {magic, n, r, c};
    for (int i = 0; i < 4; i++) b[4 * i] = (uint8_t)(h[i] >> 24), b[4 * i + 1] = (uint8_t)(h[i] >> 16), b[4 * i + 2] = (uint8_t)(h[i] >> 8),
                                b[4 * i + 3] = (uint8_t)h[i];
    for (uint32_t i = 0; i < n * r * c; i++) b[16 + i] = (uint8_t)(i * 37 + 11);
    return 16 + (size_t)n * r * c;
}
static size_t idx_labels(uint8_t *b, uint32_t magic, uint32_t n, const uint8_t *lab) {
    uint32_t h[2] = {magic, n};
    for (int i = 0; i < 2; i++) b[4 * i] = (uint8_t)(h[i] >> 24), b[4 * i + 1] = (uint8_t)(h[i] >> 16), b[4 * i + 2] = (uint8_t)(h[i] >> 8),
                                b[4 * i + 3] = (uint8_t)h[i];
    memcpy(b + 8, lab, n);
    return 8 + n;
}

/* IDX: 3 images of 2x3 as tokens and as reals, batches, normalisation, unknown labels */
static void idx_load(const uint8_t *im) {
    mega_dataset d;
    mega_data_opts o = {0};
    int rc = mega_dataset_load_idx(tpath("img.idx"), tpath("lab.idx"), &o, &d);
    TL_CHECK(rc == 0 && d.n == 3 && d.rows == 2 && d.cols == 3 && d.len[0] == 6 && d.max_len == 6, "IDX round trip: 3 images of 2x3 (%s)",
             rc ? mega_last_error() : "");
    if (rc) return;
    int pix = 1;
    for (int i = 0; i < 3; i++)
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 3; x++) pix &= d.tok[i][y * 3 + x] == im[16 + i * 6 + y * 3 + x];
    TL_CHECK(pix, "pixels in row-major order as tokens 0-255");
    TL_CHECK(d.classes.n == 2 && !strcmp(d.classes.names[0], "0") && !strcmp(d.classes.names[1], "7") && d.label[0] == 1 &&
                 d.label[1] == 0 && d.vocab.pad == 256 && d.vocab.size == 257 && !d.vocab.real,
             "IDX labels -> classes \"0\",\"7\"; pixel vocabulary 257 with pad 256");
    mega_batch b;
    int idx[2] = {2, 0};
    mega_batch_init(&b, 2, 8, 0, 0);
    rc = mega_batch_fill(&b, &d, idx, 2);
    TL_CHECK(rc == 0 && b.tok[0] == im[16 + 12] && b.tok[5] == im[16 + 17] && b.tok[6] == 256 && b.tok[7] == 256 && b.len[0] == 6 &&
                 b.label[0] == 1 && b.tok[8] == im[16],
             "token batch [2, 8]: right-padded with 256");
    TL_CHECK(mega_batch_max_len(&d, idx, 2, 0) == 6, "mega_batch_max_len");
    mega_batch_free(&b);
    mega_dataset_free(&d);
    o.real = 1;
    rc = mega_dataset_load_idx(tpath("img.idx"), tpath("lab.idx"), &o, &d);
    if (!rc) {
        mega_batch_init(&b, 2, 8, 0, 1);
        rc = mega_batch_fill(&b, &d, idx, 2);
        double want = ((double)im[16 + 12] / 255.0 - 0.5) / 0.5;
        TL_CHECK(rc == 0 && !b.tok && fabs(b.val[0] - want) < 1e-6 && b.val[6] == 0 && b.val[7] == 0 && b.len[0] == 6 &&
                     d.vocab.mean == 0.5 && d.vocab.std == 0.5,
                 "real batch: (x/255 - 0.5)/0.5, padding 0 (%g vs %g)", b.val ? b.val[0] : -99, want);
        mega_batch_free(&b);
        char *js = mega_vocab_to_json(&d.vocab);
        mega_vocab v;
        int r2 = mega_vocab_from_json(js, &v);
        TL_CHECK(r2 == 0 && v.kind == MEGA_VOCAB_PIXELS && v.real && v.mean == 0.5 && v.std == 0.5, "pixel vocabulary JSON round trip %s",
                 js ? js : "");
        free(js);
        mega_dataset_free(&d);
    } else TL_CHECK(0, "real IDX load: %s", mega_last_error());
    o.mean = 0.48, o.std = 0.24;
    rc = mega_dataset_load_idx(tpath("img.idx"), tpath("lab.idx"), &o, &d);
    TL_CHECK(rc == 0 && fabs(mega_pixel_value(&d.vocab, 255) - (1 - 0.48) / 0.24) < 1e-5, "custom mean/std");
    if (!rc) mega_dataset_free(&d);
    o.std = 0;
    o.mean = 0.3;
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("lab.idx"), &o, &d), "std 0", "std", NULL);
    memset(&o, 0, sizeof o);
    /* eval with training classes that lack a label */
    mega_classes only0 = {1, (char *[]){"0"}};
    o.classes = &only0;
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("lab.idx"), &o, &d), "IDX unknown label", "unknown label '7'", "image number");
    o.classes = NULL;
}

/* IDX: malformed files, each one clear error */
static void idx_malformed(const uint8_t *lab) {
    mega_dataset d;
    uint8_t bad[256];
    size_t n;
    n = idx_images(bad, 0x803, 3, 2, 3);
    write_file(tpath("bi.idx"), bad, n - 1);
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d), "truncated images", "truncated", "3 images of 2x3");
    write_file(tpath("bi.idx"), bad, 10);
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d), "images shorter than the header", "truncated", "header");
    write_file(tpath("bi.idx"), bad, 2);
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d), "2-byte images", "truncated", NULL);
    write_file(tpath("bi.idx"), bad, n);
    bad[n] = 1;
    write_file(tpath("bi.idx"), bad, n + 1);
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d), "trailing bytes", "trailing data", NULL);
    n = idx_images(bad, 0x801, 3, 2, 3);
    write_file(tpath("bi.idx"), bad, n);
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d), "wrong magic", "magic 0x00000801", "swapped");
    n = idx_images(bad, 0x0d03, 3, 2, 3);
    write_file(tpath("bi.idx"), bad, n);
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d), "float IDX", "magic 0x00000d03", "unsigned bytes");
    expect_fail(mega_dataset_load_idx(tpath("lab.idx"), tpath("img.idx"), NULL, &d), "swapped files", "swapped", NULL);
    n = idx_images(bad, 0x803, 0, 2, 3);
    write_file(tpath("bi.idx"), bad, n);
    uint8_t lb0[16];
    write_file(tpath("bl.idx"), lb0, idx_labels(lb0, 0x801, 0, lab));
    expect_fail(mega_dataset_load_idx(tpath("bi.idx"), tpath("bl.idx"), NULL, &d), "no images", "no images", NULL);
    write_file(tpath("bl.idx"), lb0, idx_labels(lb0, 0x801, 2, lab));
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("bl.idx"), NULL, &d), "count mismatch", "3 images", "2 labels");
    write_file(tpath("bl.idx"), lb0, idx_labels(lb0, 0x801, 3, lab) - 1);
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("bl.idx"), NULL, &d), "truncated labels", "truncated", "3 labels");
}

/* IDX: gzip-compressed files, missing files, absurd dimensions */
static void idx_gzip_and_files(const uint8_t *im, size_t ni, const uint8_t *lb, size_t nl) {
    mega_dataset d;
    int rc;
    uint8_t bad[256];
    size_t n;
    /* gzip-compressed files (as MNIST and Fashion-MNIST are published) are decompressed: the same
     * examples as the plain files; a gzip header without its data is corrupt */
    {
        gzFile g = gzopen(tpath("img.idx.gz"), "wb");
        gzwrite(g, im, (unsigned)ni), gzclose(g);
        g = gzopen(tpath("lab.idx.gz"), "wb");
        gzwrite(g, lb, (unsigned)nl), gzclose(g);
        mega_dataset dz;
        rc = mega_dataset_load_idx(tpath("img.idx.gz"), tpath("lab.idx.gz"), NULL, &dz);
        int same = rc == 0 && dz.n == 3 && dz.rows == 2 && dz.cols == 3;
        if (rc == 0 && mega_dataset_load_idx(tpath("img.idx"), tpath("lab.idx"), NULL, &d) == 0) {
            for (int i = 0; same && i < 3; i++) same = dz.label[i] == d.label[i] && !memcmp(dz.tok[i], d.tok[i], 6 * sizeof *d.tok[i]);
            mega_dataset_free(&d);
        } else same = 0;
        TL_CHECK(same, "gzip-compressed IDX images and labels load as the plain files (%s)", rc ? mega_last_error() : "");
        if (!rc) mega_dataset_free(&dz);
    }
    const uint8_t gz[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    write_file(tpath("bl.idx"), gz, sizeof gz);
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("bl.idx"), NULL, &d), "gzip header without data", "corrupt compressed",
                "bl.idx");
    write_file(tpath("bl.idx"), gz, 0);
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("bl.idx"), NULL, &d), "empty labels", "truncated", NULL);
    expect_fail(mega_dataset_load_idx(tpath("img.idx"), tpath("nope.idx"), NULL, &d), "missing labels", "nope.idx", NULL);
    expect_fail(mega_dataset_load_idx(tmpdir, tpath("lab.idx"), NULL, &d), "directory", "directory", NULL);
    /* absurd header dimensions: no huge allocation, a clear error */
    n = idx_images(bad, 0x803, 3, 2, 3);
    bad[4] = 0xff, bad[8] = 0xff, bad[12] = 0xff;
    write_file(tpath("bi.idx"), bad, n);
    rc = mega_dataset_load_idx(tpath("bi.idx"), tpath("lab.idx"), NULL, &d);
    if (!rc) mega_dataset_free(&d);
    TL_CHECK(rc != 0, "huge announced dimensions rejected: %s", mega_last_error());
}

static void test_idx(void) {
    uint8_t im[256], lb[64];
    const uint8_t lab[3] = {7, 0, 7};
    size_t ni = idx_images(im, 0x803, 3, 2, 3), nl = idx_labels(lb, 0x801, 3, lab);
    write_file(tpath("img.idx"), im, ni);
    write_file(tpath("lab.idx"), lb, nl);
    idx_load(im);
    idx_malformed(lab);
    idx_gzip_and_files(im, ni, lb, nl);
}

/* ---------------------------------------------------------------------------------------------
 * vocabulary */
static void test_vocab(void) {
    int ok = 1;
    for (int i = 0; i < MEGA_LISTOPS_VOCAB; i++) {
        const char *t = mega_listops_token(i);
        if (i >= 2 && mega_listops_id(t, strlen(t)) != i) ok = 0;
    }
    TL_CHECK(ok && mega_listops_id("[MIN", 4) == 12 && mega_listops_id("[SM", 3) == 15 && mega_listops_id("]", 1) == 16 &&
                 mega_listops_id("7", 1) == 9 && mega_listops_id("(", 1) == 17 && mega_listops_id("<pad>", 5) == MEGA_LISTOPS_UNK &&
                 mega_listops_id("[MINX", 5) == MEGA_LISTOPS_UNK && mega_listops_token(21) == NULL && mega_listops_token(-1) == NULL,
             "ListOps map: ids documented in mega_data.h");
    mega_vocab v = mega_vocab_listops(0), w;
    char *js = mega_vocab_to_json(&v);
    int rc = mega_vocab_from_json(js, &w);
    TL_CHECK(js && rc == 0 && w.kind == MEGA_VOCAB_LISTOPS && w.size == 21 && w.pad == 0 && w.unk == 1 && !w.keep_parens &&
                 strstr(js, "\"tokens\":[\"<pad>\",\"<unk>\",\"0\""),
             "ListOps vocabulary JSON round trip: %s", js ? js : "");
    /* a different map is refused */
    char *tam = js ? strdup(js) : NULL;
    char *p = tam ? strstr(tam, "[MED") : NULL;
    if (p) p[2] = 'X';
    expect_fail(mega_vocab_from_json(tam, &w), "tampered ListOps token list", "differs", NULL);
    free(tam), free(js);
    v = mega_vocab_bytes();
    js = mega_vocab_to_json(&v);
    rc = mega_vocab_from_json(js, &w);
    TL_CHECK(rc == 0 && w.kind == MEGA_VOCAB_BYTES && w.size == 257 && w.pad == 256 && w.unk == -1, "bytes vocabulary JSON: %s", js);
    free(js);
    expect_fail(mega_vocab_from_json("{\"kind\":\"words\"}", &w), "unknown vocabulary kind", "unknown kind", NULL);
    expect_fail(mega_vocab_from_json("{\"kind\":\"bytes\",\"size\":300,\"pad\":256}", &w), "bytes with the wrong size", "differ", NULL);
    expect_fail(mega_vocab_from_json("nonsense", &w), "not JSON", "JSON", NULL);
    expect_fail(mega_vocab_from_json(NULL, &w), "NULL JSON", "JSON", NULL);
}

/* ---------------------------------------------------------------------------------------------
 * no crash on arbitrary input */
static void test_fuzz(void) {
    unsigned long long s = 12345;
    const char *alpha[] = {"[MIN", "[MAX", "[MED", "[SM", "]", "(", ")", "0", "5", "9", "\t", "\n", "\r", " ", "x", "Source\tTarget\n",
                           "label\ttext\n", "\xff", "", "12"};
    char buf[4096];
    int crashes_impossible = 1, accepted = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = 0;
        int k = (int)(tl_rand01(&s) * 60);
        if (it % 3 == 0) n += (size_t)snprintf(buf, sizeof buf, "Source\tTarget\n");
        for (int j = 0; j < k && n < sizeof buf - 32; j++) {
            if (tl_rand01(&s) < 0.1) buf[n++] = (char)(tl_rand01(&s) * 256);
            else {
                const char *a = alpha[(int)(tl_rand01(&s) * (sizeof alpha / sizeof *alpha))];
                size_t l = strlen(a);
                memcpy(buf + n, a, l), n += l;
            }
        }
        write_file(tpath("f.tsv"), buf, n);
        mega_dataset d;
        mega_data_opts o = {0};
        o.max_len = it % 5;
        if (!mega_dataset_load_listops(tpath("f.tsv"), &o, &d)) accepted++, mega_dataset_free(&d);
        if (!mega_dataset_load_text(tpath("f.tsv"), &o, &d)) accepted++, mega_dataset_free(&d);
        if (!mega_dataset_load_pairs(tpath("f.tsv"), &o, &d)) accepted++, mega_dataset_free(&d);
        buf[n] = 0;
        int v;
        (void)mega_listops_eval(buf, &v);
        /* random IDX headers */
        uint8_t ib[64], lb[16];
        for (int j = 0; j < 64; j++) ib[j] = (uint8_t)(tl_rand01(&s) * 256);
        for (int j = 0; j < 16; j++) lb[j] = (uint8_t)(tl_rand01(&s) * 256);
        if (it % 2) ib[0] = ib[1] = 0, ib[2] = 8, ib[3] = 3, ib[4] = ib[5] = ib[6] = 0, ib[7] = (uint8_t)(it % 4);
        if (it % 2) lb[0] = lb[1] = 0, lb[2] = 8, lb[3] = 1, lb[4] = lb[5] = lb[6] = 0, lb[7] = (uint8_t)(it % 4);
        write_file(tpath("fi.idx"), ib, (size_t)(tl_rand01(&s) * 64));
        write_file(tpath("fl.idx"), lb, (size_t)(tl_rand01(&s) * 16));
        if (!mega_dataset_load_idx(tpath("fi.idx"), tpath("fl.idx"), NULL, &d)) accepted++, mega_dataset_free(&d);
    }
    TL_CHECK(crashes_impossible, "3000 random inputs to every loader and the evaluator: no crash (%d accepted)", accepted);
}

/* ---------------------------------------------------------------------------------------------
 * language-model text helpers */
static void test_text_helpers(void) {
    /* the data-order sampler: values pinned from tools/train.c task_rng_below before it moved
     * into the library (checkpoints store the state, so resume depends on this exact stream) */
    uint64_t st = 42;
    const uint64_t want1[6] = {413, 291, 858, 764, 250, 62};
    int ok = 1;
    for (int i = 0; i < 6; i++) ok &= mega_data_rng_below(&st, 1000) == want1[i];
    TL_CHECK(ok && st == 13064056694810536104ull, "data rng: state 42, n 1000 -> 413 291 858 764 250 62 (state %llu)",
             (unsigned long long)st);
    st = mega_data_rng_seed(7);
    const uint64_t want2[4] = {58299199432732ull, 2361545402448ull, 99118308401088ull, 19775549581598ull};
    ok = st == 7 * 0xD1B54A32D192ED03ull + 77;
    for (int i = 0; i < 4; i++) ok &= mega_data_rng_below(&st, 123456789012345ull) == want2[i];
    TL_CHECK(ok && st == 3806366635471563702ull, "data rng: the CLI's seed 7, four draws below 123456789012345 (state %llu)",
             (unsigned long long)st);
    st = 0;
    ok = mega_data_rng_below(&st, 1) == 0 && st == 0 && mega_data_rng_below(&st, 0) == 0 && st == 0;
    TL_CHECK(ok, "data rng: n <= 1 gives 0 and leaves the state alone");
    const uint64_t want3[5] = {7960286522194355700ull, 487617019471545679ull, 1961750202426094747ull, 6038094601263162090ull,
                               3207296026000306913ull};
    ok = 1;
    for (int i = 0; i < 5; i++) ok &= mega_data_rng_below(&st, 0xC000000000000000ull) == want3[i];
    TL_CHECK(ok && st == 6018027440424182931ull, "data rng: n = 3*2^62 (rejection sampling), pinned values and state");

    /* the fingerprint: FNV-1a with the offset basis 1469598103934665603 that checkpoints use (a
     * digit short of the published 14695981039346656037); values from Python */
    TL_CHECK(mega_fnv1a64("", 0) == 1469598103934665603ull && mega_fnv1a64("a", 1) == 0x44bd8ad473cd9906ull &&
                 mega_fnv1a64("foobar", 6) == 0x88fad7c0a8ff07f2ull,
             "FNV-1a 64 as checkpoints store it: '', 'a', 'foobar'");

    /* random windows: the draw order of `mega train --task lm` (pinned), targets = next byte */
    uint8_t txt[1000];
    for (int i = 0; i < 1000; i++) txt[i] = (uint8_t)((i * 7 + 3) % 256);
    int32_t tok[15], tgt[15], tok2[15], tgt2[15];
    st = 42;
    mega_status r = mega_text_windows(txt, 1000, 3, 5, &st, tok, tgt);
    const size_t off[3] = {343, 276, 113};
    ok = r == MEGA_OK && st == 15755400384260043881ull;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 5; i++) ok &= tok[b * 5 + i] == txt[off[b] + (size_t)i] && tgt[b * 5 + i] == txt[off[b] + (size_t)i + 1];
    TL_CHECK(ok, "text windows: state 42, B 3, T 5 -> windows at 343, 276, 113, targets the next bytes");
    st = 42;
    uint64_t st2 = 42;
    r = mega_text_windows(txt, 1000, 3, 5, &st, tok2, tgt2);
    ok = r == MEGA_OK && !memcmp(tok, tok2, sizeof tok) && !memcmp(tgt, tgt2, sizeof tgt);
    for (int b = 0; b < 3; b++) ok &= tok[b * 5] == txt[mega_data_rng_below(&st2, 995)];
    TL_CHECK(ok && st == st2, "text windows: deterministic in the state, one mega_data_rng_below(n - T) per row");
    st = 9;
    r = mega_text_windows(txt, 6, 2, 5, &st, tok, tgt);
    ok = r == MEGA_OK && tok[0] == txt[0] && tok[5] == txt[0] && tgt[4] == txt[5];
    TL_CHECK(ok, "text windows: n = T + 1 has the one window at 0");
    st = 9;
    expect_fail(mega_text_windows(txt, 5, 2, 5, &st, tok, tgt), "text windows: n < T + 1", "fewer than T + 1", NULL);
    TL_CHECK(st == 9, "a refused draw leaves the state alone");
    expect_fail(mega_text_windows(txt, 1000, 0, 5, &st, tok, tgt), "text windows: B 0", "bad shape", NULL);

    /* whole files */
    mega_bytes b;
    write_str("r.txt", "hello\nworld");
    r = mega_read_file(tpath("r.txt"), "--data", &b);
    TL_CHECK(r == MEGA_OK && b.n == 11 && !memcmp(b.data, "hello\nworld", 11) && b.data[11] == 0,
             "mega_read_file: the bytes, NUL-terminated (%s)", r ? mega_last_error() : "");
    mega_bytes_free(&b);
    TL_CHECK(b.data == NULL && b.n == 0, "mega_bytes_free empties it");
    r = mega_read_file(tpath("absent.txt"), "--data", &b);
    expect_fail(r, "read: missing file", "--data file '", "absent.txt': No such file");
    TL_CHECK(r == MEGA_ERR_NOT_FOUND && !b.data, "missing file: MEGA_ERR_NOT_FOUND, nothing allocated");
    write_str("e.txt", "");
    r = mega_read_file(tpath("e.txt"), "--valid", &b);
    expect_fail(r, "read: empty file", "--valid file '", "e.txt' is empty");
    TL_CHECK(r == MEGA_ERR_FORMAT && !b.data, "empty file: MEGA_ERR_FORMAT");
    r = mega_read_file(tmpdir, "log", &b);
    expect_fail(r, "read: a directory", "log file '", "' is a directory");
    TL_CHECK(r == MEGA_ERR_IO && !b.data, "directory: MEGA_ERR_IO");
    char nd[600];
    snprintf(nd, sizeof nd, "%s/x", tpath("r.txt"));
    r = mega_read_file(nd, "--data", &b);
    expect_fail(r, "read: a path through a file (unreadable)", "r.txt/x': Not a directory", NULL);
    TL_CHECK(r == MEGA_ERR_IO && !b.data, "unreadable path: MEGA_ERR_IO");
    /* larger than the first read buffer */
    size_t big = 200000;
    char *bb = malloc(big);
    for (size_t i = 0; i < big; i++) bb[i] = (char)(i * 31 + 7);
    write_file(tpath("big.bin"), bb, big);
    r = mega_read_file(tpath("big.bin"), "--data", &b);
    TL_CHECK(r == MEGA_OK && b.n == big && !memcmp(b.data, bb, big) && b.data[big] == 0, "mega_read_file: 200000 bytes");
    /* a file of MEGA_MAP_MIN bytes or more is mapped, copy-on-write: writing changes the copy only */
    TL_CHECK(r == MEGA_OK && b.mapped >= big + 1, "mega_read_file maps a 200000-byte file (mapped %zu)", b.mapped);
    const uint8_t first = (uint8_t)bb[0], flipped = (uint8_t)(first ^ 0xffu);
    if (r == MEGA_OK) b.data[0] = flipped;
    mega_bytes c = {0};
    r = mega_read_file(tpath("big.bin"), "--data", &c);
    TL_CHECK(r == MEGA_OK && c.n == big && c.data[0] == first && b.data[0] == flipped,
             "a write into a mapped file's bytes does not reach the file");
    mega_bytes_free(&b), mega_bytes_free(&c);
    TL_CHECK(b.data == NULL && b.n == 0 && b.mapped == 0, "mega_bytes_free unmaps and empties it");
    /* a file of exactly whole pages still ends with a NUL (the page after it is anonymous) */
    write_file(tpath("pages.bin"), bb, (size_t)1 << 17);
    r = mega_read_file(tpath("pages.bin"), "--data", &b);
    TL_CHECK(r == MEGA_OK && b.n == (size_t)1 << 17 && b.mapped > b.n && b.data[b.n] == 0 && !memcmp(b.data, bb, b.n),
             "a mapped file of 131072 bytes: its bytes, then a NUL");
    mega_bytes_free(&b);
    /* a prefix (--max-bytes) is read onto the heap, NUL-terminated; so is a small file */
    r = mega_read_file_max(tpath("big.bin"), "--data", 100000, &b);
    TL_CHECK(r == MEGA_OK && b.n == 100000 && b.mapped == 0 && b.data[b.n] == 0 && !memcmp(b.data, bb, b.n),
             "mega_read_file_max 100000 of a 200000-byte file: read, not mapped");
    mega_bytes_free(&b);
    write_file(tpath("small.bin"), bb, 1000);
    r = mega_read_file(tpath("small.bin"), "--data", &b);
    TL_CHECK(r == MEGA_OK && b.n == 1000 && b.mapped == 0 && b.data[b.n] == 0, "a 1000-byte file is read, not mapped");
    mega_bytes_free(&b);
    free(bb);
}

/* ---------------------------------------------------------------------------------------------
 * format detection, the load-any entry point, fingerprints */
static void test_formats(void) {
    int ok = 1;
    for (int f = MEGA_DATA_AUTO; f <= MEGA_DATA_IDX; f++) {
        mega_data_format g = MEGA_DATA_AUTO;
        ok &= !mega_data_format_parse(mega_data_format_name((mega_data_format)f), &g) && g == (mega_data_format)f;
    }
    mega_data_format g;
    TL_CHECK(ok && mega_data_format_parse("csv", &g) != 0 && mega_data_format_parse(NULL, &g) != 0 &&
                 !strcmp(mega_data_format_name(MEGA_DATA_PAIRS), "pairs"),
             "format names round trip; unknown names refused");
    write_str("fl.tsv", "Source\tTarget\n[MAX 1 2 ]\t2\n");
    write_str("ft.tsv", "pos\tgood\n");
    write_str("fp.tsv", "1\tab\tcd\n");
    TL_CHECK(mega_data_detect(tpath("fl.tsv")) == MEGA_DATA_LISTOPS && mega_data_detect(tpath("ft.tsv")) == MEGA_DATA_TEXT &&
                 mega_data_detect(tpath("fp.tsv")) == MEGA_DATA_PAIRS && mega_data_detect(tpath("none.tsv")) == MEGA_DATA_TEXT,
             "detection: ListOps header, 2 TABs = pairs, else text (also for a missing file)");
    mega_dataset d;
    const char *files[3] = {"fl.tsv", "ft.tsv", "fp.tsv"};
    const mega_data_format fmts[3] = {MEGA_DATA_LISTOPS, MEGA_DATA_TEXT, MEGA_DATA_PAIRS};
    ok = 1;
    for (int i = 0; i < 3; i++) {
        int r = mega_dataset_load(MEGA_DATA_AUTO, tpath(files[i]), NULL, NULL, NULL, &d);
        ok &= r == MEGA_OK && mega_dataset_format(&d) == fmts[i] && d.n == 1;
        mega_dataset_free(&d);
    }
    TL_CHECK(ok, "mega_dataset_load(auto) loads each format, mega_dataset_format names it");
    int r = mega_dataset_load(MEGA_DATA_TEXT, tpath("fp.tsv"), NULL, NULL, NULL, &d);
    expect_fail(r, "pairs file read as text", "fp.tsv:1:", "found 3");
    expect_fail(mega_dataset_load(MEGA_DATA_AUTO, NULL, NULL, NULL, NULL, &d), "no data", "--data FILE is required", NULL);
    expect_fail(mega_dataset_load(MEGA_DATA_IDX, tpath("ft.tsv"), NULL, NULL, NULL, &d), "IDX without files",
                "both --images and --labels", NULL);
    expect_fail(mega_dataset_load(MEGA_DATA_AUTO, NULL, tpath("img.idx"), NULL, NULL, &d), "images without labels",
                "both --images and --labels", NULL);
    expect_fail(mega_dataset_load_idx("", tpath("lab.idx"), NULL, &d), "IDX: empty images path", "images: no file given", NULL);
    expect_fail(mega_dataset_load_listops(NULL, NULL, &d), "ListOps: NULL path", "ListOps: no file given", NULL);
    TL_CHECK(d.n == 0 && d.tok == NULL && d.path == NULL, "a failed load leaves the dataset empty");
    mega_dataset_free(NULL);
    mega_batch bt;
    expect_fail(mega_batch_init(&bt, 0, 4, 0, 0), "batch of 0 rows", "bad shape", NULL);

    /* the classifier's data fingerprint: FNV-1a over each example's tokens, then its label */
    write_str("fg.tsv", "1\tabc\n0\tde\n1\tfgh\n");
    r = mega_dataset_load_text(tpath("fg.tsv"), NULL, &d);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; r == MEGA_OK && i < d.n; i++) {
        h = (h ^ mega_fnv1a64(d.tok[i], (size_t)d.len[i] * sizeof(uint16_t))) * 1099511628211ull;
        h = (h ^ (uint64_t)d.label[i]) * 1099511628211ull;
    }
    uint64_t f1 = r == MEGA_OK ? mega_dataset_fingerprint(&d) : 0;
    mega_dataset_free(&d);
    write_str("fg.tsv", "1\tabc\n0\tdf\n1\tfgh\n");
    r = mega_dataset_load_text(tpath("fg.tsv"), NULL, &d);
    uint64_t f2 = r == MEGA_OK ? mega_dataset_fingerprint(&d) : 0;
    mega_dataset_free(&d);
    TL_CHECK(f1 == h && f1 != f2, "dataset fingerprint: tokens and labels in order; one byte changes it");
}

/* ---------------------------------------------------------------------------------------------
 * the table of formats, and real-valued sequences */
static void test_format_table(void) {
    int n = 0, ok = 1;
    const mega_data_format_info *rows = mega_data_formats(&n);
    for (int i = 0; i < n; i++) {
        mega_data_format g = MEGA_DATA_AUTO;
        ok &= !mega_data_format_parse(rows[i].name, &g) && g == rows[i].id && mega_data_format_row(g) == &rows[i] &&
              rows[i].load && rows[i].help && rows[i].flag[0];
    }
    TL_CHECK(n == 8 && ok && mega_data_format_row(MEGA_DATA_AUTO) == NULL && !strcmp(mega_data_format_name(MEGA_DATA_REAL), "real"),
             "one row per format (%d), each with a name that parses back, a loader, help and its flags", n);
    const mega_data_format_info *idx = mega_data_format_row(MEGA_DATA_IDX);
    TL_CHECK(idx && !strcmp(idx->flag[0], "images") && !strcmp(idx->flag[1], "labels") && !idx->detect &&
                 !mega_data_format_row(MEGA_DATA_REAL)->detect && !mega_data_format_row(MEGA_DATA_TEXT)->flag[1],
             "IDX takes --images and --labels; IDX and real are never detected; text takes one file");
    write_str("rd.txt", "1,2,3\n");
    TL_CHECK(mega_data_detect(tpath("rd.txt")) == MEGA_DATA_TEXT, "a line of numbers is detected as text (real is chosen by name)");
}

/* a real-valued file that loads: labels, values, lengths, format, fingerprint, batches */
static void test_real_load(void) {
    write_str("r.txt", "label, x1, x2, x3\r\n1\t0.5, -2 3e-1\n\n , \n0,1,2,3\nb 4 5 6");
    mega_dataset d;
    int r = mega_dataset_load(MEGA_DATA_REAL, tpath("r.txt"), NULL, NULL, NULL, &d);
    TL_CHECK(r == MEGA_OK && d.n == 3 && d.val && !d.tok && d.max_len == 3 && d.classes.n == 3 && d.n_tokens == 9,
             "real: 3 examples of 3 values (header, empty and separator-only lines skipped; rc %d: %s)", r,
             r ? mega_last_error() : "");
    if (r != MEGA_OK) return;
    TL_CHECK(d.val[0][0] == 0.5f && d.val[0][1] == -2.f && d.val[0][2] == 0.3f && d.val[2][2] == 6.f && d.line[1] == 5 &&
                 d.line[2] == 6 && mega_dataset_format(&d) == MEGA_DATA_REAL,
             "real: the values, the line numbers and the format");
    TL_CHECK(!strcmp(d.classes.names[d.label[0]], "1") && !strcmp(d.classes.names[d.label[2]], "b"), "real: the labels");
    const uint64_t fp = mega_dataset_fingerprint(&d);
    d.val[1][1] = 2.5f;
    TL_CHECK(mega_dataset_fingerprint(&d) != fp, "real: the fingerprint covers the values");
    mega_batch b;
    int idx[2] = {2, 0};
    r = mega_batch_init(&b, 2, 4, 0, 1);
    r = r ? r : mega_batch_fill(&b, &d, idx, 2);
    TL_CHECK(r == MEGA_OK && b.val[0] == 4 && b.val[2] == 6 && b.val[3] == 0 && b.val[4] == (mega_real)0.5f && b.len[0] == 3,
             "real: a real-valued batch holds the values, padded with 0");
    mega_batch_free(&b);
    r = mega_batch_init(&b, 2, 4, 0, 0);
    if (r == MEGA_OK) expect_fail(mega_batch_fill(&b, &d, idx, 2), "real values into a token batch", "real-valued batch", NULL);
    mega_batch_free(&b);
    mega_dataset_free(&d);
    mega_data_opts o = {0};
    o.max_len = 2;
    r = mega_dataset_load_real(tpath("r.txt"), &o, &d);
    TL_CHECK(r == MEGA_OK && d.max_len == 2 && d.n_truncated == 3, "real: --seq-len cuts the values");
    mega_dataset_free(&d);
}

/* malformed real-valued files: one clear line each, the dataset left empty */
static void test_real_errors(void) {
    static const struct {
        const char *what, *text, *n1, *n2;
    } bad[] = {
        {"not a number", "1 0.5 2\n0 0.5 x2\n", "r_bad.txt:2:", "value 2 'x2' is not a number"},
        {"NaN", "1 nan 2\n", "r_bad.txt:1:", "value 1 'nan' is not finite"},
        {"Inf", "1 2 -inf\n", "r_bad.txt:1:", "value 2 '-inf' is not finite"},
        {"beyond float", "1 2 1e39\n", "r_bad.txt:1:", "beyond the float range"},
        {"beyond double", "1 2 1e999\n", "r_bad.txt:1:", "beyond the float range"},
        {"a label alone", "1 2\n3\n", "r_bad.txt:2:", "no values after the label"},
        {"ragged lengths", "1 2 3\n0 4 5\n1 6\n", "r_bad.txt:3: 1 values", "line 1) has 2"},
        {"empty file", "", "r_bad.txt", "no examples"},
        {"only a header", "label,x\n", "r_bad.txt", "no examples"},
        {"trailing junk", "1 0.5e\n", "r_bad.txt:1:", "'0.5e' is not a number"},
        {"bad UTF-8 label", "\377 1 2\n", "r_bad.txt:1:", "not valid UTF-8"},
    };
    mega_dataset d;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_str("r_bad.txt", bad[i].text);
        expect_fail(mega_dataset_load(MEGA_DATA_REAL, tpath("r_bad.txt"), NULL, NULL, NULL, &d), bad[i].what, bad[i].n1, bad[i].n2);
        TL_CHECK(d.n == 0 && !d.val && !d.vpool && !d.path, "%s: the dataset is left empty", bad[i].what);
    }
    expect_fail(mega_dataset_load(MEGA_DATA_REAL, tpath("r_missing.txt"), NULL, NULL, NULL, &d), "real: a missing file",
                "r_missing.txt", NULL);
    expect_fail(mega_dataset_load(MEGA_DATA_REAL, NULL, NULL, NULL, NULL, &d), "real: no file", "--data FILE is required", NULL);
}

/* mega_vocab_encode (the server's reader of one text) gives the ids the loaders store for the
 * same text: ListOps with and without parentheses and an unknown word, bytes with high bytes;
 * its count is the whole text's, its ids cut at cap; a pixel vocabulary is refused */
static void test_vocab_encode(void) {
    const char *src = "( [MAX 2 9 ( [MIN 4 x ) ] )", *txt = "caf\xc3\xa9 ok";
    char line[256];
    snprintf(line, sizeof line, "Source\tTarget\n%s\t9\n", src);
    write_str("enc_lo.tsv", line);
    snprintf(line, sizeof line, "label\ttext\npos\t%s\n", txt);
    write_str("enc_tx.tsv", line);
    for (int kp = 0; kp < 2; kp++) {
        mega_data_opts o;
        memset(&o, 0, sizeof o);
        o.keep_parens = kp;
        mega_dataset d;
        int32_t ids[64];
        size_t n = 0;
        const mega_vocab v = mega_vocab_listops(kp);
        int rc = mega_dataset_load_listops(tpath("enc_lo.tsv"), &o, &d);
        int same = rc == 0 && mega_vocab_encode(&v, src, strlen(src), ids, 64, &n) == MEGA_OK && n == (size_t)d.len[0];
        for (size_t i = 0; same && i < n; i++) same = ids[i] == d.tok[0][i];
        TL_CHECK(same, "mega_vocab_encode ListOps (keep_parens %d): the loader's %d ids (got %zu)", kp, rc ? -1 : d.len[0], n);
        if (!rc) mega_dataset_free(&d);
    }
    mega_dataset d;
    int32_t ids[4] = {-7, -7, -7, -7};
    size_t n = 0;
    const mega_vocab vb = mega_vocab_bytes();
    int rc = mega_dataset_load_text(tpath("enc_tx.tsv"), NULL, &d);
    int same = rc == 0 && mega_vocab_encode(&vb, txt, strlen(txt), ids, 3, &n) == MEGA_OK && n == strlen(txt) && d.len[0] == (int)n;
    for (size_t i = 0; same && i < 3; i++) same = ids[i] == d.tok[0][i];
    TL_CHECK(same && ids[3] == -7, "mega_vocab_encode bytes: the loader's ids, the count of all %zu, only cap = 3 written", strlen(txt));
    if (!rc) mega_dataset_free(&d);
    const mega_vocab vp = mega_vocab_pixels(1, 0.5, 0.5);
    TL_CHECK(mega_vocab_encode(&vp, "12", 2, ids, 4, &n) == MEGA_ERR_INVALID && strstr(mega_last_error(), "pixel"),
             "mega_vocab_encode refuses a pixel vocabulary (%s)", mega_last_error());
}

int main(int argc, char **argv) {
    const char *bin = getenv("MEGA_BIN"), *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
    if (bin) snprintf(mega_bin, sizeof mega_bin, "%s", bin);
    else if (slash) snprintf(mega_bin, sizeof mega_bin, "%.*s/mega", (int)(slash - argv[0]), argv[0]);
    else snprintf(mega_bin, sizeof mega_bin, "build/mega");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mega_cls_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_eval();
    test_parity();
    test_generator();
    test_generator_errors();
    test_cmd();
    test_listops_malformed();
    test_text();
    test_idx();
    test_vocab();
    test_vocab_encode();
    test_text_helpers();
    test_formats();
    test_format_table();
    test_real_load();
    test_real_errors();
    test_fuzz();
    rm_tree(tmpdir);
    return tl_finish();
}
