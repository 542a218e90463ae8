/* SPDX-License-Identifier: Apache-2.0 */
/* COCO instances annotations (coco.h): a walk over the JSON that keeps
 * the fields a detection source needs, then the checks and indexes that
 * tie annotations to their images and categories. */
#include "codec/coco.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/json_reader.h"
#include "core/alloc.h"

/* A key's text is at most this long where it is one we read. */
#define KEY_MAX 32

typedef struct {
    ef__json_reader j;
    const char *name;
    ef__coco *c;
    size_t cap_images, cap_anns, cap_categories;
} parser;

/* What one object of images[] or annotations[] got wrong: the first
 * problem found, reported once the object is read, when its ids (which
 * may come after the bad field) are known. */
typedef struct {
    unsigned seen; /* bit per field read */
    char field[KEY_MAX];
    char problem[160];
} check;

static void note(check *k, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note(check *k, const char *field, const char *fmt, ...)
{
    if (k->field[0])
        return; /* the first problem is the one told */
    snprintf(k->field, sizeof k->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->problem, sizeof k->problem, fmt, ap);
    va_end(ap);
}

static const char *kind_name(ef__json_kind kind)
{
    static const char *const names[] = {"null",     "a boolean", "a number",
                                        "a string", "an array",  "an object"};
    return names[kind];
}

/* Grows array *v of *cap items of `size` bytes to hold n + 1. */
static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return EF_OK;
    size_t c = *cap ? *cap * 2 : 64;
    void *more = c <= SIZE_MAX / size ? ef__realloc(*v, c * size) : NULL;
    if (!more)
        return EF_ENOMEM;
    *v = more;
    *cap = c;
    return EF_OK;
}

/* Appends text (len bytes and a NUL) to the strings; *at its offset. */
static int put_string(ef__coco *c, const char *text, size_t len, size_t *at)
{
    while (c->strings_cap - c->strings_len < len + 1) {
        size_t cap = c->strings_cap ? c->strings_cap * 2 : 1 << 16;
        char *more = ef__realloc(c->strings, cap);
        if (!more)
            return EF_ENOMEM;
        c->strings = more;
        c->strings_cap = cap;
    }
    memcpy(c->strings + c->strings_len, text, len);
    c->strings[c->strings_len + len] = '\0';
    *at = c->strings_len;
    c->strings_len += len + 1;
    return EF_OK;
}

static int no_memory(const parser *p, ef__err *err)
{
    return ef__err_set(err, EF_ENOMEM, "coco: %s: out of memory", p->name);
}

/* Whether the value of field `field` (bit `bit` of k->seen) is to be
 * read as `want`: not when the field came before, or the value is of
 * another kind, which are noted and the value skipped (*read = 0). */
static int want_kind(parser *p, check *k, const char *field, unsigned bit,
                     ef__json_kind want, const char *wanted, int *read,
                     ef__err *err)
{
    ef__json_kind kind;
    int rc = ef__json_peek(&p->j, &kind, err);
    if (rc != EF_OK)
        return rc;
    *read = 0;
    if (k->seen & bit)
        note(k, field, "given twice");
    else if (kind != want)
        note(k, field, "expected %s, got %s", wanted, kind_name(kind));
    else
        *read = 1;
    k->seen |= bit;
    return *read ? EF_OK : ef__json_skip(&p->j, err);
}

/* Reads integer field `field`; `where` names the object in messages of
 * the reader (a number out of range). */
static int read_int(parser *p, check *k, const char *field, unsigned bit,
                    const char *where, int64_t *out, ef__err *err)
{
    int read;
    int rc =
        want_kind(p, k, field, bit, EF__JSON_NUMBER, "an integer", &read, err);
    if (rc != EF_OK || !read)
        return rc;
    char what[96];
    snprintf(what, sizeof what, "%s, field '%s'", where, field);
    return ef__json_int(&p->j, what, out, err);
}

