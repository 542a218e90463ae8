/* SPDX-License-Identifier: Apache-2.0 */
/* Images: the JPEG and PNG codecs (round trips, and errors on truncated,
 * corrupt, oversized and foreign input), and the image stages (decode,
 * resize, random_resized_crop, normalize, to_chw, cast): hand-computed
 * values, keyed randomness, and each stage's error paths. Codec tests skip
 * themselves in a build without libjpeg-turbo or libspng. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "codec/image.h"
#include "core/alloc.h"
#include "ef_test_util.h"
#include "stages/image/bilinear.h"

/* ---- fixtures ------------------------------------------------------ */

/* A smooth test picture: [h,w,c], channel k of (y, x) a gradient. */
static unsigned char *picture(int64_t h, int64_t w, int c)
{
    unsigned char *px = malloc((size_t)(h * w * c));
    assert_non_null(px);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[(y * w + x) * c + k] =
                    (unsigned char)(y * 100 / h + x * (100 - 30 * k) / w +
                                    50 * k);
    return px;
}

/* Encodes with the codec under test; skips the test when not built in. */
static ef_buffer *encode(const unsigned char *px, int64_t h, int64_t w, int c,
                         int jpeg)
{
    ef_buffer *b = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = jpeg ? ef__jpeg_encode(px, h, w, c, 95, &b, &err)
                  : ef__png_encode(px, h, w, c, &b, &err);
    if (rc == EF_EUNSUPPORTED) {
        assert_non_null(
            strstr(err.msg, jpeg ? "libturbojpeg0-dev" : "libspng-dev"));
        skip();
    }
    if (rc != EF_OK)
        fail_msg("encode: %s", err.msg);
    return b;
}

/* Decodes bytes; returns the status and leaves the message in err. */
static int decode(const void *data, size_t size, int channels, ef_buffer **out,
                  int64_t shape[3], ef__err *err)
{
    ef__err_clear(err);
    *out = NULL;
    int rc =
        ef__image_decode(data, size, channels, "field 'x'", out, shape, err);
    if (rc != EF_OK)
        assert_null(*out);
    return rc;
}

/* Expects a decoding failure with EF_EFORMAT whose message names the input
 * and contains `words`. */
static void expect_bad(const void *data, size_t size, const char *words)
{
    ef_buffer *b;
    int64_t shape[3];
    ef__err err;
    int rc = decode(data, size, 0, &b, shape, &err);
    if (rc != EF_EFORMAT)
        fail_msg("expected EF_EFORMAT, got %s: %s", ef_status_name(rc),
                 err.msg);
    assert_non_null(strstr(err.msg, "field 'x'"));
    if (!strstr(err.msg, words))
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, words);
}

/* ---- codecs -------------------------------------------------------- */

static void png_round_trip_is_exact(void **state)
{
    (void)state;
    for (int c = 1; c <= 3; c += 2) {
        unsigned char *px = picture(9, 13, c);
        ef_buffer *png = encode(px, 9, 13, c, 0);
        ef_buffer *b;
        int64_t shape[3];
        ef__err err;
        assert_int_equal(decode(ef_buffer_data(png), ef_buffer_size(png), 0, &b,
                                shape, &err),
                         EF_OK);
        assert_int_equal(shape[0], 9);
        assert_int_equal(shape[1], 13);
        assert_int_equal(shape[2], c);
        assert_int_equal(ef_buffer_size(b), 9 * 13 * c);
        assert_memory_equal(ef_buffer_data(b), px, 9 * 13 * c);
        ef_buffer_release(b);

        /* and converted: gray to RGB repeats it, RGB to gray is luma */
        int other = c == 1 ? 3 : 1;
        assert_int_equal(decode(ef_buffer_data(png), ef_buffer_size(png), other,
                                &b, shape, &err),
                         EF_OK);
        assert_int_equal(shape[2], other);
        const unsigned char *d = ef_buffer_data(b);
        for (int i = 0; i < 9 * 13; i++) {
            if (c == 1)
                for (int k = 0; k < 3; k++)
                    assert_int_equal(d[3 * i + k], px[i]);
            else
                assert_int_equal(d[i], (299 * px[3 * i] + 587 * px[3 * i + 1] +
                                        114 * px[3 * i + 2] + 500) /
                                           1000);
        }
        ef_buffer_release(b);
        ef_buffer_release(png);
        free(px);
    }
}

static void jpeg_round_trip_is_close(void **state)
{
    (void)state;
    for (int c = 1; c <= 3; c += 2) {
        unsigned char *px = picture(32, 48, c);
        ef_buffer *jpg = encode(px, 32, 48, c, 1);
        ef_buffer *b;
        int64_t shape[3];
        ef__err err;
        assert_int_equal(decode(ef_buffer_data(jpg), ef_buffer_size(jpg), 0, &b,
                                shape, &err),
                         EF_OK);
        assert_int_equal(shape[0], 32);
        assert_int_equal(shape[1], 48);
        assert_int_equal(shape[2], c);
        const unsigned char *d = ef_buffer_data(b);
        double sum = 0;
        int worst = 0;
        for (int i = 0; i < 32 * 48 * c; i++) {
            int e = abs((int)d[i] - (int)px[i]);
            sum += e;
            worst = e > worst ? e : worst;
        }
        /* quality 95 on a smooth picture: off by a level or two */
        if (sum / (32 * 48 * c) > 2.0 || worst > 24)
            fail_msg("c=%d: mean error %.2f, worst %d", c, sum / (32 * 48 * c),
                     worst);
        ef_buffer_release(b);
        /* a colour JPEG decodes to gray too */
        assert_int_equal(decode(ef_buffer_data(jpg), ef_buffer_size(jpg), 1, &b,
                                shape, &err),
                         EF_OK);
        assert_int_equal(shape[2], 1);
        ef_buffer_release(b);
        ef_buffer_release(jpg);
        free(px);
    }
}

