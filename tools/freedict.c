/* `mega freedict`: parallel phrases from a FreeDict dictionary (Debian's dict-freedict-XXX-YYY
 * packages, /usr/share/dictd/freedict-XXX-YYY.dict.dz + .index): one (headword phrase, first
 * translation) pair per entry, cleaned and deduplicated by the library (src/data/freedict.c),
 * split into train/valid/test by source phrase so that no source appears in two splits, and
 * written as "source<TAB>target" lines. Every file is replaced atomically. docs/freedict.md. */
#include "common.h"
#include "mega_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the pairs of one split, as TSV lines, written atomically; 0 or 1 after printing the error */
static int fd_write(const char *dir, const char *name, const mega_freedict_pairs *p, const size_t *idx, size_t n) {
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += strlen(p->src[idx[i]]) + strlen(p->tgt[idx[i]]) + 2;
    char *buf = malloc(bytes + 1), path[4200];
    if (!buf) return cli_error("out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t ls = strlen(p->src[idx[i]]), lt = strlen(p->tgt[idx[i]]);
        memcpy(buf + o, p->src[idx[i]], ls), o += ls;
        buf[o++] = '\t';
        memcpy(buf + o, p->tgt[idx[i]], lt), o += lt;
        buf[o++] = '\n';
    }
    path_join(path, sizeof path, dir, name);
    mega_status st = mega_write_file_atomic(path, buf, o);
    free(buf);
    if (st != MEGA_OK) return cli_error("%s", mega_last_error());
    return 0;
}

