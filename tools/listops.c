/* `mega listops`: writes the ListOps task of the Long Range Arena (train.tsv, valid.tsv,
 * test.tsv) with the library's generator (src/data/listops.c, which documents the procedure and
 * its parity with the published script). Every file is written to a temporary name, synced and
 * renamed, so a failed run leaves no partial split behind; lines end in "\n". */
#include "common.h"
#include "mega_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *name;
    char path[4096], tmp[4200];
    FILE *f;
    int64_t n;
} lo_out;

static int lo_open(lo_out *o, const char *dir, const char *name) {
    o->name = name;
    path_join(o->path, sizeof o->path, dir, name);
    size_t l = strlen(o->path); /* < 4096 */
    memcpy(o->tmp, o->path, l);
    snprintf(o->tmp + l, sizeof o->tmp - l, ".tmp.%ld", (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) return cli_error("cannot create '%s': %s", o->tmp, strerror(errno));
    static char bufs[3][1 << 20];
    static int nb;
    setvbuf(o->f, bufs[nb++ % 3], _IOFBF, sizeof bufs[0]);
    if (fputs("Source\tTarget\n", o->f) == EOF) {
        int e = errno;
        fclose(o->f);
        o->f = NULL;
        unlink(o->tmp);
        return cli_error("write error on '%s': %s", o->tmp, strerror(e));
    }
    o->n = 0;
    return 0;
}

static int lo_close(lo_out *o) {
    int rc = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) rc = cli_error("write error on '%s': %s", o->tmp, strerror(errno));
    else {
        int r;
        while ((r = fsync(fileno(o->f))) != 0 && errno == EINTR) {
        }
        if (r != 0) rc = cli_error("fsync '%s': %s", o->tmp, strerror(errno));
    }
    if (fclose(o->f) != 0 && !rc) rc = cli_error("close '%s': %s", o->tmp, strerror(errno));
    o->f = NULL;
    return rc;
}

/* what was written, for the summary */
typedef struct {
    int64_t done, lsum, lmin, lmax, hist[10];
} lo_stats;

static void lo_progress(progress_t *pr, const lo_stats *st, int64_t total, double t0) {
    if (!progress_due(pr, 0)) return;
    char eta[32], rate[32];
    double rt = (double)st->done / (now_sec() - t0 + 1e-9);
    fmt_duration(eta, sizeof eta, (double)(total - st->done) / (rt + 1e-9));
    fmt_rate(rate, sizeof rate, rt);
    progress_print(pr, "listops: %lld/%lld examples (%.1f%%)  %s examples/s  ETA %s", (long long)st->done, (long long)total,
                   100.0 * (double)st->done / (double)total, rate, eta);
}

/* draw every split into its open file; 0, or 2 after printing the error */
static int lo_generate(mega_listops_gen *g, lo_out *o, const int64_t *want, int quiet, lo_stats *st) {
    const int64_t total = want[0] + want[1] + want[2];
    double t0 = now_sec();
    int rc = 0;
    progress_t pr;
    progress_init(&pr, stderr, quiet, 10);
    pr.next = t0 + 1.0; /* a short run shows none */
    memset(st, 0, sizeof *st);
    st->lmin = INT64_MAX;
    for (int s = 0; s < 3 && !rc; s++) {
        for (int64_t i = 0; i < want[s]; i++) {
            const char *src;
            int len, tgt;
            if (mega_listops_gen_next(g, &src, &len, &tgt) != MEGA_OK) {
                progress_break(&pr);
                rc = cli_error("%s", mega_last_error()), rc = 2;
                break;
            }
            if (fprintf(o[s].f, "%s\t%d\n", src, tgt) < 0) {
                rc = cli_error("write error on '%s': %s", o[s].tmp, strerror(errno)), rc = 2;
                break;
            }
            o[s].n++, st->done++;
            st->lsum += len, st->hist[tgt]++;
            st->lmin = len < st->lmin ? len : st->lmin, st->lmax = len > st->lmax ? len : st->lmax;
            if ((st->done & 63) == 0) lo_progress(&pr, st, total, t0);
        }
    }
    progress_break(&pr);
    return rc;
}

