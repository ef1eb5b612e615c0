/* The registry of token mixers (see mixer.h). */
#include "layers/mixer.h"

static const char *const NAMES[MEGA_MIXER_COUNT] = {
    "mega", "mha", "mhatw", "aft-full", "aft-local", "aft-simple", "aft-tw", "gmlp", "abc-window", "abc-linformer",
    "abc-mlp", "local",
};

const char *mega_mixer_name(mega_mixer_kind k) { return (unsigned)k < MEGA_MIXER_COUNT ? NAMES[k] : "?"; }

int mega_mixer_parse(const char *s, mega_mixer_kind *k) {
    for (int i = 0; i < MEGA_MIXER_COUNT; i++)
        if (!strcmp(s, NAMES[i])) {
            *k = (mega_mixer_kind)i;
            return 0;
        }
    return -1;
}

const mega_mixer_ops *mega_mixer_ops_of(mega_mixer_kind k) {
    switch (k) {
    case MEGA_MIXER_MEGA: return &mega_mixer_ops_mega;
    /* each mixer file adds its line here: case MEGA_MIXER_X: return &mega_mixer_ops_x; */
    default: return NULL;
    }
}

int mega_mixer_available(mega_mixer_kind k) { return mega_mixer_ops_of(k) != NULL; }

static const char *const POS[] = {"none", "rope", "alibi", "kerple-power", "kerple-log", "sandwich", "xpos"};
const char *mega_pos_name(mega_pos_kind p) { return (unsigned)p < 7 ? POS[p] : "?"; }
int mega_pos_parse(const char *s, mega_pos_kind *p) {
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, POS[i])) {
            *p = (mega_pos_kind)i;
            return 0;
        }
    return -1;
}
