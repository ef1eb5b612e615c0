/* fairseq binarized datasets (include/mega_data.h, docs/interop.md): the index and data files
 * fairseq-preprocess writes, as the official fairseq/data/indexed_dataset.py lays them out
 * (MMapIndexedDataset.Index and IndexedDataset.read_index), and fairseq's dict.txt
 * (fairseq/data/dictionary.py Dictionary.add_from_file).
 *
 * The files are untrusted: every count of the index is checked against the index's own size
 * before an array is allocated from it, every sequence against the .bin's size, with the sums
 * done in uint64 after bounds that keep them from wrapping. */
#include "data/data.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sys/stat.h>

struct mega_fbin {
    char *idx_path, *bin_path;
    int cached;          /* TNTIDX (IndexedDataset): ids stored plus 1 */
    int code;            /* the dtype code */
    size_t esize;        /* bytes per element */
    size_t n;            /* sequences */
    uint64_t *off;       /* [n] byte offset of each sequence in the .bin */
    uint32_t *len;       /* [n] its tokens */
    uint64_t total;      /* tokens in all */
    mega_bytes bin;
    char desc[32];
};

/* the dtypes of fairseq's `dtypes` table that hold token ids: element size (0 = not one) */
static size_t code_size(unsigned code) {
    switch (code) {
    case 1: case 2: return 1; /* uint8, int8 */
    case 3: case 8: return 2; /* int16, uint16 */
    case 4: return 4;         /* int32 */
    case 5: return 8;         /* int64 */
    default: return 0;
    }
}

static const char *code_name(unsigned code) {
    static const char *names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float64", "uint16"};
    return code < 9 ? names[code] : "?";
}

static uint64_t le64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static mega_status check_code(const mega_fbin *d, uint64_t code) {
    if (code == 6 || code == 7)
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': dtype code %u (float64) holds no token ids", d->idx_path, (unsigned)code);
    if (code > 8 || !code_size((unsigned)code))
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': unknown dtype code %llu (known: 1-5 and 8, the integer types)",
                  d->idx_path, (unsigned long long)code);
    return MEGA_OK;
}

/* sequence i of len elements at byte offset off lies within the .bin */
static mega_status check_within(const mega_fbin *d, size_t i, uint64_t off, uint64_t len) {
    const uint64_t nb = d->bin.n;
    /* len < 2^32 and esize <= 8: the product cannot wrap */
    if (off > nb || len * d->esize > nb - off)
        MEGA_FAIL(MEGA_ERR_FORMAT,
                  "fairseq dataset '%s': sequence %zu (%llu tokens at byte %llu) lies past the end of '%s' (%llu bytes)",
                  d->idx_path, i, (unsigned long long)len, (unsigned long long)off, d->bin_path, (unsigned long long)nb);
    return MEGA_OK;
}

static mega_status alloc_arrays(mega_fbin *d, size_t n) {
    d->n = n;
    d->off = malloc((n ? n : 1) * sizeof *d->off);
    d->len = malloc((n ? n : 1) * sizeof *d->len);
    if (!d->off || !d->len) MEGA_FAIL(MEGA_ERR_OOM, "fairseq dataset '%s': out of memory for %zu sequences", d->idx_path, n);
    return MEGA_OK;
}