/* Reads string field `field` into the strings; *at its offset. */
static int read_name(parser *p, check *k, const char *field, unsigned bit,
                     const char *where, size_t *at, ef__err *err)
{
    int read;
    int rc =
        want_kind(p, k, field, bit, EF__JSON_STRING, "a string", &read, err);
    if (rc != EF_OK || !read)
        return rc;
    char text[EF__COCO_MAX_NAME];
    char what[96];
    size_t len;
    snprintf(what, sizeof what, "%s, field '%s'", where, field);
    rc = ef__json_text(&p->j, what, text, sizeof text, &len, err);
    if (rc == EF_OK && !len)
        note(k, field, "expected a name, got an empty string");
    if (rc == EF_OK && put_string(p->c, text, len, at) != EF_OK)
        rc = no_memory(p, err);
    return rc;
}

/* Reads a bbox: an array of 4 numbers. */
static int read_bbox(parser *p, check *k, unsigned bit, const char *where,
                     double box[4], ef__err *err)
{
    int read, more = 1;
    int rc =
        want_kind(p, k, "bbox", bit, EF__JSON_ARRAY, "an array", &read, err);
    if (rc != EF_OK || !read)
        return rc;
    char what[96];
    snprintf(what, sizeof what, "%s, field 'bbox'", where);
    size_t count = 0;
    rc = ef__json_array(&p->j, what, err);
    while (rc == EF_OK &&
           (rc = ef__json_next_item(&p->j, &more, err)) == EF_OK && more) {
        ef__json_kind kind;
        rc = ef__json_peek(&p->j, &kind, err);
        if (rc == EF_OK && kind == EF__JSON_NUMBER && count < 4)
            rc = ef__json_number(&p->j, what, &box[count], err);
        else if (rc == EF_OK) {
            if (kind != EF__JSON_NUMBER)
                note(k, "bbox",
                     "expected 4 numbers [x, y, w, h], got %s "
                     "at [%zu]",
                     kind_name(kind), count);
            rc = ef__json_skip(&p->j, err);
        }
        count++;
    }
    if (rc == EF_OK && count != 4)
        note(k, "bbox", "expected 4 numbers [x, y, w, h], got %zu", count);
    return rc;
}

enum { F_ID = 1, F_FILE = 2, F_WIDTH = 4, F_HEIGHT = 8 };

/* Reads images[i]. */
static int read_image(parser *p, size_t i, ef__err *err)
{
    ef__coco *c = p->c;
    if (grow((void **)&c->images, &p->cap_images, c->nimages,
             sizeof *c->images) != EF_OK)
        return no_memory(p, err);
    ef__coco_image *im = &c->images[c->nimages];
    memset(im, 0, sizeof *im);
    check k = {0};
    char where[64], key[KEY_MAX];
    snprintf(where, sizeof where, "images[%zu]", i);
    int more = 1;
    int rc = ef__json_object(&p->j, where, err);
    size_t at = ef__json_offset(&p->j) - 1; /* its '{' */
    while (rc == EF_OK &&
           (rc = ef__json_next_key(&p->j, key, sizeof key, &more, err)) ==
               EF_OK &&
           more) {
        if (!strcmp(key, "id"))
            rc = read_int(p, &k, key, F_ID, where, &im->id, err);
        else if (!strcmp(key, "file_name"))
            rc = read_name(p, &k, key, F_FILE, where, &im->file_name, err);
        else if (!strcmp(key, "width"))
            rc = read_int(p, &k, key, F_WIDTH, where, &im->width, err);
        else if (!strcmp(key, "height"))
            rc = read_int(p, &k, key, F_HEIGHT, where, &im->height, err);
        else
            rc = ef__json_skip(&p->j, err);
    }
    if (rc != EF_OK)
        return rc;
    static const char *const names[] = {"id", "file_name", "width", "height"};
    for (int f = 0; f < 4; f++)
        if (!(k.seen & (1u << f)))
            note(&k, names[f], "missing");
    if (!k.field[0] && (im->width <= 0 || im->height <= 0))
        note(&k, im->width <= 0 ? "width" : "height",
             "expected a positive integer, got %lld",
             (long long)(im->width <= 0 ? im->width : im->height));
    if (!k.field[0]) {
        c->nimages++;
        return EF_OK;
    }
    if (k.seen & F_ID && strcmp(k.field, "id"))
        return ef__err_set(err, EF_EFORMAT,
                           "coco: %s: image %lld (images[%zu], byte %zu): "
                           "field '%s': %s",
                           p->name, (long long)im->id, i, at, k.field,
                           k.problem);
    return ef__err_set(err, EF_EFORMAT,
                       "coco: %s: images[%zu] (byte %zu): field '%s': %s",
                       p->name, i, at, k.field, k.problem);
}

