/* SPDX-License-Identifier: Apache-2.0 */
/* coco: object detection data as users have it, a COCO instances JSON
 * (`annotations`, a path or http(s) URL, gzip or plain) and its image
 * folder (`root`, a folder or URL prefix that COCO's file_name is
 * relative to). One sample per image, in the file's order:
 *
 *   <ext>     the image file's bytes, u8 [N], named by its lowercase
 *             extension as the files source names them (`| decode` works)
 *   boxes     f32 [n, 4]: x1, y1, x2, y2 in pixels (torchvision's xyxy),
 *             from COCO's x, y, w, h as x, y, x + w, y + h
 *   labels    i64 [n]: with labels=contiguous (the default) 0..K-1, the
 *             category's place among the categories in ascending id
 *             order; with labels=category COCO's category_id
 *   iscrowd   i64 [n], only with crowd=keep
 *   image_id  i64 scalar
 *   __key__, __url__   file_name without its extension, the path read
 *
 * boxes, labels and iscrowd are variable-length, so `batch` lays them out
 * ragged (a list per batch) as it does the encoded images.
 *
 * crowd=skip (the default) leaves out iscrowd annotations. A box of zero
 * or negative size, or one reaching out of its image, is refused with
 * boxes=refuse (the default), naming the file, the annotation, its
 * image's id and the field; boxes=clip clips it to the image and drops
 * it if nothing is left, counting both in the statistics. empty=keep
 * (the default) keeps the images left without a box, with boxes f32
 * [0, 4]; empty=drop leaves them out.
 *
 * The JSON is read and checked whole at open (codec/coco.h); what is kept
 * of it is an array per field, which samples view, so an image costs no
 * allocation but its file's bytes. Images are read when their sample is
 * made. An indexed source (indexed.h): a sample's identity is its place
 * among the images kept; shard=, first=, count=, checkpoints and fetch
 * are the kit's. */
#include <stdio.h>
#include <string.h>

#include "codec/coco.h"
#include "core/alloc.h"
#include "core/buffer.h"
#include "core/sample.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "stages/sources/files_list.h"
#include "stages/sources/indexed.h"
#include "stages/sources/stream_options.h"

typedef struct {
    ef__indexed ix; /* first: the kit's */
    ef__stream_opts sopts;
    int keep_empty, skip_crowd, contiguous, clip;
    /* once loaded: the kept images and what samples view */
    ef__file_list list;                /* url, key and field per kept image */
    ef_buffer *text;                   /* the list's strings */
    ef_buffer *boxes, *labels, *crowd; /* every kept box's, in image order */
    ef_buffer *ids;                    /* i64 image id per kept image */
    int64_t *first; /* kept image k's boxes: [first[k], first[k + 1]) */
    /* statistics, fixed at load */
    int64_t categories, crowd_skipped, clipped, dropped, empty_dropped;
} coco_state;

/* ---- reading the annotations ------------------------------------------ */

/* Reads all of `location` into *text (the caller's to free), *n bytes,
 * inflating gzip: in one allocation where its size is known, else growing
 * to the memory budget at most (more is EF_ENOMEM naming it). */
static int read_whole(const char *location, const ef__stream_opts *o,
                      const ef__budget *budget, char **text, size_t *n,
                      ef__err *err)
{
    ef__stream *s;
    int rc = ef__stream_open(&s, location, o, err);
    if (rc != EF_OK)
        return rc;
    char *data = NULL;
    size_t len = 0, cap = 0, got = 1;
    int64_t size = ef__stream_size(s); /* a local file's: one allocation */
    while (rc == EF_OK && got) {
        if (len == cap) {
            size_t c = cap                           ? cap * 2
                       : size >= 0 && size < 1 << 30 ? (size_t)size + 1
                                                     : (size_t)1 << 20;
            if (budget->limit && c > budget->limit)
                c = (size_t)budget->limit; /* grown to the budget at most */
            char *more = NULL;
            rc = ef__budget_check(budget, c > cap ? c : cap + 1, location, err);
            if (rc == EF_OK && !(more = ef__realloc(data, c)))
                rc = ef__err_set(err, EF_ENOMEM, "coco: %s: out of memory",
                                 location);
            if (more) {
                data = more;
                cap = c;
            }
        }
        if (rc == EF_OK)
            rc = ef__stream_read(s, data + len, cap - len, &got, err);
        len += rc == EF_OK ? got : 0;
    }
    ef__stream_close(s);
    if (rc != EF_OK) {
        ef__free(data);
        return rc;
    }
    *text = data;
    *n = len;
    return EF_OK;
}

