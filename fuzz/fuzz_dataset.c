/* The classification TSV loaders through mega_dataset_load (auto-detected, ListOps, text, real,
 * pairs), then every example through padded batches and the fingerprint. The first three bytes
 * are the options:
 *   byte 0: bits 0-1 the format (auto, listops, text, pairs), bit 2 keep_parens, bit 3 map the
 *           labels with a given class list (evaluation), bit 4 a batch shorter than the longest
 *           example (cut rows), bit 5 the real format instead (real-valued sequences)
 *   byte 1: max_len (0 = keep everything, else 1..63)
 *   byte 2: max_examples (0 = all, else 1..15)
 * and the rest is the file. Invariants: every example has a length in [1, max_len], a label in
 * [0, classes), tokens inside the vocabulary (real: finite values, every example as long as the
 * first); a batch row never exceeds its capacity. The
 * ListOps evaluator (mega_listops_eval) also reads the text, as an expression. */
#include "fuzz_common.h"

#include <math.h>

static char *given_names[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "neg", "pos"};

static void check_batches(const mega_dataset *d, int cut) {
    int L = d->max_len, L2 = d->pairs ? d->max_len2 : 0;
    if (cut && L > 1) L = L / 2;
    if (cut && L2 > 1) L2 = L2 / 2;
    const int B = d->n < 8 ? d->n : 8;
    mega_batch b;
    FZ_CHECK(mega_batch_init(&b, B, L, L2, d->val != NULL) == MEGA_OK);
    int idx[8];
    for (int i0 = 0; i0 < d->n; i0 += B) {
        int n = d->n - i0 < B ? d->n - i0 : B;
        for (int i = 0; i < n; i++) idx[i] = i0 + i;
        FZ_CHECK(mega_batch_max_len(d, idx, n, 0) <= d->max_len);
        FZ_CHECK(mega_batch_fill(&b, d, idx, n) == MEGA_OK);
        for (int r = 0; r < B; r++) {
            FZ_CHECK(b.len[r] >= 0 && b.len[r] <= L);
            FZ_CHECK(r < n ? b.label[r] == d->label[idx[r]] : b.label[r] == -1);
            for (int t = 0; t < L && !d->val; t++) FZ_CHECK(b.tok[(size_t)r * L + t] >= 0 && b.tok[(size_t)r * L + t] < d->vocab.size);
            for (int t = 0; t < L && d->val; t++) FZ_CHECK(isfinite(b.val[(size_t)r * L + t]));
            if (L2) FZ_CHECK(b.len2[r] >= 0 && b.len2[r] <= L2);
        }
    }
    idx[0] = d->n;
    FZ_CHECK(mega_batch_fill(&b, d, idx, 1) == MEGA_ERR_INVALID);
    mega_batch_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned o0 = fz_byte(&in), o1 = fz_byte(&in), o2 = fz_byte(&in);
    static const mega_data_format formats[4] = {MEGA_DATA_AUTO, MEGA_DATA_LISTOPS, MEGA_DATA_TEXT, MEGA_DATA_PAIRS};
    const mega_classes given = {(int)(sizeof given_names / sizeof *given_names), given_names};
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    o.keep_parens = (o0 >> 2) & 1;
    o.classes = (o0 >> 3) & 1 ? &given : NULL;
    o.max_len = (int)(o1 % 64);
    o.max_examples = (int)(o2 % 16);
    const char *path = fz_write("data.tsv", in.p, in.n);
    /* the ListOps evaluator on the text (a Source expression, or anything) */
    char *expr = fz_cstr(in.p, in.n);
    int value = -1;
    if (mega_listops_eval(expr, &value) == MEGA_OK) FZ_CHECK(value >= 0 && value <= 9);
    free(expr);
    mega_data_format fmt = (o0 >> 5) & 1 ? MEGA_DATA_REAL : formats[o0 & 3];
    (void)mega_data_detect(path);
    mega_dataset d;
    mega_status st = mega_dataset_load(fmt, path, NULL, NULL, &o, &d);
    if (st != MEGA_OK) {
        FZ_CHECK(d.n == 0 && d.tok == NULL && d.pool == NULL && d.val == NULL && d.vpool == NULL && d.classes.n == 0);
        FZ_CHECK(mega_last_error()[0] != 0);
        mega_dataset_free(&d);
        return 0;
    }
    FZ_CHECK(d.n >= 1 && d.classes.n >= 1);
    if (o.max_examples) FZ_CHECK(d.n <= o.max_examples);
    if (o.classes) FZ_CHECK(d.classes.n == given.n);
    for (int i = 0; i < d.n; i++) {
        FZ_CHECK(d.len[i] >= 1 && d.len[i] <= d.max_len);
        if (o.max_len) FZ_CHECK(d.len[i] <= o.max_len);
        FZ_CHECK(d.label[i] >= 0 && d.label[i] < d.classes.n);
        for (int t = 0; t < d.len[i] && !d.val; t++) FZ_CHECK(d.tok[i][t] < d.vocab.size && d.tok[i][t] != d.vocab.pad);
        for (int t = 0; t < d.len[i] && d.val; t++) FZ_CHECK(isfinite(d.val[i][t]));
        if (d.val) FZ_CHECK(d.len[i] == d.len[0]); /* real: every example as long as the first */
        if (d.pairs) {
            FZ_CHECK(d.len2[i] >= 1 && d.len2[i] <= d.max_len2);
            for (int t = 0; t < d.len2[i]; t++) FZ_CHECK(d.tok2[i][t] < d.vocab.size);
        }
    }
    for (int c = 0; c < d.classes.n; c++) FZ_CHECK(mega_classes_find(&d.classes, d.classes.names[c]) == c);
    char *cj = mega_classes_to_json(&d.classes);
    mega_classes back;
    FZ_CHECK(cj && mega_classes_from_json(cj, &back) == MEGA_OK && back.n == d.classes.n);
    mega_classes_free(&back);
    free(cj);
    (void)mega_dataset_fingerprint(&d);
    (void)mega_dataset_format(&d);
    check_batches(&d, (o0 >> 4) & 1);
    mega_dataset_free(&d);
    return 0;
}
