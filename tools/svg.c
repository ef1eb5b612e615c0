/* SVG figures: line charts and heat maps (svg.h). */
#include "svg.h"
#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void sbuf_printf(sbuf *b, const char *fmt, ...) {
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

void sbuf_xml(sbuf *o, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': sbuf_printf(o, "&amp;"); break;
        case '<': sbuf_printf(o, "&lt;"); break;
        case '>': sbuf_printf(o, "&gt;"); break;
        case '"': sbuf_printf(o, "&quot;"); break;
        case '\'': sbuf_printf(o, "&apos;"); break;
        default:
            if ((unsigned char)*s >= 0x20) sbuf_printf(o, "%c", *s);
        }
    }
}

int sbuf_write(const sbuf *b, const char *path) {
    if (b->oom) return cli_error("%s: out of memory", path), 2;
    if (mega_write_file_atomic(path, b->s ? b->s : "", b->len) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    return 0;
}

void sbuf_free(sbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

/* A "nice" linear axis over [lo, hi]: ticks at multiples of 1, 2 or 5 x 10^k, about n of them;
 * the axis is widened to whole ticks. *decimals: digits the labels need. */
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

/* ticks lo, lo + step, ... up to hi, counted (never an endless loop when step is below the
 * resolution of lo) */
static int tick_count(double lo, double hi, double step) {
    double n = floor((hi - lo) / step + 0.5);
    return !(n >= 0) ? 0 : n > 50 ? 50 : (int)n;
}

/* tab10: distinguishable, and readable on white */
static const char *const palette[10] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

typedef struct {
    double lo, hi; /* in axis units (log2 / log10 of the data on log axes) */
    int log;       /* 0, 2 or 10 */
} axis;

static double ax_val(const axis *a, double v) { return a->log == 2 ? log2(v) : a->log == 10 ? log10(v) : v; }
static int ax_ok(const axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

/* tick label of a value: 1024 -> 1K on log2 axes of lengths */
static void tick_label(char *b, size_t n, const axis *a, double v, int decimals) {
    if (a->log == 2 && v >= 1024 && fmod(v, 1024) == 0) snprintf(b, n, "%gK", v / 1024);
    else if (a->log) snprintf(b, n, "%g", v);
    else snprintf(b, n, "%.*f", decimals, v);
}

/* the palette has ten colours: the next ten series repeat them dashed, so no two series of a
 * chart look alike up to twenty */
static int dashed(const svg_series *s, int k) { return (s[k].dashed != 0) != ((k / 10) % 2 == 1); }

/* the line chart's canvas (px): width, height and the margins around the plot */
static const double CW = 800, CH = 480, ML = 78, MR = 20, MT = 40, MB = 56;

/* a line chart's axes: ranges in axis units, tick steps and label decimals of linear axes */
typedef struct {
    axis x, y;
    double xs, ys;
    int xd, yd;
} frame;

static double px(const frame *f, double v) { return ML + (v - f->x.lo) / (f->x.hi - f->x.lo) * (CW - ML - MR); }
static double py(const frame *f, double v) { return MT + (f->y.hi - v) / (f->y.hi - f->y.lo) * (CH - MT - MB); }
static int pt_ok(const frame *f, const svg_series *s, size_t i) { return ax_ok(&f->x, s->x[i]) && ax_ok(&f->y, s->y[i]); }
static double pt_x(const frame *f, const svg_series *s, size_t i) { return px(f, ax_val(&f->x, s->x[i])); }
static double pt_y(const frame *f, const svg_series *s, size_t i) { return py(f, ax_val(&f->y, s->y[i])); }

/* an axis over the data's range [lo, hi] (an empty range becomes [0, 1]): whole decades on a log
 * axis, nice ticks (*step, label *decimals) on a linear one */
static void fit_axis(axis *a, double *step, int *decimals) {
    if (!(a->lo <= a->hi)) a->lo = 0, a->hi = 1;
    if (a->log) a->lo = floor(a->lo), a->hi = ceil(a->hi) > floor(a->lo) ? ceil(a->hi) : floor(a->lo) + 1;
    else nice_axis(&a->lo, &a->hi, 6, step, decimals);
}

/* the axes over every plottable point */
static void chart_frame(frame *f, const svg_chart *c, const svg_series *s, int ns) {
    *f = (frame){{INFINITY, -INFINITY, c->logx ? 2 : 0}, {INFINITY, -INFINITY, c->logy ? 10 : 0}, 1, 1, 0, 0};
    axis *ax = &f->x, *ay = &f->y;
    for (int k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].n; i++)
            if (pt_ok(f, &s[k], i)) {
                const double x = ax_val(ax, s[k].x[i]), y = ax_val(ay, s[k].y[i]);
                ax->lo = fmin(ax->lo, x), ax->hi = fmax(ax->hi, x), ay->lo = fmin(ay->lo, y), ay->hi = fmax(ay->hi, y);
            }
    fit_axis(ax, &f->xs, &f->xd);
    fit_axis(ay, &f->ys, &f->yd);
}

/* does any curve pass through the box (x, y, w, h), with a margin of 4 px? */
static int curves_hit(const frame *f, const svg_series *s, int ns, double bx, double by, double w, double h) {
    for (int k = 0; k < ns; k++) {
        double qx = NAN, qy = NAN;
        for (size_t i = 0; i < s[k].n; i++) {
            if (!pt_ok(f, &s[k], i)) continue;
            const double nx = pt_x(f, &s[k], i), ny = pt_y(f, &s[k], i);
            /* the segment from the previous point, sampled every few pixels at most */
            const int steps = isfinite(qx) ? 1 + (int)(hypot(nx - qx, ny - qy) / 4) : 0;
            for (int j = 0; j <= steps; j++) {
                const double t = steps ? (double)j / steps : 1, x = isfinite(qx) ? qx + t * (nx - qx) : nx,
                             y = isfinite(qy) ? qy + t * (ny - qy) : ny;
                if (x >= bx - 4 && x <= bx + w + 4 && y >= by - 4 && y <= by + h + 4) return 1;
            }
            qx = nx, qy = ny;
        }
    }
    return 0;
}

/* the legend's box: a line of each series' colour and its label. It goes in the first corner of
 * the plot (the preferred top corner first, then the other, then the bottom ones) whose box
 * covers no part of any curve, and to the right of the plot, on a wider canvas (*canvas_w), when
 * every corner would hide some: a legend must never hide the data it explains */
typedef struct {
    int n;               /* labelled series */
    double x, y, w, h;
} legend;

static void place_legend(legend *lg, double *canvas_w, const frame *f, const svg_chart *c, const svg_series *s, int ns) {
    size_t longest = 0;
    lg->n = 0;
    for (int k = 0; k < ns; k++)
        if (s[k].label) lg->n++, longest = strlen(s[k].label) > longest ? strlen(s[k].label) : longest;
    /* about 7 px a character at 12 px */
    lg->w = 40 + 7.0 * (double)(longest < 60 ? longest : 60), lg->h = 17.0 * lg->n + 6;
    const double left = ML + 6, right = CW - MR - 6 - lg->w, top = MT + 6, bottom = CH - MB - 6 - lg->h;
    const double cx[4] = {c->legend_left ? left : right, c->legend_left ? right : left, right, left};
    const double cy[4] = {top, top, bottom, bottom};
    lg->x = CW - MR + 10, lg->y = MT + 4, *canvas_w = CW; /* outside, unless a corner is free */
    for (int q = 0; q < 4 && lg->n; q++)
        if (!curves_hit(f, s, ns, cx[q], cy[q], lg->w, lg->h)) {
            lg->x = cx[q], lg->y = cy[q];
            return;
        }
    if (lg->n) *canvas_w = CW + lg->w + 16;
}

/* grid lines and tick labels (1-2-5 ticks of each decade on a log10 y axis), axis labels, frame */
static void draw_axes(sbuf *o, const frame *f, const svg_chart *c) {
    char lab[64];
    if (f->y.log) {
        for (double d = f->y.lo; d < f->y.hi + 1e-9; d++)
            for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
                const double v = d + log10(m);
                if (v > f->y.hi + 1e-9) break;
                tick_label(lab, sizeof lab, &f->y, pow(10, v), 0);
                sbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, py(f, v), CW - MR,
                            py(f, v));
                sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 6, py(f, v) + 4, lab);
            }
    } else
        for (int i = 0, nt = tick_count(f->y.lo, f->y.hi, f->ys); i <= nt; i++) {
            const double v = f->y.lo + i * f->ys;
            sbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, py(f, v), CW - MR, py(f, v));
            sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", ML - 6, py(f, v) + 4, f->yd, v);
        }
    const int nx = f->x.log ? (int)(f->x.hi - f->x.lo) : tick_count(f->x.lo, f->x.hi, f->xs);
    for (int i = 0; i <= nx && i <= 50; i++) {
        const double v = f->x.lo + i * (f->x.log ? 1 : f->xs);
        tick_label(lab, sizeof lab, &f->x, f->x.log ? pow(2, v) : v, f->xd);
        sbuf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", px(f, v), MT, px(f, v), CH - MB);
        sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px(f, v), CH - MB + 18, lab);
    }
    sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (ML + CW - MR) / 2, CH - 14);
    sbuf_xml(o, c->xlabel);
    sbuf_printf(o, "</text>\n<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">", (MT + CH - MB) / 2);
    sbuf_xml(o, c->ylabel);
    sbuf_printf(o, "</text>\n");
    sbuf_printf(o, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", ML, MT,
                CW - ML - MR, CH - MT - MB);
}

