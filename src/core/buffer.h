/* Buffer internals: references taken and dropped several at a time. */
#ifndef EF_CORE_BUFFER_H
#define EF_CORE_BUFFER_H

#include "echoflow/echoflow.h"

/* n more references on b, in one atomic add (ef_buffer_retain n times). */
void ef__buffer_retain_n(ef_buffer *b, unsigned n);
/* Drops n references (ef_buffer_release n times); frees b with the last.
 * Accepts NULL and n == 0. */
void ef__buffer_release_n(ef_buffer *b, unsigned n);

#endif
