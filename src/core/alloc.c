/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation wrappers with a failure hook for tests (see alloc.h). */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Allocations left before failing starts; 0 = never fail. */
static atomic_long fail_countdown;

static int should_fail(void)
{
    long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (n == 0)
        return 0;
    if (n == 1)
        return 1; /* stays at 1: every later allocation fails too */
    atomic_store_explicit(&fail_countdown, n - 1, memory_order_relaxed);
    return 0;
}

void ef__alloc_fail_after(long n)
{
    atomic_store(&fail_countdown, n < 0 ? 0 : n);
}

void *ef__malloc(size_t size)
{
    return should_fail() ? NULL : malloc(size ? size : 1);
}

void *ef__calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *ef__realloc(void *p, size_t size)
{
    return should_fail() ? NULL : realloc(p, size ? size : 1);
}

void ef__free(void *p)
{
    free(p);
}

char *ef__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ef__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void *ef__grow(void *p, size_t *cap, size_t first, size_t size)
{
    if (*cap > SIZE_MAX / 2 / size || first > SIZE_MAX / size)
        return NULL;
    size_t n = *cap ? 2 * *cap : first;
    void *q = ef__realloc(p, n * size);
    if (q)
        *cap = n;
    return q;
}