/* each series as a polyline (and its markers), then the legend */
static void draw_series(sbuf *o, const frame *f, const legend *lg, const svg_series *s, int ns) {
    for (int k = 0; k < ns; k++) {
        const char *col = palette[k % 10];
        sbuf_printf(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s points=\"", col,
                    dashed(s, k) ? " stroke-dasharray=\"6 4\"" : "");
        for (size_t i = 0; i < s[k].n; i++)
            if (pt_ok(f, &s[k], i)) sbuf_printf(o, "%.1f,%.1f ", pt_x(f, &s[k], i), pt_y(f, &s[k], i));
        sbuf_printf(o, "\"/>\n");
        if (s[k].markers)
            for (size_t i = 0; i < s[k].n; i++)
                if (pt_ok(f, &s[k], i))
                    sbuf_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", pt_x(f, &s[k], i),
                                pt_y(f, &s[k], i), col);
    }
    if (lg->n)
        sbuf_printf(o, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"white\" stroke=\"#bbb\"/>\n", lg->x,
                    lg->y, lg->w, lg->h);
    for (int k = 0, j = 0; k < ns; k++) {
        if (!s[k].label) continue;
        const char *col = palette[k % 10];
        const double lx = lg->x + 6, ly = lg->y + 16 + 17 * j++;
        sbuf_printf(o, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2.5\"%s/>\n", lx,
                    ly - 4, lx + 22, ly - 4, col, dashed(s, k) ? " stroke-dasharray=\"6 4\"" : "");
        sbuf_printf(o, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">", lx + 28, ly, col);
        sbuf_xml(o, s[k].label);
        sbuf_printf(o, "</text>\n");
    }
}

