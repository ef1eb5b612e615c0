/* The model loaders on a whole file: the input is written to a temporary model.safetensors and
 * loaded with mega_lm_load, mega_cls_load and mega_s2s_load (config JSON in the metadata, then
 * every parameter by name and shape). There is no loader from memory, hence the file. A model
 * that loads is checked against the file: its config is valid and reads back from its JSON. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("model.safetensors", data, size);
    mega_lm *lm = NULL;
    if (mega_lm_load(path, &lm) == MEGA_OK) {
        FZ_CHECK(lm != NULL);
        FZ_CHECK(mega_lm_config_check(mega_lm_get_config(lm)) == MEGA_OK);
        mega_lm_free(lm);
    } else {
        FZ_CHECK(lm == NULL);
    }
    mega_cls *cls = NULL;
    if (mega_cls_load(path, &cls) == MEGA_OK) {
        FZ_CHECK(cls != NULL);
        FZ_CHECK(mega_cls_config_check(mega_cls_get_config(cls)) == MEGA_OK);
        mega_cls_free(cls);
    } else {
        FZ_CHECK(cls == NULL);
    }
    mega_s2s *s2s = NULL;
    if (mega_s2s_load(path, &s2s) == MEGA_OK) {
        FZ_CHECK(s2s != NULL);
        FZ_CHECK(mega_s2s_config_check(mega_s2s_get_config(s2s)) == MEGA_OK);
        mega_s2s_free(s2s);
    } else {
        FZ_CHECK(s2s == NULL);
    }
    return 0;
}
