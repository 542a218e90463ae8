/* Whole-file reads, gzip-compressed or not. */
#ifndef EF_IO_FILE_H
#define EF_IO_FILE_H

#include "core/err.h"

/* Reads all of `path` into a new buffer (the caller owns it), inflating it
 * first when it starts with the gzip magic. A truncated or corrupt gzip
 * stream is an EF_EFORMAT error naming the file and how far it got. */
int ef__read_file(const char *path, ef_buffer **out, ef__err *err);

#endif