/* MMIDIDX: magic(9) version(8) code(1) n(8) [Megatron: ndoc(8)] sizes(4n) pointers(8n) [doc(8 ndoc)] */
static mega_status read_mmap(mega_fbin *d, const uint8_t *b, size_t nb) {
    if (nb < 26) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s' is truncated: %zu bytes, shorter than the 26-byte header", d->idx_path, nb);
    uint64_t ver = le64(b + 9), n = le64(b + 18);
    if (ver != 1) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': index version %llu, expected 1", d->idx_path, (unsigned long long)ver);
    MEGA_TRY(check_code(d, b[17]));
    d->code = b[17], d->esize = code_size(b[17]);
    if (n > (nb - 26) / 12)
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s' is truncated: the header announces %llu sequences but the file has %zu "
                  "bytes, room for %zu", d->idx_path, (unsigned long long)n, nb, (nb - 26) / 12);
    size_t at = 26, rest = nb - 26 - (size_t)n * 12;
    if (rest) { /* Megatron-LM: a document count after n, the documents' first sequences at the end */
        uint64_t nd = rest >= 8 ? le64(b + 26) : 0;
        if (rest < 8 || nd != (rest - 8) / 8 || (rest - 8) % 8)
            MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': %zu bytes where %llu sequences take %llu (trailing data, or a "
                      "count that does not match the file)", d->idx_path, nb, (unsigned long long)n, (unsigned long long)(26 + 12 * n));
        at = 34;
        const uint8_t *doc = b + at + 12 * (size_t)n;
        for (uint64_t k = 0; k < nd; k++)
            if (le64(doc + 8 * k) > n || (k && le64(doc + 8 * k) < le64(doc + 8 * (k - 1))))
                MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': document index %llu is out of order or past the %llu sequences",
                          d->idx_path, (unsigned long long)k, (unsigned long long)n);
    }
    MEGA_TRY(alloc_arrays(d, (size_t)n));
    const uint8_t *sz = b + at, *ptr = b + at + 4 * (size_t)n;
    for (size_t i = 0; i < d->n; i++) {
        uint32_t s = le32(sz + 4 * i);
        uint64_t p = le64(ptr + 8 * i);
        if (s > INT32_MAX) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': sequence %zu has a negative size (%d)", d->idx_path, i, (int32_t)s);
        MEGA_TRY(check_within(d, i, p, s));
        d->off[i] = p, d->len[i] = s, d->total += s;
    }
    snprintf(d->desc, sizeof d->desc, "mmap %s", code_name((unsigned)d->code));
    return MEGA_OK;
}

/* TNTIDX: magic(8) version code esize n s (8 each) dim_offsets(8(n+1)) data_offsets(8(n+1)) sizes(8s) */
static mega_status read_cached(mega_fbin *d, const uint8_t *b, size_t nb) {
    if (nb < 48) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s' is truncated: %zu bytes, shorter than the 48-byte header", d->idx_path, nb);
    uint64_t ver = le64(b + 8), code = le64(b + 16), es = le64(b + 24), n = le64(b + 32), s = le64(b + 40);
    if (ver != 1) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': index version %llu, expected 1", d->idx_path, (unsigned long long)ver);
    MEGA_TRY(check_code(d, code));
    d->code = (int)code, d->esize = code_size((unsigned)code);
    if (es != d->esize)
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': element size %llu for dtype %s (%zu bytes)", d->idx_path,
                  (unsigned long long)es, code_name((unsigned)code), d->esize);
    /* each bound keeps the next product from wrapping: n, s < nb / 8 */
    const uint64_t words = (nb - 48) / 8;
    if (n >= words / 2 || s > words || (nb - 48) % 8 || 2 * (n + 1) + s != words)
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': %zu bytes, not the size its header announces (%llu sequences, %llu "
                  "dimensions)", d->idx_path, nb, (unsigned long long)n, (unsigned long long)s);
    const uint8_t *dim = b + 48, *dat = dim + 8 * ((size_t)n + 1), *sz = dat + 8 * ((size_t)n + 1);
    if (le64(dim) != 0 || le64(dat) != 0 || le64(dim + 8 * n) != s)
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': the offsets do not start at 0 or end at the %llu dimensions", d->idx_path,
                  (unsigned long long)s);
    MEGA_TRY(alloc_arrays(d, (size_t)n));
    for (size_t i = 0; i < d->n; i++) {
        uint64_t d0 = le64(dim + 8 * i), d1 = le64(dim + 8 * (i + 1)), e0 = le64(dat + 8 * i), e1 = le64(dat + 8 * (i + 1));
        if (d1 != d0 + 1 || d0 >= s)
            MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': item %zu has %lld dimensions; a token sequence has 1", d->idx_path, i,
                      (long long)(d1 - d0));
        uint64_t len = le64(sz + 8 * d0);
        if (len > INT32_MAX || e1 < e0 || e1 - e0 != len)
            MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': item %zu: size %lld and data offsets %llu..%llu disagree", d->idx_path, i,
                      (long long)len, (unsigned long long)e0, (unsigned long long)e1);
        const uint64_t off = e0 > UINT64_MAX / 8 ? UINT64_MAX : e0 * d->esize; /* no wrap: far past the end */
        MEGA_TRY(check_within(d, i, off, len));
        d->off[i] = off, d->len[i] = (uint32_t)len, d->total += len;
    }
    d->cached = 1;
    snprintf(d->desc, sizeof d->desc, "cached %s", code_name((unsigned)code));
    return MEGA_OK;
}