/* What the kept boxes come to, gathered before they become buffers. */
typedef struct {
    float *boxes;
    int64_t *labels, *crowd, *ids, *first;
    size_t nboxes, nkept;
} kept;

/* Annotation a's box as x1, y1, x2, y2, judged against its image: EF_OK
 * and *keep = 1 to keep it (clipped with boxes=clip), *keep = 0 when
 * clipping leaves nothing, or the refusal. */
static int convert_box(coco_state *st, const char *file, const ef__coco *c,
                       const ef__coco_ann *a, float out[4], int *keep,
                       ef__err *err)
{
    const ef__coco_image *im = &c->images[a->image];
    const double *b = a->bbox;
    double w = (double)im->width, h = (double)im->height;
    double x1 = b[0], y1 = b[1], x2 = b[0] + b[2], y2 = b[1] + b[3];
    int empty = !(b[2] > 0 && b[3] > 0);
    int outside = x1 < 0 || y1 < 0 || x2 > w || y2 > h;
    *keep = 1;
    if ((empty || outside) && !st->clip) {
        char ids[48] = "";
        if (a->id >= 0)
            snprintf(ids, sizeof ids, " %lld", (long long)a->id);
        return ef__err_set(
            err, EF_EFORMAT,
            "coco: %s: annotation%s of image %lld (annotations[%zu], byte "
            "%zu): field 'bbox': [x, y, w, h] = [%g, %g, %g, %g] %s; "
            "boxes=clip clips boxes to the image and drops empty ones",
            file, ids, (long long)im->id, (size_t)(a - c->anns), a->at, b[0],
            b[1], b[2], b[3],
            empty     ? "has a width or height of zero or less"
            : outside ? "reaches out of its image"
                      : "");
    }
    if (outside) {
        x1 = x1 < 0 ? 0 : x1 > w ? w : x1;
        x2 = x2 < 0 ? 0 : x2 > w ? w : x2;
        y1 = y1 < 0 ? 0 : y1 > h ? h : y1;
        y2 = y2 < 0 ? 0 : y2 > h ? h : y2;
    }
    if (!(x2 > x1 && y2 > y1)) {
        *keep = 0;
        st->dropped++;
        return EF_OK;
    }
    st->clipped += outside;
    out[0] = (float)x1;
    out[1] = (float)y1;
    out[2] = (float)x2;
    out[3] = (float)y2;
    return EF_OK;
}

/* Image i's boxes, labels and crowd marks appended to k; *n the count. */
static int gather_image(coco_state *st, const char *file, const ef__coco *c,
                        size_t i, kept *k, size_t *n, ef__err *err)
{
    const ef__coco_image *im = &c->images[i];
    *n = 0;
    for (size_t j = im->first; j < im->first + im->n; j++) {
        const ef__coco_ann *a = &c->anns[c->ann_order[j]];
        if (a->iscrowd && st->skip_crowd) {
            st->crowd_skipped++;
            continue;
        }
        int keep;
        size_t at = k->nboxes;
        int rc = convert_box(st, file, c, a, &k->boxes[4 * at], &keep, err);
        if (rc != EF_OK)
            return rc;
        if (!keep)
            continue;
        k->labels[at] = st->contiguous ? (int64_t)a->category
                                       : c->categories[a->category].id;
        k->crowd[at] = a->iscrowd;
        k->nboxes++;
        (*n)++;
    }
    return EF_OK;
}

