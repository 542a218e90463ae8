/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation through one hook, so tests can fail the N-th allocation and
 * check that the error comes back cleanly with nothing leaked. */
#ifndef EF_CORE_ALLOC_H
#define EF_CORE_ALLOC_H

#include <stddef.h>

void *ef__malloc(size_t size);
void *ef__calloc(size_t n, size_t size);
void *ef__realloc(void *p, size_t size);
void ef__free(void *p);
char *ef__strdup(const char *s);

/* Test hook: the `n`-th allocation from now on (1 = the next) and every one
 * after it fail; 0 turns failing off. Not thread-safe against concurrent
 * allocation counts; meant for single-threaded tests. */
void ef__alloc_fail_after(long n);

#endif
