/* The CLI's flag parser (tools/cli.c: cli_parse, cli_find) with a table like `mega train`'s: one
 * flag per field of the language-model and block configs (cli_add_fields) and flags of every
 * kind (int, int64, double, float, string, bool, set, clear, enum, choice; with and without a
 * range). The input is argv: arguments separated by NUL bytes. A parsed configuration is then
 * judged by mega_lm_config_check, as `mega train` does. Output is silenced (fuzz/run.sh closes
 * stdout and stderr; libFuzzer keeps its own reports). */
#include "fuzz_common.h"

#include "../tools/cli.h"

#define MAX_ARGS 64
#define MAX_FLAGS 160

static struct {
    mega_lm_config lm;
    int i, tok, set, clear, b;
    int64_t steps, any64;
    double lr, any;
    float f;
    const char *s, *e;
    int choice;
} A;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cli_flag fl[MAX_FLAGS];
    memset(&A, 0, sizeof A);
    mega_lm_config_default(&A.lm);
    A.s = "text.txt", A.e = "cosine";
    const cli_flag own[] = {
        {"data", F_STR, &A.s, "data file", NULL, 1, 0, 0},
        {"steps", F_I64, &A.steps, "optimizer steps", NULL, 1, 1e12, 0},
        {"seed", F_I64, &A.any64, "seed (no range)", NULL, 1, 0, 0},
        {"lr", F_DBL, &A.lr, "learning rate", NULL, 0, 10, 0},
        {"scale", F_DBL, &A.any, "any number", NULL, 1, 0, 0},
        {"temperature", F_FLT, &A.f, "a float", NULL, 0, 100, 0},
        {"threads", F_INT, &A.i, "threads", NULL, 0, 4096, 0},
        {"quiet", F_SET, &A.set, "a switch", NULL, 1, 0, 0},
        {"no-resume", F_CLEAR, &A.b, "a negated switch (the same variable as --resume)", NULL, 1, 0, 0},
        {"resume", F_BOOL, &A.b, "a boolean", NULL, 1, 0, 0},
        {"schedule", F_ENUM, &A.e, "an enum", "cosine|linear|constant", 1, 0, 0},
        {"model", F_STR, &A.s, "-m", NULL, 1, 0, 0},
        {"tokens", F_INT, &A.tok, "-n", NULL, 1, 1 << 20, 0},
        {"prompt", F_STR, &A.s, "-p", NULL, 1, 0, 0},
        {"kind", F_CHOICE, &A.choice, "a choice", "a|bb|ccc", 1, 0, 0},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) fl[n++] = own[i];
    int nm, nb;
    const mega_field *mf = mega_lm_config_fields(&nm), *bf = mega_block_config_fields(&nb);
    n = cli_add_fields(fl, n, MAX_FLAGS, mf, nm, &A.lm);
    FZ_CHECK(n > 0);
    n = cli_add_fields(fl, n, MAX_FLAGS, bf, nb, &A.lm.block);
    FZ_CHECK(n > 0);

    /* argv: "mega" "train" then the NUL-separated arguments (each an exact-size heap copy) */
    char *argv[MAX_ARGS + 3];
    int argc = 0;
    argv[argc++] = fz_cstr("mega", 4);
    argv[argc++] = fz_cstr("train", 5);
    size_t st = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS + 2; i++)
        if (i == size || data[i] == 0) {
            if (i > st || i < size) argv[argc++] = fz_cstr(data + st, i - st);
            st = i + 1;
        }
    argv[argc] = NULL;
    (void)cli_find(argc, argv, 2, "task");
    (void)cli_find(argc, argv, 2, "out");
    int r = cli_parse("train", "[options]", fl, argc, argv, 2);
    FZ_CHECK(r == 0 || r == 1 || r == 2);
    if (r == 0) {
        FZ_CHECK(A.steps >= 0 && A.steps <= 1e12 && A.lr >= 0 && A.lr <= 10 && A.i >= 0 && A.i <= 4096);
        FZ_CHECK(!strcmp(A.e, "cosine") || !strcmp(A.e, "linear") || !strcmp(A.e, "constant"));
        FZ_CHECK(A.choice >= 0 && A.choice <= 2);
        (void)mega_lm_config_check(&A.lm);
        for (const cli_flag *f = fl; f->name; f++) (void)cli_seen(fl, f->name);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