/* Joins root and a file name: "root/name", or the name alone. */
static int image_url(const char *root, const char *name, char *out, size_t cap,
                     ef__err *err)
{
    size_t r = strlen(root);
    while (r > 1 && root[r - 1] == '/')
        r--;
    int n = r ? snprintf(out, cap, "%.*s/%s", (int)r, root, name)
              : snprintf(out, cap, "%s", name);
    if (n < 0 || (size_t)n >= cap)
        return ef__err_set(err, EF_EFORMAT,
                           "coco: image '%s' under root '%s': a path over "
                           "%zu bytes",
                           name, root, cap - 1);
    return EF_OK;
}

/* Adds image i to the kept list: its path under root, its key (the
 * file name without its extension) and its field (the extension). */
static int add_image(coco_state *st, const ef__coco *c, size_t i,
                     const char *root, const char *file, ef__err *err)
{
    const char *name = ef__coco_string(c, c->images[i].file_name);
    char url[EF__COCO_MAX_NAME + 4096], where[EF__ERR_MAX / 2];
    int rc = image_url(root, name, url, sizeof url, err);
    if (rc != EF_OK)
        return rc;
    const char *slash = strrchr(name, '/'), *dot = strrchr(name, '.');
    size_t key_len =
        dot && (!slash || dot > slash) ? (size_t)(dot - name) : strlen(name);
    while (key_len && *name == '/') { /* keys are relative */
        name++;
        key_len--;
    }
    snprintf(where, sizeof where, "coco: %.200s: image %lld, field 'file_name'",
             file, (long long)c->images[i].id);
    return ef__file_list_add(&st->list, url, name, key_len, 0, where, err);
}

/* Moves n items of `size` bytes at data into a new buffer (data is
 * freed, whatever happens). */
static ef_buffer *to_buffer(void *data, size_t n, size_t size)
{
    ef_buffer *b = ef_buffer_new(n * size);
    if (b && n)
        memcpy(ef_buffer_data(b), data, n * size);
    ef__free(data);
    return b;
}

/* Builds the kept images and their boxes from the parsed file. */
static int keep_images(coco_state *st, const ef__coco *c, const char *root,
                       const char *file, ef__err *err)
{
    size_t na = c->nanns ? c->nanns : 1, ni = c->nimages + 1;
    kept k = {.boxes = ef__malloc(na * 4 * sizeof(float)),
              .labels = ef__malloc(na * sizeof(int64_t)),
              .crowd = ef__malloc(na * sizeof(int64_t)),
              .ids = ef__malloc(ni * sizeof(int64_t)),
              .first = ef__malloc(ni * sizeof(int64_t))};
    int rc = k.boxes && k.labels && k.crowd && k.ids && k.first
                 ? EF_OK
                 : ef__err_set(err, EF_ENOMEM, "coco: %s: out of memory", file);
    for (size_t i = 0; rc == EF_OK && i < c->nimages; i++) {
        size_t n, before = k.nboxes;
        rc = gather_image(st, file, c, i, &k, &n, err);
        if (rc == EF_OK && !n && !st->keep_empty) {
            st->empty_dropped++;
            continue;
        }
        k.first[k.nkept] = (int64_t)before;
        k.ids[k.nkept++] = c->images[i].id;
        if (rc == EF_OK)
            rc = add_image(st, c, i, root, file, err);
    }
    k.first[k.nkept] = (int64_t)k.nboxes;
    st->first = k.first;
    st->boxes = to_buffer(k.boxes, k.nboxes, 4 * sizeof(float));
    st->labels = to_buffer(k.labels, k.nboxes, sizeof(int64_t));
    st->crowd = to_buffer(k.crowd, k.nboxes, sizeof(int64_t));
    st->ids = to_buffer(k.ids, k.nkept, sizeof(int64_t));
    st->text = ef__file_list_seal(&st->list);
    if (rc == EF_OK &&
        !(st->boxes && st->labels && st->crowd && st->ids && st->text))
        rc = ef__err_set(err, EF_ENOMEM, "coco: %s: out of memory", file);
    return rc;
}

