/* SPDX-License-Identifier: Apache-2.0 */
/* COCO instances annotations (instances_*.json): the images, their
 * annotations' boxes and the categories, read from the JSON with the pull
 * reader (json_reader.h), so a 450 MB file is walked without a tree.
 *
 * Read: images[] {id, file_name, width, height}, annotations[] {id,
 * image_id, bbox, category_id, iscrowd}, categories[] {id, name}; every
 * other key (info, licenses, segmentation, area ...) is checked as JSON
 * and skipped. `annotations` and `categories` may be absent (an image
 * info file); `images` may not.
 *
 * Checked, with a message naming the file, the image or annotation (its
 * id, its image's id, its place in its array and its byte offset) and the
 * field: a missing field, a value of the wrong type, a key given twice, a
 * bbox that is not 4 numbers, an image id or category id given twice, an
 * annotation naming an image or category that is not there, a width or
 * height that is not positive, iscrowd other than 0 or 1. The box itself
 * (its size, its place in the image) is the caller's to judge. */
#ifndef EF_CODEC_COCO_H
#define EF_CODEC_COCO_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct {
    int64_t id, width, height;
    size_t file_name; /* offset of its NUL-ended text in `strings` */
    size_t first, n;  /* its annotations: ann_order[first, first + n) */
} ef__coco_image;

typedef struct {
    int64_t id; /* -1 when the file gives none */
    int64_t image_id, category_id;
    double bbox[4]; /* COCO's x, y, w, h, as written */
    int iscrowd;
    size_t image;    /* index in images[] */
    size_t category; /* index in categories[], which are in id order */
    size_t at;       /* byte offset of its object */
} ef__coco_ann;

typedef struct {
    int64_t id;
    size_t name; /* offset of its NUL-ended text in `strings` */
} ef__coco_category;

typedef struct {
    ef__coco_image *images; /* in the file's order */
    size_t nimages;
    ef__coco_ann *anns; /* in the file's order */
    size_t nanns;
    size_t *ann_order; /* annotations by image, each image's in file order */
    /* sorted by id: category k is contiguous label k */
    ef__coco_category *categories;
    size_t ncategories;
    char *strings;
    size_t strings_len, strings_cap;
} ef__coco;

/* The longest file_name and category name read, in bytes. */
#define EF__COCO_MAX_NAME 4096

/* Reads text[0, n), named `name` in messages, into *out (zeroed first;
 * the caller frees it with ef__coco_free, failure or not). EF_EFORMAT
 * for anything the header says is checked, EF_ENOMEM. */
int ef__coco_parse(const char *text, size_t n, const char *name, ef__coco *out,
                   ef__err *err);
void ef__coco_free(ef__coco *c);

static inline const char *ef__coco_string(const ef__coco *c, size_t at)
{
    return c->strings + at;
}

#endif
