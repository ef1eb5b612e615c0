/* SVG figures for the tool (mega plot, mega experiment): line charts with axes, units and a
 * legend, and heat maps. Built in memory and written atomically. */
#ifndef MEGA_TOOLS_SVG_H
#define MEGA_TOOLS_SVG_H

#include <stddef.h>

/* a growing text buffer; oom is set (and further output dropped) when an allocation fails */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void sbuf_printf(sbuf *b, const char *fmt, ...);
/* s as XML text: & < > " ' escaped, control characters dropped */
void sbuf_xml(sbuf *b, const char *s);
/* writes b to path atomically; 0, or 2 after printing the error */
int sbuf_write(const sbuf *b, const char *path);
void sbuf_free(sbuf *b);

typedef struct {
    const char *label;     /* legend text (NULL: not in the legend) */
    const double *x, *y;   /* n points; non-finite ones are skipped */
    size_t n;
    int markers;           /* draw a dot at each point */
    int dashed;
} svg_series;

typedef struct {
    const char *title, *xlabel, *ylabel; /* labels carry their units, e.g. "training time (s)" */
    int logx;                            /* x on a log2 axis (lengths, sizes) */
    int logy;                            /* y on a log10 axis */
    int legend_left;                     /* try the legend in the top-left corner first (it goes where it hides no curve) */
} svg_chart;

/* a line chart of ns series, appended to out */
void svg_line_chart(sbuf *out, const svg_chart *c, const svg_series *s, int ns);

/* a heat map of the rows x cols matrix m (row-major), white (min) to dark blue (max), with a
 * colour bar; row 0 at the top */
void svg_heatmap(sbuf *out, const char *title, const char *xlabel, const char *ylabel, const double *m, int rows,
                 int cols);

#endif
