/* fairseq binarized datasets through mega_fbin_open and mega_fbin_read, and dict.txt through
 * mega_fdict_load_txt. Byte 0 chooses: bit 0 clear, a dataset: the rest is cut in two files (the
 * .idx, then the .bin) at the offset in bytes 1-2 (little-endian, modulo the rest's length + 1),
 * and bits 1-7 give the id limit the sequences are read with (0 = none); bit 0 set, the rest is a
 * dict.txt, read with the word unit when bit 1 is clear, else the byte unit. */
#include "fuzz_common.h"

static void dataset(fz_in *in, unsigned opt) {
    unsigned cut = fz_byte(in);
    cut |= fz_byte(in) << 8;
    cut %= (unsigned)in->n + 1;
    fz_write("fb.idx", in->p, cut);
    fz_write("fb.bin", in->p + cut, in->n - cut);
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s/%d_fb", fz_dir(), (int)getpid());
    FZ_CHECK(mega_fbin_prefix(prefix, NULL, 0));
    mega_fbin *d = (mega_fbin *)1;
    if (mega_fbin_open(prefix, &d) != MEGA_OK) {
        FZ_CHECK(d == NULL);
        return;
    }
    const int32_t limit = (int32_t)(opt >> 1);
    uint64_t total = 0;
    for (size_t i = 0; i < mega_fbin_count(d); i++) {
        const size_t n = mega_fbin_length(d, i);
        /* every sequence lies within the .bin (at least one byte per token) */
        FZ_CHECK(n <= in->n - cut);
        total += n;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) abort();
        if (mega_fbin_read(d, i, limit, ids) == MEGA_OK)
            for (size_t k = 0; k < n; k++) FZ_CHECK(ids[k] >= 0 && (limit <= 0 || ids[k] < limit));
        free(ids);
    }
    FZ_CHECK(total == mega_fbin_tokens(d) && mega_fbin_length(d, mega_fbin_count(d)) == 0);
    FZ_CHECK(mega_fbin_read(d, mega_fbin_count(d), 0, NULL) == MEGA_ERR_INVALID);
    FZ_CHECK(mega_fbin_describe(d)[0] != 0);
    mega_fbin_close(d);
}

static void dictionary(fz_in *in, unsigned opt) {
    const char *path = fz_write("dict.txt", in->p, in->n);
    mega_fdict *d = (mega_fdict *)1;
    if (mega_fdict_load_txt(path, opt & 2 ? MEGA_FDICT_BYTE : MEGA_FDICT_WORD, &d) != MEGA_OK) {
        FZ_CHECK(d == NULL);
        return;
    }
    const int n = mega_fdict_size(d);
    FZ_CHECK(n >= 5 && !strcmp(mega_fdict_token(d, 3), "<unk>") && mega_fdict_token(d, n) == NULL);
    for (int i = 0; i < n; i++) FZ_CHECK(mega_fdict_token(d, i) && mega_fdict_token(d, i)[0]);
    FZ_CHECK(mega_fdict_check_same(d, d, "fuzz") == MEGA_OK);
    mega_fdict_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned opt = fz_byte(&in);
    if (opt & 1) dictionary(&in, opt);
    else dataset(&in, opt);
    return 0;
}
