/* SPDX-License-Identifier: Apache-2.0 */
/* A window of a JPEG, decoded through libjpeg's own API: columns cropped
 * (jpeg_crop_scanline), rows above the window skipped (jpeg_skip_scanlines,
 * which still entropy-decodes them), and decoding stopped after the
 * window's last row. When the caller will shrink the window a lot, the
 * IDCT scales it down by 2, 4 or 8 for free.
 *
 * Unscaled, the window's pixels are those of ef__jpeg_decode (TurboJPEG
 * over the same library, same IDCT and upsampling) cropped, bit for bit.
 * One catch: libjpeg's fancy chroma upsampling treats the edges of a
 * cropped region as image edges, so columns next to a crop's edge differ
 * from a full decode. Hence a margin of one iMCU is decoded on each side
 * where the image continues, and left out of `inside`.
 *
 * Strictness is that of jpeg.c: the header goes through the same
 * TurboJPEG check (ef__jpeg_probe), every libjpeg warning (corrupt or
 * truncated data) is an error, and a progressive image may have at most
 * 500 scans. But only what is decoded is checked: damage in the rows
 * below the window, or the columns beside it in a baseline image (which
 * are entropy-decoded but not inverse-transformed), may go unnoticed
 * where a full decode would fail. */
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/alloc.h"

#if defined(EF_HAVE_JPEG) && defined(EF_HAVE_TURBOJPEG)
#include <jerror.h>
#include <jpeglib.h>

_Static_assert(SIZE_MAX <= ULONG_MAX,
               "jpeg_mem_src takes sizes as unsigned long");

/* as TurboJPEG's TJFLAG_LIMITSCANS: a progressive image of many tiny
 * scans costs a full pass over the coefficients per scan */
#define MAX_SCANS 500

typedef struct {
    struct jpeg_error_mgr pub; /* first: libjpeg sees only this */
    jmp_buf jump;
    int warning, nomem;
    char msg[JMSG_LENGTH_MAX];
} error_mgr;

/* Everything the decoding touches, owned by ef__jpeg_decode_window's
 * frame, so that it keeps its values across the longjmp. */
typedef struct {
    struct jpeg_decompress_struct cinfo;
    error_mgr jerr;
    struct jpeg_progress_mgr progress;
    ef_buffer *out;
    unsigned char *row; /* one CMYK row, when converting */
} job;

static void on_error(j_common_ptr c)
{
    error_mgr *e = (error_mgr *)c->err;
    e->nomem = c->err->msg_code == JERR_OUT_OF_MEMORY;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

static void on_message(j_common_ptr c, int level)
{
    if (level >= 0) /* trace messages */
        return;
    error_mgr *e = (error_mgr *)c->err;
    e->warning = 1;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

static void on_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number <= MAX_SCANS)
        return;
    error_mgr *e = (error_mgr *)c->err;
    snprintf(e->msg, sizeof e->msg,
             "progressive JPEG image has more than %d scans", MAX_SCANS);
    longjmp(e->jump, 1);
}

/* The largest IDCT scaling, 1/2 to 1/8, that keeps the window at least
 * the output size; 1 when the window is not at least twice the output
 * size both ways, or out_h or out_w is 0. */
static int scale_factor(const int64_t win[4], int64_t out_h, int64_t out_w)
{
    int f = 1;
    if (out_h < 1 || out_w < 1)
        return 1;
    while (f < 8 && win[2] >= 2 * f * out_h && win[3] >= 2 * f * out_w)
        f *= 2;
    return f;
}

/* a / f rounded to nearest, halves up (a >= 0) */
static int64_t div_round(int64_t a, int f)
{
    return (2 * a + f) / (2 * f);
}

/* The window in the image scaled by 1/f, oh x ow: {y0, x0, height,
 * width}, its edges rounded to the nearest scaled pixel and cut at the
 * scaled image's edge. */
