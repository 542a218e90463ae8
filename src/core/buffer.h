/* SPDX-License-Identifier: Apache-2.0 */
/* Buffer internals: references taken and dropped several at a time, and
 * the reuse of large buffers (buffer.c). */
#ifndef EF_CORE_BUFFER_H
#define EF_CORE_BUFFER_H

#include "echoflow/echoflow.h"

/* Like ef_buffer_wrap, for memory echoflow allocated itself and hands
 * over: nobody outside holds it, so the buffer is not borrowed
 * (ef_buffer_is_borrowed) and may be handed out for writing. */
ef_buffer *ef__buffer_adopt(void *data, size_t size,
                            void (*release)(void *user), void *user);
/* n more references on b, in one atomic add (ef_buffer_retain n times). */
void ef__buffer_retain_n(ef_buffer *b, unsigned n);
/* Drops n references (ef_buffer_release n times); frees b with the last.
 * Accepts NULL and n == 0. */
void ef__buffer_release_n(ef_buffer *b, unsigned n);

/* Large owned buffers freed are kept for reuse from this size up; the
 * number kept at the most (0 in address sanitizer builds). */
#define EF__BUFFER_LARGE ((size_t)128 << 10)
int ef__buffer_keep_max(void);

#endif
