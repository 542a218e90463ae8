/* SPDX-License-Identifier: Apache-2.0 */
/* A small ustar writer (for `echoflow pack` and for tests): regular files
 * only, one header block per member, reproducible (mode 0644, owner 0,
 * time 0). */
#ifndef EF_CODEC_TAR_WRITE_H
#define EF_CODEC_TAR_WRITE_H

#include <stddef.h>
#include <stdio.h>

#include "core/err.h"

/* Writes a member: header, `size` bytes of `data`, zero padding to the
 * next 512-byte block. A name of up to 100 bytes fits the header as is;
 * up to 256 bytes it is split at a '/' into the prefix field (at most 155
 * bytes) and the name field (at most 100). Names that cannot be stored
 * this way, empty names and sizes of 8 GiB or more are EF_EINVAL; a
 * failed write is EF_EIO. `f` is borrowed. */
int ef__tar_write_member(FILE *f, const char *name, const void *data,
                         size_t size, ef__err *err);

/* Ends the archive: two zero blocks. */
int ef__tar_write_end(FILE *f, ef__err *err);

#endif
