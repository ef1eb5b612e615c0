/* Language-model text data: mega_read_file on a file holding the input, mega_read_file_max with a
 * limit of 1 + seed % 64 bytes, the fingerprint, and mega_text_windows with a batch shape taken
 * from the first two bytes (the windows and their next-byte targets must come from the text). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const int B = 1 + (int)(fz_byte(&in) % 8), T = (int)fz_byte(&in) % 130; /* T = 0 is invalid */
    const uint64_t seed = fz_byte(&in);
    const char *path = fz_write("text.txt", in.p, in.n);
    mega_bytes text = {0, 0, 0};
    mega_status st = mega_read_file(path, "--data", &text);
    if (st != MEGA_OK) {
        FZ_CHECK(in.n == 0 && st == MEGA_ERR_FORMAT && text.data == NULL);
        return 0;
    }
    FZ_CHECK(text.n == in.n && !memcmp(text.data, in.p, in.n) && text.data[text.n] == 0);
    FZ_CHECK(mega_fnv1a64(text.data, text.n) == mega_fnv1a64(in.p, in.n));
    /* the start of the file only (`mega eval --max-bytes`) */
    const uint64_t max = 1 + seed % 64;
    mega_bytes head = {0, 0, 0};
    FZ_CHECK(mega_read_file_max(path, "--data", max, &head) == MEGA_OK);
    FZ_CHECK(head.n == (in.n < max ? in.n : max) && !memcmp(head.data, in.p, head.n) && head.data[head.n] == 0);
    mega_bytes_free(&head);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * (T ? (size_t)T : 1));
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)B * (T ? (size_t)T : 1));
    FZ_CHECK(tok && tgt);
    uint64_t state = mega_data_rng_seed(seed);
    st = mega_text_windows(text.data, text.n, B, T, &state, tok, tgt);
    if (st == MEGA_OK) {
        for (size_t i = 0; i < (size_t)B * (size_t)T; i++) {
            FZ_CHECK(tok[i] >= 0 && tok[i] < 256 && tgt[i] >= 0 && tgt[i] < 256);
            if ((i + 1) % (size_t)T) FZ_CHECK(tgt[i] == tok[i + 1]);
        }
    } else {
        FZ_CHECK(T < 1 || text.n < (size_t)T + 1);
    }
    free(tok);
    free(tgt);
    mega_bytes_free(&text);
    return 0;
}