/* CRC-32 of PNG chunks, to forge headers that pass the checksum. */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

static void put_be(unsigned char *p, uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
}

static void bad_png_is_an_error(void **state)
{
    (void)state;
    unsigned char *px = picture(16, 16, 3);
    ef_buffer *png = encode(px, 16, 16, 3, 0);
    size_t n = ef_buffer_size(png);
    unsigned char *bytes = malloc(n);
    memcpy(bytes, ef_buffer_data(png), n);

    expect_bad(bytes, n / 2, "PNG"); /* truncated in the image data */
    expect_bad(bytes, 30, "PNG");    /* truncated in the header */
    bytes[n / 2] ^= 0x10;            /* a flipped bit: checksum */
    expect_bad(bytes, n, "corrupt PNG");
    bytes[n / 2] ^= 0x10;

    /* a header claiming 40000 x 16 pixels, checksum intact */
    put_be(bytes + 16, 40000, 4);
    put_be(bytes + 29, crc32_of(bytes + 12, 17), 4);
    expect_bad(bytes, n, "40000 x 16");
    /* sides in range, but 20000 x 20000 pixels */
    put_be(bytes + 16, 20000, 4);
    put_be(bytes + 20, 20000, 4);
    put_be(bytes + 29, crc32_of(bytes + 12, 17), 4);
    expect_bad(bytes, n, "at most");
    free(bytes);
    ef_buffer_release(png);
    free(px);
}

static void bad_jpeg_is_an_error(void **state)
{
    (void)state;
    unsigned char *px = picture(64, 64, 3);
    ef_buffer *jpg = encode(px, 64, 64, 3, 1);
    size_t n = ef_buffer_size(jpg);
    unsigned char *bytes = malloc(n);
    memcpy(bytes, ef_buffer_data(jpg), n);

    /* truncated: libjpeg would fill the rest with grey and only warn */
    expect_bad(bytes, n / 2, "truncated or corrupt JPEG data");
    expect_bad(bytes, 20, "without a frame header");

    /* the frame header (SOF0: FF C0, length, precision, height, width) */
    size_t sof = 2;
    while (sof + 9 < n && !(bytes[sof] == 0xFF && bytes[sof + 1] == 0xC0))
        sof++;
    assert_true(sof + 9 < n);
    put_be(bytes + sof + 5, 40000, 2);
    expect_bad(bytes, n, "64 x 40000");
    put_be(bytes + sof + 5, 20000, 2);
    put_be(bytes + sof + 7, 20000, 2);
    expect_bad(bytes, n, "at most");
    put_be(bytes + sof + 5, 0, 2);
    put_be(bytes + sof + 7, 64, 2);
    expect_bad(bytes, n, "JPEG");
    free(bytes);
    ef_buffer_release(jpg);
    free(px);
}

static void foreign_bytes_are_an_error(void **state)
{
    (void)state;
    expect_bad("", 0, "empty");
    expect_bad("<html><body>404</body></html>", 29,
               "starting 3c 68 74 6d 6c 3e 3c 62");
    expect_bad("\xFF\xD8", 2, "neither JPEG");
    expect_bad("\x89PNG\r\n\x1a", 7, "neither JPEG");
    ef_buffer *b;
    int64_t shape[3];
    ef__err err;
    assert_int_equal(decode("\x89PNG", 4, 2, &b, shape, &err), EF_EINVAL);
}

/* In a build without a codec's library, its format is EF_EUNSUPPORTED
 * and the message names the package to install; with it, these stubs are
 * merely corrupt. */
static void missing_library_is_named(void **state)
{
    (void)state;
    static const struct {
        const char *bytes, *package;
        size_t n;
    } cases[] = {{"\x89PNG\r\n\x1a\n", "libspng-dev", 8},
                 {"\xFF\xD8\xFF\xE0", "libturbojpeg0-dev", 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ef_buffer *b;
        int64_t shape[3];
        ef__err err;
        int rc = decode(cases[i].bytes, cases[i].n, 0, &b, shape, &err);
        assert_true(rc == EF_EFORMAT || rc == EF_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "field 'x'"));
        if (rc == EF_EUNSUPPORTED)
            assert_non_null(strstr(err.msg, cases[i].package));
    }
}

/* Every allocation the PNG codec makes (libspng's and zlib's included)
 * may fail: the error comes back cleanly and nothing leaks (the ASan
 * build). libspng reports zlib's window allocation failing mid-stream as
 * a stream error, so decoding may say EF_EFORMAT then. */
static void png_survives_failed_allocations(void **state)
{
    (void)state;
    unsigned char *px = picture(8, 8, 3);
    ef_buffer *png = encode(px, 8, 8, 3, 0);
    int done = 0;
    for (long k = 1; k < 200 && !done; k++) {
        ef_buffer *b = NULL;
        int64_t shape[3];
        ef__err err;
        ef__err_clear(&err);
        ef__alloc_fail_after(k);
        int rc = ef__image_decode(ef_buffer_data(png), ef_buffer_size(png), 1,
                                  "field 'x'", &b, shape, &err);
        ef__alloc_fail_after(0);
        if (rc != EF_OK && rc != EF_ENOMEM &&
            !(rc == EF_EFORMAT && strstr(err.msg, "IDAT stream")))
            fail_msg("allocation %ld failing gave %s: %s", k,
                     ef_status_name(rc), err.msg);
        done = rc == EF_OK;
        ef_buffer_release(b);
    }
    assert_true(done);
    done = 0;
    for (long k = 1; k < 200 && !done; k++) {
        ef_buffer *b = NULL;
        ef__err err;
        ef__alloc_fail_after(k);
        int rc = ef__png_encode(px, 8, 8, 3, &b, &err);
        ef__alloc_fail_after(0);
        if (rc != EF_OK && rc != EF_ENOMEM)
            fail_msg("encoding, allocation %ld failing gave %s: %s", k,
                     ef_status_name(rc), err.msg);
        done = rc == EF_OK;
        ef_buffer_release(b);
    }
    assert_true(done);
    ef_buffer_release(png);
    free(px);
}

