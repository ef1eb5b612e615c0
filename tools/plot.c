/* mega plot DIR: an SVG of the training (and validation) curves from DIR/log.jsonl. */
#include "common.h"
#include "svg.h"
#include "task.h"

#include <math.h>
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

static void write_svg(sbuf *o, const plot_log *g, const char *dir, const char *what) {
    char title[4200], lt[64], lv[64];
    snprintf(title, sizeof title, "%s: %s", dir, what);
    if (g->tr.n) snprintf(lt, sizeof lt, "train (last %.4f)", g->tr.y[g->tr.n - 1]);
    if (g->va.n) snprintf(lv, sizeof lv, "validation (last %.4f)", g->va.y[g->va.n - 1]);
    svg_series s[2] = {{g->tr.n ? lt : NULL, g->tr.x, g->tr.y, g->tr.n, 0, 0},
                       {g->va.n ? lv : NULL, g->va.x, g->va.y, g->va.n, 1, 0}};
    svg_chart c = {title, "step", what, 0, 0, 0};
    svg_line_chart(o, &c, s, 2);
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
        const task_def *td = cJSON_IsString(k) ? task_find(k->valuestring) : NULL;
        if (td) t = td->metric_title;
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
    int st = sbuf_write(&svg, out);
    sbuf_free(&svg), free(g.tr.x), free(g.tr.y), free(g.va.x), free(g.va.y);
    if (st) return st;
    printf("wrote %s (%zu training points, %zu validation points)\n", out, g.tr.n, g.va.n);
    return 0;
}