static void scaled_window(const int64_t win[4], int f, int64_t oh, int64_t ow,
                          int64_t sw[4])
{
    int64_t y0 = div_round(win[0], f), x0 = div_round(win[1], f);
    int64_t y1 = div_round(win[0] + win[2], f);
    int64_t x1 = div_round(win[1] + win[3], f);
    sw[0] = y0;
    sw[1] = x0;
    sw[2] = (y1 < oh ? y1 : oh) - y0;
    sw[3] = (x1 < ow ? x1 : ow) - x0;
}

/* How far beyond the window, in (scaled) pixels, columns must be decoded
 * for the window's pixels to be those of a full decode. libjpeg treats
 * the edges of a cropped region as the image's edges in two places:
 * fancy upsampling of horizontally subsampled chroma reads one chroma
 * sample beside each, so one iMCU column suffices; and in a progressive
 * image whose AC coefficients are incomplete (a truncated progression),
 * block smoothing estimates them from a block's neighbours up to two
 * blocks away, so two more iMCU columns (an iMCU column holds one block of
 * the most subsampled component) keep those neighbours real. Rows need no
 * margin: skipped rows still feed both. */
static int64_t crop_margin(const struct jpeg_decompress_struct *d)
{
    int imcus = (d->max_h_samp_factor > 1) + 2 * (d->progressive_mode != 0);
    return (int64_t)imcus * d->max_h_samp_factor * d->min_DCT_scaled_size;
}

/* Decodes rows [y0, y1) of the cropped columns into j->out, starting at
 * row y0 of the (scaled) image. */
static int read_rows(job *j, JDIMENSION y0, JDIMENSION y1, int c, int cmyk,
                     int64_t shape[3], const char *what, ef__err *err)
{
    struct jpeg_decompress_struct *d = &j->cinfo;
    int64_t w = d->output_width;
    int rc =
        ef__image_alloc((int64_t)(y1 - y0), w, c, what, &j->out, shape, err);
    if (rc != EF_OK)
        return rc;
    if (cmyk && !(j->row = ef__malloc((size_t)w * 4)))
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory for CMYK pixels",
                           what);
    /* skipping to row 0 is fine; libjpeg returns how many it skipped */
    if (y0 && jpeg_skip_scanlines(d, y0) != y0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated or corrupt JPEG data (in the image "
                           "data): could not skip to row %u",
                           what, (unsigned)y0);
    unsigned char *dst = ef_buffer_data(j->out);
    for (JDIMENSION y = y0; y < y1; y++, dst += w * c) {
        JSAMPROW row = cmyk ? j->row : dst;
        if (jpeg_read_scanlines(d, &row, 1) != 1)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: truncated or corrupt JPEG data (in the "
                               "image data): row %u is missing",
                               what, (unsigned)y);
        if (cmyk && c == 3) {
            ef__image_cmyk_to_rgb(j->row, (size_t)w, dst);
        } else if (cmyk) {
            ef__image_cmyk_to_rgb(j->row, (size_t)w, j->row);
            ef__image_rgb_to_gray(j->row, (size_t)w, dst);
        }
    }
    return EF_OK;
}

/* Returned by run() when libjpeg failed: the message is in j->jerr. */
#define LIBJPEG_FAILED 1

/* The decoding itself; libjpeg's errors and warnings land at the setjmp
 * and come back as LIBJPEG_FAILED. */
