/* SPDX-License-Identifier: Apache-2.0 */
/* GIF through giflib: the first frame only, as PIL's Image.open() gives
 * it. The canvas is the logical screen (grown to hold the frame if it
 * reaches past it), filled with the frame's transparent index, or index
 * 0 without one; the frame's indices go where it says; the local colour
 * table, else the global one, maps indices to RGB, and an index past the
 * table is the gray of its value (PIL's default palette). A GIF without
 * any colour table, or whose table maps every index i to gray i (what
 * PIL writes for a gray image), is stored gray, as PIL reads it. Animation, disposal
 * and the other frames are ignored. */
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/alloc.h"
#include "core/buffer.h"

#ifdef EF_HAVE_GIF
#include <gif_lib.h>

typedef struct {
    const unsigned char *data;
    size_t size, at;
} source;

static int read_fn(GifFileType *gif, GifByteType *buf, int len)
{
    source *s = gif->UserData;
    size_t n = s->size - s->at < (size_t)len ? s->size - s->at : (size_t)len;
    memcpy(buf, s->data + s->at, n);
    s->at += n;
    return (int)n;
}

static int gif_failed(int e, const char *what, const char *step, ef__err *err)
{
    if (e == D_GIF_ERR_NOT_ENOUGH_MEM)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory in giflib (in "
                                           "the %s)",
                           what, step);
    const char *why = GifErrorString(e);
    return ef__err_set(err, EF_EFORMAT, "%s: %s GIF (in the %s): giflib: %s",
                       what,
                       e == D_GIF_ERR_READ_FAILED || e == D_GIF_ERR_EOF_TOO_SOON
                           ? "truncated"
                           : "corrupt",
                       step, why ? why : "unknown error");
}

/* The first frame's header, found after the extensions before it. */
typedef struct {
    GifFileType *gif;
    int transparent; /* an index, or -1 */
    int64_t h, w;    /* the canvas */
} first_frame;

static int skip_extension(GifFileType *gif, int *transparent)
{
    int code;
    GifByteType *ext;
    if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR)
        return GIF_ERROR;
    if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) {
        GraphicsControlBlock gcb;
        if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK)
            *transparent = gcb.TransparentColor;
    }
    while (ext)
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR)
            return GIF_ERROR;
    return GIF_OK;
}

/* Opens the GIF and reads up to the first frame's pixels; on success the
 * caller closes f->gif. */
static int open_first(source *s, const char *what, first_frame *f,
                      ef__err *err)
{
    int e = 0;
    f->transparent = NO_TRANSPARENT_COLOR;
    f->gif = DGifOpen(s, read_fn, &e);
    if (!f->gif)
        return gif_failed(e, what, "screen descriptor", err);
    GifRecordType type;
    for (;;) {
        if (DGifGetRecordType(f->gif, &type) == GIF_ERROR)
            break;
        if (type == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(f->gif) == GIF_ERROR)
                break;
            const GifImageDesc *d = &f->gif->Image;
            int64_t right = (int64_t)d->Left + d->Width,
                    bottom = (int64_t)d->Top + d->Height;
            f->w = right > f->gif->SWidth ? right : f->gif->SWidth;
            f->h = bottom > f->gif->SHeight ? bottom : f->gif->SHeight;
            int rc = ef__image_check_size(f->h, f->w, "GIF", what, err);
            if (rc != EF_OK)
                DGifCloseFile(f->gif, &e);
            return rc;
        }
        if (type == TERMINATE_RECORD_TYPE) {
            DGifCloseFile(f->gif, &e);
            return ef__err_set(err, EF_EFORMAT,
                               "%s: corrupt GIF: it ends before its first "
                               "image",
                               what);
        }
        if (type == EXTENSION_RECORD_TYPE &&
            skip_extension(f->gif, &f->transparent) == GIF_ERROR)
            break;
    }
    int rc = gif_failed(f->gif->Error, what, "records before the first image",
                        err);
    DGifCloseFile(f->gif, &e);
    return rc;
}

/* The frame's colour table, local or global; NULL when it has none or
 * one of grays i -> (i, i, i), whose indices are the pixels. */
