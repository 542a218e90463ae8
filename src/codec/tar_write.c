/* SPDX-License-Identifier: Apache-2.0 */
/* The ustar writer (see tar_write.h; the header layout is described at
 * the top of tar.c). */
#include "codec/tar_write.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 512

static int write_error(const char *name, ef__err *err)
{
    return ef__err_set(err, EF_EIO, "tar: cannot write member '%.200s': %s",
                       name, strerror(errno));
}

/* Where to split a long name: the index of a '/' leaving at most 155
 * bytes before it and 1 to 100 after; -1 when there is none. */
static long split_at(const char *name, size_t len)
{
    if (len <= 100)
        return -2; /* no split needed */
    for (size_t i = len - 1; i > 0; i--) {
        if (len - i - 1 > 100)
            break;
        if (name[i] == '/' && i <= 155 && i < len - 1)
            return (long)i;
    }
    return -1;
}

/* Writes `v` in octal, zero-padded, into a field of `width` bytes whose
 * last byte is a NUL. */
static void octal(unsigned char *field, size_t width, uint64_t v)
{
    field[width - 1] = '\0';
    for (size_t i = width - 1; i-- > 0;) {
        field[i] = (unsigned char)('0' + (v & 7));
        v >>= 3;
    }
}

int ef__tar_write_member(FILE *f, const char *name, const void *data,
                         size_t size, ef__err *err)
{
    size_t len = strlen(name);
    long cut = len ? split_at(name, len) : -1;
    if (cut == -1)
        return ef__err_set(err, EF_EINVAL,
                           "tar: cannot store the name '%.300s' (%zu bytes) "
                           "in a ustar header: it must be 1 to 100 bytes, or "
                           "up to 255 with a '/' leaving at most 155 bytes "
                           "before it and 100 after",
                           name, len);
    if ((uint64_t)size >= (uint64_t)1 << 33)
        return ef__err_set(err, EF_EINVAL,
                           "tar: member '%.200s' is %zu bytes; a ustar header "
                           "holds sizes below 8 GiB",
                           name, size);
    unsigned char h[BLOCK];
    memset(h, 0, sizeof h);
    if (cut < 0) {
        memcpy(h, name, len);
    } else {
        memcpy(h + 345, name, (size_t)cut);
        memcpy(h, name + cut + 1, len - (size_t)cut - 1);
    }
    octal(h + 100, 8, 0644);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, size);
    octal(h + 136, 12, 0);
    h[156] = '0';
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    /* the checksum is summed with its own field as spaces, then written
     * as six octal digits, a NUL and a space */
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof h; i++)
        sum += h[i];
    octal(h + 148, 7, sum);
    h[155] = ' ';
    static const unsigned char zeros[BLOCK];
    size_t pad = (BLOCK - size % BLOCK) % BLOCK;
    if (fwrite(h, 1, sizeof h, f) != sizeof h ||
        (size && fwrite(data, 1, size, f) != size) ||
        (pad && fwrite(zeros, 1, pad, f) != pad))
        return write_error(name, err);
    return EF_OK;
}

int ef__tar_write_end(FILE *f, ef__err *err)
{
    static const unsigned char zeros[2 * BLOCK];
    if (fwrite(zeros, 1, sizeof zeros, f) != sizeof zeros)
        return ef__err_set(err, EF_EIO, "tar: cannot write the end blocks: %s",
                           strerror(errno));
    return EF_OK;
}
