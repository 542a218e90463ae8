/* SPDX-License-Identifier: Apache-2.0 */
/* crop_mirror_normalize: bit-equal to the separate stages it fuses
 * (random_resized_crop or resize, flip, normalize, to_chw) for many
 * windows, both flips, u8 and f32, one and three channels, odd sizes,
 * enlarging and shrinking; its kernel equal to the separate kernels on
 * random windows; its draws keyed per echo copy; and its errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "ef_test_util.h"
#include "stages/image/bilinear.h"
#include "stages/image/normalize_values.h"

/* ---- a source of random images -------------------------------------- */

/* Every sample is an image of this kind, its pixels drawn from a
 * generator seeded by its index (or the fixed `pixels` when set). */
static struct {
    ef_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t count;
    const void *pixels;
} src;

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005u + 1442695040888963407u;
    return *x >> 33;
}

/* u8 anywhere in 0..255; f32 in [-40, 300) with fractions, never -0 */
static void fill(void *px, ef_dtype dtype, size_t n, uint64_t seed)
{
    uint64_t x = seed * 7919 + 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = lcg(&x);
        if (dtype == EF_U8)
            ((unsigned char *)px)[i] = (unsigned char)(r & 0xff);
        else
            ((float *)px)[i] = (float)(r % 340000) / 1000.0f - 40.0f;
    }
}

static void src_set(ef_dtype dtype, int64_t h, int64_t w, int64_t c,
                    int64_t count)
{
    memset(&src, 0, sizeof src);
    src.dtype = dtype;
    src.ndim = c ? 3 : 2;
    src.shape[0] = h;
    src.shape[1] = w;
    src.shape[2] = c;
    src.count = count;
}

/* user: the pipeline's own next index, so that pipelines compared side
 * by side see the same samples */
static int source_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    int64_t *next = user;
    (void)block;
    if (*next >= src.count)
        return EF_END;
    int64_t index = (*next)++;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = index, .epoch = epoch});
    void *dst;
    assert_int_equal(
        ef_sample_add_new(s, "image", src.dtype, src.ndim, src.shape, &dst),
        EF_OK);
    ef_tensor t = tu_field(s, "image");
    if (src.pixels)
        memcpy(dst, src.pixels, t.nbytes);
    else
        fill(dst, src.dtype, t.nbytes / ef_dtype_size(src.dtype),
             (uint64_t)index);
    *out = s;
    return EF_OK;
}

static ef_pipeline *from_source(const char *stages, uint64_t seed)
{
    /* a ring of counters: at most three pipelines are alive at once */
    static int64_t next[4];
    static int turn;
    int64_t *mine = &next[turn++ % 4];
    *mine = 0;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, source_fn, mine, NULL), EF_OK);
    tu_parse(p, stages);
    return p;
}

/* Fails unless the two tensors have the same dtype, shape and bytes;
 * the message names the first differing value. */
static void assert_same(const ef_tensor *a, const ef_tensor *b,
                        const char *what)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        fail_msg("%s: dtype/ndim %d/%d vs %d/%d", what, a->dtype, a->ndim,
                 b->dtype, b->ndim);
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            fail_msg("%s: dimension %d is %lld vs %lld", what, d,
                     (long long)a->shape[d], (long long)b->shape[d]);
    assert_int_equal(a->nbytes, b->nbytes);
    if (!memcmp(a->data, b->data, a->nbytes))
        return;
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < a->nbytes / 4; i++)
        if (memcmp(&x[i], &y[i], 4))
            fail_msg("%s: value %zu is %.9g vs %.9g", what, i, x[i], y[i]);
}

