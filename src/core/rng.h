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

/* The draws are inline: a shuffle buffer draws once per item it hands
 * out, and the calls were a quarter of an echoed copy's cost there. */

/* The finaliser of SplitMix64. */
static inline uint64_t ef__rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t ef__rng_u64(ef__rng *r)
{
    return ef__rng_mix64(r->key + 0x9e3779b97f4a7c15ull * ++r->counter);
}

/* Uniform in [0, 1). */
static inline double ef__rng_uniform(ef__rng *r)
{
    return (double)(ef__rng_u64(r) >> 11) * 0x1.0p-53;
}

/* The draw after `m`, whose low half fell below n (ef__rng_below). */
uint64_t ef__rng_below_again(ef__rng *r, uint64_t n, unsigned __int128 m);

/* Uniform in [0, n) without modulo bias; n > 0. The high half of x * n,
 * rejecting the few x whose low half falls in the part of the range that
 * would favour some values (Lemire, "Fast Random Integer Generation in an
 * Interval", 2019): every value equally likely, and a division only in
 * the rare case that needs the threshold. */
static inline uint64_t ef__rng_below(ef__rng *r, uint64_t n)
{
    unsigned __int128 m = (unsigned __int128)ef__rng_u64(r) * n;
    if ((uint64_t)m < n)
        return ef__rng_below_again(r, n, m);
    return (uint64_t)(m >> 64);
}

#endif