int cmd_freedict(int argc, char **argv) {
    const char *dict = NULL, *index = NULL, *out = NULL;
    int64_t seed = 1;
    double valid_frac = 0.02, test_frac = 0.02;
    mega_freedict_opts o = {200, 0};
    cli_flag fl[] = {
        {"dict", F_STR, &dict, "the dictionary: X.dict.dz (or X.dict), e.g. /usr/share/dictd/freedict-deu-eng.dict.dz", NULL, 1, 0, 0},
        {"index", F_STR, &index, "its index (default: X.index next to it)", NULL, 1, 0, 0},
        {"out", F_STR, &out, "output directory: writes train.tsv, valid.tsv, test.tsv (created if missing)", NULL, 1, 0, 0},
        {"seed", F_I64, &seed, "seed of the split (same dictionary and seed: the same files, byte for byte)", NULL, 0,
         9007199254740991.0, 0},
        {"valid-frac", F_DBL, &valid_frac, "share of the pairs for valid.tsv", NULL, 0, 0.5, 0},
        {"test-frac", F_DBL, &test_frac, "share of the pairs for test.tsv", NULL, 0, 0.5, 0},
        {"max-len", F_INT, &o.max_len, "drop pairs whose source or target is longer, in bytes (0 = no limit)", NULL, 0, 1e9, 0},
        {"drop-identical", F_SET, &o.drop_identical, "drop pairs whose target is the source itself (kept by default)", NULL, 1, 0, 0},
        FL_END};
    const char *usage =
        "--dict X.dict.dz --out DIR [--seed N --valid-frac F --test-frac F --max-len N --drop-identical]\n\n"
        "Parallel phrases from a FreeDict dictionary in dictd format (Debian: apt-get install\n"
        "dict-freedict-deu-eng, any dict-freedict-XXX-YYY works): DIR/{train,valid,test}.tsv, lines\n"
        "\"source<TAB>target\" (UTF-8). One pair per entry, the headword phrase and its first translation:\n"
        "  source  the entry's first line up to its pronunciation /.../;\n"
        "  target  the first body line that is not blank, an indented \"Note:\" / \"Synonym(s):\" / \"see:\"\n"
        "          (any indented \"Word:\") line or a \"quoted\" example, without its sense number \"1.\",\n"
        "          cut at the first \", \" or \"; \" outside brackets (for a sentence, only after . ! ? or …),\n"
        "          the first part that is not empty once cleaned (lines giving none are passed over);\n"
        "  both    without grammar <...>, labels [...] and {...}, a (...) standing alone, pronunciations\n"
        "          /.../, and text glued to a grammar tag (\"dollar sign <n>$\" -> \"dollar sign\"); control\n"
        "          bytes and runs of spaces become one space, trimmed of spaces, ',' and ';'.\n"
        "Dropped, and counted: entries that are not valid UTF-8, or whose index offsets lie outside the\n"
        "dictionary, empty sources or targets, a first translation followed by a bare pronunciation\n"
        "(an abbreviation glued to it: \"patternFAP,  /fæp/\"), pairs longer than --max-len, exact\n"
        "duplicate pairs, and with --drop-identical pairs whose target equals the source. The\n"
        "database's own 00-database-* entries are skipped. The split keeps every source phrase in\n"
        "one file: the distinct sources are shuffled with --seed and fill test.tsv, then valid.tsv, up\n"
        "to their shares of the pairs; the rest is train.tsv. docs/freedict.md has the details.";
    int r = cli_parse("freedict", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!dict || !*dict) return cli_error("--dict X.dict.dz is required (see 'mega freedict --help')"), 2;
    if (!out || !*out) return cli_error("--out DIR is required (see 'mega freedict --help')"), 2;
    if (strlen(out) > 4000) return cli_error("--out: path too long"), 2;
    if (valid_frac + test_frac >= 1) return cli_error("--valid-frac + --test-frac must be below 1"), 2;

    double t0 = now_sec();
    mega_dictd *d;
    if (mega_dictd_open(dict, index, &d) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_freedict_pairs p;
    mega_freedict_stats st;
    mega_status s = mega_freedict_pairs_from(d, &o, &p, &st);
    size_t dict_bytes = mega_dictd_size(d);
    mega_dictd_free(d);
    if (s != MEGA_OK) return cli_error("%s", mega_last_error());
    size_t *order = malloc((p.n + 1) * sizeof *order), count[3], groups[3];
    if (!order) {
        mega_freedict_pairs_free(&p);
        return cli_error("out of memory");
    }
    int rc = 0;
    if (mega_freedict_split(&p, (uint64_t)seed, valid_frac, test_frac, order, count, groups) != MEGA_OK)
        rc = cli_error("%s", mega_last_error());
    if (!rc && ensure_dir(out)) rc = 1;
    static const char *const names[3] = {"train.tsv", "valid.tsv", "test.tsv"};
    for (int k = 0; k < 3 && !rc; k++) {
        size_t first = k == 0 ? 0 : k == 1 ? count[0] : count[0] + count[1];
        rc = fd_write(out, names[k], &p, order + first, count[k]);
    }
    if (!rc) {
        printf("read %s: %zu bytes, %zu index lines, %zu entries (%zu database lines skipped)\n", dict, dict_bytes, st.index_lines,
               st.entries, st.meta);
        size_t ndrop = 0;
        for (int k = 1; k < MEGA_FREEDICT_NREASONS; k++) ndrop += st.dropped[k];
        printf("pairs kept %zu (%zu with the target equal to the source), dropped %zu:", st.kept, st.identical, ndrop);
        for (int k = 1; k < MEGA_FREEDICT_NREASONS; k++) {
            if (k == MEGA_FREEDICT_IDENTICAL && !o.drop_identical) continue;
            printf(" %s %zu%s", mega_freedict_reason_name(k), st.dropped[k], k + 1 < MEGA_FREEDICT_NREASONS ? "," : "");
        }
        if (o.max_len) printf(" (max-len %d)", o.max_len);
        printf("\nwrote %s/{train,valid,test}.tsv: %zu/%zu/%zu pairs, %zu/%zu/%zu source phrases (seed %lld) in %.1fs\n", out,
               count[0], count[1], count[2], groups[0], groups[1], groups[2], (long long)seed, now_sec() - t0);
    }
    free(order);
    mega_freedict_pairs_free(&p);
    return rc;
}
