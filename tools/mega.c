/* The mega command-line tool. */
#include "mega.h"
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: mega <command> [options]\n\n"
               "commands:\n"
               "  help       this text\n"
               "  version    version and build description\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("%s\n", mega_build_info());
        return 0;
    }
    fprintf(stderr, "mega: unknown command '%s' (see 'mega help')\n", argv[1]);
    return 2;
}
