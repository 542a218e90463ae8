/* SPDX-License-Identifier: Apache-2.0 */
/* Field names, interned: each distinct name is stored once for the life
 * of the process, so a sample's fields hold a pointer, not a copy, and
 * cloning a sample copies no name whatever its length. */
#ifndef EF_CORE_NAMES_H
#define EF_CORE_NAMES_H

#include <stddef.h>

/* Distinct names the process keeps at most: a shard whose members invent
 * a new extension each cannot grow the table without end. */
#define EF__NAMES_MAX 65536

/* The stored copy of name[0..len) (no NUL inside, 0 < len <
 * EF_MAX_NAME), stored on first sight; NULL when out of memory or when
 * EF__NAMES_MAX names are already stored. Thread-safe. */
const char *ef__name_intern(const char *name, size_t len);

#endif
