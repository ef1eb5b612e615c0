/* The vocabulary and class-list readers of checkpoint metadata (mega_vocab_from_json,
 * mega_classes_from_json) on arbitrary text. Invariants: what was read writes back to JSON that
 * reads back to the same thing. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = fz_cstr(data, size);
    mega_vocab v;
    memset(&v, 0, sizeof v);
    if (mega_vocab_from_json(json, &v) == MEGA_OK) {
        FZ_CHECK(v.size > 0 && v.pad >= 0 && v.pad < v.size && v.unk < v.size);
        char *again = mega_vocab_to_json(&v);
        FZ_CHECK(again);
        mega_vocab w;
        FZ_CHECK(mega_vocab_from_json(again, &w) == MEGA_OK);
        FZ_CHECK(w.kind == v.kind && w.size == v.size && w.pad == v.pad && w.unk == v.unk && w.real == v.real &&
                 w.keep_parens == v.keep_parens);
        free(again);
    }
    mega_classes c;
    if (mega_classes_from_json(json, &c) == MEGA_OK) {
        FZ_CHECK(c.n >= 1);
        for (int i = 0; i < c.n; i++) FZ_CHECK(c.names[i] && mega_classes_find(&c, c.names[i]) == i);
        char *again = mega_classes_to_json(&c);
        FZ_CHECK(again);
        mega_classes d;
        FZ_CHECK(mega_classes_from_json(again, &d) == MEGA_OK && d.n == c.n);
        for (int i = 0; i < c.n; i++) FZ_CHECK(!strcmp(c.names[i], d.names[i]));
        mega_classes e;
        FZ_CHECK(mega_classes_copy(&e, &c) == MEGA_OK && e.n == c.n);
        mega_classes_free(&e);
        mega_classes_free(&d);
        free(again);
        mega_classes_free(&c);
    } else {
        FZ_CHECK(c.n == 0 && c.names == NULL);
    }
    free(json);
    return 0;
}
