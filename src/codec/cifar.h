/* SPDX-License-Identifier: Apache-2.0 */
/* The CIFAR-10 binary format: records of 3073 bytes, a label byte (0 to 9)
 * then a 32x32 colour image as three planes (red, green, blue), each row
 * by row. No header: a file is records back to back. */
#ifndef EF_CODEC_CIFAR_H
#define EF_CODEC_CIFAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define EF__CIFAR_SIDE 32
#define EF__CIFAR_IMAGE (EF__CIFAR_SIDE * EF__CIFAR_SIDE * 3)
#define EF__CIFAR_RECORD (1 + EF__CIFAR_IMAGE)
#define EF__CIFAR_CLASSES 10

/* The number of whole records in a file of `size` bytes into *n. A size
 * that is not a multiple of the record size is EF_EFORMAT naming the file
 * (`name`) and the offset where the partial record starts; *n still
 * counts the whole records before it. */
int ef__cifar_count(size_t size, const char *name, int64_t *n, ef__err *err);

/* Converts n records at `data`: images to `images` (n x 32 x 32 x 3 bytes,
 * height, width, channel), labels to `labels` (the label byte, unchecked). */
void ef__cifar_convert(const unsigned char *data, int64_t n,
                       unsigned char *images, int64_t *labels);

/* EF_OK for a label of 0 to 9; otherwise EF_EFORMAT naming the file, the
 * record and its offset. */
int ef__cifar_check_label(const char *name, int64_t record, int64_t label,
                          ef__err *err);

#endif