/* path names an existing regular file */
static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

int mega_fbin_prefix(const char *path, char *prefix, size_t cap) {
    char a[4096], b[4096];
    if (!path || !*path || strlen(path) + 5 > sizeof a) return 0;
    size_t n = strlen(path);
    int named = ends_with(path, ".idx") || ends_with(path, ".bin");
    if (named) n -= 4;
    else if (is_file(path)) return 0; /* a file of text, whatever lies next to it */
    snprintf(a, sizeof a, "%.*s.idx", (int)n, path);
    snprintf(b, sizeof b, "%.*s.bin", (int)n, path);
    if (!is_file(a) || !is_file(b)) return 0;
    if (prefix) {
        if (n + 1 > cap) return 0;
        memcpy(prefix, path, n), prefix[n] = 0;
    }
    return 1;
}

void mega_fbin_close(mega_fbin *d) {
    if (!d) return;
    free(d->idx_path), free(d->bin_path), free(d->off), free(d->len);
    mega_bytes_free(&d->bin);
    free(d);
}

/* the two file names of the dataset path names (a prefix, or either file) */
static mega_status fbin_names(mega_fbin *d, const char *path) {
    MEGA_TRY(mega__data_given(path, "fairseq dataset"));
    size_t n = strlen(path);
    if (ends_with(path, ".idx") || ends_with(path, ".bin")) n -= 4;
    d->idx_path = malloc(n + 5), d->bin_path = malloc(n + 5);
    if (!d->idx_path || !d->bin_path) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    snprintf(d->idx_path, n + 5, "%.*s.idx", (int)n, path);
    snprintf(d->bin_path, n + 5, "%.*s.bin", (int)n, path);
    return MEGA_OK;
}

static mega_status fbin_load(mega_fbin *d, const char *path) {
    MEGA_TRY(fbin_names(d, path));
    mega_bytes ix = {0};
    MEGA_TRY(mega__data_load(d->idx_path, "fairseq dataset", 0, 1, &ix));
    mega_status st = mega__data_load(d->bin_path, "fairseq dataset", 0, 1, &d->bin);
    if (st == MEGA_OK) {
        if (ix.n >= 9 && !memcmp(ix.data, "MMIDIDX\0\0", 9)) st = read_mmap(d, ix.data, ix.n);
        else if (ix.n >= 8 && !memcmp(ix.data, "TNTIDX\0\0", 8)) st = read_cached(d, ix.data, ix.n);
        else {
            char show[40];
            st = mega__error(MEGA_ERR_FORMAT, "fairseq dataset '%s': not a fairseq index (starts with \"%s\", not MMIDIDX or TNTIDX)",
                             d->idx_path, mega__data_show((const char *)ix.data, ix.n < 9 ? ix.n : 9, show, sizeof show));
        }
    }
    mega_bytes_free(&ix);
    return st;
}

mega_status mega_fbin_open(const char *path, mega_fbin **out) {
    *out = NULL;
    mega_fbin *d = calloc(1, sizeof *d);
    if (!d) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    mega_status st = fbin_load(d, path);
    if (st != MEGA_OK) {
        mega_fbin_close(d);
        return st;
    }
    *out = d;
    return MEGA_OK;
}

size_t mega_fbin_count(const mega_fbin *d) { return d->n; }
size_t mega_fbin_length(const mega_fbin *d, size_t i) { return i < d->n ? d->len[i] : 0; }
uint64_t mega_fbin_tokens(const mega_fbin *d) { return d->total; }
const char *mega_fbin_describe(const mega_fbin *d) { return d->desc; }

/* element k of a little-endian array of the dataset's dtype, as a signed 64-bit value */
static int64_t element(const mega_fbin *d, const uint8_t *p) {
    switch (d->code) {
    case 1: return p[0];
    case 2: return (int8_t)p[0];
    case 3: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case 8: return (uint16_t)(p[0] | p[1] << 8);
    case 4: return (int32_t)le32(p);
    default: return (int64_t)le64(p);
    }
}