/* ---- a source of one kind of sample --------------------------------- */

/* Every sample of the test source carries these fields (copied). */
#define MAX_TEST_FIELDS 4
static struct {
    int n;
    struct {
        const char *name;
        ef_dtype dtype;
        int ndim;
        int64_t shape[4];
        const void *data;
    } f[MAX_TEST_FIELDS];
    int64_t count; /* samples per pass */
    int64_t next;
    int64_t members; /* > 0: each sample is a batch of that many */
} src;

static void src_reset(int64_t count)
{
    memset(&src, 0, sizeof src);
    src.count = count;
}

static void src_field(const char *name, ef_dtype dtype, int ndim,
                      const int64_t *shape, const void *data)
{
    assert_true(src.n < MAX_TEST_FIELDS);
    src.f[src.n].name = name;
    src.f[src.n].dtype = dtype;
    src.f[src.n].ndim = ndim;
    memcpy(src.f[src.n].shape, shape, (size_t)ndim * sizeof *shape);
    src.f[src.n++].data = data;
}

static void src_bytes(const char *name, const void *data, size_t n)
{
    int64_t shape[1] = {(int64_t)n};
    src_field(name, EF_U8, 1, shape, data);
}

static int source_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)user, (void)block;
    if (src.next >= src.count)
        return EF_END;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = src.next++, .epoch = epoch});
    for (int i = 0; i < src.n; i++) {
        void *dst;
        assert_int_equal(ef_sample_add_new(s, src.f[i].name, src.f[i].dtype,
                                           src.f[i].ndim, src.f[i].shape, &dst),
                         EF_OK);
        ef_tensor t;
        ef_sample_get(s, src.f[i].name, &t);
        memcpy(dst, src.f[i].data, t.nbytes);
    }
    if (src.members > 0) {
        ef_sample_id ids[16];
        assert_true(src.members <= 16);
        for (int64_t k = 0; k < src.members; k++)
            ids[k] = (ef_sample_id){.index = (src.next - 1) * src.members + k,
                                    .epoch = epoch};
        assert_int_equal(ef_sample_set_members(s, ids, src.members), EF_OK);
    }
    *out = s;
    return EF_OK;
}

static ef_pipeline *from_source(const char *stages, uint64_t seed)
{
    ef_pipeline *p;
    src.next = 0;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, source_fn, NULL, NULL), EF_OK);
    tu_parse(p, stages);
    return p;
}

/* The first sample out of `stages` applied to the source. */
static ef_sample *first(const char *stages)
{
    ef_pipeline *p = from_source(stages, 1);
    ef_sample *s = tu_next(p);
    ef_pipeline_destroy(p);
    return s;
}

/* The first pull of p (made ready by the caller) fails with `status`,
 * the message containing each of the NULL-terminated words. */
static void expect_first_error(ef_pipeline *p, const char *what, int status,
                               ...)
{
    va_list ap;
    va_start(ap, status);
    tu_vexpect_first_error(p, what, status, ap);
    va_end(ap);
}

/* The first pull fails with `status`, the message containing each of the
 * NULL-terminated words. */
static void expect_error(const char *stages, int status, ...)
{
    ef_pipeline *p = from_source(stages, 1);
    va_list ap;
    va_start(ap, status);
    tu_vexpect_first_error(p, stages, status, ap);
    va_end(ap);
    ef_pipeline_destroy(p);
}

static void expect_spec_error(const char *stages, const char *words)
{
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, source_fn, NULL, NULL), EF_OK);
    int rc = ef_pipeline_parse(p, stages);
    if (rc != EF_ESPEC || !strstr(ef_pipeline_error(p), words))
        fail_msg("%s: expected EF_ESPEC naming \"%s\", got %s: %s", stages,
                 words, ef_status_name(rc), ef_pipeline_error(p));
    ef_pipeline_destroy(p);
}

static const unsigned char *u8_of(const ef_sample *s, const char *name)
{
    return tu_field(s, name).data;
}

static const float *f32_of(const ef_sample *s, const char *name)
{
    return tu_field(s, name).data;
}

static void assert_shape(const ef_sample *s, const char *name, ef_dtype dtype,
                         int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    ef_tensor t = tu_field(s, name);
    int64_t want[3] = {d0, d1, d2};
    if (t.dtype != dtype || t.ndim != ndim)
        fail_msg("%s: dtype %s ndim %d, expected %s ndim %d", name,
                 ef_dtype_name(t.dtype), t.ndim, ef_dtype_name(dtype), ndim);
    for (int d = 0; d < ndim; d++)
        assert_int_equal(t.shape[d], want[d]);
}

/* The two echo copies out of `stages` share the image's payload. */
static void expect_shared(const char *stages)
{
    ef_pipeline *p = from_source(stages, 1);
    ef_sample *a = tu_next(p), *b = tu_next(p);
    assert_int_equal(ef_sample_identity(b).echo_copy, 1);
    assert_ptr_equal(tu_field(a, "image").data, tu_field(b, "image").data);
    ef_sample_free(a);
    ef_sample_free(b);
    ef_pipeline_destroy(p);
}

