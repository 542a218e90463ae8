/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the JSON pull reader (src/codec/json_reader.c) and the
 * COCO annotations reader on it (src/codec/coco.c).
 *
 * Each input is one whole file, walked twice: skipped as one JSON value,
 * then read as COCO annotations. A failure must be EF_EFORMAT (or
 * EF_ENOMEM) with a message naming the file; a file read as COCO must
 * also be valid JSON, and its indexes must hold together: every
 * annotation's image and category within their arrays, the images'
 * annotation ranges covering ann_order exactly once, the categories in
 * ascending id order. Any violation aborts. */
#include <stdlib.h>
#include <string.h>

#include "codec/coco.h"
#include "codec/json_reader.h"
#include "fuzz.h"

static int skip_all(const uint8_t *data, size_t size)
{
    ef__json_reader j;
    ef__err err;
    ef__err_clear(&err);
    ef__json_reader_init(&j, (const char *)data, size, "fuzz.json");
    int rc = ef__json_skip(&j, &err);
    if (rc == EF_OK)
        rc = ef__json_finish(&j, &err);
    CHECK(rc == EF_OK || rc == EF_EFORMAT);
    if (rc != EF_OK)
        fuzz_check_message(err.msg, sizeof err.msg, "fuzz.json");
    return rc;
}

static void check_indexes(const ef__coco *c)
{
    size_t total = 0;
    for (size_t k = 1; k < c->ncategories; k++)
        CHECK(c->categories[k - 1].id < c->categories[k].id);
    for (size_t i = 0; i < c->nimages; i++) {
        const ef__coco_image *im = &c->images[i];
        CHECK(im->first == total && im->width > 0 && im->height > 0);
        CHECK(im->file_name < c->strings_len);
        for (size_t j = im->first; j < im->first + im->n; j++) {
            CHECK(c->ann_order[j] < c->nanns);
            const ef__coco_ann *a = &c->anns[c->ann_order[j]];
            CHECK(a->image == i && a->image_id == im->id);
            CHECK(a->category < c->ncategories);
            CHECK(c->categories[a->category].id == a->category_id);
        }
        total += im->n;
    }
    CHECK(total == c->nanns);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int json = skip_all(data, size);
    ef__coco c;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__coco_parse((const char *)data, size, "fuzz.json", &c, &err);
    CHECK(rc == EF_OK || rc == EF_EFORMAT || rc == EF_ENOMEM);
    if (rc != EF_OK)
        fuzz_check_message(err.msg, sizeof err.msg, "fuzz.json");
    else {
        CHECK(json == EF_OK);
        check_indexes(&c);
    }
    ef__coco_free(&c);
    return 0;
}
