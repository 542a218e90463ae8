/* SPDX-License-Identifier: Apache-2.0 */
/* Opening a local file that must be a regular one: a model, a list of
 * files. A FIFO's open would wait for a writer for good and a device
 * (/dev/zero) never ends, so anything else is refused before a byte is
 * read. */
#ifndef EF_IO_REGULAR_FILE_H
#define EF_IO_REGULAR_FILE_H

#include <stdint.h>

#include "core/err.h"
#include "echoflow/echoflow.h"

/* Opens `path` for reading into *fd (the caller's to close) with its
 * size then in *size, when it names a regular file. EF_EIO naming the
 * path and `what` it should be ("the list file") when it cannot be
 * opened or is not a regular file. */
int ef__open_regular(const char *path, const char *what, int *fd,
                     uint64_t *size, ef__err *err);

/* Maps the regular file `path` whole and read-only into *out, a borrowed
 * buffer (the caller's reference) unmapped when its last reference goes;
 * an empty file gives an empty buffer. The file must not shrink while it
 * is mapped: a read past its new end ends the process (SIGBUS). Errors
 * as ef__open_regular's, or naming the path when it cannot be mapped. */
int ef__map_regular(const char *path, const char *what, ef_buffer **out,
                    ef__err *err);

#endif