static void unload(coco_state *st)
{
    ef_buffer_release(st->boxes);
    ef_buffer_release(st->labels);
    ef_buffer_release(st->crowd);
    ef_buffer_release(st->ids);
    ef_buffer_release(st->text);
    ef__file_list_free(&st->list);
    ef__free(st->first);
    st->boxes = st->labels = st->crowd = st->ids = st->text = NULL;
    st->first = NULL;
    memset(&st->list, 0, sizeof st->list);
    st->crowd_skipped = st->clipped = st->dropped = st->empty_dropped = 0;
}

/* Reads and checks the annotations: the kit's load. */
static int coco_load(ef__stage *s, int64_t *records, ef__err *err)
{
    coco_state *st = s->state;
    const char *file = ef__opt_string(&s->opts, "annotations");
    char *text = NULL;
    size_t n = 0;
    ef__coco c;
    memset(&c, 0, sizeof c);
    int rc = read_whole(file, &st->sopts, &s->ctx->budget, &text, &n, err);
    if (rc == EF_OK)
        rc = ef__coco_parse(text, n, file, &c, err);
    ef__free(text);
    if (rc == EF_OK)
        rc = keep_images(st, &c, ef__opt_string(&s->opts, "root"), file, err);
    st->categories = (int64_t)c.ncategories;
    ef__coco_free(&c);
    if (rc != EF_OK)
        unload(st);
    *records = rc == EF_OK ? (int64_t)st->list.n : 0;
    return rc;
}

/* ---- samples ----------------------------------------------------------- */

/* Reads all of the file at url into *out. */
static int read_image(const ef__stage *s, const char *url, ef_buffer **out,
                      ef__err *err)
{
    const coco_state *st = s->state;
    ef__stream_opts o = st->sopts;
    o.compression = EF__COMP_NONE; /* an image is read as it is */
    o.regular_only = 1;
    o.cancelled = &s->ctx->cancelled;
    char *data = NULL;
    size_t n = 0;
    int rc = read_whole(url, &o, &s->ctx->budget, &data, &n, err);
    if (rc != EF_OK)
        return rc;
    *out = ef__buffer_adopt(data, n, ef__free, data);
    if (!*out) {
        ef__free(data);
        return ef__err_set(err, EF_ENOMEM, "coco: %s: out of memory", url);
    }
    return EF_OK;
}

/* Image k of pass `epoch`: its bytes read now, the rest views. */
static int make(const ef__stage *s, int64_t k, int64_t epoch, ef_sample **out,
                ef__err *err)
{
    const coco_state *st = s->state;
    const ef__file_entry *e = &st->list.v[k];
    const char *url = ef__file_url(&st->list, (size_t)k);
    ef_buffer *bytes;
    int rc = read_image(s, url, &bytes, err);
    if (rc != EF_OK)
        return rc;
    ef_sample *smp = ef_sample_new((ef_sample_id){.index = k, .epoch = epoch});
    int64_t b = st->first[k], n = st->first[k + 1] - b;
    int64_t shape[2] = {n, 4};
    rc = smp ? ef__sample_add_variable(
                   smp, ef__file_field(&st->list, (size_t)k), EF_U8,
                   (int64_t)ef_buffer_size(bytes), bytes, 0)
             : EF_ENOMEM;
    ef_buffer_release(bytes);
    if (rc == EF_OK)
        rc = ef_sample_add(smp, "boxes", EF_F32, 2, shape, st->boxes,
                           (size_t)b * 4 * sizeof(float));
    if (rc == EF_OK)
        rc = ef_sample_set_variable(smp, "boxes");
    if (rc == EF_OK)
        rc = ef__sample_add_variable(smp, "labels", EF_I64, n, st->labels,
                                     (size_t)b * sizeof(int64_t));
    if (rc == EF_OK && !st->skip_crowd)
        rc = ef__sample_add_variable(smp, "iscrowd", EF_I64, n, st->crowd,
                                     (size_t)b * sizeof(int64_t));
    if (rc == EF_OK)
        rc = ef_sample_add(smp, "image_id", EF_I64, 0, NULL, st->ids,
                           (size_t)k * sizeof(int64_t));
    if (rc == EF_OK)
        rc = ef__sample_add_variable(
            smp, "__key__", EF_U8,
            (int64_t)strlen(ef__file_key(&st->list, (size_t)k)), st->text,
            e->key);
    if (rc == EF_OK)
        rc = ef__sample_add_variable(smp, "__url__", EF_U8,
                                     (int64_t)strlen(url), st->text, e->url);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "coco: %s: cannot build a sample: %s", url,
                           ef_strerror(rc));
    }
    *out = smp;
    return EF_OK;
}

