/* Sample internals: a fixed array of fields, each a view into a
 * reference-counted buffer. Samples are small and copied by value when
 * cloned; payload bytes are shared. */
#ifndef EF_CORE_SAMPLE_H
#define EF_CORE_SAMPLE_H

#include "echoflow/echoflow.h"

typedef struct {
    char name[EF_MAX_NAME];
    ef_dtype dtype;
    int ndim;
    int64_t shape[EF_MAX_DIMS];
    ef_buffer *buf; /* owned reference */
    size_t offset;
    size_t nbytes;
} ef__field;

struct ef_sample {
    ef_sample_id id;
    int nfields;
    ef__field fields[EF_MAX_FIELDS];
};

/* Index of the field called `name`, or -1. */
int ef__sample_find(const ef_sample *s, const char *name);
/* Number of elements of a shape (1 for ndim 0). */
int64_t ef__shape_count(int ndim, const int64_t *shape);
/* Writes "[28,28]" into buf. */
void ef__shape_format(char *buf, size_t cap, int ndim, const int64_t *shape);

#endif