/* Every sample of the two pipelines is the same image. */
static void expect_same_outputs(const char *fused, const char *separate,
                                int64_t count)
{
    src.count = count;
    ef_pipeline *p = from_source(fused, 7), *q = from_source(separate, 7);
    for (int64_t i = 0; i < count; i++) {
        ef_sample *a = tu_next(p), *b = tu_next(q);
        ef_tensor ta = tu_field(a, "image"), tb = tu_field(b, "image");
        char what[600];
        snprintf(what, sizeof what, "item %lld of %.280s vs %.280s",
                 (long long)i, fused, separate);
        assert_same(&ta, &tb, what);
        ef_sample_free(a);
        ef_sample_free(b);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    ef_pipeline_destroy(q);
}

/* ---- equal to the separate stages --------------------------------- */

/* Input shapes: odd and even sides, wide and tall, 2-D (c = 0) and
 * [H,W,C]; output sides below and above them, one past a column block. */
static const struct {
    int64_t h, w, c;
} shapes[] = {{17, 23, 3}, {40, 31, 0}, {9, 12, 1}, {64, 48, 3}, {5, 300, 3}};
static const int64_t sizes[] = {7, 16, 33, 261};

/* The mean and std of the spec for c channels (0: a 2-D image). */
static const char *norm_args(int64_t c, int variant)
{
    if (c == 3 && variant)
        return "mean=\"0.485,0.456,0.406\",std=\"0.229,0.224,0.225\"";
    return variant ? "mean=0.45,std=0.27" : "mean=-1.5,std=3";
}

static void equals_random_resized_crop_chain(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
            for (int t = 0; t < 4; t++) {
                ef_dtype dtype = t & 1 ? EF_F32 : EF_U8;
                int mirror = t >> 1, hwc = z == 1;
                src_set(dtype, shapes[s].h, shapes[s].w, shapes[s].c, 0);
                const char *norm = norm_args(shapes[s].c, (int)z & 1);
                char fused[300], separate[300];
                /* a wide scale range: small crops enlarge, large shrink */
                snprintf(fused, sizeof fused,
                         "crop_mirror_normalize:size=%lld,scale_min=0.01,"
                         "mirror=%d,%s,layout=%s",
                         (long long)sizes[z], mirror, norm,
                         hwc ? "hwc" : "chw");
                snprintf(separate, sizeof separate,
                         "random_resized_crop:size=%lld,scale_min=0.01 | "
                         "flip:p=%d | normalize:%s%s",
                         (long long)sizes[z], mirror, norm,
                         hwc ? "" : " | to_chw");
                expect_same_outputs(fused, separate, sizes[z] > 100 ? 3 : 12);
            }
}

/* crop=none is resize, the same size included (resize shares the payload
 * there; the resampling maps every pixel onto itself). */
static void equals_resize_chain(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            ef_dtype dtype = t & 1 ? EF_F32 : EF_U8;
            int mirror = t >> 1;
            src_set(dtype, shapes[s].h, shapes[s].w, shapes[s].c, 0);
            int64_t sides[3] = {13, shapes[s].h, 2 * shapes[s].w + 1};
            for (int k = 0; k < 3; k++) {
                /* a square input of side h for the same-size case */
                if (k == 1)
                    src.shape[1] = shapes[s].h;
                char fused[300], separate[300];
                snprintf(fused, sizeof fused,
                         "crop_mirror_normalize:size=%lld,crop=none,"
                         "mirror=%d,%s",
                         (long long)sides[k], mirror,
                         norm_args(src.shape[2], 1));
                snprintf(separate, sizeof separate,
                         "resize:%lld | flip:p=%d | normalize:%s | to_chw",
                         (long long)sides[k], mirror,
                         norm_args(src.shape[2], 1));
                expect_same_outputs(fused, separate, 2);
                src.shape[1] = shapes[s].w;
            }
        }
}

/* A flip with probability 1/2 gives one of the two results, each often;
 * the crop is the whole image (scale 1, the image's own ratio). */
static void mirror_is_drawn_per_sample(void **state)
{
    (void)state;
    src_set(EF_U8, 12, 18, 3, 40);
    static unsigned char px[12 * 18 * 3];
    fill(px, EF_U8, sizeof px, 3);
    src.pixels = px;
    const char *whole = "size=10,scale_min=1,ratio_min=1.5,ratio_max=1.5";
    char spec[200];
    snprintf(spec, sizeof spec, "crop_mirror_normalize:%s", whole);
    ef_pipeline *p = from_source(spec, 3);
    ef_sample *ref[2];
    for (int m = 0; m < 2; m++) {
        snprintf(spec, sizeof spec,
                 "random_resized_crop:%s | flip:p=%d | normalize | to_chw",
                 whole, m);
        ef_pipeline *q = from_source(spec, 3);
        ref[m] = tu_next(q);
        ef_pipeline_destroy(q);
    }
    int seen[2] = {0, 0};
    for (int i = 0; i < 40; i++) {
        ef_sample *s = tu_next(p);
        ef_tensor t = tu_field(s, "image");
        int which = -1;
        for (int m = 0; m < 2; m++)
            if (!memcmp(t.data, tu_field(ref[m], "image").data, t.nbytes))
                which = m;
        if (which < 0)
            fail_msg("item %d is neither the image nor its mirror", i);
        seen[which]++;
        ef_sample_free(s);
    }
    assert_true(seen[0] > 8 && seen[1] > 8);
    ef_pipeline_destroy(p);
    ef_sample_free(ref[0]);
    ef_sample_free(ref[1]);
}

/* ---- the kernel against the separate kernels ----------------------- */

/* ef__bilinear into a new u8/f32 image, then flip, normalize and to_chw as
 * stages on a one-sample source serving it. */
