#include "common.h"

#include <stdarg.h>

#include <errno.h>
#include <fcntl.h>
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

static int out_said; /* the error about standard output was printed */

int out_failed(void) {
    if (!ferror(stdout)) return 0;
    if (!out_said) cli_error("writing standard output: %s", strerror(errno ? errno : EIO));
    out_said = 1;
    return 1;
}

int out_close(void) {
    errno = 0;
    if (fflush(stdout) || ferror(stdout)) {
        out_failed();
        fclose(stdout);
        return 1;
    }
    if (fclose(stdout) && !out_said) out_said = cli_error("writing standard output: %s", strerror(errno));
    return out_said;
}

void progress_init(progress_t *p, FILE *f, int quiet, double every) {
    p->f = f, p->tty = is_tty(f), p->quiet = quiet, p->live = 0, p->every = every, p->next = 0;
}

int progress_due(progress_t *p, int final) {
    if (p->quiet) return 0;
    const double now = now_sec();
    if (!final && now < p->next) return 0;
    p->next = now + (p->tty ? 0.25 : p->every);
    return 1;
}

void progress_print(progress_t *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->tty) fputc('\r', p->f);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
    if (p->tty) fputs("   ", p->f), p->live = 1;
    else fputc('\n', p->f);
    fflush(p->f);
}

void progress_break(progress_t *p) {
    if (p->live) fputc('\n', p->f), fflush(p->f);
    p->live = 0;
}

/* "name value" pairs of one field table, comma-separated, wrapped before 100 columns; block
 * fields that do not apply to the mixer are left out */
static void print_fields(FILE *f, const mega_field *fd, int n, const void *cfg, mega_mixer_kind mixer, const char *ind,
                         int *col) {
    for (int i = 0; i < n; i++) {
        if (!mega_field_applies(&fd[i], mixer) || !strcmp(fd[i].name, "bidirectional")) continue;
        char v[64], item[128];
        mega_field_format(&fd[i], cfg, v, sizeof v);
        int len = snprintf(item, sizeof item, "%s %s", fd[i].name, v);
        if (*col > 0 && *col + 2 + len > 100) {
            fprintf(f, ",\n%s", ind);
            *col = 0;
        } else if (*col > 0) {
            fprintf(f, ", ");
            *col += 2;
        } else {
            fprintf(f, "%s", ind);
        }
        fprintf(f, "%s", item);
        *col += len + (int)strlen(ind) * (*col == 0);
    }
}

void print_config(FILE *f, const mega_field *mf, int nmf, const void *cfg, const mega_block_config *block, const char *ind) {
    int nb, col = 0;
    const mega_field *bf = mega_block_config_fields(&nb);
    print_fields(f, mf, nmf, cfg, block->mixer, ind, &col);
    print_fields(f, bf, nb, block, block->mixer, ind, &col);
    fprintf(f, "\n");
}

void print_lm_config(FILE *f, const mega_lm_config *c, const char *ind) {
    int n;
    const mega_field *mf = mega_lm_config_fields(&n);
    print_config(f, mf, n, c, &c->block, ind);
}

void print_cls_config(FILE *f, const mega_cls_config *c, const char *ind) {
    int n;
    const mega_field *mf = mega_cls_config_fields(&n);
    print_config(f, mf, c->mlm ? n : n - 1, c, &c->block, ind); /* "mlm" (the last) on masked-LM models only */
}

/* ---- memory -------------------------------------------------------------------------------- */

int64_t tool_max_memory;
mega_optim_kind tool_optim = MEGA_OPTIM_ADAMW;

const char *fmt_bytes(char *buf, size_t n, uint64_t b) { return mega_fmt_bytes(buf, n, b); }

uint64_t file_size(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) return 0;
    return (uint64_t)st.st_size;
}

