/*
 * The models the commands open: the kind of a model file (one small table of the kinds' names),
 * and one loader that opens a run directory or a model file and loads whichever model it holds.
 */
#ifndef MEGA_TOOLS_MODELS_H
#define MEGA_TOOLS_MODELS_H
#include "common.h"

typedef enum { MODEL_LM = 0, MODEL_CLS, MODEL_S2S } model_kind;

/* the kind named in a config (JSON; the "kind" a library config writes, else guessed from the
 * fields of an older or official config) */
model_kind model_kind_of_config(const char *config_json);
/* the name of a kind ("mega_lm", "mega_cls", "mega_s2s") */
const char *model_kind_name(model_kind k);
/* the kind of the model file at path: 0, or -1 (mega_last_error set) when it cannot be read */
int model_file_kind(const char *path, model_kind *k);

#endif
