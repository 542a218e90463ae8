/* SPDX-License-Identifier: Apache-2.0 */
/* CRC-32C, table-driven, eight bytes per step ("slicing-by-8"): table[0]
 * is the classic byte-at-a-time table for the reflected Castagnoli
 * polynomial 0x82F63B78; table[k][b] is the CRC of byte b followed by k
 * zero bytes, so eight table lookups advance the CRC by eight bytes. The
 * tables are computed once, on first use, under pthread_once. */
#include "common/crc32c.h"

#include <pthread.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            table[k][b] =
                (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xff];
}

uint32_t ef__crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, make_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    /* the bytes are assembled one by one, so neither the alignment of
     * `data` nor the host's byte order matters */
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                           (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
            table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^ table[3][p[4]] ^
            table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return ~c;
}

uint32_t ef__crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