static const ColorMapObject *colour_map(const GifFileType *gif)
{
    const ColorMapObject *map =
        gif->Image.ColorMap ? gif->Image.ColorMap : gif->SColorMap;
    for (int i = 0; map && i < map->ColorCount; i++) {
        const GifColorType *e = &map->Colors[i];
        if (e->Red != i || e->Green != i || e->Blue != i)
            return map;
    }
    return NULL;
}

int ef__gif_probe(const unsigned char *data, size_t size, const char *what,
                  int64_t *h, int64_t *w, int *c, ef__err *err)
{
    source s = {data, size, 0};
    first_frame f;
    int rc = open_first(&s, what, &f, err);
    if (rc != EF_OK)
        return rc;
    *h = f.h, *w = f.w;
    *c = colour_map(f.gif) ? 3 : 1;
    int e;
    DGifCloseFile(f.gif, &e);
    return EF_OK;
}

/* The frame's indices into the canvas `idx` (f->h x f->w). */
static int read_indices(const first_frame *f, unsigned char *idx,
                        const char *what, ef__err *err)
{
    const GifImageDesc *d = &f->gif->Image;
    memset(idx, f->transparent >= 0 ? f->transparent : 0,
           (size_t)(f->h * f->w));
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    if (d->Width <= 0 || d->Height <= 0)
        return EF_OK; /* an empty frame: the canvas alone */
    for (int pass = 0; pass < (d->Interlace ? 4 : 1); pass++) {
        int y0 = d->Interlace ? start[pass] : 0;
        int dy = d->Interlace ? step[pass] : 1;
        for (int y = y0; y < d->Height; y += dy) {
            unsigned char *row = idx + (size_t)(d->Top + y) * (size_t)f->w +
                                 (size_t)d->Left;
            if (DGifGetLine(f->gif, row, d->Width) == GIF_ERROR)
                return gif_failed(f->gif->Error, what, "image data", err);
        }
    }
    return EF_OK;
}

static void to_rgb(const unsigned char *idx, size_t pixels,
                   const ColorMapObject *map, unsigned char *dst)
{
    unsigned char pal[256][3];
    for (int i = 0; i < 256; i++) /* PIL's default palette: grays */
        pal[i][0] = pal[i][1] = pal[i][2] = (unsigned char)i;
    for (int i = 0; i < map->ColorCount && i < 256; i++) {
        pal[i][0] = map->Colors[i].Red;
        pal[i][1] = map->Colors[i].Green;
        pal[i][2] = map->Colors[i].Blue;
    }
    for (size_t i = 0; i < pixels; i++)
        memcpy(dst + 3 * i, pal[idx[i]], 3);
}

static int decode_frame(const first_frame *f, int channels, const char *what,
                        ef_buffer **out, int64_t shape[3], ef__err *err)
{
    const ColorMapObject *map = colour_map(f->gif);
    int native = map ? 3 : 1, c = channels ? channels : native;
    int rc = ef__image_alloc(f->h, f->w, c, what, out, shape, err);
    if (rc != EF_OK)
        return rc;
    size_t pixels = (size_t)(f->h * f->w);
    unsigned char *px = ef__image_scratch(*out, c, native, pixels);
    unsigned char *idx = map ? ef__malloc(pixels) : px;
    if (!px || !idx)
        rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory for GIF indices",
                         what);
    else
        rc = read_indices(f, idx, what, err);
    if (rc == EF_OK && map)
        to_rgb(idx, pixels, map, px);
    if (idx != px)
        ef__free(idx);
    return ef__image_convert_end(px, native, out, rc);
}

int ef__gif_decode(const unsigned char *data, size_t size, int channels,
                   const char *what, ef_buffer **out, int64_t shape[3],
                   ef__err *err)
{
    source s = {data, size, 0};
    first_frame f;
    int rc = open_first(&s, what, &f, err);
    if (rc != EF_OK)
        return rc;
    rc = decode_frame(&f, channels, what, out, shape, err);
    int e;
    DGifCloseFile(f.gif, &e);
    return rc;
}

#endif
