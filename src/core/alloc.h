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
/* Room for more elements of `size` bytes in the array `p` that holds
 * *cap of them: twice as many, or `first` when it holds none. Returns
 * the moved array and sets *cap, or NULL (p and *cap untouched) when out
 * of memory or past SIZE_MAX bytes. */
void *ef__grow(void *p, size_t *cap, size_t first, size_t size);

/* Test hook: the `n`-th allocation from now on (1 = the next) and every one
 * after it fail; 0 turns failing off. Not thread-safe against concurrent
 * allocation counts; meant for single-threaded tests. */
void ef__alloc_fail_after(long n);

#endif
