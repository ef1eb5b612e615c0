/* mega plot DIR: an SVG of the training (and validation) curves from DIR/log.jsonl. */
#include "common.h"

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
    mega_bytes b;
    if (mega_read_file(p, "log", &b) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    series tr = {0}, va = {0};
    size_t pos = 0;
    int bad = 0;
    while (pos < b.n) {
        size_t e = pos;
        while (e < b.n && b.data[e] != '\n') e++;
        if (e > pos) {
            cJSON *j = cJSON_ParseWithLength((const char *)b.data + pos, e - pos);
            const cJSON *st = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
            const cJSON *l = j ? cJSON_GetObjectItemCaseSensitive(j, "bpb") : NULL;
            const cJSON *v = j ? cJSON_GetObjectItemCaseSensitive(j, "valid_bpb") : NULL;
            if (!cJSON_IsNumber(st)) bad++;
            else if (cJSON_IsNumber(l)) push(&tr, st->valuedouble, l->valuedouble);
            else if (cJSON_IsNumber(v)) push(&va, st->valuedouble, v->valuedouble);
            cJSON_Delete(j);
        }
        pos = e + 1;
    }
    free(b.data);
    if (!tr.n && !va.n) return cli_error("%s holds no training records", p), 2;
    if (bad) fprintf(stderr, "mega: warning: %d malformed line(s) in %s were skipped\n", bad, p);
    double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
    series *all[2] = {&tr, &va};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            if (all[k]->x[i] > x1) x1 = all[k]->x[i];
            if (all[k]->y[i] < y0) y0 = all[k]->y[i];
            if (all[k]->y[i] > y1) y1 = all[k]->y[i];
        }
    if (y1 - y0 < 1e-6) y1 = y0 + 1;
    double pady = 0.05 * (y1 - y0);
    y0 -= pady, y1 += pady;
    if (!out) out = path_join(o, sizeof o, dir, "curves.svg");
    /* build in memory, then write atomically */
    size_t cap = 1 << 16, len = 0;
    char *svg = malloc(cap);
    if (!svg) return cli_error("out of memory"), 2;
#define EMIT(...)                                                                                \
    do {                                                                                         \
        int w_ = snprintf(NULL, 0, __VA_ARGS__);                                                 \
        while (len + (size_t)w_ + 1 > cap) {                                                     \
            char *ns = realloc(svg, cap * 2);                                                    \
            if (!ns) { free(svg); return cli_error("out of memory"), 2; }                        \
            svg = ns, cap *= 2;                                                                  \
        }                                                                                        \
        snprintf(svg + len, cap - len, __VA_ARGS__);                                             \
        len += (size_t)w_;                                                                       \
    } while (0)
    const double W = 800, H = 480, L = 70, R = 20, T = 40, Bm = 50;
#define PX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define PY(y) (T + (y1 - (y)) / (y1 - y0) * (H - T - Bm))
    EMIT("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    EMIT("<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    EMIT("<text x=\"%.0f\" y=\"22\" font-size=\"15\">%s: bits per byte</text>\n", L, dir);
    for (int k = 0; k <= 5; k++) {
        double y = y0 + (y1 - y0) * k / 5.0, x = x0 + (x1 - x0) * k / 5.0;
        EMIT("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, PY(y), W - R, PY(y));
        EMIT("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3f</text>\n", L - 6, PY(y) + 4, y);
        EMIT("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", PX(x), H - Bm + 18, x);
    }
    EMIT("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 12);
    EMIT("<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", L, T, W - L - R, H - T - Bm);
    const char *col[2] = {"#1f77b4", "#d62728"}, *lab[2] = {"train", "validation"};
    for (int k = 0; k < 2; k++) {
        if (!all[k]->n) continue;
        EMIT("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", col[k]);
        for (size_t i = 0; i < all[k]->n; i++) EMIT("%.1f,%.1f ", PX(all[k]->x[i]), PY(all[k]->y[i]));
        EMIT("\"/>\n");
        if (k == 1)
            for (size_t i = 0; i < all[k]->n; i++)
                EMIT("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(all[k]->x[i]), PY(all[k]->y[i]), col[k]);
        EMIT("<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s (last %.4f)</text>\n", W - R - 220, T + 18 + 16 * k, col[k], lab[k],
             all[k]->y[all[k]->n - 1]);
    }
    EMIT("</svg>\n");
    mega_status st = mega_write_file_atomic(out, svg, len);
    free(svg), free(tr.x), free(tr.y), free(va.x), free(va.y);
    if (st) return cli_error("%s", mega_last_error()), 2;
    printf("wrote %s (%zu training points, %zu validation points)\n", out, tr.n, va.n);
    return 0;
}
