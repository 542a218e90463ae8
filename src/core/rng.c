/* SPDX-License-Identifier: Apache-2.0 */
/* Counter-based generator: a 64-bit mixing function (the finaliser of
 * SplitMix64) applied to the key and a counter. Stateless apart from the
 * counter, so any decision can be recomputed from its key. */
#include "core/rng.h"

void ef__rng_init(ef__rng *r, uint64_t seed, uint64_t stage, int64_t index,
                  int64_t epoch, int64_t echo_copy)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;
    uint64_t k = ef__rng_mix64(seed + golden);
    k = ef__rng_mix64(k ^ (stage + golden));
    k = ef__rng_mix64(k ^ ((uint64_t)index + golden));
    k = ef__rng_mix64(k ^ ((uint64_t)epoch + golden));
    k = ef__rng_mix64(k ^ ((uint64_t)echo_copy + golden));
    r->key = k;
    r->counter = 0;
}

uint64_t ef__rng_below_again(ef__rng *r, uint64_t n, unsigned __int128 m)
{
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    while ((uint64_t)m < threshold)
        m = (unsigned __int128)ef__rng_u64(r) * n;
    return (uint64_t)(m >> 64);
}
