/* SPDX-License-Identifier: Apache-2.0 */
/* Lists of paths or URLs for sources that read many files: the text is
 * split at white space and each word is brace-expanded the way shells and
 * WebDataset write shard lists:
 *     "shards/train-{000000..000099}.tar"  numeric range; zero padding
 *                                          from the wider bound when a
 *                                          bound has a leading zero
 *     "{train,val}/part-{0..3}.tfrecord"   alternatives, and products
 *     "{a,b{1..2}}"                        nesting (a b1 b2)
 * Ranges may run downwards ({9..0}). A '{' without its '}', a '}' without
 * its '{', an empty group, and a group that is neither a list nor a range
 * are errors naming the word. */
#ifndef EF_IO_PATHS_H
#define EF_IO_PATHS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* At most this many names in one list, and this many bytes of names. */
#define EF__PATHS_MAX_NAMES 1000000
#define EF__PATHS_MAX_BYTES ((uint64_t)64 << 20)

typedef struct {
    char **names; /* n NUL-terminated names, in order */
    size_t n;
} ef__paths;

/* Name i of the list, or NULL when it has none: a sample's part, for
 * messages. */
static inline const char *ef__paths_at(const ef__paths *p, int64_t i)
{
    return i >= 0 && (size_t)i < p->n ? p->names[i] : NULL;
}

/* Checks the syntax and the caps and counts the names without building
 * them: *n names taking *bytes bytes, NULs included (`bytes` may be NULL).
 * `what` names the list in messages ("tar: option 'urls'"). */
int ef__paths_count(const char *text, const char *what, size_t *n,
                    size_t *bytes, ef__err *err);

/* Builds the names (after the same checks). The caller owns *out
 * (ef__paths_free). */
int ef__paths_expand(const char *text, const char *what, ef__paths *out,
                     ef__err *err);

/* Frees the names; accepts an empty list. */
void ef__paths_free(ef__paths *p);

#endif