static ef_sample *separate_kernels(const void *window, ef_dtype dtype,
                                   int64_t stride, int64_t ch, int64_t cw,
                                   int64_t c, int64_t side, int mirror,
                                   const char *norm)
{
    size_t esize = ef_dtype_size(dtype);
    void *resampled = malloc((size_t)(side * side * c) * esize);
    assert_non_null(resampled);
    assert_int_equal(
        ef__bilinear(window, dtype, stride, ch, cw, c, resampled, side, side),
        EF_OK);
    src_set(dtype, side, side, c, 1);
    src.pixels = resampled;
    char spec[300];
    snprintf(spec, sizeof spec, "flip:p=%d | normalize:%s | to_chw", mirror,
             norm);
    ef_pipeline *p = from_source(spec, 1);
    ef_sample *s = tu_next(p);
    ef_pipeline_destroy(p);
    free(resampled);
    return s;
}

static void kernel_equals_separate_kernels(void **state)
{
    (void)state;
    uint64_t x = 42;
    /* three channels with a value each, or one */
    const ef__norm_values nv3 = {3,
                                 3,
                                 {0.485, 0.456, 0.406},
                                 {0.229, 0.224, 0.225}},
                          nv1 = {1, 1, {0.45}, {0.27}};
    const char *norm3 = "mean=\"0.485,0.456,0.406\",std=\"0.229,0.224,0.225\"",
               *norm1 = "mean=0.45,std=0.27";
    for (int trial = 0; trial < 200; trial++) {
        ef_dtype dtype = trial & 1 ? EF_F32 : EF_U8;
        int mirror = (trial >> 1) & 1;
        int64_t h = 1 + (int64_t)(lcg(&x) % 50),
                w = 1 + (int64_t)(lcg(&x) % 50);
        int64_t c = trial % 3 ? 3 : 1;
        int64_t side = 1 + (int64_t)(lcg(&x) % (trial % 10 ? 60 : 300));
        int64_t ch = 1 + (int64_t)(lcg(&x) % (uint64_t)h);
        int64_t cw = 1 + (int64_t)(lcg(&x) % (uint64_t)w);
        int64_t y0 = (int64_t)(lcg(&x) % (uint64_t)(h - ch + 1));
        int64_t x0 = (int64_t)(lcg(&x) % (uint64_t)(w - cw + 1));
        size_t esize = ef_dtype_size(dtype);
        unsigned char *img = malloc((size_t)(h * w * c) * esize);
        assert_non_null(img);
        fill(img, dtype, (size_t)(h * w * c), (uint64_t)trial);
        const unsigned char *window = img + (size_t)((y0 * w + x0) * c) * esize;

        float a[3], b[3];
        ef__norm_coeffs(c == 3 ? &nv3 : &nv1, c, dtype, a, b);
        float *fused = malloc((size_t)(side * side * c) * sizeof *fused);
        assert_non_null(fused);
        const ef__bilinear_norm how = {a, b, c == 3, mirror, 1};
        assert_int_equal(ef__bilinear_normalize(window, dtype, w, ch, cw, c,
                                                &how, fused, side, side),
                         EF_OK);
        ef_sample *ref = separate_kernels(window, dtype, w, ch, cw, c, side,
                                          mirror, c == 3 ? norm3 : norm1);
        ef_tensor want = tu_field(ref, "image");
        ef_tensor got = want;
        got.data = fused;
        char what[160];
        snprintf(what, sizeof what,
                 "trial %d: %s %lldx%lld, window %lld,%lld %lldx%lld to %lld%s",
                 trial, ef_dtype_name(dtype), (long long)h, (long long)w,
                 (long long)y0, (long long)x0, (long long)ch, (long long)cw,
                 (long long)side, mirror ? ", mirrored" : "");
        assert_same(&got, &want, what);
        ef_sample_free(ref);
        free(fused);
        free(img);
    }
}

/* ---- keys, shapes and errors --------------------------------------- */

static void draws_are_keyed(void **state)
{
    (void)state;
    src_set(EF_U8, 30, 40, 3, 0);
    static unsigned char px[30 * 40 * 3];
    fill(px, EF_U8, sizeof px, 1);
    src.pixels = px;
    enum { N = 20, BYTES = 3 * 16 * 16 * 4 };
    static unsigned char runs[2][2 * N][BYTES];
    for (int run = 0; run < 2; run++) {
        src.count = N;
        ef_pipeline *p =
            from_source(run ? "echo:2 | crop_mirror_normalize:size=16,threads=3"
                            : "echo:2 | crop_mirror_normalize:size=16",
                        5);
        int differ = 0;
        for (int i = 0; i < N; i++) {
            ef_sample *a = tu_next(p), *b = tu_next(p);
            assert_int_equal(ef_sample_identity(b).echo_copy, 1);
            memcpy(runs[run][2 * i], tu_field(a, "image").data, BYTES);
            memcpy(runs[run][2 * i + 1], tu_field(b, "image").data, BYTES);
            differ +=
                memcmp(runs[run][2 * i], runs[run][2 * i + 1], BYTES) != 0;
            ef_sample_free(a);
            ef_sample_free(b);
        }
        assert_true(differ > N - 3); /* each copy has its own crop */
        ef_pipeline_destroy(p);
    }
    /* the same seed gives the same crops on one thread or three */
    assert_memory_equal(runs[0], runs[1], sizeof runs[0]);
}

