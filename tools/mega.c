/* The mega command-line tool: train, evaluate and run Mega language models. */
#include "common.h"
#include "dist.h"
/* the git commit of the build (Makefile: $(BUILD)/gen/commit.h), "unknown" outside a checkout */
#include "commit.h"
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

/* Every command, one row each: its name, its function, and its line in `mega help` (a "\n" in it
 * continues the line, indented). A new command is its function, in its own file, and one row here;
 * the row declares the function too. */
#define MEGA_COMMANDS(X)                                                                                                \
    X("train", cmd_train, "train a byte-level Mega language model, a classifier (--task classify) or a\n"                \
                          "translation model (--task translate)")                                                       \
    X("eval", cmd_eval, "bits per byte of a language model (streaming), or a classifier's accuracy")                     \
    X("generate", cmd_generate, "sample text from a model, token by token")                                             \
    X("predict", cmd_predict, "print one predicted label per input (classifiers)")                                      \
    X("translate", cmd_translate, "translate lines with an encoder-decoder (mega train --task translate)")               \
    X("quantize", cmd_quantize, "write a model with its matrices in int8 blocks (q8_0) for faster decoding")            \
    X("info", cmd_info, "print a model's config and parameter count")                                                   \
    X("plot", cmd_plot, "write an SVG of the training and validation curves of a run")                                  \
    X("listops", cmd_listops, "generate the ListOps task of the Long Range Arena (--out DIR)")                           \
    X("pathfinder", cmd_pathfinder, "generate the Pathfinder task of the Long Range Arena as PNG images (--out DIR)")    \
    X("speech-synth", cmd_speech_synth, "spoken keywords from espeak-ng in the Speech Commands layout (--out DIR)")          \
    X("freedict", cmd_freedict, "parallel phrases (train/valid/test TSV) from a FreeDict dictionary (--dict, --out)")   \
    X("experiment", cmd_experiment, "rerun a claim of the papers with figures (docs/results.md; 'mega experiment --list')") \
    X("hf-export", cmd_hf_export, "write a model in the Hugging Face transformers Mega layout (--model, --out)")         \
    X("hf-import", cmd_hf_import, "read a Hugging Face transformers Mega model (--hf, --out)")                          \
    X("serve", cmd_serve, "an HTTP server for a language model: OpenAI and llama.cpp APIs, a page at /\n"            \
                          "(docs/serving.md)")                                                                          \
    X("bench", cmd_bench, "performance workloads (tokens/s, GFLOP/s, peak memory; 'mega bench --list')")                \
    X("version", cmd_version, "version and build description")                                                          \
    X("help", cmd_help, "this text")

#define DECLARE(name, fn, summary) int fn(int argc, char **argv);
MEGA_COMMANDS(DECLARE)
#undef DECLARE

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

#define ROW(name, fn, summary) {name, fn, summary},
static const command COMMANDS[] = {MEGA_COMMANDS(ROW)};
#undef ROW

static void usage(FILE *f) {
    fprintf(f, "usage: mega <command> [options]     ('mega <command> --help' lists every flag and default)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++) {
        fprintf(f, "  %-10s ", COMMANDS[i].name);
        for (const char *c = COMMANDS[i].summary; *c; c++)
            if (*c == '\n') fprintf(f, "\n%13s", "");
            else fputc(*c, f);
        fprintf(f, "\n");
    }
}

/* Large data files are mapped (mega_read_file_max), and touching a page that another process cut
 * off the file raises SIGBUS: turn that into the tool's usual one-line error and exit code 2
 * instead of a core dump. Only async-signal-safe calls here. */
static void on_sigbus(int sig) {
    static const char msg[] = "mega: error: an input file was truncated or became unreadable while in use "
                              "(SIGBUS on its mapped pages)\n";
    (void)sig;
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(2);
}

