/* Table-driven command-line flags for the mega tool: every command declares its flags once, and
 * the same table parses argv, rejects unknown flags and bad values with one clear line, and
 * prints --help with every flag and its default. */
#ifndef MEGA_CLI_H
#define MEGA_CLI_H
#include "mega.h"
#include <stdint.h>
#include <stdio.h>

/* F_ENUM: a string among choices "a|b|c" (dst const char **); F_CHOICE: the index of the value in
 * choices (dst int *: the config fields' enums); F_FLT: a float; F_SIZE: a number of bytes, with
 * an optional K, M, G or T suffix (powers of 1024; "1.5G"), into an int64_t; F_INTS: a config
 * field's list of integers "a,b,c" */
typedef enum { F_INT, F_I64, F_DBL, F_FLT, F_STR, F_BOOL, F_SET, F_CLEAR, F_ENUM, F_CHOICE, F_SIZE, F_INTS } flag_kind;

typedef struct {
    const char *name;    /* without the leading -- */
    flag_kind kind;
    void *dst;           /* int*, int64_t*, double*, const char**, int* */
    const char *help;
    const char *choices; /* F_ENUM: "a|b|c" (dst is const char**) */
    double lo, hi;       /* numeric range (ignored when lo > hi) */
    int seen;
} cli_flag;

#define FL_END {NULL, F_INT, NULL, NULL, NULL, 0, 0, 0}

/* append one flag per field of a config table (fields marked MEGA_FIELD_NOFLAG are skipped)
 * whose values go straight into the config struct at base; the values are checked by the
 * config's own check (mega_*_config_check), not by the flag. Returns the new count; fails (-1)
 * when cap is too small. */
int cli_add_fields(cli_flag *fl, int n, int cap, const mega_field *f, int nf, void *base);
/* the value of --name in argv (the last one; "--name V" or "--name=V"), NULL if absent; for
 * choosing the flags of a command before parsing it */
const char *cli_find(int argc, char **argv, int i0, const char *name);

/* parse argv[i0..argc); returns 0, or 2 after printing the error (or 1 when --help was printed).
 * Two flags that set one variable (--prenorm and --postnorm) given with contradicting values are
 * an error. A --threads above 4 x the online CPUs is lowered to that, with a note on stderr. */
int cli_parse(const char *cmd, const char *usage, cli_flag *flags, int argc, char **argv, int i0);
void cli_help(FILE *f, const char *cmd, const char *usage, const cli_flag *flags);
/* the flag called name in a table (NULL if none; a table names each flag once); whether it was
 * given on the command line */
cli_flag *cli_flag_named(const cli_flag *flags, const char *name);
int cli_seen(const cli_flag *flags, const char *name);
/* "error: ..." on stderr, returns 1 */
int cli_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
#endif