static int run(job *j, const unsigned char *data, size_t size, int channels,
               const int64_t win[4], int f, const char *what, int64_t shape[3],
               int64_t inside[4], ef__err *err)
{
    struct jpeg_decompress_struct *d = &j->cinfo;
    if (setjmp(j->jerr.jump))
        return LIBJPEG_FAILED;
    jpeg_create_decompress(d);
    d->progress = &j->progress;
    jpeg_mem_src(d, data, (unsigned long)size);
    jpeg_read_header(d, TRUE);
    int cmyk =
        d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
    int c = channels ? channels : d->jpeg_color_space == JCS_GRAYSCALE ? 1 : 3;
    d->out_color_space = cmyk ? JCS_CMYK : c == 1 ? JCS_GRAYSCALE : JCS_EXT_RGB;
    d->scale_num = 1;
    d->scale_denom = (unsigned)f;
    jpeg_start_decompress(d);

    /* the window in scaled pixels; the columns to decode, with margins
     * (crop_margin) */
    int64_t wy0 = win[0] / f, wx0 = win[1] / f;
    int64_t wy1 = (win[0] + win[2] + f - 1) / f;
    int64_t wx1 = (win[1] + win[3] + f - 1) / f;
    int64_t mx = crop_margin(d);
    int64_t ow = d->output_width, oh = d->output_height;
    JDIMENSION x0 = (JDIMENSION)(wx0 > mx ? wx0 - mx : 0);
    JDIMENSION x1 = (JDIMENSION)(wx1 + mx < ow ? wx1 + mx : ow);
    /* no margin above: jpeg_skip_scanlines keeps the upsampler's context
     * rows (test_decode_window checks it) */
    JDIMENSION y0 = (JDIMENSION)wy0;
    JDIMENSION y1 = (JDIMENSION)(wy1 < oh ? wy1 : oh);
    JDIMENSION cw = x1 - x0;
    jpeg_crop_scanline(d, &x0, &cw); /* widens to iMCU columns */
    int rc = read_rows(j, y0, y1, c, cmyk, shape, what, err);
    if (rc != EF_OK)
        return rc;
    jpeg_abort_decompress(d); /* the rows below are not needed */
    scaled_window(win, f, oh, ow, inside);
    inside[0] -= y0;
    inside[1] -= x0;
    return EF_OK;
}

void ef__jpeg_window_covered(const int64_t win[4], int64_t h, int64_t w,
                             int64_t out_h, int64_t out_w, int64_t covered[4])
{
    int f = scale_factor(win, out_h, out_w);
    /* libjpeg's scaled size: jdiv_round_up(size, f) */
    scaled_window(win, f, (h + f - 1) / f, (w + f - 1) / f, covered);
    for (int i = 0; i < 4; i++)
        covered[i] *= f;
}

int ef__jpeg_decode_window(const unsigned char *data, size_t size, int channels,
                           ef__window_fn choose, void *user, int64_t out_h,
                           int64_t out_w, const char *what, ef_buffer **out,
                           int64_t shape[3], int64_t inside[4], ef__err *err)
{
    *out = NULL;
    int64_t h, w, win[4];
    int stored;
    int rc = ef__jpeg_probe(data, size, what, &h, &w, &stored, err);
    if (rc != EF_OK)
        return rc;
    choose(h, w, user, win);
    rc = ef__image_check_window(win, h, w, what, err);
    if (rc != EF_OK)
        return rc;
    job j;
    memset(&j, 0, sizeof j);
    j.cinfo.err = jpeg_std_error(&j.jerr.pub);
    j.jerr.pub.error_exit = on_error;
    j.jerr.pub.emit_message = on_message;
    j.progress.progress_monitor = on_progress;
    rc = run(&j, data, size, channels, win, scale_factor(win, out_h, out_w),
             what, shape, inside, err);
    jpeg_destroy_decompress(&j.cinfo);
    ef__free(j.row);
    if (rc == LIBJPEG_FAILED)
        rc = ef__err_set(err, j.jerr.nomem ? EF_ENOMEM : EF_EFORMAT,
                         "%s: %s (in the image data): libjpeg-turbo: %s", what,
                         j.jerr.nomem     ? "out of memory"
                         : j.jerr.warning ? "truncated or corrupt JPEG data"
                                          : "corrupt JPEG",
                         j.jerr.msg);
    if (rc != EF_OK) {
        ef_buffer_release(j.out);
        j.out = NULL;
    }
    *out = j.out;
    return rc;
}

#endif
