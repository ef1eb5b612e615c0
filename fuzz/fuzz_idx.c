/* IDX images and labels through mega_dataset_load(MEGA_DATA_IDX): the input is cut in two files
 * at the offset in its first two bytes (little-endian, modulo the rest's length + 1); byte 2
 * holds the options (bit 0 real-valued pixels, bit 1 a given class list, bits 2-7 max_len / 4
 * when not 0) and byte 3 max_examples (0 = all, else 1..15). Every example then goes through a
 * padded batch (token ids or reals). */
#include "fuzz_common.h"

static char *given_names[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    unsigned cut = fz_byte(&in);
    cut |= fz_byte(&in) << 8;
    const unsigned o0 = fz_byte(&in), o1 = fz_byte(&in);
    cut %= (unsigned)in.n + 1;
    const mega_classes given = {10, given_names};
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    o.real = o0 & 1;
    o.classes = (o0 >> 1) & 1 ? &given : NULL;
    o.max_len = (int)(o0 >> 2) * 4;
    o.max_examples = (int)(o1 % 16);
    const char *images = fz_write("images.idx", in.p, cut);
    const char *labels = fz_write("labels.idx", in.p + cut, in.n - cut);
    mega_dataset d;
    mega_status st = mega_dataset_load(MEGA_DATA_IDX, NULL, images, labels, &o, &d);
    if (st != MEGA_OK) {
        FZ_CHECK(d.n == 0 && d.tok == NULL && d.pool == NULL);
        mega_dataset_free(&d);
        return 0;
    }
    FZ_CHECK(d.n >= 1 && d.rows >= 1 && d.cols >= 1 && mega_dataset_format(&d) == MEGA_DATA_IDX);
    const int px = d.rows * d.cols;
    for (int i = 0; i < d.n; i++) {
        FZ_CHECK(d.len[i] == (o.max_len && o.max_len < px ? o.max_len : px));
        FZ_CHECK(d.label[i] >= 0 && d.label[i] < d.classes.n);
    }
    const int B = d.n < 4 ? d.n : 4;
    mega_batch b;
    FZ_CHECK(mega_batch_init(&b, B, d.max_len, 0, o.real) == MEGA_OK);
    int idx[4];
    for (int i0 = 0; i0 < d.n; i0 += B) {
        int n = d.n - i0 < B ? d.n - i0 : B;
        for (int i = 0; i < n; i++) idx[i] = i0 + i;
        FZ_CHECK(mega_batch_fill(&b, &d, idx, n) == MEGA_OK);
    }
    mega_batch_free(&b);
    (void)mega_dataset_fingerprint(&d);
    mega_dataset_free(&d);
    return 0;
}