/* ---- decode ---------------------------------------------------------- */

static void decode_images_and_labels(void **state)
{
    (void)state;
    unsigned char *px = picture(5, 6, 3);
    ef_buffer *png = encode(px, 5, 6, 3, 0);
    int64_t one[1] = {1};
    int64_t key = 77;
    /* a PNG named .jpg decodes: the bytes say what it is */
    src_reset(3);
    src_field("key", EF_I64, 1, one, &key);
    src_bytes("jpg", ef_buffer_data(png), ef_buffer_size(png));
    src_bytes("cls", " 42\n", 4);
    ef_sample *s = first("decode");
    assert_int_equal(ef_sample_field_count(s), 3);
    assert_shape(s, "image", EF_U8, 3, 5, 6, 3);
    assert_memory_equal(u8_of(s, "image"), px, 5 * 6 * 3);
    assert_int_equal(tu_i64(s, "label"), 42);
    assert_int_equal(((const int64_t *)tu_field(s, "key").data)[0], 77);
    ef_sample_free(s);

    /* options: gray, another name, explicit fields, threads */
    s = first("decode:channels=1,as=pixels,fields=\"png, jpg\",threads=2");
    assert_shape(s, "pixels", EF_U8, 3, 5, 6, 1);
    ef_sample_free(s);

    /* labels: signs, and the limits of i64 */
    static const struct {
        const char *text;
        int64_t value;
    } good[] = {{"-3", -3},
                {"+7", 7},
                {"0", 0},
                {"9223372036854775807", INT64_MAX},
                {"-9223372036854775808", INT64_MIN}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        src.f[2].shape[0] = (int64_t)strlen(good[i].text);
        src.f[2].data = good[i].text;
        s = first("decode");
        assert_int_equal(tu_i64(s, "label"), good[i].value);
        ef_sample_free(s);
    }
    static const char *const bad[] = {
        "abc", "",    " ", "4 2", "1.5", "0x10", "9223372036854775808",
        "--1", "7\"q"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        src.f[2].shape[0] = (int64_t)strlen(bad[i]);
        src.f[2].data = bad[i];
        expect_error("decode", EF_EFORMAT, "item 0", "'cls'", "decimal", NULL);
    }
    src.f[2].shape[0] = 3;
    src.f[2].data = "abc";
    expect_error("decode", EF_EFORMAT, "\"abc\"", NULL);
    ef_buffer_release(png);
    free(px);
}

static void decode_errors(void **state)
{
    (void)state;
    unsigned char *px = picture(4, 4, 1);
    ef_buffer *png = encode(px, 4, 4, 1, 0);
    const void *bytes = ef_buffer_data(png);
    size_t n = ef_buffer_size(png);

    src_reset(2);
    src_bytes("txt", "hello", 5);
    src_bytes("cls", "1", 1);
    expect_error("decode", EF_ESHAPE, "no field to decode", "jpg, jpeg, png",
                 "txt, cls", NULL);

    src_reset(2);
    src_bytes("jpg", bytes, n);
    src_bytes("png", bytes, n);
    expect_error("decode", EF_ESHAPE, "'jpg' and 'png'", NULL);

    src_reset(2);
    src_bytes("png", bytes, n);
    src_bytes("image", bytes, n);
    expect_error("decode", EF_ESHAPE, "already has a field 'image'", NULL);

    src_reset(2);
    src_bytes("png", bytes, n);
    src_bytes("label", "x", 1);
    src_bytes("cls", "1", 1);
    expect_error("decode", EF_ESHAPE, "already has a field 'label'", NULL);

    src_reset(2);
    int64_t shape[2] = {2, 2};
    src_field("png", EF_F32, 2, shape, px);
    expect_error("decode", EF_ESHAPE, "'png' is f32 [2,2]", "u8 [N]", NULL);

    src_reset(2);
    src_bytes("png", bytes, n / 2);
    expect_error("decode:threads=3", EF_EFORMAT, "item 0", "field 'png'", "PNG",
                 NULL);

    expect_spec_error("decode:channels=2", "'channels'");
    expect_spec_error("decode:fields=\"jpg,,png\"", "empty name");
    expect_spec_error("decode:fields=\"jpg,cls\"", "'cls'");
    expect_spec_error("decode:as=", "'as'");
    expect_spec_error("decode:as=label", "'as'");
    ef_buffer_release(png);
    free(px);
}

/* The per-pixel formula ef__bilinear computes, written out directly: a
 * reference for the row-at-a-time implementation, which must equal it to
 * the bit. */
static float ref_coord(int64_t o, int64_t out, int64_t in, int64_t *i0,
                       int64_t *i1)
{
    double s = ((double)o + 0.5) * ((double)in / (double)out) - 0.5;
    s = s < 0 ? 0 : s;
    *i0 = (int64_t)s < in - 1 ? (int64_t)s : in - 1;
    *i1 = *i0 < in - 1 ? *i0 + 1 : *i0;
    return (float)(s - (double)*i0);
}

