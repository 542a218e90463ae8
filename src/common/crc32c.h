/* SPDX-License-Identifier: Apache-2.0 */
/* CRC-32C (Castagnoli), the checksum of TFRecord framing, and the "masked"
 * form TFRecord stores so that a CRC of data that itself holds CRCs does
 * not degenerate. */
#ifndef EF_COMMON_CRC32C_H
#define EF_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C over n more bytes: start with crc = 0, and feed the
 * result back in to checksum data given in pieces. */
uint32_t ef__crc32c(uint32_t crc, const void *data, size_t n);

/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t ef__crc32c_mask(uint32_t crc);

#endif
