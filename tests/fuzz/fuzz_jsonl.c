/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the JSON Lines reader (src/codec/json.c).
 *
 * Each input is one line, read for the key "text" and for the key "a"
 * into a buffer of exactly the line's size (ASan watches it). A failure
 * must be EF_EFORMAT with a message; a success must give at most the
 * line's bytes. Whitespace after the object must change nothing, and a
 * line that parses must parse again the same from a copy with the key's
 * value read a second time (the reader keeps no state). Any violation
 * aborts. */
#include <stdlib.h>
#include <string.h>

#include "codec/json.h"
#include "fuzz.h"

static void one(const uint8_t *data, size_t size, const char *key)
{
    char *out = malloc(size ? size : 1);
    char *again = malloc(size + 3);
    CHECK(out && again);
    size_t len = (size_t)-1;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__json_string((const char *)data, size, key, out, &len, &err);
    CHECK(rc == EF_OK || rc == EF_EFORMAT);
    if (rc != EF_OK) {
        fuzz_check_message(err.msg, sizeof err.msg, NULL);
    } else {
        CHECK(len <= size);
        /* trailing whitespace is no part of the object */
        memcpy(again, data, size);
        memcpy(again + size, " \t\r", 3);
        char *out2 = malloc(size + 3);
        CHECK(out2 != NULL);
        size_t len2 = (size_t)-1;
        ef__err_clear(&err);
        CHECK(ef__json_string(again, size + 3, key, out2, &len2, &err) ==
              EF_OK);
        CHECK(len2 == len && memcmp(out, out2, len) == 0);
        free(out2);
    }
    free(again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, "text");
    one(data, size, "a");
    return 0;
}
