/* SPDX-License-Identifier: Apache-2.0 */
/* Detailed error messages that travel with a status code.
 *
 * Every internal call that can fail takes an ef__err *: the callee fills it
 * (status plus a message naming file, offset, option, what was expected) and
 * returns the same status, so callers can simply propagate. */
#ifndef EF_CORE_ERR_H
#define EF_CORE_ERR_H

#include "echoflow/echoflow.h"

#define EF__ERR_MAX 512

typedef struct {
    int status;
    char msg[EF__ERR_MAX];
} ef__err;

void ef__err_clear(ef__err *err);
/* Formats the message and returns `status`; a NULL err is allowed. A
 * message longer than EF__ERR_MAX - 1 loses the middle of its longest word
 * (its path or URL), so that its end, which says why, is kept. */
int ef__err_set(ef__err *err, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Prefixes the current message with "prefix: " (for context added by a
 * caller, such as a stage name). Returns err->status. */
int ef__err_prefix(ef__err *err, const char *prefix);
/* Copies text `s` into dst (cap bytes), shortened as ef__err_set shortens a
 * message: the middle of the longest word gives way to "...". dst may be s. */
void ef__err_fit(char *dst, size_t cap, const char *s);

#endif
