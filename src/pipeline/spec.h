/* SPDX-License-Identifier: Apache-2.0 */
/* The text spec: "NAME[:OPT[,OPT...]] | NAME ...". */
#ifndef EF_PIPELINE_SPEC_H
#define EF_PIPELINE_SPEC_H

#include <stddef.h>

#include "core/err.h"

typedef struct {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    const char *opts; /* text after ':', may be empty */
    size_t opts_len;
    int position; /* 1-based, for messages */
} ef__spec_stage;

/* Narrows [*s, *s + *len) to drop leading and trailing white space. */
void ef__trim(const char **s, size_t *len);

/* Calls `fn` for each stage of `spec` in order; stops at the first error
 * (from the syntax or from fn). Double quotes protect '|' and ','. */
int ef__spec_parse(const char *spec,
                   int (*fn)(void *arg, const ef__spec_stage *st, ef__err *err),
                   void *arg, ef__err *err);

#endif
