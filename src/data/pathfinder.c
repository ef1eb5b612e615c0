/* The Pathfinder task of the Long Range Arena: the "snakes2" generator of Linsley et al. (2018,
 * "Learning long-range spatial dependencies with horizontal gated recurrent units";
 * github.com/drewlinsley/pathfinder, snakes2.py), with the per-size settings the Long Range Arena
 * documents for its release (lra_benchmarks/data/pathfinder.py, the Pathfinder32/64/128 builders).
 *
 * An image holds two target paths and short distractor paths, each a chain of paddles (short
 * line segments) separated by gaps; a circle marks one end of one target path and the far end of
 * the same path (label 1) or of the other one (label 0). The procedure, as in snakes2:
 *  - the first paddle of path 1 starts at a free point away from the border (seed_distance*2),
 *    with an orientation drawn in whole degrees; path 2 starts seed_distance away in a random
 *    direction (two_snakes / initialize_two_seeds);
 *  - each further paddle starts 2*margin beyond the previous one's end: around the pivot (the
 *    middle of the gap) the candidate end points on the circle of radius paddle_length + margin,
 *    one per pixel of arc, are weighted by cos(min(continuity * |turn|, pi/2))^2 and by being
 *    free (no ink within `margin`), one is drawn, and the paddle is kept when its footprint (the
 *    segment dilated by margin) does not touch earlier paths (extend_snake / get_coords_cmf);
 *    both paths grow one paddle at a time and any failure restarts the pair;
 *  - distractor paths of distractor_length paddles are seeded anywhere free and grown the same
 *    way; a distractor that fails is retried, then skipped (make_many_snakes, allow_incomplete);
 *  - the target paddles have contrast paddle_contrast * snake_contrast, the distractors
 *    snake_contrast, the markers 1; the image is scaled so that its maximum is 255.
 * Rasterisation differs: snakes2 draws at antialias_scale times the size with PIL and shrinks
 * with a Lanczos filter; here each pixel is the fraction of antialias^2 sample points inside the
 * paddle (a rectangle of width round(thickness * antialias) / antialias) or the marker disc, and
 * a footprint is the set of pixels whose centre lies within width/2 + margin of the paddle.
 * Images therefore match the release in their statistics, not bit for bit. */
#include "data/data.h"
#include "core/rng.h"

#include <math.h>

#define PF_FOOT_MAX 4096 /* pixels of one paddle's footprint (size 128, margin 3: under 400) */

struct mega_pathfinder_gen {
    mega_pathfinder_params p;
    mega_rng rng;
    int S, margin;
    float *img;     /* [S*S] intensity before scaling */
    uint8_t *mask;  /* [S*S] 1 = taken (footprints of kept paddles, border) */
    int *foot[2];   /* the current last paddle's footprint of each growing path (not yet in mask) */
    int nfoot[2];
    int *tmp;       /* a candidate footprint */
    int64_t attempts;
};

/* ---- the settings ---------------------------------------------------------------------- */

mega_status mega_pathfinder_defaults(int size, int difficulty, mega_pathfinder_params *p) {
    memset(p, 0, sizeof *p);
    static const int lengths[3] = {6, 9, 14};
    if (difficulty < 0 || difficulty > 2) MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: difficulty must be 0, 1 or 2 (easy, medium, hard)");
    p->size = size, p->contour_length = lengths[difficulty];
    p->padding = 1, p->antialias = 2, p->max_paddle_trials = 2, p->max_distractor_trials = 4, p->max_pair_trials = 100000;
    p->paddle_contrast = 1.0;
    /* distractor_length = contour_length / 3 and num_distractor_snakes = D / distractor_length:
     * integer division at 32 (its builder writes //), true division at 64 and 128, where the
     * loops run while i < D / length (so ceil) and a distractor has int(length) paddles */
    double dl = p->contour_length / 3.0, D;
    switch (size) {
    case 32:
        p->paddle_length = 2, p->paddle_thickness = 0.5, p->marker_radius = 1.5, p->continuity = 1.0, p->seed_distance = 7;
        p->margins[0] = 1, p->n_margins = 1, p->snake_contrast = 2.0, p->paddle_contrast = 0.75;
        p->distractor_length = p->contour_length / 3, p->n_distractors = 20 / p->distractor_length;
        return MEGA_OK;
    case 64:
        p->paddle_length = 5, p->paddle_thickness = 1.0, p->marker_radius = 2.5, p->continuity = 1.8, p->seed_distance = 12;
        p->margins[0] = 1, p->n_margins = 1, p->snake_contrast = 0.8, D = 22;
        break;
    case 128:
        p->paddle_length = 5, p->paddle_thickness = 1.5, p->marker_radius = 3.0, p->continuity = 1.8, p->seed_distance = 20;
        p->margins[0] = 2, p->margins[1] = 3, p->n_margins = 2, p->snake_contrast = 0.9, D = 35;
        break;
    default: MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: size must be 32, 64 or 128 (got %d)", size);
    }
    p->distractor_length = (int)dl, p->n_distractors = (int)ceil(D / dl - 1e-9);
    return MEGA_OK;
}

