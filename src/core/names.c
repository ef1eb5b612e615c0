/* Names of the enumerated settings, generated from the lists in mega.h (the one place each list
 * is written). */
#include "core/internal.h"

#define NAME_(ID, name, help) name,
#define HELP_(ID, name, help) help,
#define MNAME_(ID, id, name, help) name,
#define MHELP_(ID, id, name, help) help,

/* the name tables (also read by the config field tables) */
const char *const mega__names_attn[MEGA_ATTN_COUNT] = {MEGA_ATTN_LIST(NAME_)};
const char *const mega__names_norm[MEGA_NORM_COUNT] = {MEGA_NORM_LIST(NAME_)};
const char *const mega__names_act[MEGA_ACT_COUNT] = {MEGA_ACT_LIST(NAME_)};
const char *const mega__names_relpos[MEGA_RELPOS_COUNT] = {MEGA_RELPOS_LIST(NAME_)};
const char *const mega__names_pos[MEGA_POS_COUNT] = {MEGA_POS_LIST(NAME_)};
const char *const mega__names_mixer[MEGA_MIXER_COUNT] = {MEGA_MIXER_LIST(MNAME_)};
static const char *const MIXER_HELP[] = {MEGA_MIXER_LIST(MHELP_)};
#define ATTN mega__names_attn
#define NORM mega__names_norm
#define ACT mega__names_act
#define RELPOS mega__names_relpos
#define POS mega__names_pos
#define MIXER mega__names_mixer

static const char *name_of(const char *const *names, int n, int v) { return v >= 0 && v < n ? names[v] : "?"; }

static int parse_in(const char *const *names, int n, const char *s, int *v) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *v = i;
            return 0;
        }
    return -1;
}

#define NAMED_ENUM(type, fname, table, count)                                                      \
    const char *fname##_name(type v) { return name_of(table, count, (int)v); }                    \
    int fname##_parse(const char *s, type *v) {                                                    \
        int i;                                                                                     \
        if (parse_in(table, count, s, &i)) return -1;                                              \
        *v = (type)i;                                                                              \
        return 0;                                                                                  \
    }
NAMED_ENUM(mega_attn_fn, mega_attn_fn, ATTN, MEGA_ATTN_COUNT)
NAMED_ENUM(mega_norm_type, mega_norm, NORM, MEGA_NORM_COUNT)
NAMED_ENUM(mega_relpos_kind, mega_relpos, RELPOS, MEGA_RELPOS_COUNT)
NAMED_ENUM(mega_pos_kind, mega_pos, POS, MEGA_POS_COUNT)
NAMED_ENUM(mega_mixer_kind, mega_mixer, MIXER, MEGA_MIXER_COUNT)

const char *mega_act_name(mega_act a) { return name_of(ACT, MEGA_ACT_COUNT, (int)a); }
int mega_act_parse(const char *s, mega_act *a) {
    int i;
    if (!strcmp(s, "swish")) s = "silu"; /* the official code's other name for it */
    if (parse_in(ACT, MEGA_ACT_COUNT, s, &i)) return -1;
    *a = (mega_act)i;
    return 0;
}

const char *mega_mixer_summary(mega_mixer_kind k) { return name_of(MIXER_HELP, MEGA_MIXER_COUNT, (int)k); }
