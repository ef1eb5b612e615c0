/* The official LRA text data as it ships (fairseq binarized, read by the lra-text task of
 * fairseq/tasks/long_range_arena.py) into a classification dataset: include/mega_data.h
 * mega_dataset_load_lra_bin. */
#include "data/data.h"

#include <sys/stat.h>

/* dir/sub/name into buf (cap bytes); MEGA_ERR_INVALID when it does not fit */
static mega_status join(char *buf, size_t cap, const char *dir, const char *sub, const char *name) {
    const int k = snprintf(buf, cap, "%s/%s/%s", dir, sub, name);
    if (k < 0 || (size_t)k >= cap) MEGA_FAIL(MEGA_ERR_INVALID, "LRA data '%s': the path is too long", dir);
    return MEGA_OK;
}

static int is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

/* src-bin/dict.txt against the model's dictionary: the same token at each of its ids; the
 * model's further ids are the <CLS> the task appends (LRATextTask.setup_task) or fillers */
static mega_status check_src_dict(const char *path, const mega_fdict *model) {
    mega_fdict *dd;
    MEGA_TRY(mega_fdict_load_txt(path, MEGA_FDICT_WORD, &dd));
    const int nm = mega_fdict_size(model), nd = mega_fdict_size(dd);
    mega_status st = MEGA_OK;
    char a[48], b[48];
    for (int i = 0; i < nd && !st; i++) {
        const char *x = i < nm ? mega_fdict_token(model, i) : NULL, *y = mega_fdict_token(dd, i);
        if (!x)
            st = mega__error(MEGA_ERR_FORMAT, "%s has %d tokens, more than the model's %d (another dictionary)", path, nd, nm);
        else if (strcmp(x, y))
            st = mega__error(MEGA_ERR_FORMAT, "%s: id %d is '%s' but the model's id %d is '%s' (another dictionary)", path, i,
                             mega__data_show(y, strlen(y), a, sizeof a), i, mega__data_show(x, strlen(x), b, sizeof b));
    }
    for (int i = nd; i < nm && !st; i++)
        if (strcmp(mega_fdict_token(model, i), "<CLS>") && strncmp(mega_fdict_token(model, i), "madeupword", 10))
            st = mega__error(MEGA_ERR_FORMAT, "%s has %d tokens but the model has %d, not only <CLS> and fillers after them", path,
                             nd, nm);
    mega_fdict_free(dd);
    return st;
}

/* the class names: label-bin/dict.txt's tokens after the 4 specials, its madeupword fillers
 * (fairseq-preprocess pads every dictionary to a multiple of 8) left out */
static mega_status label_names(const char *path, mega_fdict **ld, mega_classes *names) {
    MEGA_TRY(mega_fdict_load_txt(path, MEGA_FDICT_WORD, ld));
    int n = mega_fdict_size(*ld);
    while (n > 4 && !strncmp(mega_fdict_token(*ld, n - 1), "madeupword", 10)) n--;
    if (n <= 4) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: no labels", path);
    names->names = calloc((size_t)(n - 4), sizeof *names->names);
    if (!names->names) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    for (int i = 4; i < n; i++) {
        if (!(names->names[i - 4] = strdup(mega_fdict_token(*ld, i)))) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        names->n = i - 3;
    }
    return MEGA_OK;
}

/* sequence i of ds into the pool: <CLS> first when cls >= 0, cut at opts->max_len (the task's
 * TruncateDataset); *off, *len */