const char *mega_pathfinder_subdir(int contour_length) {
    return contour_length == 6 ? "curv_baseline" : contour_length == 9 ? "curv_contour_length_9" : "curv_contour_length_14";
}

static mega_status pf_check(const mega_pathfinder_params *p) {
    if (p->size < 8 || p->size > 1024) MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: size %d outside 8..1024", p->size);
    if (p->contour_length < 1 || p->contour_length > 1000 || p->distractor_length < 0 || p->n_distractors < 0 ||
        p->n_distractors > 10000)
        MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: bad path lengths or distractor count");
    if (p->paddle_length < 1 || p->paddle_length > 64 || !(p->paddle_thickness > 0) || p->antialias < 1 || p->antialias > 16)
        MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: bad paddle length, thickness or antialias");
    if (p->n_margins < 1 || p->n_margins > 4) MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: 1 to 4 margins");
    for (int i = 0; i < p->n_margins; i++)
        if (p->margins[i] < 0 || p->margins[i] > 16) MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: margin %d outside 0..16", p->margins[i]);
    if (!(p->marker_radius > 0) || !(p->continuity >= 0) || p->seed_distance < 1 || p->padding < 0 || p->max_pair_trials < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: bad marker radius, continuity, seed distance or padding");
    return MEGA_OK;
}

mega_status mega_pathfinder_gen_new(const mega_pathfinder_params *p, mega_pathfinder_gen **out) {
    *out = NULL;
    MEGA_TRY(pf_check(p));
    mega_pathfinder_gen *g = calloc(1, sizeof *g);
    const size_t n = (size_t)p->size * p->size;
    if (g) {
        g->img = malloc(n * sizeof *g->img), g->mask = malloc(n);
        g->foot[0] = malloc(PF_FOOT_MAX * sizeof(int)), g->foot[1] = malloc(PF_FOOT_MAX * sizeof(int));
        g->tmp = malloc(PF_FOOT_MAX * sizeof(int));
    }
    if (!g || !g->img || !g->mask || !g->foot[0] || !g->foot[1] || !g->tmp) {
        mega_pathfinder_gen_free(g);
        MEGA_FAIL(MEGA_ERR_OOM, "pathfinder: out of memory");
    }
    g->p = *p, g->S = p->size;
    mega_rng_seed(&g->rng, p->seed);
    *out = g;
    return MEGA_OK;
}

void mega_pathfinder_gen_free(mega_pathfinder_gen *g) {
    if (!g) return;
    free(g->img), free(g->mask), free(g->foot[0]), free(g->foot[1]), free(g->tmp);
    free(g);
}

int64_t mega_pathfinder_gen_attempts(const mega_pathfinder_gen *g) { return g->attempts; }

/* ---- geometry (points are (y, x) pixel indices as in snakes2; a pixel's centre is +0.5) ---- */

typedef struct {
    int y, x;
} pt;

/* translate_coord: ceil of the displaced point */
static pt move(pt a, double th, double d) { return (pt){(int)ceil(a.y + d * sin(th)), (int)ceil(a.x + d * cos(th))}; }
static int inside(const mega_pathfinder_gen *g, pt a) { return a.y >= 0 && a.y < g->S && a.x >= 0 && a.x < g->S; }
static double width(const mega_pathfinder_gen *g) {
    double w = round(g->p.paddle_thickness * g->p.antialias);
    return (w < 1 ? 1 : w) / g->p.antialias;
}

/* distance of (py, px) to the paddle from a along th of length L: perpendicular distance when
 * the projection falls on the paddle (flat ends, *on = 1), else distance to the nearer end */
static double seg_dist(double py, double px, double ay, double ax, double th, double L, int *on) {
    const double dy = py - ay, dx = px - ax, t = dy * sin(th) + dx * cos(th);
    *on = t >= 0 && t <= L;
    if (*on) return fabs(dx * sin(th) - dy * cos(th));
    const double ey = t < 0 ? 0 : L * sin(th), ex = t < 0 ? 0 : L * cos(th);
    return hypot(dy - ey, dx - ex);
}

/* the footprint of a paddle (pixels whose centre is within width/2 + margin) into f; its count,
 * or -1 when it touches a taken pixel of g->mask (check) */
static int footprint(const mega_pathfinder_gen *g, pt a, double th, int *f, int check) {
    const int L = g->p.paddle_length, S = g->S;
    const double r = width(g) / 2 + g->margin - 0.3, ay = a.y + 0.5, ax = a.x + 0.5;
    const int R = L + (int)ceil(r) + 1;
    int n = 0;
    for (int y = a.y - R; y <= a.y + R; y++) {
        if (y < 0 || y >= S) continue;
        for (int x = a.x - R; x <= a.x + R; x++) {
            int on;
            if (x < 0 || x >= S || seg_dist(y + 0.5, x + 0.5, ay, ax, th, L, &on) > r) continue;
            if (check && g->mask[(size_t)y * S + x]) return -1;
            if (n < PF_FOOT_MAX) f[n++] = y * S + x;
        }
    }
    return n;
}

/* draw a paddle (max with what is there) at intensity c */
static void draw_paddle(mega_pathfinder_gen *g, pt a, double th, double c) {
    const int L = g->p.paddle_length, S = g->S, A = g->p.antialias;
    const double hw = width(g) / 2, ay = a.y + 0.5, ax = a.x + 0.5;
    const int R = L + 2;
    for (int y = a.y - R; y <= a.y + R; y++) {
        if (y < 0 || y >= S) continue;
        for (int x = a.x - R; x <= a.x + R; x++) {
            if (x < 0 || x >= S) continue;
            int hit = 0, on;
            for (int i = 0; i < A; i++)
                for (int j = 0; j < A; j++)
                    hit += seg_dist(y + (i + 0.5) / A, x + (j + 0.5) / A, ay, ax, th, L, &on) <= hw && on;
            const float v = (float)(c * hit / (A * A));
            float *o = &g->img[(size_t)y * S + x];
            if (v > *o) *o = v;
        }
    }
}

static void draw_marker(mega_pathfinder_gen *g, pt c) {
    const int S = g->S, A = g->p.antialias;
    const double r = g->p.marker_radius, cy = c.y + 0.5, cx = c.x + 0.5;
    for (int y = c.y - (int)r - 2; y <= c.y + (int)r + 2; y++)
        for (int x = c.x - (int)r - 2; x <= c.x + (int)r + 2; x++) {
            if (y < 0 || y >= S || x < 0 || x >= S) continue;
            int hit = 0;
            for (int i = 0; i < A; i++)
                for (int j = 0; j < A; j++) {
                    const double dy = y + (i + 0.5) / A - cy, dx = x + (j + 0.5) / A - cx;
                    hit += dy * dy + dx * dx <= r * r;
                }
            const float v = (float)hit / (float)(A * A);
            if (v > g->img[(size_t)y * S + x]) g->img[(size_t)y * S + x] = v;
        }
}

static void take(mega_pathfinder_gen *g, const int *f, int n) {
    for (int i = 0; i < n; i++) g->mask[f[i]] = 1;
}

/* orientation in whole degrees in [-180, 180), as snakes2 draws it */
static double draw_angle(mega_pathfinder_gen *g) { return ((double)mega_rng_below(&g->rng, 360) - 180.0) * M_PI / 180.0; }

/* ---- growing a path ---------------------------------------------------------------------- */

/* a free pixel, no taken pixel within `margin` of it */
static int clear_around(const mega_pathfinder_gen *g, pt c) {
    const int m = g->margin, S = g->S;
    for (int y = c.y - m; y <= c.y + m; y++)
        for (int x = c.x - m; x <= c.x + m; x++)
            if ((y - c.y) * (y - c.y) + (x - c.x) * (x - c.x) <= m * m && y >= 0 && y < S && x >= 0 && x < S &&
                g->mask[(size_t)y * S + x])
                return 0;
    return 1;
}

/* extend_snake: one more paddle after the pivot *pv along *th; the path's last footprint
 * (slot k) joins the mask once the new paddle is kept. 0, or -1 when no paddle fits. */
static int extend(mega_pathfinder_gen *g, int k, pt *pv, double *th, double contrast, pt *head) {
    const int L = g->p.paddle_length, m = g->margin;
    const pt piv = move(*pv, *th, L + 2 * m);
    const double step = L + m, dpp = 360.0 / (2 * step * M_PI);
    enum { NC = 1024 };
    pt cand[NC];
    double w[NC], tot = 0;
    int nc = 0;
    for (double deg = 0; deg < 360 && nc < NC; deg += dpp) {
        const double a = deg * M_PI / 180, fy = piv.y + step * sin(a), fx = piv.x + step * cos(a);
        if (fy >= g->S || fy < 0 || fx >= g->S || fx < 0) continue;
        pt c = {(int)fy, (int)fx}; /* astype(int): toward zero, non-negative here */
        int dup = 0;
        for (int i = 0; i < nc && !dup; i++) dup = cand[i].y == c.y && cand[i].x == c.x;
        if (dup) continue;
        const double o = atan2(c.y - piv.y, c.x - piv.x), d0 = fabs(o - *th);
        double d = fmin(d0, 2 * M_PI - d0) * g->p.continuity;
        d = fmin(d, M_PI / 2);
        const double cw = fmax(cos(d), 0);
        cand[nc] = c, w[nc] = clear_around(g, c) ? cw * cw : 0, tot += w[nc], nc++;
    }
    if (tot < 1e-4) return -1;
    for (int t = 0; t <= g->p.max_paddle_trials; t++) {
        const double u = mega_rng_u01(&g->rng) * tot;
        double acc = 0;
        int s = 0;
        for (; s < nc - 1; s++)
            if ((acc += w[s]) > u) break;
        const double o = atan2(cand[s].y - piv.y, cand[s].x - piv.x), flip = o < 0 ? o + M_PI : o - M_PI;
        const int n = footprint(g, cand[s], flip, g->tmp, 1);
        if (n < 0) continue;
        draw_paddle(g, cand[s], flip, contrast);
        take(g, g->foot[k], g->nfoot[k]);
        memcpy(g->foot[k], g->tmp, (size_t)n * sizeof(int));
        g->nfoot[k] = n, *pv = piv, *th = o, *head = cand[s];
        return 0;
    }
    return -1;
}

/* seed_snake: a first paddle at a uniformly drawn free place (rejection sampling over the pixels
 * that are not taken; a border of `border` pixels counts as taken); its tail, pivot and angle */
static int seed(mega_pathfinder_gen *g, int k, int border, double contrast, pt *tail, pt *pv, double *th) {
    const int S = g->S, L = g->p.paddle_length;
    for (int t = 0; t <= g->p.max_paddle_trials; t++) {
        const double a = draw_angle(g);
        for (int r = 0; r < 4 * S * S; r++) {
            pt c = {(int)mega_rng_below(&g->rng, (uint64_t)S), (int)mega_rng_below(&g->rng, (uint64_t)S)};
            if (c.y < border || c.x < border || c.y >= S - border || c.x >= S - border || g->mask[(size_t)c.y * S + c.x]) continue;
            const pt h = move(c, a, L), p = move(h, a < 0 ? a + M_PI : a - M_PI, L + g->margin);
            if (!inside(g, h) || !inside(g, p)) break; /* a missampled seed costs a trial */
            const int n = footprint(g, c, a, g->tmp, 1);
            if (n < 0) continue;
            draw_paddle(g, c, a, contrast);
            memcpy(g->foot[k], g->tmp, (size_t)n * sizeof(int));
            g->nfoot[k] = n, *tail = c, *pv = p, *th = a;
            return 0;
        }
    }
    return -1;
}

/* free pixels / all, before a distractor is seeded (stop_with_availability) */
static double availability(const mega_pathfinder_gen *g) {
    size_t n = (size_t)g->S * g->S, f = 0;
    for (size_t i = 0; i < n; i++) f += !g->mask[i];
    return (double)f / (double)n;
}

/* two_snakes: the target pair; origin and terminal tips; 0 or -1 (restart) */
static int two_paths(mega_pathfinder_gen *g, pt origin[2], pt term[2]) {
    const int S = g->S, L = g->p.paddle_length, sd = g->p.seed_distance, P = g->p.padding;
    const double c = g->p.paddle_contrast * g->p.snake_contrast;
    memset(g->img, 0, (size_t)S * S * sizeof *g->img);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) g->mask[(size_t)y * S + x] = y < P || x < P || y >= S - P || x >= S - P;
    pt pv[2];
    double th[2];
    /* the first path starts away from the border by 2 * seed_distance */
    const int b = 2 * sd > P ? 2 * sd : P;
    if (b * 2 >= S || seed(g, 0, b, c, &origin[0], &pv[0], &th[0])) return -1;
    int t = 0;
    for (; t <= g->p.max_paddle_trials; t++) {
        const double a = draw_angle(g), dir = (double)mega_rng_below(&g->rng, 360) * M_PI / 180;
        const pt tail = {(int)lround(origin[0].y + sd * sin(dir)), (int)lround(origin[0].x + sd * cos(dir))};
        const pt h = move(tail, a, L), p = move(h, a < 0 ? a + M_PI : a - M_PI, L + g->margin);
        if (!inside(g, tail) || !inside(g, h) || !inside(g, p)) continue;
        draw_paddle(g, tail, a, c);
        g->nfoot[1] = footprint(g, tail, a, g->foot[1], 0);
        origin[1] = tail, pv[1] = p, th[1] = a;
        break;
    }
    if (t > g->p.max_paddle_trials) return -1;
    term[0] = origin[0], term[1] = origin[1];
    for (int s = 1; s < g->p.contour_length; s++)
        for (int k = 0; k < 2; k++)
            if (extend(g, k, &pv[k], &th[k], c, &term[k])) return -1;
    take(g, g->foot[0], g->nfoot[0]), take(g, g->foot[1], g->nfoot[1]);
    return 0;
}