static void coco_stats(const ef__stage *s, ef_stage_stats *out)
{
    const coco_state *st = s->state;
    ef__stats_extra(out, "categories", (double)st->categories);
    ef__stats_extra(out, "boxes",
                    st->first ? (double)st->first[st->list.n] : 0);
    ef__stats_extra(out, "crowd_skipped", (double)st->crowd_skipped);
    ef__stats_extra(out, "boxes_clipped", (double)st->clipped);
    ef__stats_extra(out, "boxes_dropped", (double)st->dropped);
    ef__stats_extra(out, "empty_dropped", (double)st->empty_dropped);
}

/* ---- the stage --------------------------------------------------------- */

static const ef__indexed_ops coco_ops = {.load = coco_load,
                                         .make = make,
                                         .stats = coco_stats,
                                         .ranged = "annotations"};

static int coco_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    coco_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    int rc = ef__indexed_init(s, o, &coco_ops, err);
    if (rc == EF_OK && !ef__opt_string(o, "annotations")[0])
        rc = ef__err_set(err, EF_ESPEC,
                         "coco: option 'annotations' is empty: expected the "
                         "instances JSON's path or URL");
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "coco", "empty", "keep", "drop", &st->keep_empty,
                            err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "coco", "crowd", "skip", "keep", &st->skip_crowd,
                            err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "coco", "labels", "contiguous", "category",
                            &st->contiguous, err);
    int refuse = 1;
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "coco", "boxes", "refuse", "clip", &refuse, err);
    st->clip = !refuse;
    ef__stream_opts_from(o, &st->sopts);
    return rc;
}

static void coco_destroy(ef__stage *s)
{
    coco_state *st = s->state;
    if (st)
        unload(st);
    ef__free(st);
}

static const ef__option_def coco_options[] = {
    EF__OPT("annotations", EF_OPT_STRING, NULL,
            "COCO instances JSON, a path or http(s) URL, gzip or plain", 0, 0),
    EF__OPT("root", EF_OPT_STRING, "",
            "folder or URL prefix the images' file_name is relative to", 0, 0),
    EF__OPT("empty", EF_OPT_STRING, "keep",
            "keep|drop: images without a box (boxes f32 [0, 4])", 0, 0),
    EF__OPT("crowd", EF_OPT_STRING, "skip",
            "skip|keep: iscrowd annotations (keep adds an iscrowd field)", 0,
            0),
    EF__OPT("labels", EF_OPT_STRING, "contiguous",
            "contiguous|category: 0..K-1 in category id order, or category_id",
            0, 0),
    EF__OPT("boxes", EF_OPT_STRING, "refuse",
            "refuse|clip: boxes empty or reaching out of the image", 0, 0),
    EF__INDEXED_RANGE_OPTIONS,
    EF__SHARD_OPTION,
    EF__STREAM_OPTIONS,
};

const ef__stage_def ef__stage_coco = {
    .info = {"coco",
             "COCO instances JSON and its images: boxes (xyxy), labels, "
             "image_id",
             EF__OPTIONS(coco_options)},
    EF__INDEXED_STAGE_OPS,
    .create = coco_create,
    .destroy = coco_destroy,
};
