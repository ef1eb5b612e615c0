/* mega plot DIR: an SVG of the training (and validation) curves from DIR/log.jsonl. */
#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

typedef struct {
    double *x, *y;
    size_t n, cap;
} series;

static int push(series *s, double x, double y) {
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 256;
        double *nx = realloc(s->x, c * sizeof(double)), *ny = realloc(s->y, c * sizeof(double));
        if (!nx || !ny) return -1;
        s->x = nx, s->y = ny, s->cap = c;
    }
    s->x[s->n] = x, s->y[s->n] = y, s->n++;
    return 0;
}

/* A "nice" axis over [lo, hi]: ticks at multiples of 1, 2 or 5 x 10^k, about n of them; the
 * axis is widened to whole ticks. *decimals: digits the labels need. */
static void nice_axis(double *lo, double *hi, int n, double *step, int *decimals) {
    double span = *hi - *lo;
    if (!(span > 0)) span = fabs(*lo) > 0 ? fabs(*lo) : 1;
    const double raw = span / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    *step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    *lo = floor(*lo / *step) * *step;
    *hi = ceil(*hi / *step) * *step;
    if (*hi <= *lo) *hi = *lo + *step;
    *decimals = *step >= 1 ? 0 : (int)ceil(-log10(*step) - 1e-9);
}

typedef struct {
    series tr, va;
    const char *metric; /* "bpb" (language models) or "acc" (classifiers, translation) */
    int bad;            /* malformed lines */
    int skipped;        /* points with a non-finite or out-of-range value (never drawn) */
} plot_log;

/* values beyond this are not drawn: a diverged run's 1e30 would flatten every other point, and
 * the axes' arithmetic must stay finite */
#define PLOT_MAX 1e9

/* a point worth drawing: finite, in range (steps are not negative) */
static int drawable(double x, double y) { return isfinite(x) && isfinite(y) && x >= 0 && x <= 1e15 && fabs(y) <= PLOT_MAX; }

/* the training and validation points of DIR/log.jsonl */
static int read_log(const char *path, plot_log *g) {
    mega_bytes b;
    memset(g, 0, sizeof *g);
    if (mega_read_file(path, "log", &b) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    for (size_t pos = 0; pos < b.n;) {
        size_t e = pos;
        while (e < b.n && b.data[e] != '\n') e++;
        cJSON *j = e > pos ? cJSON_ParseWithLength((const char *)b.data + pos, e - pos) : NULL;
        const cJSON *st = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
        for (int k = 0; j && k < 2 && !g->metric; k++) {
            const char *m = k ? "acc" : "bpb", *vm = k ? "valid_acc" : "valid_bpb";
            if (cJSON_GetObjectItemCaseSensitive(j, m) || cJSON_GetObjectItemCaseSensitive(j, vm)) g->metric = m;
        }
        char vkey[32];
        snprintf(vkey, sizeof vkey, "valid_%s", g->metric ? g->metric : "bpb");
        const cJSON *l = j ? cJSON_GetObjectItemCaseSensitive(j, g->metric ? g->metric : "bpb") : NULL;
        const cJSON *v = j ? cJSON_GetObjectItemCaseSensitive(j, vkey) : NULL;
        if (e > pos && !cJSON_IsNumber(st)) g->bad++;
        else if (cJSON_IsNumber(l) || cJSON_IsNumber(v)) {
            const double x = st->valuedouble, y = cJSON_IsNumber(l) ? l->valuedouble : v->valuedouble;
            if (!drawable(x, y)) g->skipped++;
            else if (push(cJSON_IsNumber(l) ? &g->tr : &g->va, x, y)) g->bad++;
        }
        cJSON_Delete(j);
        pos = e + 1;
    }
    mega_bytes_free(&b);
    if (g->bad) fprintf(stderr, "mega: warning: %d malformed line(s) in %s were skipped\n", g->bad, path);
    if (g->skipped)
        fprintf(stderr, "mega: warning: %d point(s) of %s with a non-finite value or one beyond %g were not drawn\n",
                g->skipped, path, PLOT_MAX);
    if (!g->tr.n && !g->va.n) return cli_error("%s holds no training records to draw", path), 2;
    return 0;
}

/* a growing text buffer */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void emit(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->oom || w < 0) return;
    while (b->len + (size_t)w + 1 > b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 1 << 16;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns, b->cap = nc;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)w;
}

/* s as SVG text: & < > " ' escaped, control characters dropped */
static void emit_text(sbuf *o, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': emit(o, "&amp;"); break;
        case '<': emit(o, "&lt;"); break;
        case '>': emit(o, "&gt;"); break;
        case '"': emit(o, "&quot;"); break;
        case '\'': emit(o, "&apos;"); break;
        default:
            if ((unsigned char)*s >= 0x20) emit(o, "%c", *s);
        }
    }
}

/* ticks lo, lo + step, ... up to hi, counted (never an endless loop when step is below the
 * resolution of lo) */
static int tick_count(double lo, double hi, double step) {
    double n = floor((hi - lo) / step + 0.5);
    return !(n >= 0) ? 0 : n > 50 ? 50 : (int)n;
}