/* libgomp's idle threads spin for 300,000 iterations before they sleep. On a machine where
 * another process keeps one of the cores busy, a thread that is descheduled holds up every other
 * thread spinning at the end of each parallel region, and there are hundreds of regions per
 * training step: one spin-loop neighbour on the second core of a 2-core machine made a 2-thread
 * translation training run 6x slower, and 2-thread decoding 5x slower (docs/performance.md, "A
 * busy neighbour"). With a short spin, what libgomp itself uses when it has more threads than
 * cores (GOMP_SPINCOUNT=1000), the quiet machine runs as fast as before and the busy one loses
 * only what the neighbour takes. libgomp reads its environment when it is loaded, before main,
 * so the tool sets the variable and executes itself again, once. A setting of the user's
 * (GOMP_SPINCOUNT or OMP_WAIT_POLICY) is kept, and so is a run under valgrind (its tool would
 * not follow the new image). LLVM's runtime (clang builds) has its own variable (KMP_BLOCKTIME)
 * and is left at its default. */
#ifdef MEGA_USE_BLAS
char *openblas_get_corename(void);
#endif

static void short_spin(char **argv) {
#if defined(_OPENMP) && defined(__GNUC__) && !defined(__clang__)
    if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY")) return;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) return;
    if (setenv("GOMP_SPINCOUNT", "1000", 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT"); /* no /proc: run with the default, and say nothing different to children */
#else
    (void)argv;
#endif
}

/* run the command called name (argv[1] may be its alias) */
static int dispatch(const char *name, int argc, char **argv) {
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(COMMANDS[i].name, name)) return COMMANDS[i].fn(argc, argv);
    fprintf(stderr, "mega: error: unknown command '%s' (see 'mega help')\n", name);
    return 2;
}

/* mega help: the commands; mega help CMD == mega CMD --help */
static int cmd_help(int argc, char **argv) {
    if (argc > 2 && argv[2][0] != '-' && strcmp(argv[2], "help")) {
        static char help_flag[] = "--help";
        char *hv[4] = {argv[0], argv[2], help_flag, NULL};
        return dispatch(argv[2], 3, hv);
    }
    usage(stdout);
    return 0;
}

static int cmd_version(int argc, char **argv) {
    (void)argc, (void)argv;
    const char *spin = getenv("GOMP_SPINCOUNT"), *wait = getenv("OMP_WAIT_POLICY");
    printf("%s\ncommit %s\ndistributed %s\nopenmp wait GOMP_SPINCOUNT=%s OMP_WAIT_POLICY=%s\ncompiler %s\n", mega_build_info(),
           MEGA_COMMIT, dist_describe(), spin ? spin : "(default)", wait ? wait : "(default)",
#if defined(__clang__)
           "clang " __clang_version__
#elif defined(__GNUC__)
           "gcc " __VERSION__
#else
           "unknown"
#endif
    );
#ifdef MEGA_USE_BLAS
    /* OpenBLAS picks its kernels from the CPU when it is loaded, unless OPENBLAS_CORETYPE
     * names them; the GEMM rate depends on it (docs/performance.md, "The BLAS kernels") */
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("blas OpenBLAS %s kernels%s%s%s\n", openblas_get_corename(), ct ? " (OPENBLAS_CORETYPE=" : "",
           ct ? ct : "", ct ? ")" : "");
#else
    printf("blas none (portable GEMM)\n");
#endif
    return 0;
}

int main(int argc, char **argv) {
    short_spin(argv);
    struct sigaction sb;
    memset(&sb, 0, sizeof sb);
    sb.sa_handler = on_sigbus;
    sigemptyset(&sb.sa_mask);
    sigaction(SIGBUS, &sb, NULL);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    /* the usual spellings of help and version */
    if (!strcmp(c, "--help") || !strcmp(c, "-h")) c = "help";
    if (!strcmp(c, "--version")) c = "version";
    const int rc = dispatch(c, argc, argv);
    /* output that never arrived is a failure, whatever the command thought (one line) */
    return out_close() ? 2 : rc;
}
