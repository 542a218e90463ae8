/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the list files of the `files` source
 * (ef__files_parse_list in src/stages/sources/files_list.c).
 *
 * Each input is a list file's bytes. A failure is EF_EFORMAT (or
 * EF_ENOMEM) naming the list, with "line N" for a bad line, and leaves
 * nothing behind; a success has at least one entry, each with a path
 * that is neither empty nor holds a NUL or a newline, a field of 1 to
 * EF_MAX_NAME - 1 bytes, the lowercase of the path's last extension, a
 * key that starts at no '/' and has no extension of its own, and a
 * label when the list has labels. Parsing the same bytes again with
 * another base directory gives the same entries, relative paths joined
 * to the base. Any violation aborts. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "stages/sources/files_list.h"

#define NAME "fuzz/list.txt"

static void check_entry(const ef__file_list *l, size_t k)
{
    const char *url = ef__file_url(l, k), *key = ef__file_key(l, k);
    const char *field = ef__file_field(l, k);
    size_t n = strlen(url);
    CHECK(n > 0);
    CHECK(strchr(url, '\n') == NULL);
    size_t f = strlen(field);
    CHECK(f > 0 && f < EF_MAX_NAME);
    const char *dot = strrchr(url, '.');
    CHECK(dot != NULL && strlen(dot + 1) == f);
    for (size_t i = 0; i < f; i++) {
        char c = dot[1 + i];
        char lc = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        CHECK(field[i] == lc);
    }
    CHECK(key[0] != '/');
    CHECK(strlen(key) <= n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ef__file_list a, b;
    ef__err err, err2;
    ef__err_clear(&err);
    ef__err_clear(&err2);
    int rc = ef__files_parse_list((const char *)data, size, NAME, "", &a, &err);
    int rc2 =
        ef__files_parse_list((const char *)data, size, NAME, "base", &b, &err2);
    CHECK(rc == rc2);
    if (rc != EF_OK) {
        CHECK(rc == EF_EFORMAT || rc == EF_ENOMEM);
        CHECK(strncmp(err.msg, NAME, strlen(NAME)) == 0);
        CHECK(a.v == NULL && a.n == 0 && b.v == NULL && b.n == 0);
        return 0;
    }
    CHECK(a.n > 0 && a.n == b.n && a.labelled == b.labelled);
    for (size_t i = 0; i < a.n; i++) {
        check_entry(&a, i);
        check_entry(&b, i);
        CHECK(strcmp(ef__file_key(&a, i), ef__file_key(&b, i)) == 0);
        CHECK(strcmp(ef__file_field(&a, i), ef__file_field(&b, i)) == 0);
        CHECK(!a.labelled || a.v[i].label == b.v[i].label);
        /* "base/" + a relative path, or the same absolute path or URL */
        const char *x = ef__file_url(&a, i), *y = ef__file_url(&b, i);
        int rel = x[0] != '/' && strncmp(x, "http://", 7) != 0 &&
                  strncmp(x, "https://", 8) != 0;
        if (rel)
            CHECK(strncmp(y, "base/", 5) == 0 && strcmp(y + 5, x) == 0);
        else
            CHECK(strcmp(x, y) == 0);
    }
    ef__file_list_free(&a);
    ef__file_list_free(&b);
    return 0;
}