static void write_svg(sbuf *o, const plot_log *g, const char *dir, const char *what) {
    double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY, xs, ys;
    const series *all[2] = {&g->tr, &g->va};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            x1 = fmax(x1, all[k]->x[i]);
            y0 = fmin(y0, all[k]->y[i]), y1 = fmax(y1, all[k]->y[i]);
        }
    int xd, yd;
    nice_axis(&x0, &x1, 6, &xs, &xd);
    nice_axis(&y0, &y1, 6, &ys, &yd);
    const double W = 800, H = 480, L = 70, R = 20, T = 40, Bm = 50;
#define PX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define PY(y) (T + (y1 - (y)) / (y1 - y0) * (H - T - Bm))
    emit(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    emit(o, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    emit(o, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">", L);
    emit_text(o, dir);
    emit(o, ": %s</text>\n", what);
    for (int i = 0, nt = tick_count(y0, y1, ys); i <= nt; i++) {
        const double y = y0 + i * ys;
        emit(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, PY(y), W - R, PY(y));
        emit(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", L - 6, PY(y) + 4, yd, y);
    }
    for (int i = 0, nt = tick_count(x0, x1, xs); i <= nt; i++) {
        const double x = x0 + i * xs;
        emit(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f</text>\n", PX(x), H - Bm + 18, xd, x);
    }
    emit(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 12);
    emit(o, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", L, T, W - L - R, H - T - Bm);
    const char *col[2] = {"#1f77b4", "#d62728"}, *lab[2] = {"train", "validation"};
    for (int k = 0; k < 2; k++) {
        if (!all[k]->n) continue;
        emit(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", col[k]);
        for (size_t i = 0; i < all[k]->n; i++) emit(o, "%.1f,%.1f ", PX(all[k]->x[i]), PY(all[k]->y[i]));
        emit(o, "\"/>\n");
        if (k == 1)
            for (size_t i = 0; i < all[k]->n; i++)
                emit(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(all[k]->x[i]), PY(all[k]->y[i]), col[k]);
        emit(o, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s (last %.4f)</text>\n", W - R - 220, T + 18 + 16 * k, col[k],
             lab[k], all[k]->y[all[k]->n - 1]);
    }
    emit(o, "</svg>\n");
#undef PX
#undef PY
}

/* what the curves measure: the run's task (checkpoint.json), else the metric of the log */
static const char *metric_title(const char *dir, const char *metric) {
    char p[4096];
    path_join(p, sizeof p, dir, "checkpoint.json");
    mega_bytes b;
    const char *t = NULL;
    if (file_exists(p) && mega_read_file_max(p, "checkpoint", 1 << 16, &b) == MEGA_OK) {
        cJSON *j = cJSON_ParseWithLength((const char *)b.data, b.n);
        const cJSON *k = j ? cJSON_GetObjectItemCaseSensitive(j, "task") : NULL;
        if (cJSON_IsString(k) && !strcmp(k->valuestring, "translate")) t = "token accuracy (teacher forcing)";
        else if (cJSON_IsString(k) && !strcmp(k->valuestring, "classify")) t = "accuracy";
        cJSON_Delete(j);
        mega_bytes_free(&b);
    }
    if (t && metric && !strcmp(metric, "acc")) return t;
    return metric && !strcmp(metric, "acc") ? "accuracy" : "bits per byte";
}

int cmd_plot(int argc, char **argv) {
    const char *out = NULL;
    const char *dir = NULL;
    int i0 = 2;
    if (argc > 2 && strncmp(argv[2], "--", 2)) dir = argv[2], i0 = 3;
    cli_flag fl[] = {{"out", F_STR, &out, "SVG file to write (default DIR/curves.svg)", NULL, 1, 0, 0},
                     {"run", F_STR, &dir, "run directory (alternative to the positional DIR)", NULL, 1, 0, 0},
                     FL_END};
    int r = cli_parse("plot", "DIR [--out FILE.svg]", fl, argc, argv, i0);
    if (r) return r == 1 ? 0 : 2;
    if (!dir) return cli_error("a run directory is required: mega plot DIR"), 2;
    char p[4096], o[4096];
    path_join(p, sizeof p, dir, "log.jsonl");
    plot_log g;
    if (read_log(p, &g)) return free(g.tr.x), free(g.tr.y), free(g.va.x), free(g.va.y), 2;
    if (!out) out = path_join(o, sizeof o, dir, "curves.svg");
    sbuf svg = {NULL, 0, 0, 0};
    write_svg(&svg, &g, dir, metric_title(dir, g.metric));
    /* built in memory, written atomically */
    mega_status st = svg.oom ? MEGA_ERR_OOM : mega_write_file_atomic(out, svg.s, svg.len);
    free(svg.s), free(g.tr.x), free(g.tr.y), free(g.va.x), free(g.va.y);
    if (st) return cli_error("%s", svg.oom ? "out of memory" : mega_last_error()), 2;
    printf("wrote %s (%zu training points, %zu validation points)\n", out, g.tr.n, g.va.n);
    return 0;
}
