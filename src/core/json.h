/* Typed reads of config JSON (cJSON) and the field-table JSON reader/writer shared by every
 * config kind. */
#ifndef MEGA_JSON_H
#define MEGA_JSON_H
#include "core/internal.h"
#include <cjson/cJSON.h>

typedef struct {
    const cJSON *o;
    mega_status st; /* the first error */
} mega_json_reader;

/* absent or null keys leave *dst unchanged; a wrongly typed value records an error */
void mega_json_int(mega_json_reader *r, const char *k, int *dst);
void mega_json_flt(mega_json_reader *r, const char *k, float *dst);
void mega_json_bool(mega_json_reader *r, const char *k, int *dst, int invert);
/* a string value looked up in names[0..n) (its index is stored) */
void mega_json_ints(mega_json_reader *r, const char *k, int *dst);
void mega_json_choice(mega_json_reader *r, const char *k, const char *const *names, int n, int *dst);

/* every field of the config struct at base, keys = field names */
void mega__fields_to_json(cJSON *o, const mega_field *f, int n, const void *base);
void mega__fields_from_json(mega_json_reader *r, const mega_field *f, int n, void *base);
#endif