/* close every open file and move the complete ones into place; on failure remove them all */
static int lo_finish(lo_out *o, int nopen, int rc, const char *out) {
    for (int s = 0; s < nopen; s++)
        if (lo_close(&o[s])) rc = 2;
    if (!rc)
        for (int s = 0; s < 3; s++)
            if (rename(o[s].tmp, o[s].path) != 0) {
                rc = cli_error("cannot rename '%s' to '%s': %s", o[s].tmp, o[s].path, strerror(errno)), rc = 2;
                break;
            }
    if (rc) {
        for (int s = 0; s < nopen; s++) unlink(o[s].tmp);
        return rc;
    }
    int dfd = open(out, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

int cmd_listops(int argc, char **argv) {
    mega_listops_params p = mega_listops_defaults();
    const char *out = NULL;
    int quiet = 0;
    cli_flag fl[] = {
        {"out", F_STR, &out, "output directory: writes train.tsv, valid.tsv, test.tsv (created if missing)", NULL, 1, 0, 0},
        {"train", F_I64, &p.n_train, "training examples", NULL, 1, 1e8, 0},
        {"valid", F_I64, &p.n_valid, "validation examples", NULL, 1, 1e8, 0},
        {"test", F_I64, &p.n_test, "test examples", NULL, 1, 1e8, 0},
        {"min-len", F_INT, &p.min_len, "keep expressions longer than this (tokens, parentheses not counted)", NULL, 0, 1e7, 0},
        {"max-len", F_INT, &p.max_len, "keep expressions shorter than this", NULL, 2, 1e7, 0},
        {"max-depth", F_INT, &p.max_depth, "maximum tree depth (the root is depth 1)", NULL, 1, 64, 0},
        {"max-args", F_INT, &p.max_args, "maximum arguments of an operator (at least 2)", NULL, 2, 100, 0},
        {"seed", F_I64, &p.seed, "seed; S draws what the published script draws after Python's random.seed(S)", NULL, 0,
         9007199254740991.0, 0},
        {"quiet", F_SET, &quiet, "no progress on stderr", NULL, 1, 0, 0},
        FL_END};
    const char *usage = "--out DIR [--train N --valid N --test N --min-len L --max-len L --max-depth D --max-args A --seed S]\n\n"
                        "Writes the ListOps task of the Long Range Arena (lra_benchmarks/data/listops.py): nested\n"
                        "[MIN/[MAX/[MED/[SM lists of digits 0-9, TSV with the header Source<TAB>Target. The defaults\n"
                        "are the published ones.";
    int r = cli_parse("listops", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!out || !*out) return cli_error("--out DIR is required (see 'mega listops --help')"), 2;
    if (strlen(out) > 4000) return cli_error("--out: path too long"), 2;
    mega_listops_gen *g;
    if (mega_listops_gen_new(&p, &g) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    if (ensure_dir(out)) {
        mega_listops_gen_free(g);
        return 2;
    }
    lo_out o[3];
    const char *names[3] = {"train.tsv", "valid.tsv", "test.tsv"};
    const int64_t want[3] = {p.n_train, p.n_valid, p.n_test};
    int nopen = 0, rc = 0;
    for (; nopen < 3; nopen++)
        if (lo_open(&o[nopen], out, names[nopen])) {
            rc = 2;
            break;
        }
    double t0 = now_sec();
    lo_stats st;
    if (!rc) rc = lo_generate(g, o, want, quiet, &st);
    if ((rc = lo_finish(o, nopen, rc, out))) {
        mega_listops_gen_free(g);
        return rc;
    }
    double dt = now_sec() - t0;
    printf("wrote %s/{train,valid,test}.tsv: %lld/%lld/%lld examples in %.1fs (%lld draws, seed %lld)\n", out,
           (long long)o[0].n, (long long)o[1].n, (long long)o[2].n, dt, (long long)mega_listops_gen_attempts(g), (long long)p.seed);
    printf("length (tokens without parentheses) min %lld, mean %.1f, max %lld; targets 0-9:", (long long)st.lmin,
           (double)st.lsum / (double)st.done, (long long)st.lmax);
    for (int i = 0; i < 10; i++) printf(" %lld", (long long)st.hist[i]);
    printf("\n");
    mega_listops_gen_free(g);
    return 0;
}