static void ref_bilinear(const void *in, ef_dtype dtype, int64_t stride,
                         int64_t ih, int64_t iw, int64_t c, void *dst,
                         int64_t oh, int64_t ow)
{
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0, y1, x0, x1;
        float wy = ref_coord(y, oh, ih, &y0, &y1);
        for (int64_t x = 0; x < ow; x++) {
            float wx = ref_coord(x, ow, iw, &x0, &x1);
            for (int64_t k = 0; k < c; k++) {
                size_t a = (size_t)((y0 * stride + x0) * c + k),
                       b = (size_t)((y0 * stride + x1) * c + k),
                       d = (size_t)((y1 * stride + x0) * c + k),
                       e = (size_t)((y1 * stride + x1) * c + k),
                       o = (size_t)((y * ow + x) * c + k);
                if (dtype == EF_U8) {
                    const unsigned char *p = in;
                    float top = p[a] + wx * (float)(p[b] - p[a]);
                    float bot = p[d] + wx * (float)(p[e] - p[d]);
                    ((unsigned char *)dst)[o] =
                        (unsigned char)(top + wy * (bot - top) + 0.5f);
                } else {
                    const float *p = in;
                    float top = p[a] + wx * (p[b] - p[a]);
                    float bot = p[d] + wx * (p[e] - p[d]);
                    ((float *)dst)[o] = top + wy * (bot - top);
                }
            }
        }
    }
}

static void bilinear_equals_the_formula(void **state)
{
    (void)state;
    uint64_t r = 12345;
    for (int round = 0; round < 300; round++) {
        /* sizes from 1 to 40, up and down, a stride past the width */
        int64_t ih = 1 +
                     (int64_t)((r = r * 6364136223846793005u + 1) >> 58) % 40,
                iw = 1 +
                     (int64_t)((r = r * 6364136223846793005u + 1) >> 58) % 40,
                oh = 1 +
                     (int64_t)((r = r * 6364136223846793005u + 1) >> 58) % 40,
                ow = 1 +
                     (int64_t)((r = r * 6364136223846793005u + 1) >> 58) % 40,
                c = 1 + round % 4, stride = iw + round % 3;
        ef_dtype dtype = round % 5 == 4 ? EF_F32 : EF_U8;
        size_t es = ef_dtype_size(dtype), n = (size_t)(ih * stride * c),
               m = (size_t)(oh * ow * c);
        unsigned char *pix = malloc(n * es), *got = malloc(m * es),
                      *want = malloc(m * es);
        assert_non_null(pix);
        assert_non_null(got);
        assert_non_null(want);
        for (size_t i = 0; i < n; i++) {
            r = r * 6364136223846793005u + 1;
            if (dtype == EF_U8)
                pix[i] = (unsigned char)(r >> 56);
            else
                ((float *)pix)[i] = (float)(r >> 40) / 65536.0f - 100.0f;
        }
        assert_int_equal(
            ef__bilinear(pix, dtype, stride, ih, iw, c, got, oh, ow), EF_OK);
        ref_bilinear(pix, dtype, stride, ih, iw, c, want, oh, ow);
        assert_memory_equal(got, want, m * es);
        free(pix);
        free(got);
        free(want);
    }
}

/* ---- resize ---------------------------------------------------------- */

static void resize_known_values(void **state)
{
    (void)state;
    /* [1,2] -> [1,4]: sources x = -0.25 (edge), 0.25, 0.75, 1.25 (edge) */
    static const unsigned char row[2] = {0, 100};
    src_reset(1);
    src_field("image", EF_U8, 2, (int64_t[]){1, 2}, row);
    ef_sample *s = first("resize:height=1,width=4");
    assert_shape(s, "image", EF_U8, 2, 1, 4, 0);
    static const unsigned char want[4] = {0, 25, 75, 100};
    assert_memory_equal(u8_of(s, "image"), want, 4);
    ef_sample_free(s);

    /* [2,2] -> [1,1] samples the centre, the mean; halves round up */
    static const unsigned char sq[4] = {0, 10, 20, 31};
    src_reset(1);
    src_field("image", EF_U8, 2, (int64_t[]){2, 2}, sq);
    s = first("resize:1");
    assert_int_equal(u8_of(s, "image")[0], 15); /* 15.25 */
    ef_sample_free(s);
    /* halves round up: the mean of 0 and 1 */
    src_reset(1);
    src_field("image", EF_U8, 2, (int64_t[]){1, 2}, (unsigned char[]){0, 1});
    s = first("resize:height=1,width=1");
    assert_int_equal(u8_of(s, "image")[0], 1);
    ef_sample_free(s);

    /* RGB [1,2,3] -> [2,4,3], channels apart */
    static const unsigned char rgb[6] = {0, 200, 40, 100, 0, 40};
    src_reset(1);
    src_field("image", EF_U8, 3, (int64_t[]){1, 2, 3}, rgb);
    s = first("resize:height=2,width=4");
    assert_shape(s, "image", EF_U8, 3, 2, 4, 3);
    static const unsigned char want3[12] = {0,  200, 40, 25,  150, 40,
                                            75, 50,  40, 100, 0,   40};
    for (int y = 0; y < 2; y++)
        assert_memory_equal(u8_of(s, "image") + 12 * y, want3, 12);
    ef_sample_free(s);

    /* f32 stays f32, unrounded: [2,1] -> [4,1] */
    static const float col[2] = {0.0f, 1.0f};
    src_reset(1);
    src_field("image", EF_F32, 2, (int64_t[]){2, 1}, col);
    s = first("resize:height=4,width=1");
    assert_shape(s, "image", EF_F32, 2, 4, 1, 0);
    static const float wantf[4] = {0.0f, 0.25f, 0.75f, 1.0f};
    for (int i = 0; i < 4; i++)
        assert_float_equal(f32_of(s, "image")[i], wantf[i], 1e-6);
    ef_sample_free(s);

    /* the same size is the identity, and shares the payload */
    src_reset(1);
    src_field("image", EF_U8, 2, (int64_t[]){2, 2}, sq);
    s = first("resize:size=5 | resize:2");
    assert_shape(s, "image", EF_U8, 2, 2, 2, 0);
    ef_sample_free(s);
    s = first("resize:2");
    assert_memory_equal(u8_of(s, "image"), sq, 4);
    ef_sample_free(s);
    expect_shared("echo:2 | resize:2");
}