static void output_shapes(void **state)
{
    (void)state;
    static const struct {
        int64_t c;
        const char *layout;
        int ndim;
        int64_t d[3];
    } cases[] = {{3, "chw", 3, {3, 6, 6}},
                 {3, "hwc", 3, {6, 6, 3}},
                 {0, "chw", 3, {1, 6, 6}},
                 {0, "hwc", 2, {6, 6, 0}},
                 {1, "hwc", 3, {6, 6, 1}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int f = 0; f < 2; f++) {
            src_set(f ? EF_F32 : EF_U8, 9, 4, cases[i].c, 1);
            char spec[100];
            snprintf(spec, sizeof spec, "crop_mirror_normalize:6,layout=%s",
                     cases[i].layout);
            ef_pipeline *p = from_source(spec, 1);
            ef_sample *s = tu_next(p);
            ef_tensor t = tu_field(s, "image");
            assert_int_equal(t.dtype, EF_F32);
            assert_int_equal(t.ndim, cases[i].ndim);
            for (int d = 0; d < t.ndim; d++)
                assert_int_equal(t.shape[d], cases[i].d[d]);
            ef_sample_free(s);
            ef_pipeline_destroy(p);
        }
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

static void expect_spec_error(const char *stage, const char *words)
{
    ef_pipeline *p;
    static int64_t next;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, source_fn, &next, NULL), EF_OK);
    int rc = ef_pipeline_parse(p, stage);
    if (rc != EF_ESPEC || !strstr(ef_pipeline_error(p), words))
        fail_msg("%s: expected EF_ESPEC naming \"%s\", got %s: %s", stage,
                 words, ef_status_name(rc), ef_pipeline_error(p));
    ef_pipeline_destroy(p);
}

static void errors_are_named(void **state)
{
    (void)state;
    const char *cmn = "crop_mirror_normalize:8";
    src_set(EF_I32, 4, 4, 3, 1);
    expect_error(cmn, EF_ESHAPE, "field 'image' is i32", "u8 or f32", NULL);
    src_set(EF_U8, 2, 4, 4, 1);
    src.ndim = 4;
    src.shape[3] = 3;
    expect_error(cmn, EF_ESHAPE, "[2,4,4,3]", "before batch", NULL);
    src_set(EF_U8, 0, 4, 3, 1);
    expect_error(cmn, EF_ESHAPE, "empty", NULL);
    src_set(EF_F32, 4, 4, 3, 1);
    expect_error("crop_mirror_normalize:8,field=pic", EF_ESHAPE,
                 "no field 'pic'", "image", NULL);
    expect_error("crop_mirror_normalize:mean=\"0.1,0.2\"", EF_ESHAPE, "item 0",
                 "3 channels but mean has 2 values", "expected 1 or 3", NULL);
    src_set(EF_U8, 4, 4, 0, 1);
    expect_error("crop_mirror_normalize:std=\"1,2,3\"", EF_ESHAPE,
                 "one channel but std has 3 values", NULL);

    expect_spec_error("crop_mirror_normalize:crop=center",
                      "option 'crop' must be random_resized or none, got "
                      "'center'");
    expect_spec_error("crop_mirror_normalize:layout=nchw",
                      "option 'layout' must be chw or hwc, got 'nchw'");
    expect_spec_error("crop_mirror_normalize:mirror=1.5", "'mirror'");
    expect_spec_error("crop_mirror_normalize:size=0", "'size'");
    expect_spec_error("crop_mirror_normalize:scale_min=0.9,scale_max=0.5",
                      "stage 'crop_mirror_normalize': ranges must not be "
                      "reversed");
    expect_spec_error("crop_mirror_normalize:ratio_min=2,ratio_max=1",
                      "reversed");
    expect_spec_error("crop_mirror_normalize:mean=abc",
                      "stage 'crop_mirror_normalize': option 'mean' expects "
                      "a number");
    expect_spec_error("crop_mirror_normalize:std=\"1,0\"",
                      "option 'std' values must be > 0");
    expect_spec_error("crop_mirror_normalize:field=", "'field'");
    expect_spec_error("crop_mirror_normalize:threads=0", "'threads'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(equals_random_resized_crop_chain),
        cmocka_unit_test(equals_resize_chain),
        cmocka_unit_test(mirror_is_drawn_per_sample),
        cmocka_unit_test(kernel_equals_separate_kernels),
        cmocka_unit_test(draws_are_keyed),
        cmocka_unit_test(output_shapes),
        cmocka_unit_test(errors_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