void svg_line_chart(sbuf *o, const svg_chart *c, const svg_series *s, int ns) {
    frame f;
    chart_frame(&f, c, s, ns);
    legend lg;
    double Wc;
    place_legend(&lg, &Wc, &f, c, s, ns);
    sbuf_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                   "font-family=\"sans-serif\" font-size=\"12\">\n", Wc, CH, Wc, CH);
    sbuf_printf(o, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    sbuf_printf(o, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">", ML);
    sbuf_xml(o, c->title);
    sbuf_printf(o, "</text>\n");
    draw_axes(o, &f, c);
    draw_series(o, &f, &lg, s, ns);
    sbuf_printf(o, "</svg>\n");
}

void svg_heatmap(sbuf *o, const char *title, const char *xlabel, const char *ylabel, const double *m, int rows,
                 int cols) {
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
        if (isfinite(m[i])) lo = fmin(lo, m[i]), hi = fmax(hi, m[i]);
    if (!(lo < hi)) hi = lo + 1;
    if (!isfinite(lo)) lo = 0, hi = 1;
    const double L = 70, T = 40, side = 480, cw = side / (cols > 0 ? cols : 1), ch = side / (rows > 0 ? rows : 1);
    const double W = L + side + 110, H = T + side + 56;
    sbuf_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                   "font-family=\"sans-serif\" font-size=\"12\" shape-rendering=\"crispEdges\">\n", W, H, W, H);
    sbuf_printf(o, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"24\" font-size=\"15\">", L);
    sbuf_xml(o, title);
    sbuf_printf(o, "</text>\n");
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const double v = m[(size_t)r * cols + c];
            if (!isfinite(v)) continue;
            /* white -> #08306b, linear in the value */
            const double t = (v - lo) / (hi - lo);
            const int R = (int)(255 - t * (255 - 8)), G = (int)(255 - t * (255 - 48)), B = (int)(255 - t * (255 - 107));
            if (R == 255 && G == 255 && B == 255) continue;
            sbuf_printf(o, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#%02x%02x%02x\"/>\n",
                        L + c * cw, T + r * ch, cw + 0.05, ch + 0.05, R, G, B);
        }
    sbuf_printf(o, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", L, T, side, side);
    /* axes: first and last index, and the middle */
    for (int k = 0; k < 3; k++) {
        const int ix = k == 0 ? 0 : k == 1 ? cols / 2 : cols - 1, iy = k == 0 ? 0 : k == 1 ? rows / 2 : rows - 1;
        sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", L + (ix + 0.5) * cw, T + side + 16, ix);
        sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", L - 5, T + (iy + 0.5) * ch + 4, iy);
    }
    sbuf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", L + side / 2, T + side + 40);
    sbuf_xml(o, xlabel);
    sbuf_printf(o, "</text>\n<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">", T + side / 2);
    sbuf_xml(o, ylabel);
    sbuf_printf(o, "</text>\n");
    /* colour bar */
    const double bx = L + side + 24;
    for (int i = 0; i < 64; i++) {
        const double t = 1 - i / 63.0;
        sbuf_printf(o, "<rect x=\"%.0f\" y=\"%.2f\" width=\"16\" height=\"%.2f\" fill=\"#%02x%02x%02x\"/>\n", bx,
                    T + i * side / 64, side / 64 + 0.05, (int)(255 - t * 247), (int)(255 - t * 207), (int)(255 - t * 148));
    }
    sbuf_printf(o, "<rect x=\"%.0f\" y=\"%.0f\" width=\"16\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", bx, T, side);
    sbuf_printf(o, "<text x=\"%.0f\" y=\"%.0f\">%.3g</text>\n<text x=\"%.0f\" y=\"%.0f\">%.3g</text>\n", bx + 20, T + 10, hi,
                bx + 20, T + side, lo);
    sbuf_printf(o, "</svg>\n");
}
