/* SPDX-License-Identifier: Apache-2.0 */
/* Counter-based random numbers.
 *
 * A generator is a key and a counter, nothing shared: the key hashes
 * (seed, stage, source index, epoch, echo copy), and draw k is a hash of
 * (key, k). The same decision therefore gets the same value whatever thread
 * makes it and in whatever order. */
#ifndef EF_CORE_RNG_H
#define EF_CORE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t key;
    uint64_t counter;
} ef__rng;

void ef__rng_init(ef__rng *r, uint64_t seed, uint64_t stage, int64_t index,
                  int64_t epoch, int64_t echo_copy);
uint64_t ef__rng_u64(ef__rng *r);
/* Uniform in [0, 1). */
double ef__rng_uniform(ef__rng *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t ef__rng_below(ef__rng *r, uint64_t n);

#endif
