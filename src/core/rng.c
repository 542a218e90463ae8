/* SPDX-License-Identifier: Apache-2.0 */
/* Counter-based generator: a 64-bit mixing function (the finaliser of
 * SplitMix64) applied to the key and a counter. Stateless apart from the
 * counter, so any decision can be recomputed from its key. */
#include "core/rng.h"

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ef__rng_init(ef__rng *r, uint64_t seed, uint64_t stage, int64_t index,
                  int64_t epoch, int64_t echo_copy)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;
    uint64_t k = mix64(seed + golden);
    k = mix64(k ^ (stage + golden));
    k = mix64(k ^ ((uint64_t)index + golden));
    k = mix64(k ^ ((uint64_t)epoch + golden));
    k = mix64(k ^ ((uint64_t)echo_copy + golden));
    r->key = k;
    r->counter = 0;
}

uint64_t ef__rng_u64(ef__rng *r)
{
    return mix64(r->key + 0x9e3779b97f4a7c15ull * ++r->counter);
}

double ef__rng_uniform(ef__rng *r)
{
    return (double)(ef__rng_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t ef__rng_below(ef__rng *r, uint64_t n)
{
    /* the high half of x * n, rejecting the few x whose low half falls in
     * the part of the range that would favour some values (Lemire, "Fast
     * Random Integer Generation in an Interval", 2019): every value
     * equally likely, and a division only in the rare case that needs
     * the threshold. A shuffle buffer draws once per item, and two
     * 64-bit divisions per draw were half of an echoed copy's cost. */
    unsigned __int128 m = (unsigned __int128)ef__rng_u64(r) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
        while (low < threshold) {
            m = (unsigned __int128)ef__rng_u64(r) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