/* ---- random_resized_crop ---------------------------------------------- */

static unsigned char *crop_pixels;

static void set_crop_source(int64_t h, int64_t w)
{
    free(crop_pixels);
    crop_pixels = picture(h, w, 3);
    src_reset(40);
    src_field("image", EF_U8, 3, (int64_t[]){h, w, 3}, crop_pixels);
}

static void random_resized_crop_shapes_and_keys(void **state)
{
    (void)state;
    set_crop_source(30, 50);
    ef_sample *s = first("random_resized_crop:size=16");
    assert_shape(s, "image", EF_U8, 3, 16, 16, 3);
    ef_sample_free(s);

    /* the same seed repeats; echoed copies get crops of their own */
    unsigned char runs[2][40][16 * 16 * 3];
    for (int run = 0; run < 2; run++) {
        ef_pipeline *p =
            from_source("echo:2 | random_resized_crop:size=16,threads=3", 5);
        int differ = 0;
        for (int i = 0; i < 40; i++) {
            ef_sample *a = tu_next(p), *b = tu_next(p);
            assert_int_equal(ef_sample_identity(b).echo_copy, 1);
            differ += memcmp(u8_of(a, "image"), u8_of(b, "image"),
                             sizeof runs[0][0]) != 0;
            memcpy(runs[run][i], u8_of(a, "image"), sizeof runs[0][0]);
            ef_sample_free(a);
            ef_sample_free(b);
        }
        assert_true(differ > 30);
        ef_pipeline_destroy(p);
    }
    assert_memory_equal(runs[0], runs[1], sizeof runs[0]);

    /* a 2-D image stays 2-D, f32 stays f32 */
    float g[12] = {0};
    src_reset(1);
    src_field("image", EF_F32, 2, (int64_t[]){3, 4}, g);
    s = first("random_resized_crop:size=5");
    assert_shape(s, "image", EF_F32, 2, 5, 5, 0);
    ef_sample_free(s);
}

/* With the area fixed at the whole image and the ratio at its own, the
 * crop is the image; with an impossible ratio, every try fails and the
 * fallback takes the centred square, as torchvision does. */
static void random_resized_crop_whole_and_fallback(void **state)
{
    (void)state;
    set_crop_source(20, 20);
    ef_sample *a = first("random_resized_crop:size=8,scale_min=1,"
                         "ratio_min=1,ratio_max=1");
    ef_sample *b = first("resize:8");
    assert_memory_equal(u8_of(a, "image"), u8_of(b, "image"), 8 * 8 * 3);
    ef_sample_free(a);
    ef_sample_free(b);

    /* 20 x 40 with ratio 1 and the whole area: sqrt(800) > 20 every try;
     * fallback: the centred 20 x 20 square from x = 10 */
    set_crop_source(20, 40);
    a = first("random_resized_crop:size=20,scale_min=1,ratio_min=1,"
              "ratio_max=1");
    const unsigned char *o = u8_of(a, "image");
    for (int y = 0; y < 20; y++)
        assert_memory_equal(o + y * 20 * 3, crop_pixels + (y * 40 + 10) * 3,
                            20 * 3);
    ef_sample_free(a);
    free(crop_pixels);
    crop_pixels = NULL;
}

/* ---- normalize, to_chw, cast ------------------------------------------- */

static void normalize_values(void **state)
{
    (void)state;
    static const unsigned char px[6] = {0, 51, 255, 255, 102, 0};
    src_reset(1);
    src_field("image", EF_U8, 3, (int64_t[]){1, 2, 3}, px);
    ef_sample *s = first("normalize:mean=\"0.5,0.2,0\",std=\"0.5, 0.1, 2\"");
    assert_shape(s, "image", EF_F32, 3, 1, 2, 3);
    const float *o = f32_of(s, "image");
    static const float want[6] = {-1.0f, 0.0f, 0.5f, 1.0f, 2.0f, 0.0f};
    for (int i = 0; i < 6; i++)
        assert_float_equal(o[i], want[i], 1e-6);
    ef_sample_free(s);

    /* one value for every channel; defaults scale u8 to [0, 1] */
    s = first("normalize:mean=0.2,std=0.2");
    assert_float_equal(f32_of(s, "image")[1], 0.0, 1e-6);
    ef_sample_free(s);
    s = first("normalize");
    assert_float_equal(f32_of(s, "image")[1], 0.2, 1e-6);
    ef_sample_free(s);

    /* f32 input is not scaled */
    static const float f[2] = {3.0f, -1.0f};
    src_reset(1);
    src_field("image", EF_F32, 2, (int64_t[]){1, 2}, f);
    s = first("normalize:mean=1,std=2");
    assert_float_equal(f32_of(s, "image")[0], 1.0, 1e-6);
    assert_float_equal(f32_of(s, "image")[1], -1.0, 1e-6);
    ef_sample_free(s);

    src_reset(1);
    src_field("image", EF_U8, 3, (int64_t[]){1, 2, 3}, px);
    expect_error("normalize:mean=\"0.1,0.2\"", EF_ESHAPE, "3 channels",
                 "mean has 2 values", NULL);
    expect_spec_error("normalize:std=0", "> 0");
    expect_spec_error("normalize:std=\"1,-1\"", "> 0");
    expect_spec_error("normalize:mean=abc", "'mean'");
    expect_spec_error("normalize:mean=\"1,,2\"", "'mean'");
    expect_spec_error("normalize:mean=nan", "'mean'");
}

