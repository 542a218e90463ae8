/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for decoding a window of a JPEG (src/codec/jpeg_window.c
 * through ef__image_decode_window), as decode_crop does.
 *
 * Each input is 10 bytes choosing the decode, then the image: byte 0 the
 * channels (0, 1 or 3) and whether to let the IDCT scale, bytes 1-8 the
 * window as four 16-bit fractions of the image's size (top, left, height,
 * width), byte 9 the output side for scaling. The window is placed inside
 * the size the decoder reads (its window chooser). Checks: a failure is a
 * known status naming the input; a success
 * is a buffer of shape[0]*shape[1]*shape[2] bytes, every one read, with
 * `inside` within it: the window itself when unscaled, at least the
 * output side when scaled. For small images, unscaled, whenever a full
 * decode succeeds the window must too, equal to the full decode's crop
 * byte for byte. */
#include "fuzz.h"
#include "image_check.h"

#define HEAD 10

static int64_t part(const uint8_t *p, int64_t n)
{
    return (int64_t)(((uint32_t)p[0] << 8 | p[1]) * (uint64_t)n >> 16);
}

/* The window's fractions, and what the chooser saw and chose. */
typedef struct {
    const uint8_t *fractions; /* bytes 1-8 */
    int64_t h, w;             /* 0 until chosen */
    int64_t win[4];
} choice;

/* ef__window_fn: the fractions of the image's size. */
static void choose(int64_t h, int64_t w, void *user, int64_t win[4])
{
    choice *c = user;
    CHECK(h >= 1 && h <= EF__IMAGE_MAX_SIDE && w >= 1 &&
          w <= EF__IMAGE_MAX_SIDE);
    win[2] = 1 + part(c->fractions + 4, h);
    win[3] = 1 + part(c->fractions + 6, w);
    win[0] = part(c->fractions, h - win[2] + 1);
    win[1] = part(c->fractions + 2, w - win[3] + 1);
    c->h = h;
    c->w = w;
    memcpy(c->win, win, sizeof c->win);
}

/* The window's pixels against ef__image_decode's, cropped. */
static void check_against_full(const uint8_t *data, size_t size, int channels,
                               const int64_t win[4], const ef_buffer *b,
                               const int64_t shape[3], const int64_t in[4])
{
    int64_t fs[3];
    ef_buffer *whole = fuzz_decode(data, size, channels, fs);
    if (!whole)
        return;
    CHECK(b != NULL); /* the full decode read everything the window did */
    CHECK(fs[2] == shape[2]);
    const unsigned char *a = ef_buffer_data(whole), *d = ef_buffer_data(b);
    for (int64_t y = 0; y < win[2]; y++)
        CHECK(memcmp(a + ((win[0] + y) * fs[1] + win[1]) * fs[2],
                     d + ((in[0] + y) * shape[1] + in[1]) * shape[2],
                     (size_t)(win[3] * fs[2])) == 0);
    ef_buffer_release(whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEAD)
        return 0;
    static const int layouts[3] = {0, 1, 3};
    int channels = layouts[(data[0] & 3) % 3];
    int scale = data[0] >> 7;
    int64_t out_side = scale ? 1 + data[9] % 64 : 0;
    const uint8_t *jpg = data + HEAD;
    size_t n = size - HEAD;
    choice ch = {.fractions = data + 1};
    ef__err err;
    ef_buffer *b = (ef_buffer *)&b;
    int64_t shape[3], in[4];
    ef__err_clear(&err);
    int rc = ef__image_decode_window(jpg, n, channels, choose, &ch, out_side,
                                     out_side, FUZZ_WHAT, &b, shape, in, &err);
    if (rc != EF_OK) {
        CHECK(b == NULL);
        CHECK(rc == EF_EFORMAT || rc == EF_EUNSUPPORTED || rc == EF_ENOMEM);
        fuzz_check_message(err.msg, sizeof err.msg, FUZZ_WHAT);
        b = NULL;
    } else {
        CHECK(b != NULL);
        CHECK(shape[0] >= 1 && shape[1] >= 1);
        CHECK(channels ? shape[2] == channels : shape[2] == 1 || shape[2] == 3);
        CHECK(ef_buffer_size(b) == (size_t)(shape[0] * shape[1] * shape[2]));
        CHECK(in[0] >= 0 && in[1] >= 0 && in[2] >= 1 && in[3] >= 1);
        CHECK(in[0] + in[2] <= shape[0] && in[1] + in[3] <= shape[1]);
        if (!scale) {
            CHECK(in[2] == ch.win[2] && in[3] == ch.win[3]);
        } else {
            CHECK(in[2] >= (ch.win[2] < out_side ? ch.win[2] : out_side));
            CHECK(in[3] >= (ch.win[3] < out_side ? ch.win[3] : out_side));
        }
        fuzz_read_all(b);
    }
    /* chosen: the header passed, so a full decode may compare */
    if (!scale && ch.h && ch.h * ch.w <= FUZZ_SMALL)
        check_against_full(jpg, n, channels, ch.win, b, shape, in);
    ef_buffer_release(b);
    return 0;
}