void fmt_run_memory(char *buf, size_t n, const run_memory *r, const char *how) {
    char t[32], w[32], g[32], o[32], b[32], d[32], l[32];
    const mega_memory *m = &r->model;
    size_t k = (size_t)snprintf(buf, n, "about %s: weights %s", fmt_bytes(t, sizeof t, r->total), fmt_bytes(w, sizeof w, m->params));
    if (m->grads && k < n) k += (size_t)snprintf(buf + k, n - k, ", gradients %s", fmt_bytes(g, sizeof g, m->grads));
    if (m->optimizer && k < n)
        k += (size_t)snprintf(buf + k, n - k, ", %s %s %s", tool_optim == MEGA_OPTIM_ADAMW ? "AdamW" : mega_optim_name(tool_optim),
                              tool_optim == MEGA_OPTIM_ADAMW ? "moments" : "state", fmt_bytes(o, sizeof o, m->optimizer));
    if (k < n)
        k += (size_t)snprintf(buf + k, n - k, ", buffers %s%s%s%s", fmt_bytes(b, sizeof b, m->buffers), how ? " (" : "",
                              how ? how : "", how ? ")" : "");
    if (r->data && k < n) k += (size_t)snprintf(buf + k, n - k, ", data %s", fmt_bytes(d, sizeof d, r->data));
    if (r->save && k < n) k += (size_t)snprintf(buf + k, n - k, ", checkpoint saves %s", fmt_bytes(d, sizeof d, r->save));
    if (k < n)
        snprintf(buf + k, n - k, "; limit %s (%s)", fmt_bytes(l, sizeof l, r->limit),
                 r->limit_given ? "--max-memory" : "the memory available");
}

int memory_guard(const char *what, const char *how, const char *advice, const mega_memory *model, uint64_t data,
                 uint64_t resident, int64_t max_memory, run_memory *r) {
    memset(r, 0, sizeof *r);
    r->model = *model, r->data = data;
    if (model->optimizer) { /* the models count AdamW's two moments: the optimizer of the run instead */
        r->model.optimizer = (size_t)mega_optim_state_reals(tool_optim) * model->params;
        r->model.total = model->total - model->optimizer + r->model.optimizer;
    }
    r->save = 2 * (uint64_t)r->model.optimizer; /* 0 without an optimizer (evaluation) */
    r->total = (uint64_t)model->total + data + r->save;
    r->limit_given = max_memory > 0;
    /* the memory available now no longer holds what is already allocated: add it back */
    const uint64_t avail = (uint64_t)mega_memory_available();
    r->limit = r->limit_given ? (uint64_t)max_memory : avail + resident;
    if (r->total <= r->limit) return 0;
    char msg[512];
    fmt_run_memory(msg, sizeof msg, r, how);
    return cli_error("%s would need %s; %s%s", what, msg, advice ? advice : "",
                     r->limit_given ? "raise --max-memory to run anyway" : "set --max-memory to run anyway");
}

FILE *open_input(const char *path, const char *what) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return cli_error("%s '%s': %s", what, path, strerror(errno)), NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cli_error("%s '%s': %s", what, path, strerror(e)), NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cli_error("%s '%s' is %s", what, path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file"), NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return cli_error("%s '%s': %s", what, path, strerror(errno)), NULL;
    }
    return f;
}

/* the row of the format read from two files (IDX) */
static const mega_data_format_info *file_pair_row(void) {
    int n;
    const mega_data_format_info *r = mega_data_formats(&n);
    for (int i = 0; i < n; i++)
        if (r[i].flag[1]) return &r[i];
    return NULL;
}

const char *data_format_choices(void) {
    static char buf[256];
    if (!buf[0]) {
        int n, o = snprintf(buf, sizeof buf, "auto");
        const mega_data_format_info *r = mega_data_formats(&n);
        for (int i = 0; i < n && o > 0 && (size_t)o < sizeof buf; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "|%s", r[i].name);
    }
    return buf;
}

const char *data_format_help(void) {
    static char buf[2048];
    if (!buf[0]) {
        int n, o = snprintf(buf, sizeof buf, "input format (auto: from the first line of --data, one of");
        const mega_data_format_info *r = mega_data_formats(&n);
        for (int i = 0, k = 0; i < n && (size_t)o < sizeof buf; i++)
            if (r[i].detect) o += snprintf(buf + o, sizeof buf - (size_t)o, "%s %s", k++ ? "," : "", r[i].name);
        if ((size_t)o < sizeof buf) o += snprintf(buf + o, sizeof buf - (size_t)o, ")");
        for (int i = 0; i < n && (size_t)o < sizeof buf; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "; %s: %s", r[i].name, r[i].help);
    }
    return buf;
}