static void to_chw_layout(void **state)
{
    (void)state;
    /* [2,2,3]: pixel p channel k = 10 p + k */
    int32_t px[12];
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 3; k++)
            px[p * 3 + k] = 10 * p + k;
    src_reset(1);
    src_field("image", EF_I32, 3, (int64_t[]){2, 2, 3}, px);
    ef_sample *s = first("to_chw");
    assert_shape(s, "image", EF_I32, 3, 3, 2, 2);
    const int32_t *o = tu_field(s, "image").data;
    for (int k = 0; k < 3; k++)
        for (int p = 0; p < 4; p++)
            assert_int_equal(o[k * 4 + p], 10 * p + k);
    ef_sample_free(s);

    static const unsigned char g[6] = {1, 2, 3, 4, 5, 6};
    src_reset(1);
    src_field("image", EF_U8, 2, (int64_t[]){2, 3}, g);
    s = first("to_chw");
    assert_shape(s, "image", EF_U8, 3, 1, 2, 3);
    assert_memory_equal(u8_of(s, "image"), g, 6);
    ef_sample_free(s);
    expect_shared("echo:2 | to_chw");
}

static void cast_rounds_and_refuses(void **state)
{
    (void)state;
    static const float g[7] = {0.4f, 0.5f, 1.5f, 2.5f, 254.6f, -0.4f, 255.4f};
    src_reset(1);
    src_field("image", EF_F32, 2, (int64_t[]){1, 7}, g);
    ef_sample *s = first("cast:dtype=u8");
    /* nearest, halves away from zero */
    static const unsigned char want[7] = {0, 1, 2, 3, 255, 0, 255};
    assert_memory_equal(u8_of(s, "image"), want, 7);
    ef_sample_free(s);
    s = first("cast:i32 | cast:f32");
    assert_float_equal(f32_of(s, "image")[3], 3.0, 0);
    ef_sample_free(s);

    /* values the target cannot hold */
    static const float big[2] = {1.0f, 300.5f};
    src_reset(3);
    src_field("image", EF_F32, 3, (int64_t[]){1, 2, 1}, big);
    expect_error("cast:u8", EF_EFORMAT, "item 0", "[0,1,0]", "300.5", "u8",
                 NULL);
    static const float neg[1] = {-1.0f};
    src.f[0].shape[1] = 1;
    src.f[0].data = neg;
    expect_error("cast:u8", EF_EFORMAT, "-1", NULL);
    static const float nan1[1] = {NAN};
    src.f[0].data = nan1;
    expect_error("cast:i64", EF_EFORMAT, "nan", NULL);
    expect_error("cast:i32", EF_EFORMAT, "nan", NULL);
    static const float inf1[1] = {INFINITY};
    src.f[0].data = inf1;
    expect_error("cast:i64", EF_EFORMAT, "inf", NULL);
    static const int64_t wide[2] = {5, INT64_C(1) << 40};
    src_reset(1);
    src_field("image", EF_I64, 2, (int64_t[]){1, 2}, wide);
    expect_error("cast:i32", EF_EFORMAT, "1099511627776", "i32", NULL);
    s = first("cast:f32");
    assert_float_equal(f32_of(s, "image")[1], 1099511627776.0, 0);
    ef_sample_free(s);

    /* same dtype: the payload is shared (echo's copies share one buffer,
     * and still do after the cast) */
    src_reset(1);
    src_field("image", EF_F32, 2, (int64_t[]){1, 7}, g);
    expect_shared("echo:2 | cast:f32");
    expect_spec_error("cast:c64", "u8, i32, i64, f32, bool, i8, i16, u16, "
                                  "f16, bf16 or f64, got 'c64'");
    expect_spec_error("cast", "'dtype' is required");
}

/* ---- error paths every image stage shares ------------------------------ */

static void image_stage_errors(void **state)
{
    (void)state;
    static const char *const stages[] = {"resize:4",
                                         "random_resized_crop:4",
                                         "crop_mirror_normalize:4",
                                         "normalize",
                                         "to_chw",
                                         "cast:u8"};
    static unsigned char px[2 * 4 * 4 * 3];
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        int any_dtype =
            strstr(stages[i], "to_chw") || strstr(stages[i], "cast");
        /* missing field: the message lists what there is */
        src_reset(1);
        src_bytes("data", px, 4);
        expect_error(stages[i], EF_ESHAPE, "no field 'image'", "data", NULL);
        /* a batch: one more dimension */
        src_reset(1);
        src_field("image", EF_U8, 4, (int64_t[]){2, 4, 4, 3}, px);
        expect_error(stages[i], EF_ESHAPE, "[2,4,4,3]", "[H,W,C]",
                     "before batch", NULL);
        /* 1-D */
        src_reset(1);
        src_field("image", EF_U8, 1, (int64_t[]){8}, px);
        expect_error(stages[i], EF_ESHAPE, "[H,W]", NULL);
        /* a dtype the stage does not take */
        if (!any_dtype) {
            src_reset(1);
            src_field("image", EF_I32, 2, (int64_t[]){2, 2}, px);
            expect_error(stages[i], EF_ESHAPE, "i32", "u8 or f32", NULL);
        }
        /* another field name */
        char spec[96];
        snprintf(spec, sizeof spec, "%s%cfield=pic", stages[i],
                 strchr(stages[i], ':') ? ',' : ':');
        src_reset(1);
        src_field("pic", EF_U8, 3, (int64_t[]){4, 4, 3}, px);
        ef_sample *s = first(spec);
        ef_sample_free(s);
    }
    /* an empty image cannot be resampled */
    src_reset(1);
    src_field("image", EF_U8, 3, (int64_t[]){0, 4, 3}, px);
    expect_error("resize:4", EF_ESHAPE, "empty", NULL);
    expect_error("random_resized_crop:4", EF_ESHAPE, "empty", NULL);
    expect_error("crop_mirror_normalize:4", EF_ESHAPE, "empty", NULL);

    expect_spec_error("resize", "'size'");
    expect_spec_error("resize:height=3", "'size'");
    expect_spec_error("resize:40000", "'size'");
    expect_spec_error("random_resized_crop:scale_min=0.9,scale_max=0.5",
                      "reversed");
    expect_spec_error("random_resized_crop:ratio_min=2,ratio_max=1",
                      "reversed");
    expect_spec_error("to_chw:field=", "'field'");
}

