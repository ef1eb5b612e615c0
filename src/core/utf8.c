/* The one UTF-8 decoder of the library: the validity check of safetensors headers, names and
 * metadata, of data files (pairs, labels, dictionaries) and the character loop of the metrics
 * all follow Unicode table 3-7 (well-formed byte sequences) through it. */
#include "core/internal.h"
#include "mega_data.h"

uint32_t mega__utf8_next(const unsigned char *s, size_t n, size_t *i, int mode) {
    const size_t k = *i;
    const unsigned c = s[k];
    if (c < 0x80) {
        *i = k + 1;
        return c;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;      /* overlong below U+0800 */
        else if (c == 0xED) hi = 0x9F; /* surrogates U+D800..DFFF */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;      /* overlong below U+10000 */
        else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } /* else a continuation byte, C0/C1 (overlong ASCII) or F5..FF */
    if (len == 0 || n - k < len) goto bad; /* truncated at the end */
    for (size_t j = 1; j < len; j++) {
        const unsigned b = s[k + j];
        if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) goto bad;
        cp = (cp << 6) | (b & 0x3F);
    }
    *i = k + len;
    return cp;
bad:
    if (mode == MEGA__UTF8_STRICT) return MEGA__UTF8_BAD;
    *i = k + 1;
    return 0xDC00 + c;
}

size_t mega_utf8_check(const void *p, size_t n) {
    const unsigned char *s = p;
    size_t i = 0;
    while (i < n)
        if (s[i] < 0x80) i++; /* most text is ASCII: no call */
        else if (mega__utf8_next(s, n, &i, MEGA__UTF8_STRICT) == MEGA__UTF8_BAD) return i;
    return n;
}
