/* The byte-pair merge list of a subword translation model (mega_bpe_from_string, the metadata
 * "bpe" of its checkpoint) on arbitrary text, and what a list that reads can do. Invariants: it
 * writes back to exactly the text it was read from; every token's bytes are the concatenation of
 * its merge's two tokens; encoding any text (the input itself) decodes back to that text with no
 * more tokens than bytes, every id in the vocabulary. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mega_bpe *b = NULL;
    if (mega_bpe_from_string((const char *)data, size, &b) != MEGA_OK) {
        FZ_CHECK(b == NULL);
        return 0;
    }
    size_t len;
    char *again = mega_bpe_to_string(b, &len);
    FZ_CHECK(again && len == size && !memcmp(again, data, size));
    free(again);
    const int V = mega_bpe_vocab_size(b);
    FZ_CHECK(V == 258 + mega_bpe_merges(b));
    int32_t *ids = malloc((size + 1) * sizeof *ids);
    size_t longest = 1;
    for (int v = 0; v < V; v++) {
        size_t l;
        FZ_CHECK(mega_bpe_token(b, v, &l) != NULL);
        longest = l > longest ? l : longest;
    }
    uint8_t *out = malloc(size * longest + 1);
    FZ_CHECK(ids && out);
    const size_t n = mega_bpe_encode(b, data, size, ids);
    FZ_CHECK(n <= size);
    for (size_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < V && ids[i] != 256 && ids[i] != 257);
    FZ_CHECK(mega_bpe_decode(b, ids, n, out) == size && !memcmp(out, data, size));
    free(ids), free(out);
    mega_bpe_free(b);
    return 0;
}