/* make_many_snakes for the distractors: each retried up to max_distractor_trials times, then
 * skipped; returns how many were drawn, *paddles their paddles */
static int distractors(mega_pathfinder_gen *g, int *paddles) {
    int drawn = 0;
    *paddles = 0;
    for (int i = 0; i < g->p.n_distractors; i++)
        for (int t = 0; t <= g->p.max_distractor_trials; t++) {
            if (availability(g) < 0.01) return drawn;
            /* a failed distractor leaves nothing: draw on copies */
            const size_t n = (size_t)g->S * g->S;
            float *img0 = malloc(n * sizeof *img0);
            uint8_t *mask0 = malloc(n);
            if (!img0 || !mask0) {
                free(img0), free(mask0);
                return -1;
            }
            memcpy(img0, g->img, n * sizeof *img0), memcpy(mask0, g->mask, n);
            pt tail, pv, head;
            double th;
            int ok = !seed(g, 0, 1, g->p.snake_contrast, &tail, &pv, &th);
            for (int s = 1; ok && s < g->p.distractor_length; s++) ok = !extend(g, 0, &pv, &th, g->p.snake_contrast, &head);
            if (ok) {
                take(g, g->foot[0], g->nfoot[0]);
                drawn++, *paddles += g->p.distractor_length;
            } else
                memcpy(g->img, img0, n * sizeof *img0), memcpy(g->mask, mask0, n);
            free(img0), free(mask0);
            if (ok) break;
        }
    return drawn;
}