static mega_status put_seq(mega__builder *b, const mega_fbin *ds, size_t i, int32_t *buf, int V, int cls, size_t *off,
                           int *len) {
    mega_dataset *d = b->d;
    const size_t n = mega_fbin_length(ds, i);
    MEGA_TRY(mega_fbin_read(ds, i, V, buf + 1));
    buf[0] = cls;
    const int32_t *s = cls >= 0 ? buf : buf + 1;
    size_t k = cls >= 0 ? n + 1 : n;
    if (b->o->max_len > 0 && k > (size_t)b->o->max_len) k = (size_t)b->o->max_len, d->n_truncated++;
    if (k == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: sequence %zu is empty", b->path, i);
    MEGA_TRY(mega__builder_reserve(b, k));
    *off = d->pool_n;
    for (size_t t = 0; t < k; t++) d->pool[d->pool_n + t] = (uint16_t)s[t];
    d->pool_n += k;
    d->n_tokens += (int64_t)k;
    *len = (int)k;
    return MEGA_OK;
}

/* the label of example i: its ids with </s> stripped (StripTokenDataset) must be one label */
static mega_status put_label(mega__builder *b, const mega_fbin *lab, const mega_fdict *ld, const mega_classes *names,
                             size_t i, int32_t *buf, int *li) {
    const int eos = mega_fdict_get_specials(ld).eos;
    const size_t n = mega_fbin_length(lab, i);
    if (n > 16) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: label %zu has %zu tokens, not one label", b->path, i, n);
    MEGA_TRY(mega_fbin_read(lab, i, mega_fdict_size(ld), buf));
    size_t s = 0, e = n;
    while (s < e && buf[s] == eos) s++;
    while (e > s && buf[e - 1] == eos) e--;
    if (e - s != 1 || buf[s] < 4 || buf[s] - 4 >= names->n)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: label %zu is not one token of the label dictionary's %d labels", b->path, i, names->n);
    const char *name = names->names[buf[s] - 4];
    return mega__builder_label(b, name, strlen(name), (int)i + 1, li);
}

typedef struct {
    mega_fbin *src, *src1, *lab;
    mega_fdict *ld;
    mega_classes names;
    int32_t *buf;
} lra_files;

static void lra_files_free(lra_files *f) {
    mega_fbin_close(f->src), mega_fbin_close(f->src1), mega_fbin_close(f->lab);
    mega_fdict_free(f->ld);
    mega_classes_free(&f->names);
    free(f->buf);
}

/* open the split's datasets and dictionaries, checked against each other and the model's */
static mega_status lra_open(const char *dir, const char *split, const mega_fdict *dict, lra_files *f) {
    char p[4096], name[512];
    if (snprintf(name, sizeof name, "%s.idx", split) >= (int)sizeof name) MEGA_FAIL(MEGA_ERR_INVALID, "LRA split name too long");
    MEGA_TRY(join(p, sizeof p, dir, "src-bin", name));
    if (!is_file(p))
        MEGA_FAIL(MEGA_ERR_NOT_FOUND, "LRA data '%s': no %s (the lra-text task reads src-bin/%s.idx/.bin, label-bin/%s.idx/.bin "
                  "and their dict.txt)", dir, p, split, split);
    MEGA_TRY(join(p, sizeof p, dir, "src-bin", "dict.txt"));
    if (is_file(p)) MEGA_TRY(check_src_dict(p, dict));
    MEGA_TRY(join(p, sizeof p, dir, "label-bin", "dict.txt"));
    MEGA_TRY(label_names(p, &f->ld, &f->names));
    MEGA_TRY(join(p, sizeof p, dir, "src-bin", split));
    MEGA_TRY(mega_fbin_open(p, &f->src));
    MEGA_TRY(join(p, sizeof p, dir, "label-bin", split));
    MEGA_TRY(mega_fbin_open(p, &f->lab));
    MEGA_TRY(join(p, sizeof p, dir, "src1-bin", name));
    if (is_file(p)) { /* the two-text task (AAN): src1-bin beside src-bin */
        MEGA_TRY(join(p, sizeof p, dir, "src1-bin", split));
        MEGA_TRY(mega_fbin_open(p, &f->src1));
        if (mega_fbin_count(f->src1) != mega_fbin_count(f->src))
            MEGA_FAIL(MEGA_ERR_FORMAT, "LRA data '%s': src1-bin/%s has %zu sequences but src-bin/%s has %zu", dir, split,
                      mega_fbin_count(f->src1), split, mega_fbin_count(f->src));
    }
    if (mega_fbin_count(f->lab) != mega_fbin_count(f->src))
        MEGA_FAIL(MEGA_ERR_FORMAT, "LRA data '%s': label-bin/%s has %zu labels but src-bin/%s has %zu sequences", dir, split,
                  mega_fbin_count(f->lab), split, mega_fbin_count(f->src));
    size_t longest = 16;
    for (size_t i = 0; i < mega_fbin_count(f->src); i++) {
        longest = mega_fbin_length(f->src, i) > longest ? mega_fbin_length(f->src, i) : longest;
        if (f->src1) longest = mega_fbin_length(f->src1, i) > longest ? mega_fbin_length(f->src1, i) : longest;
    }
    if (!(f->buf = malloc((longest + 1) * sizeof *f->buf))) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    return MEGA_OK;
}

static mega_status lra_read(mega__builder *b, lra_files *f, const mega_fdict *dict, int cls) {
    mega_dataset *d = b->d;
    const int V = mega_fdict_size(dict);
    d->pairs = f->src1 != NULL;
    for (size_t i = 0; i < mega_fbin_count(f->src); i++) {
        if (b->o->max_examples > 0 && d->n >= b->o->max_examples) break;
        MEGA_TRY(mega__builder_grow(b, d->pairs));
        MEGA_TRY(put_label(b, f->lab, f->ld, &f->names, i, f->buf, &b->ex_lab[d->n]));
        MEGA_TRY(put_seq(b, f->src, i, f->buf, V, cls, &b->off[d->n], &d->len[d->n]));
        if (f->src1) MEGA_TRY(put_seq(b, f->src1, i, f->buf, V, cls, &b->off2[d->n], &d->len2[d->n]));
        d->line[d->n] = (int)i + 1;
        d->n++;
    }
    return MEGA_OK;
}

mega_status mega_dataset_load_lra_bin(const char *dir, const char *split, const mega_fdict *dict, int prepend_cls,
                                      const mega_data_opts *opts, mega_dataset *d) {
    mega_data_opts o0 = {0};
    if (!opts) opts = &o0;
    memset(d, 0, sizeof *d);
    if (!dir || !*dir || !split || !*split || !dict) MEGA_FAIL(MEGA_ERR_INVALID, "LRA data: no directory, split or dictionary given");
    if (mega_fdict_size(dict) > 65536)
        MEGA_FAIL(MEGA_ERR_INVALID, "LRA data '%s': a dictionary of %d tokens (datasets hold ids below 65536)", dir, mega_fdict_size(dict));
    int cls = -1;
    for (int i = 0; prepend_cls && i < mega_fdict_size(dict) && cls < 0; i++)
        if (!strcmp(mega_fdict_token(dict, i), "<CLS>")) cls = i;
    if (prepend_cls && cls < 0) MEGA_FAIL(MEGA_ERR_INVALID, "LRA data '%s': the model pools <CLS> but its dictionary has none", dir);
    lra_files f = {0};
    mega_status st = lra_open(dir, split, dict, &f);
    /* the labels are looked up among the label dictionary's names: class id = label id - 4, as
     * the task's OffsetTokensDataset(-nspecial) gives */
    mega_data_opts o = *opts;
    o.classes = &f.names;
    char path[4200];
    snprintf(path, sizeof path, "%s/label-bin/%s", dir, split);
    mega__builder b;
    if (!st) st = mega__builder_init(&b, path, &o, d);
    else memset(&b, 0, sizeof b);
    if (!st) st = lra_read(&b, &f, dict, cls);
    if (!st) st = mega__builder_finish(&b, NULL);
    if (!st) {
        d->vocab = mega_vocab_bytes();
        d->vocab.size = mega_fdict_size(dict), d->vocab.pad = mega_fdict_get_specials(dict).pad;
        d->vocab.unk = mega_fdict_get_specials(dict).unk;
    }
    mega__builder_free(&b);
    lra_files_free(&f);
    if (st) mega_dataset_free(d);
    return st;
}