enum { A_ID = 1, A_IMAGE = 2, A_BBOX = 4, A_CATEGORY = 8, A_CROWD = 16 };

/* The message about annotation i's field, with the ids it has. */
static int bad_ann(const parser *p, const ef__coco_ann *a, size_t i,
                   const check *k, ef__err *err)
{
    char ids[96] = "";
    int n = 0;
    if (k->seen & A_ID && strcmp(k->field, "id"))
        n = snprintf(ids, sizeof ids, " %lld", (long long)a->id);
    if (k->seen & A_IMAGE && strcmp(k->field, "image_id"))
        snprintf(ids + n, sizeof ids - (size_t)n, " of image %lld",
                 (long long)a->image_id);
    return ef__err_set(err, EF_EFORMAT,
                       "coco: %s: annotation%s (annotations[%zu], byte %zu): "
                       "field '%s': %s",
                       p->name, ids, i, a->at, k->field, k->problem);
}

/* Reads annotations[i]. */
static int read_ann(parser *p, size_t i, ef__err *err)
{
    ef__coco *c = p->c;
    if (grow((void **)&c->anns, &p->cap_anns, c->nanns, sizeof *c->anns) !=
        EF_OK)
        return no_memory(p, err);
    ef__coco_ann *a = &c->anns[c->nanns];
    memset(a, 0, sizeof *a);
    a->id = -1;
    a->at = ef__json_offset(&p->j);
    check k = {0};
    char where[64], key[KEY_MAX];
    snprintf(where, sizeof where, "annotations[%zu]", i);
    int64_t crowd = 0;
    int more = 1;
    int rc = ef__json_object(&p->j, where, err);
    if (rc == EF_OK)
        a->at = ef__json_offset(&p->j) - 1; /* its '{', past whitespace */
    while (rc == EF_OK &&
           (rc = ef__json_next_key(&p->j, key, sizeof key, &more, err)) ==
               EF_OK &&
           more) {
        if (!strcmp(key, "id"))
            rc = read_int(p, &k, key, A_ID, where, &a->id, err);
        else if (!strcmp(key, "image_id"))
            rc = read_int(p, &k, key, A_IMAGE, where, &a->image_id, err);
        else if (!strcmp(key, "bbox"))
            rc = read_bbox(p, &k, A_BBOX, where, a->bbox, err);
        else if (!strcmp(key, "category_id"))
            rc = read_int(p, &k, key, A_CATEGORY, where, &a->category_id, err);
        else if (!strcmp(key, "iscrowd"))
            rc = read_int(p, &k, key, A_CROWD, where, &crowd, err);
        else
            rc = ef__json_skip(&p->j, err);
    }
    if (rc != EF_OK)
        return rc;
    if (!(k.seen & A_IMAGE))
        note(&k, "image_id", "missing");
    if (!(k.seen & A_BBOX))
        note(&k, "bbox", "missing");
    if (!(k.seen & A_CATEGORY))
        note(&k, "category_id", "missing");
    if (crowd != 0 && crowd != 1)
        note(&k, "iscrowd", "expected 0 or 1, got %lld", (long long)crowd);
    if (k.field[0])
        return bad_ann(p, a, i, &k, err);
    a->iscrowd = (int)crowd;
    c->nanns++;
    return EF_OK;
}

