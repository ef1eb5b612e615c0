/* The registry of token mixers (mixer.h), generated from MEGA_MIXER_LIST (mega.h). */
#include "layers/mixer.h"

#define OPS_(ID, id, name, help) &mega_mixer_ops_##id,
static const mega_mixer_ops *const OPS[MEGA_MIXER_COUNT] = {MEGA_MIXER_LIST(OPS_)};

const mega_mixer_ops *mega_mixer_ops_of(mega_mixer_kind k) { return (unsigned)k < MEGA_MIXER_COUNT ? OPS[k] : NULL; }
int mega_mixer_available(mega_mixer_kind k) { return mega_mixer_ops_of(k) != NULL; }