mega_status mega_fbin_read(const mega_fbin *d, size_t i, int32_t limit, int32_t *out) {
    if (i >= d->n) MEGA_FAIL(MEGA_ERR_INVALID, "fairseq dataset '%s': sequence %zu of %zu", d->bin_path, i, d->n);
    const uint8_t *p = d->bin.data + d->off[i];
    const int64_t hi = limit > 0 ? limit : (int64_t)INT32_MAX + 1;
    for (size_t k = 0; k < d->len[i]; k++, p += d->esize) {
        int64_t v = element(d, p) - d->cached; /* TNTIDX: Lua's 1-based ids (fix_lua_indexing) */
        if (v < 0 || v >= hi)
        {
            if (v >= 0 && limit > 0)
                MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': sequence %zu, token %zu: id %lld, outside the dictionary's %d ids",
                          d->bin_path, i, k, (long long)v, (int)limit);
            MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq dataset '%s': sequence %zu, token %zu: id %lld %s", d->bin_path, i, k, (long long)v,
                      v < 0 ? "is negative" : "does not fit 32 bits");
        }
        out[k] = (int32_t)v;
    }
    return MEGA_OK;
}

/* ---- dict.txt --------------------------------------------------------------------------- */

/* the tokens read so far, with an open-addressing set of their strings (-1 = empty) */
typedef struct {
    cJSON *arr;
    const char **tok; /* [n] the strings (owned by arr) */
    size_t n, cap;
    int32_t *slot;
    size_t nslot;
} tokset;

static uint64_t str_hash(const char *s) {
    uint64_t h = MEGA__FNV_BASIS;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * MEGA__FNV_PRIME;
    return h;
}

/* the slot of s: where it is, or the empty slot where it would go */
static size_t set_find(const tokset *t, const char *s) {
    size_t k = (size_t)str_hash(s) & (t->nslot - 1);
    while (t->slot[k] >= 0 && strcmp(t->tok[t->slot[k]], s)) k = (k + 1) & (t->nslot - 1);
    return k;
}

/* append s (a repeat replaces the earlier entry in the set, keeping its id in the list) */
static mega_status set_add(tokset *t, const char *s) {
    if (t->n >= (1 << 24)) MEGA_FAIL(MEGA_ERR_FORMAT, "more than 2^24 tokens");
    if (2 * (t->n + 1) > t->nslot) {
        size_t ns = t->nslot ? 2 * t->nslot : 64;
        int32_t *sl = malloc(ns * sizeof *sl);
        const char **tk = realloc(t->tok, ns / 2 * sizeof *tk);
        if (!sl || !tk) {
            free(sl);
            if (tk) t->tok = tk;
            MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        }
        t->tok = tk, free(t->slot), t->slot = sl, t->nslot = ns;
        memset(sl, 0xff, ns * sizeof *sl);
        for (size_t i = 0; i < t->n; i++) t->slot[set_find(t, t->tok[i])] = (int32_t)i;
    }
    cJSON *js = cJSON_CreateString(s);
    if (!js) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    cJSON_AddItemToArray(t->arr, js);
    t->tok[t->n] = js->valuestring;
    t->slot[set_find(t, s)] = (int32_t)t->n;
    t->n++;
    return MEGA_OK;
}

/* one line of dict.txt (NUL-terminated, without its line break): "token count [#fairseq:overwrite]"
 * as add_from_file splits it (rstrip, then rsplit at the last space, twice with the flag) */
static mega_status dict_line(tokset *t, char *s, const char *path, size_t line) {
    size_t n = strlen(s);
    while (n > 0) { /* str.rstrip(): Python's whitespace, ASCII or not */
        size_t k = n - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
        size_t j = k;
        if (!mega__py_isspace(mega__utf8_next((const unsigned char *)s, n, &j, MEGA__UTF8_ESCAPE))) break;
        n = k;
    }
    s[n] = 0;
    char *sp = strrchr(s, ' '), show[64];
    int over = sp && !strcmp(sp + 1, "#fairseq:overwrite");
    if (over) *sp = 0, sp = strrchr(s, ' ');
    if (!sp) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%zu: expected 'token count', got '%s'", path, line, mega__data_show(s, strlen(s), show, sizeof show));
    const char *c = sp + 1;
    while (*c == ' ' || *c == '\t') c++; /* int() ignores surrounding whitespace */
    if (*c == '+' || *c == '-') c++;
    const char *d0 = c;
    while (*c >= '0' && *c <= '9') c++;
    if (c == d0 || *c)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%zu: the count '%s' is not an integer", path, line, mega__data_show(sp + 1, strlen(sp + 1), show, sizeof show));
    *sp = 0;
    if (!*s) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%zu: empty token", path, line);
    if (!over && t->slot[set_find(t, s)] >= 0)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%zu: duplicate token '%s' (fairseq refuses it without '#fairseq:overwrite')", path, line,
                  mega__data_show(s, strlen(s), show, sizeof show));
    return set_add(t, s);
}