/* Reads categories[i]: its id and name (optional). */
static int read_category(parser *p, size_t i, ef__err *err)
{
    ef__coco *c = p->c;
    if (grow((void **)&c->categories, &p->cap_categories, c->ncategories,
             sizeof *c->categories) != EF_OK)
        return no_memory(p, err);
    ef__coco_category *cat = &c->categories[c->ncategories];
    check k = {0};
    char where[64], key[KEY_MAX];
    snprintf(where, sizeof where, "categories[%zu]", i);
    size_t at = ef__json_offset(&p->j);
    int more = 1, rc = put_string(c, "", 0, &cat->name) == EF_OK
                           ? ef__json_object(&p->j, where, err)
                           : no_memory(p, err);
    while (rc == EF_OK &&
           (rc = ef__json_next_key(&p->j, key, sizeof key, &more, err)) ==
               EF_OK &&
           more) {
        if (!strcmp(key, "id"))
            rc = read_int(p, &k, key, F_ID, where, &cat->id, err);
        else if (!strcmp(key, "name"))
            rc = read_name(p, &k, key, F_FILE, where, &cat->name, err);
        else
            rc = ef__json_skip(&p->j, err);
    }
    if (rc == EF_OK && !(k.seen & F_ID))
        note(&k, "id", "missing");
    if (rc == EF_OK && k.field[0])
        rc = ef__err_set(err, EF_EFORMAT,
                         "coco: %s: categories[%zu] (byte %zu): field '%s': "
                         "%s",
                         p->name, i, at, k.field, k.problem);
    if (rc == EF_OK)
        c->ncategories++;
    return rc;
}

/* Reads the array of top-level key `key`, each item with `one`. */
static int read_array(parser *p, const char *key,
                      int (*one)(parser *, size_t, ef__err *), ef__err *err)
{
    int more = 1;
    int rc = ef__json_array(&p->j, key, err);
    for (size_t i = 0;
         rc == EF_OK && (rc = ef__json_next_item(&p->j, &more, err)) == EF_OK &&
         more;
         i++)
        rc = one(p, i, err);
    return rc;
}

/* Reads the top-level object. */
static int read_top(parser *p, ef__err *err)
{
    static const char *const keys[] = {"images", "annotations", "categories"};
    int (*const readers[])(parser *, size_t, ef__err *) = {read_image, read_ann,
                                                           read_category};
    unsigned seen = 0;
    char key[KEY_MAX];
    int more = 1;
    int rc = ef__json_object(&p->j, "the document", err);
    while (rc == EF_OK &&
           (rc = ef__json_next_key(&p->j, key, sizeof key, &more, err)) ==
               EF_OK &&
           more) {
        int f = 0;
        while (f < 3 && strcmp(key, keys[f]))
            f++;
        if (f == 3) {
            rc = ef__json_skip(&p->j, err);
            continue;
        }
        if (seen & (1u << f))
            return ef__err_set(err, EF_EFORMAT,
                               "coco: %s: byte %zu: key '%s' given twice",
                               p->name, ef__json_offset(&p->j), key);
        seen |= 1u << f;
        rc = read_array(p, key, readers[f], err);
    }
    if (rc == EF_OK)
        rc = ef__json_finish(&p->j, err);
    if (rc == EF_OK && !(seen & 1))
        rc = ef__err_set(err, EF_EFORMAT,
                         "coco: %s: no 'images' array: expected COCO "
                         "annotations (images, annotations, categories)",
                         p->name);
    if (rc != EF_OK && err && strncmp(err->msg, "coco: ", 6))
        ef__err_prefix(err, "coco"); /* the reader's own messages */
    return rc;
}

/* ---- indexes ---------------------------------------------------------- */

typedef struct {
    int64_t id;
    size_t index;
} id_index;

static int by_id(const void *a, const void *b)
{
    int64_t x = ((const id_index *)a)->id, y = ((const id_index *)b)->id;
    if (x != y)
        return x < y ? -1 : 1;
    size_t i = ((const id_index *)a)->index, j = ((const id_index *)b)->index;
    return i < j ? -1 : i > j;
}

static int category_by_id(const void *a, const void *b)
{
    int64_t x = ((const ef__coco_category *)a)->id;
    int64_t y = ((const ef__coco_category *)b)->id;
    return x < y ? -1 : x > y;
}

/* The index of id in sorted v[0, n), or -1. */
static int64_t find(const id_index *v, size_t n, int64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].id == id ? (int64_t)v[lo].index : -1;
}

