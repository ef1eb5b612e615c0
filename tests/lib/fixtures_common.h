/* Shared helpers of the fixture runners (tests/test_fixtures.c, built as build/test_fixtures and
 * build/t64_fixtures). */
#ifndef MEGA_FIXTURES_COMMON_H
#define MEGA_FIXTURES_COMMON_H
#include "core/params.h"
#include "testlib.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <sys/stat.h>

typedef struct {
    char dir[1024], name[256];
    cJSON *json;       /* case.json */
    const cJSON *cfg;  /* "config" */
    int f64;           /* reference dtype float64 */
    int B, T;
    mega_st_file *w, *io;
    double worst;      /* worst relative error seen */
    char worst_name[160];
    int failed;
    double tol;        /* relative tolerance for this case in this build */
    double noise_abs;  /* absolute tolerance for noise gradients */
} fx_case;

int fx_open(fx_case *c, const char *dir);
void fx_close(fx_case *c);
int fx_cfg_int(const fx_case *c, const char *key, int dflt);
double fx_cfg_num(const fx_case *c, const char *key, double dflt);
const char *fx_cfg_str(const fx_case *c, const char *key, const char *dflt);
int fx_cfg_bool(const fx_case *c, const char *key, int dflt);
int fx_is_noise(const fx_case *c, const char *param);
/* read a float tensor from io into a new mega_real array (NULL if absent) */
mega_real *fx_tensor(const fx_case *c, const char *name, size_t *n);
uint8_t *fx_mask(const fx_case *c, const char *name, size_t n);
int32_t *fx_ints(const fx_case *c, const char *name, size_t *n);
/* compare and record; returns relative error */
double fx_compare(fx_case *c, const char *what, const mega_real *got, const mega_real *ref, size_t n, int noise);
/* compare every grad.<name> in io against P->grad, names prefixed by `prefix` */
void fx_compare_grads(fx_case *c, const mega_params *P, const char *prefix);
/* list case directories (those with case.json) under root, sorted; returns count */
int fx_list(const char *root, char names[][1024], int max);
#endif