const char *data_file_flag(const char *prefix, int i) {
    static char buf[2][2][64];
    const int v = prefix && *prefix, k = i ? 1 : 0;
    const mega_data_format_info *r = file_pair_row();
    if (!buf[v][k][0]) snprintf(buf[v][k], sizeof buf[v][k], "%s%s", v ? prefix : "", r ? r->flag[k] : "?");
    return buf[v][k];
}

const char *data_file_help(const char *prefix, int i) {
    static char buf[2][2][256];
    const int v = prefix && *prefix, k = i ? 1 : 0;
    const mega_data_format_info *r = file_pair_row();
    if (!r) return "";
    /* the first file names its partner: "..., with --labels" */
    if (!buf[v][k][0])
        snprintf(buf[v][k], sizeof buf[v][k], "%s%s%s%s", v ? "validation data: " : "", r->flag_help[k], k ? "" : ", with --",
                 k ? "" : data_file_flag(prefix, 1));
    return buf[v][k];
}

int data_flags_check(const char *const flag[3], const char *data, const char *images, const char *labels) {
    const mega_data_format_info *r = file_pair_row();
    const char *what = r ? r->what : "?";
    /* two datasets named at once: one of them would be silently ignored */
    if (data && (images || labels))
        return cli_error("--%s and --%s/--%s name two datasets: give --%s (text) or --%s with --%s (%s images), not both",
                         flag[0], flag[1], flag[2], flag[0], flag[1], flag[2], what);
    if (!images != !labels) return cli_error("%s data needs both --%s and --%s", what, flag[1], flag[2]);
    return 0;
}

int meta_fdict(const mega_st_file *f, const char *key, int size, const char *path, const char *what, mega_fdict **d) {
    *d = NULL;
    const char *v = mega_st_meta(f, key);
    if (!v || !strstr(v, "\"fairseq\"")) return 0;
    if (mega_fdict_from_json(v, d) != MEGA_OK) return cli_error("%s: %s", path, mega_last_error());
    if (mega_fdict_size(*d) != size) {
        int n = mega_fdict_size(*d);
        mega_fdict_free(*d), *d = NULL;
        return cli_error("%s: the %s has %d tokens but the model's vocabulary has %d", path, what, n, size);
    }
    return 0;
}

int meta_bpe(const char *path, const mega_s2s_config *c, mega_bpe **src, mega_bpe **tgt) {
    *src = *tgt = NULL;
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    const char *v = mega_st_meta(f, "vocab"), *ms = mega_st_meta(f, "src-bpe"), *mt = mega_st_meta(f, "tgt-bpe");
    int rc = 0;
    if (v && strstr(v, "\"bpe\"")) {
        if (!ms && !mt) rc = cli_error("%s: a subword (BPE) model without its merge lists (metadata \"src-bpe\", \"tgt-bpe\")", path);
        if (!rc && ms && mega_bpe_from_string(ms, strlen(ms), src) != MEGA_OK) rc = cli_error("%s: src-bpe: %s", path, mega_last_error());
        if (!rc && mt && ms && !strcmp(ms, mt)) *tgt = *src; /* one vocabulary for both sides */
        else if (!rc && mt && mega_bpe_from_string(mt, strlen(mt), tgt) != MEGA_OK)
            rc = cli_error("%s: tgt-bpe: %s", path, mega_last_error());
        if (!rc && (mega_bpe_vocab_size(*src) != c->src_vocab_size || mega_bpe_vocab_size(*tgt) != c->tgt_vocab_size ||
                    c->padding_idx != MEGA_S2S_PAD || c->eos_idx != MEGA_S2S_EOS))
            rc = cli_error("%s: the subword vocabularies (source %d, target %d tokens; pad 256, eos 257) do not match the "
                           "model's (%d/%d, pad %d, eos %d)", path, mega_bpe_vocab_size(*src), mega_bpe_vocab_size(*tgt),
                           c->src_vocab_size, c->tgt_vocab_size, c->padding_idx, c->eos_idx);
    } else if (ms || mt) {
        rc = cli_error("%s: a BPE merge list in a model whose vocabulary is not \"bpe\"", path);
    }
    mega_st_close(f);
    if (rc) {
        if (*tgt != *src) mega_bpe_free(*tgt);
        mega_bpe_free(*src), *src = *tgt = NULL;
    }
    return rc;
}
