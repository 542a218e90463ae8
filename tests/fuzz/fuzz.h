/* SPDX-License-Identifier: Apache-2.0 */
/* What every fuzz target shares: the entry point it defines, and the way
 * it checks an invariant. libFuzzer calls the entry point with each input;
 * replay.c calls it with each file of a corpus, so a corpus also runs as an
 * ordinary test (and under the ASan and TSan builds). */
#ifndef EF_FUZZ_H
#define EF_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs one input; returns 0. A violated invariant calls abort(), which
 * libFuzzer and ctest both report as a failure. `data` is borrowed. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Says which invariant failed, and where, then aborts (for CHECK). */
static inline _Noreturn void fuzz_violated(const char *file, int line,
                                           const char *what)
{
    const char *base = strrchr(file, '/');
    fprintf(stderr, "%s:%d: invariant violated: %s\n", base ? base + 1 : file,
            line, what);
    abort();
}

/* Aborts unless `cond` holds. */
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            fuzz_violated(__FILE__, __LINE__, #cond);                          \
    } while (0)

/* Checks an error message in a buffer of `cap` bytes: not empty, ended
 * within the buffer, and naming `name` unless that is NULL. */
static inline void fuzz_check_message(const char *msg, size_t cap,
                                      const char *name)
{
    CHECK(msg != NULL);
    size_t len = strnlen(msg, cap);
    CHECK(len > 0 && len < cap);
    CHECK(name == NULL || strstr(msg, name) != NULL);
}

#endif
