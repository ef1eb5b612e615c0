/* The models the commands open (models.h). */
#include "models.h"

#include <stdio.h>
#include <string.h>

/* The one place a kind's name is compared: the "kind" each config's to_json writes. */
static const struct {
    const char *name;
    model_kind kind;
} KINDS[] = {
    {"mega_lm", MODEL_LM},
    {"mega_cls", MODEL_CLS},
    {"mega_s2s", MODEL_S2S},
};

/* name appears in the JSON text as a string ("name") */
static int has_string(const char *json, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = strstr(json, name); p; p = strstr(p + 1, name))
        if (p > json && p[-1] == '"' && p[n] == '"') return 1;
    return 0;
}

model_kind model_kind_of_config(const char *cfg) {
    if (!cfg) return MODEL_LM;
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS; i++)
        if (KINDS[i].kind != MODEL_LM && has_string(cfg, KINDS[i].name)) return KINDS[i].kind;
    /* a config without its kind (converted or older files): an encoder with a decoder translates,
     * an encoder alone classifies */
    if (strstr(cfg, "encoder_layers")) return strstr(cfg, "decoder_layers") ? MODEL_S2S : MODEL_CLS;
    return MODEL_LM;
}

const char *model_kind_name(model_kind k) {
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS; i++)
        if (KINDS[i].kind == k) return KINDS[i].name;
    return "?";
}

int model_file_kind(const char *path, model_kind *k) {
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return -1;
    *k = model_kind_of_config(mega_st_meta(f, "config"));
    mega_st_close(f);
    return 0;
}
