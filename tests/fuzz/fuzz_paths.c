/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for path lists with brace expansion (src/io/paths.c).
 *
 * Each input is a list as a user would write it in a `urls` or `files`
 * option. Counting and building must agree: the same status, and on
 * success as many names, and as many bytes, as counted. A built name holds
 * no white space and no brace (every group is expanded, and a stray brace
 * is an error); a word without braces comes back as it was; a failure is
 * EF_ESPEC with a message naming the list. Any violation aborts. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "io/paths.h"

#define WHAT "fuzz: option 'urls'"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0'; /* the option parser hands over C strings */

    ef__err err;
    ef__err_clear(&err);
    size_t count = 0, bytes = 0;
    int rc = ef__paths_count(text, WHAT, &count, &bytes, &err);
    ef__paths p;
    ef__err err2;
    ef__err_clear(&err2);
    int rc2 = ef__paths_expand(text, WHAT, &p, &err2);
    CHECK(rc == rc2);
    if (rc != EF_OK) {
        CHECK(rc == EF_ESPEC || rc == EF_ENOMEM);
        CHECK(strstr(err.msg, WHAT) != NULL);
        CHECK(strcmp(err.msg, err2.msg) == 0);
        CHECK(p.names == NULL && p.n == 0);
        free(text);
        return 0;
    }
    CHECK(p.n == count && count > 0 && count <= EF__PATHS_MAX_NAMES);
    size_t total = 0;
    for (size_t i = 0; i < p.n; i++) {
        const char *n = p.names[i];
        total += strlen(n) + 1;
        for (const char *c = n; *c; c++)
            CHECK(*c != '{' && *c != '}' && !isspace((unsigned char)*c));
    }
    CHECK(total == bytes && bytes <= EF__PATHS_MAX_BYTES);

    /* words without braces come back one for one, in order */
    if (!strchr(text, '{')) {
        size_t k = 0;
        for (const char *s = text; *s;) {
            while (*s && isspace((unsigned char)*s))
                s++;
            const char *e = s;
            while (*e && !isspace((unsigned char)*e))
                e++;
            if (e > s) {
                CHECK(k < p.n);
                CHECK(strlen(p.names[k]) == (size_t)(e - s));
                CHECK(memcmp(p.names[k], s, (size_t)(e - s)) == 0);
                k++;
            }
            s = e;
        }
        CHECK(k == p.n);
    }
    ef__paths_free(&p);
    free(text);
    return 0;
}