/* the specials then every line of text[0..n) (lines end at \n, \r\n or \r, Python's text mode) */
static mega_status dict_lines(tokset *t, char *text, size_t n, const char *path) {
    static const char *specials[] = {"<s>", "<pad>", "</s>", "<unk>"};
    for (int i = 0; i < 4; i++) MEGA_TRY(set_add(t, specials[i]));
    size_t line = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && text[j] != '\n' && text[j] != '\r') j++;
        size_t next = j + (j < n && text[j] == '\r' && j + 1 < n && text[j + 1] == '\n' ? 2 : 1);
        text[j] = 0, line++;
        MEGA_TRY(dict_line(t, text + i, path, line));
        i = next;
    }
    if (t->n == 4) MEGA_FAIL(MEGA_ERR_FORMAT, "dictionary '%s' has no tokens", path);
    return MEGA_OK;
}

mega_status mega_fdict_load_txt(const char *path, mega_fdict_unit unit, mega_fdict **out) {
    *out = NULL;
    mega_bytes f;
    MEGA_TRY(mega__data_given(path, "dictionary"));
    MEGA_TRY(mega_read_file(path, "dictionary", &f));
    size_t bad = mega_utf8_check(f.data, f.n);
    if (bad < f.n) {
        const unsigned byte = f.data[bad];
        mega_bytes_free(&f);
        MEGA_FAIL(MEGA_ERR_FORMAT, "dictionary '%s' is not UTF-8 (byte 0x%02x at offset %zu)", path, byte, bad);
    }
    cJSON *o = cJSON_CreateObject();
    tokset t = {0};
    t.arr = cJSON_CreateArray();
    mega_status st = o && t.arr ? dict_lines(&t, (char *)f.data, f.n, path) : mega__error(MEGA_ERR_OOM, "out of memory");
    char *json = NULL;
    if (st == MEGA_OK) {
        cJSON_AddItemToObject(o, "tokens", t.arr), t.arr = NULL;
        cJSON_AddStringToObject(o, "kind", "fairseq");
        cJSON_AddStringToObject(o, "unit", unit == MEGA_FDICT_BYTE ? "byte" : "word");
        cJSON_AddNumberToObject(o, "bos", 0), cJSON_AddNumberToObject(o, "pad", 1);
        cJSON_AddNumberToObject(o, "eos", 2), cJSON_AddNumberToObject(o, "unk", 3);
        if (!(json = cJSON_PrintUnformatted(o))) st = mega__error(MEGA_ERR_OOM, "out of memory");
    }
    if (st == MEGA_OK && mega_fdict_from_json(json, out) != MEGA_OK) st = mega__error_prefix(MEGA_ERR_FORMAT, path);
    free(json), cJSON_Delete(o), cJSON_Delete(t.arr), free(t.tok), free(t.slot);
    mega_bytes_free(&f);
    return st;
}

mega_status mega_fdict_check_same(const mega_fdict *model, const mega_fdict *data, const char *what) {
    const int nm = mega_fdict_size(model), nd = mega_fdict_size(data);
    if (nd > nm) MEGA_FAIL(MEGA_ERR_FORMAT, "%s has %d tokens, more than the model's %d", what, nd, nm);
    for (int i = 0; i < nd; i++)
        if (strcmp(mega_fdict_token(model, i), mega_fdict_token(data, i))) {
            char a[48], b[48];
            const char *x = mega_fdict_token(model, i), *y = mega_fdict_token(data, i);
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s: id %d is '%s' but the model's id %d is '%s' (another dictionary)", what, i,
                      mega__data_show(y, strlen(y), a, sizeof a), i, mega__data_show(x, strlen(x), b, sizeof b));
        }
    for (int i = nd; i < nm; i++)
        if (strncmp(mega_fdict_token(model, i), "madeupword", 10))
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s has %d tokens but the model has %d, not only madeupword fillers after them", what, nd, nm);
    return MEGA_OK;
}
