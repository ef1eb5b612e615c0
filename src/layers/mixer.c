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
    case MEGA_MIXER_MHA: return &mega_mixer_ops_mha;
    case MEGA_MIXER_LOCAL: return &mega_mixer_ops_local;
    case MEGA_MIXER_MHATW: return &mega_mixer_ops_mhatw;
    /* each mixer file adds its line here: case MEGA_MIXER_X: return &mega_mixer_ops_x; */
    case MEGA_MIXER_AFT_FULL: return &mega_mixer_ops_aft_full;
    case MEGA_MIXER_AFT_LOCAL: return &mega_mixer_ops_aft_local;
    case MEGA_MIXER_AFT_SIMPLE: return &mega_mixer_ops_aft_simple;
    case MEGA_MIXER_AFT_TW: return &mega_mixer_ops_aft_tw;
    case MEGA_MIXER_GMLP: return &mega_mixer_ops_gmlp;
    case MEGA_MIXER_ABC_WINDOW: return &mega_mixer_ops_abc_window;
    case MEGA_MIXER_ABC_LINFORMER: return &mega_mixer_ops_abc_linformer;
    case MEGA_MIXER_ABC_MLP: return &mega_mixer_ops_abc_mlp;
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