/* Resolves every annotation's image and category, refusing ids given
 * twice and ids not there, and groups the annotations by image. */
static int build_indexes(parser *p, ef__err *err)
{
    ef__coco *c = p->c;
    if (c->ncategories > 1) /* none: no array to sort */
        qsort(c->categories, c->ncategories, sizeof *c->categories,
              category_by_id);
    for (size_t k = 1; k < c->ncategories; k++)
        if (c->categories[k].id == c->categories[k - 1].id)
            return ef__err_set(err, EF_EFORMAT,
                               "coco: %s: category id %lld given twice in "
                               "'categories'",
                               p->name, (long long)c->categories[k].id);
    size_t n = c->nimages > c->ncategories ? c->nimages : c->ncategories;
    id_index *ids = ef__malloc((n ? n : 1) * sizeof *ids);
    id_index *cats =
        ef__malloc((c->ncategories ? c->ncategories : 1) * sizeof *cats);
    size_t *count = ef__calloc(c->nimages + 1, sizeof *count);
    c->ann_order = ef__malloc((c->nanns ? c->nanns : 1) * sizeof(size_t));
    int rc = ids && cats && count && c->ann_order ? EF_OK : no_memory(p, err);
    for (size_t k = 0; rc == EF_OK && k < c->ncategories; k++)
        cats[k] = (id_index){c->categories[k].id, k};
    for (size_t i = 0; rc == EF_OK && i < c->nimages; i++)
        ids[i] = (id_index){c->images[i].id, i};
    if (rc == EF_OK)
        qsort(ids, c->nimages, sizeof *ids, by_id);
    for (size_t i = 1; rc == EF_OK && i < c->nimages; i++)
        if (ids[i].id == ids[i - 1].id)
            rc = ef__err_set(err, EF_EFORMAT,
                             "coco: %s: image id %lld given twice (images[%zu] "
                             "and images[%zu])",
                             p->name, (long long)ids[i].id, ids[i - 1].index,
                             ids[i].index);
    for (size_t a = 0; rc == EF_OK && a < c->nanns; a++) {
        ef__coco_ann *an = &c->anns[a];
        int64_t im = find(ids, c->nimages, an->image_id);
        int64_t cat = find(cats, c->ncategories, an->category_id);
        check k = {.seen = (an->id >= 0 ? A_ID : 0) | A_IMAGE};
        if (im < 0)
            note(&k, "image_id", "image %lld is not in 'images'",
                 (long long)an->image_id);
        else if (cat < 0)
            note(&k, "category_id", "category %lld is not in 'categories'",
                 (long long)an->category_id);
        if (k.field[0])
            rc = bad_ann(p, an, a, &k, err);
        else {
            an->image = (size_t)im;
            an->category = (size_t)cat;
            count[im]++;
        }
    }
    for (size_t i = 0, at = 0; rc == EF_OK && i < c->nimages; i++) {
        c->images[i].first = at;
        at += count[i];
        count[i] = c->images[i].first; /* now: where the next one goes */
    }
    for (size_t a = 0; rc == EF_OK && a < c->nanns; a++)
        c->ann_order[count[c->anns[a].image]++] = a;
    for (size_t i = 0; rc == EF_OK && i < c->nimages; i++)
        c->images[i].n = count[i] - c->images[i].first;
    ef__free(ids);
    ef__free(cats);
    ef__free(count);
    return rc;
}

int ef__coco_parse(const char *text, size_t n, const char *name, ef__coco *out,
                   ef__err *err)
{
    memset(out, 0, sizeof *out);
    parser p = {.name = name, .c = out};
    ef__json_reader_init(&p.j, text, n, name);
    int rc = read_top(&p, err);
    return rc == EF_OK ? build_indexes(&p, err) : rc;
}

void ef__coco_free(ef__coco *c)
{
    ef__free(c->images);
    ef__free(c->anns);
    ef__free(c->ann_order);
    ef__free(c->categories);
    ef__free(c->strings);
    memset(c, 0, sizeof *c);
}
