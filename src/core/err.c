/* SPDX-License-Identifier: Apache-2.0 */
/* Detailed error messages (see err.h). */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a shortened path keeps at least of its head; the rest of what is
 * kept goes to its tail, which names the file. */
#define EF__FIT_HEAD 24

void ef__err_clear(ef__err *err)
{
    err->status = EF_OK;
    err->msg[0] = '\0';
}

/* The longest run of text without a space: in a message, the path or URL. */
static void longest_word(const char *s, size_t len, size_t *at, size_t *n)
{
    *at = *n = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] != ' ')
            j++;
        if (j - i > *n) {
            *at = i;
            *n = j - i;
        }
        i = j + 1;
    }
}

/* Copies len bytes of s and a '\0' into dst, keeping what is around the
 * piece [at, at + n) and the ends of the piece, "..." for what is cut. */
static void cut_middle(char *dst, size_t cap, const char *s, size_t len,
                       size_t at, size_t n)
{
    size_t keep = cap - 1 - 3 - (len - n); /* of the piece */
    size_t head = keep / 4 < EF__FIT_HEAD ? keep / 4 : EF__FIT_HEAD;
    size_t tail = keep - head;
    char *d = dst;
    memcpy(d, s, at + head);
    d += at + head;
    memcpy(d, "...", 3);
    d += 3;
    memcpy(d, s + at + n - tail, tail + (len - at - n));
    d[tail + (len - at - n)] = '\0';
}

void ef__err_fit(char *dst, size_t cap, const char *s)
{
    size_t len = strlen(s);
    if (len < cap) {
        memmove(dst, s, len + 1);
        return;
    }
    size_t at, n;
    longest_word(s, len, &at, &n);
    /* A path long enough to take the whole cut loses its middle; past
     * that, the message itself loses its middle. Either way the end,
     * which says why, survives. */
    if (cap >= 64 && n >= len - cap + 1 + 3 + 2 * 8)
        cut_middle(dst, cap, s, len, at, n);
    else if (cap > 4)
        cut_middle(dst, cap, s, len, 0, len);
    else if (cap > 0)
        dst[0] = '\0';
}

int ef__err_set(ef__err *err, int status, const char *fmt, ...)
{
    if (!err)
        return status;
    char text[2048];
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* libc's malloc, not ef__malloc: a message is no allocation for the
     * failure-injection tests to count, and failing here only shortens
     * the message more */
    char *big = n >= (int)sizeof text ? malloc((size_t)n + 1) : NULL;
    if (big)
        vsnprintf(big, (size_t)n + 1, fmt, again);
    va_end(again);
    ef__err_fit(err->msg, sizeof err->msg, big ? big : n >= 0 ? text : "");
    free(big);
    err->status = status;
    return status;
}

int ef__err_prefix(ef__err *err, const char *prefix)
{
    char msg[EF__ERR_MAX];
    memcpy(msg, err->msg, sizeof msg);
    return ef__err_set(err, err->status, "%s: %s", prefix, msg);
}