mega_status mega_pathfinder_gen_next(mega_pathfinder_gen *g, uint8_t *out, mega_pathfinder_info *info) {
    memset(info, 0, sizeof *info);
    const int label = (int)mega_rng_below(&g->rng, 2);
    g->margin = g->p.margins[mega_rng_below(&g->rng, (uint64_t)g->p.n_margins)];
    pt origin[2], term[2];
    int tries = 0;
    while (two_paths(g, origin, term)) {
        g->attempts++;
        if (++tries >= g->p.max_pair_trials)
            MEGA_FAIL(MEGA_ERR_INVALID, "pathfinder: no pair of %d-paddle paths fits a %dx%d image in %d attempts", g->p.contour_length,
                      g->S, g->S, tries);
    }
    g->attempts++;
    int dp;
    const int nd = g->p.distractor_length > 0 ? distractors(g, &dp) : (dp = 0);
    if (nd < 0) MEGA_FAIL(MEGA_ERR_OOM, "pathfinder: out of memory");
    const int o = (int)mega_rng_below(&g->rng, 2), t = label ? o : 1 - o;
    draw_marker(g, origin[o]), draw_marker(g, term[t]);
    const size_t n = (size_t)g->S * g->S;
    float lo = g->img[0], hi = g->img[0];
    for (size_t i = 1; i < n; i++) lo = fminf(lo, g->img[i]), hi = fmaxf(hi, g->img[i]);
    const float sc = hi > lo ? 255.0f / (hi - lo) : 0;
    for (size_t i = 0; i < n; i++) out[i] = (uint8_t)lrintf((g->img[i] - lo) * sc);
    info->label = label, info->margin = g->margin, info->distractors = nd, info->distractor_paddles = dp;
    info->target_paddles = 2 * g->p.contour_length, info->pair_attempts = tries + 1;
    info->marker[0][0] = origin[o].y, info->marker[0][1] = origin[o].x;
    info->marker[1][0] = term[t].y, info->marker[1][1] = term[t].x;
    return MEGA_OK;
}