/* After batch, every image stage refuses the batch by its members, not
 * its shape: ten grey 28 x 28 images batch to [10,28,28], which an image
 * stage would otherwise read as one 10 x 28 image of 28 channels. Through
 * echo and a map in between too, and under on_error=skip, which drops bad
 * samples but not a misplaced stage. */
static void image_stages_refuse_batches(void **state)
{
    (void)state;
    static const char *const stages[] = {"random_crop:pad=1",
                                         "flip:p=1",
                                         "resize:4",
                                         "random_resized_crop:4",
                                         "crop_mirror_normalize:4",
                                         "normalize",
                                         "to_chw",
                                         "cast:f32"};
    static const char *const between[] = {"", "echo:2 | ", "map:fn=noop | "};
    static unsigned char px[28 * 28];
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(stages[i], ":"),
                 stages[i]);
        /* before batch: the stage takes each image */
        char spec[128];
        snprintf(spec, sizeof spec, "%s | batch:10", stages[i]);
        src_reset(10);
        src_field("image", EF_U8, 2, (int64_t[]){28, 28}, px);
        ef_sample_free(first(spec));
        for (size_t k = 0; k < sizeof between / sizeof between[0]; k++) {
            snprintf(spec, sizeof spec, "batch:10 | %s%s", between[k],
                     stages[i]);
            src_reset(10);
            src_field("image", EF_U8, 2, (int64_t[]){28, 28}, px);
            expect_error(spec, EF_ESPEC, name, "[10,28,28]",
                         "place this stage before batch", NULL);
        }
        snprintf(spec, sizeof spec, "batch:5 | %s", stages[i]);
        src_reset(10);
        src_field("image", EF_U8, 2, (int64_t[]){28, 28}, px);
        ef_pipeline *p = from_source(spec, 1);
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
        expect_first_error(p, spec, EF_ESPEC, "before batch", NULL);
        ef_pipeline_destroy(p);
    }
}

/* A source whose samples are batches already declares them so
 * (ef_sample_set_members): every image stage refuses them as it refuses
 * batch's output, naming the way to have the source yield examples,
 * instead of reading ten grey images as one 10 x 28 image. */
static void image_stages_refuse_a_sources_batches(void **state)
{
    (void)state;
    static const char *const stages[] = {"flip:p=1", "to_chw",
                                         "crop_mirror_normalize:4",
                                         "random_crop:pad=1", "cast:f32"};
    static unsigned char px[10 * 28 * 28];
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(stages[i], ":"),
                 stages[i]);
        src_reset(2);
        src_field("image", EF_U8, 3, (int64_t[]){10, 28, 28}, px);
        src.members = 10;
        expect_error(stages[i], EF_ESPEC, name, "[10,28,28]",
                     "is a batch of 10 examples", "the source yields batches",
                     "unbatch=True", NULL);
    }
    /* the batch keeps its members through the pipeline */
    src_reset(2);
    src_field("image", EF_U8, 3, (int64_t[]){10, 28, 28}, px);
    src.members = 10;
    ef_sample *b = first("echo:2");
    ef_sample_id ids[10];
    assert_int_equal(ef_sample_members(b, ids, 10), 10);
    assert_int_equal(ids[9].index, 9);
    ef_sample_free(b);
}

/* The stages are listed with help for every option. */
static void stages_are_registered(void **state)
{
    (void)state;
    static const char *const names[] = {
        "decode", "resize", "random_resized_crop",  "normalize",
        "to_chw", "cast",   "crop_mirror_normalize"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const ef_stage_info *found = NULL;
        for (int i = 0; i < ef_stage_registry_count(); i++)
            if (!strcmp(ef_stage_registry_get(i)->name, names[k]))
                found = ef_stage_registry_get(i);
        if (!found)
            fail_msg("stage %s is not registered", names[k]);
        assert_true(strlen(found->help) > 10);
        for (int o = 0; o < found->noptions; o++)
            assert_true(strlen(found->options[o].help) > 5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(png_round_trip_is_exact),
        cmocka_unit_test(jpeg_round_trip_is_close),
        cmocka_unit_test(bad_png_is_an_error),
        cmocka_unit_test(bad_jpeg_is_an_error),
        cmocka_unit_test(foreign_bytes_are_an_error),
        cmocka_unit_test(missing_library_is_named),
        cmocka_unit_test(png_survives_failed_allocations),
        cmocka_unit_test(decode_images_and_labels),
        cmocka_unit_test(decode_errors),
        cmocka_unit_test(bilinear_equals_the_formula),
        cmocka_unit_test(resize_known_values),
        cmocka_unit_test(random_resized_crop_shapes_and_keys),
        cmocka_unit_test(random_resized_crop_whole_and_fallback),
        cmocka_unit_test(normalize_values),
        cmocka_unit_test(to_chw_layout),
        cmocka_unit_test(cast_rounds_and_refuses),
        cmocka_unit_test(image_stage_errors),
        cmocka_unit_test(image_stages_refuse_batches),
        cmocka_unit_test(image_stages_refuse_a_sources_batches),
        cmocka_unit_test(stages_are_registered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
