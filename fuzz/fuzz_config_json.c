/* The model config readers on arbitrary text: mega_lm_config_from_json,
 * mega_cls_config_from_json and mega_s2s_config_from_json (ours and the official fairseq
 * argument names). Invariant: a config that was read is valid and survives a round trip through
 * its own JSON writer unchanged. */
#include "fuzz_common.h"

#define ROUND_TRIP(kind, type)                                                                   \
    do {                                                                                         \
        type c, c2;                                                                              \
        memset(&c, 0, sizeof c);                                                                 \
        if (mega_##kind##_config_from_json(json, &c) == MEGA_OK) {                               \
            FZ_CHECK(mega_##kind##_config_check(&c) == MEGA_OK);                                 \
            char *again = mega_##kind##_config_to_json(&c);                                      \
            FZ_CHECK(again != NULL);                                                             \
            memset(&c2, 0, sizeof c2);                                                           \
            FZ_CHECK(mega_##kind##_config_from_json(again, &c2) == MEGA_OK);                     \
            char *third = mega_##kind##_config_to_json(&c2);                                     \
            FZ_CHECK(third != NULL && !strcmp(again, third));                                    \
            free(again);                                                                         \
            free(third);                                                                         \
        }                                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = fz_cstr(data, size);
    ROUND_TRIP(lm, mega_lm_config);
    ROUND_TRIP(cls, mega_cls_config);
    ROUND_TRIP(s2s, mega_s2s_config);
    free(json);
    return 0;
}
