/* SPDX-License-Identifier: Apache-2.0 */
/* Invariants of ef__image_decode shared by fuzz_png.c and fuzz_jpeg.c:
 * a failure is a known status with a message naming the input; a success
 * is a buffer of exactly H*W*C bytes within the documented limits, every
 * byte of which is read (ASan flags a buffer shorter than its size says;
 * an MSan build would flag pixels never written). The libraries
 * themselves are Debian's, not instrumented: what is fuzzed is our use of
 * them. Header-only; a violation aborts. */
#ifndef EF_FUZZ_IMAGE_CHECK_H
#define EF_FUZZ_IMAGE_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/image.h"
#include "fuzz.h"

#define FUZZ_WHAT "field 'fuzz'"

/* Images up to this many pixels are also decoded to the other layouts
 * and re-encoded; bigger ones only once, to keep each input fast. */
#define FUZZ_SMALL (1 << 16)

/* Decodes `data` to `channels`; returns the pixels (the caller releases
 * them) or NULL after checking the failure. */
/* Reads every byte of b, so that the sanitizers see any that were not
 * written. */
static inline void fuzz_read_all(const ef_buffer *b)
{
    const unsigned char *px = ef_buffer_data(b);
    unsigned sum = 0;
    for (size_t i = 0; i < ef_buffer_size(b); i++)
        sum += px[i];
    volatile unsigned sink = sum;
    (void)sink;
}

static inline ef_buffer *fuzz_decode(const uint8_t *data, size_t size,
                                     int channels, int64_t shape[3])
{
    ef_buffer *b = (ef_buffer *)&b; /* not NULL: must be cleared */
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__image_decode(data, size, channels, FUZZ_WHAT, &b, shape, &err);
    if (rc != EF_OK) {
        CHECK(b == NULL);
        /* EF_ENOMEM: a header within the limits may still ask for more
         * than the fuzzer's memory limit allows */
        CHECK(rc == EF_EFORMAT || rc == EF_EUNSUPPORTED || rc == EF_ENOMEM);
        CHECK(err.status == rc);
        fuzz_check_message(err.msg, sizeof err.msg, FUZZ_WHAT);
        return NULL;
    }
    CHECK(b != NULL);
    CHECK(shape[0] >= 1 && shape[0] <= EF__IMAGE_MAX_SIDE);
    CHECK(shape[1] >= 1 && shape[1] <= EF__IMAGE_MAX_SIDE);
    CHECK(shape[0] * shape[1] <= EF__IMAGE_MAX_PIXELS);
    CHECK(channels ? shape[2] == channels : shape[2] == 1 || shape[2] == 3);
    CHECK(ef_buffer_size(b) == (size_t)(shape[0] * shape[1] * shape[2]));
    fuzz_read_all(b);
    return b;
}

#endif
