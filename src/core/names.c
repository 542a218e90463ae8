/* SPDX-License-Identifier: Apache-2.0 */
/* The interned field names (names.h): an open-addressing hash set of
 * pointers under one lock. Lookups take the lock too (the table's growth
 * moves every slot), but a small cache per thread answers most of them
 * first: a cheap source adds a field per item, and a lock per field is
 * a good part of such an item's cost. */
#include "core/names.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"

static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
static const char **slots; /* cap entries, NULL where free */
static size_t cap, count;  /* cap: 0 or a power of two */

static uint64_t hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return h;
}

/* The slot holding name[0..len), or the free one where it would go. */
static size_t find(const char *name, size_t len)
{
    size_t i = (size_t)hash(name, len) & (cap - 1);
    while (slots[i] &&
           !(strncmp(slots[i], name, len) == 0 && slots[i][len] == '\0'))
        i = (i + 1) & (cap - 1);
    return i;
}

/* Doubles the table (kept at most half full). */
static int grow(void)
{
    size_t old_cap = cap, new_cap = cap ? cap * 2 : 64;
    const char **old = slots;
    const char **fresh = ef__calloc(new_cap, sizeof *fresh);
    if (!fresh)
        return -1;
    slots = fresh;
    cap = new_cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i])
            slots[find(old[i], strlen(old[i]))] = old[i];
    ef__free(old);
    return 0;
}

/* Each thread's names found lately, by hash: most fields a thread adds
 * bear the few names its stages use, found here without the lock. The
 * stored names never move or go, so a pointer kept here stays good. */
#define RECENT 16
static _Thread_local const char *recent[RECENT];

const char *ef__name_intern(const char *name, size_t len)
{
    const char **seen = &recent[hash(name, len) & (RECENT - 1)];
    if (*seen && strncmp(*seen, name, len) == 0 && (*seen)[len] == '\0')
        return *seen;
    const char *got = NULL;
    pthread_mutex_lock(&names_mu);
    if (cap || grow() == 0) {
        size_t i = find(name, len);
        if (slots[i]) {
            got = slots[i];
        } else if (count < EF__NAMES_MAX &&
                   (2 * (count + 1) <= cap || grow() == 0)) {
            char *copy = ef__malloc(len + 1);
            if (copy) {
                memcpy(copy, name, len);
                copy[len] = '\0';
                slots[find(name, len)] = copy;
                count++;
                got = copy;
            }
        }
    }
    pthread_mutex_unlock(&names_mu);
    if (got)
        *seen = got;
    return got;
}
