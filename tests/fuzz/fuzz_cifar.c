/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for CIFAR-10 records (src/codec/cifar.c).
 *
 * Each input is a whole file. The size check must accept exactly the
 * multiples of 3073 bytes (otherwise EF_EFORMAT with the offset of the
 * partial record); the whole records are converted, and every pixel of
 * every image is checked against the input (channel c of pixel (y, x) in
 * HWC order is byte 1 + c * 1024 + y * 32 + x of its record), as is every
 * label and the label check. Any violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/cifar.h"
#include "fuzz.h"

#define NAME "fuzz.bin"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ef__err err;
    ef__err_clear(&err);
    int64_t n = -1;
    int rc = ef__cifar_count(size, NAME, &n, &err);
    CHECK(n == (int64_t)(size / EF__CIFAR_RECORD));
    if (size % EF__CIFAR_RECORD == 0) {
        CHECK(rc == EF_OK);
    } else {
        CHECK(rc == EF_EFORMAT && err.status == rc);
        char where[64];
        snprintf(where, sizeof where, "offset %lld",
                 (long long)(n * EF__CIFAR_RECORD));
        CHECK(strstr(err.msg, NAME) != NULL && strstr(err.msg, where));
    }
    if (n == 0)
        return 0;
    unsigned char *images = malloc((size_t)n * EF__CIFAR_IMAGE);
    int64_t *labels = malloc((size_t)n * sizeof *labels);
    CHECK(images && labels);
    ef__cifar_convert(data, n, images, labels);
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *rec = data + r * EF__CIFAR_RECORD;
        const unsigned char *img = images + r * EF__CIFAR_IMAGE;
        CHECK(labels[r] == rec[0]);
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                for (int c = 0; c < 3; c++)
                    CHECK(img[(y * 32 + x) * 3 + c] ==
                          rec[1 + c * 1024 + y * 32 + x]);
        ef__err_clear(&err);
        rc = ef__cifar_check_label(NAME, r, labels[r], &err);
        CHECK((rc == EF_OK) == (rec[0] <= 9));
        if (rc != EF_OK) {
            char where[64];
            snprintf(where, sizeof where, "record %lld at offset %lld",
                     (long long)r, (long long)(r * EF__CIFAR_RECORD));
            CHECK(rc == EF_EFORMAT && strstr(err.msg, where));
        }
    }
    free(images);
    free(labels);
    return 0;
}
