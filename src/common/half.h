/* SPDX-License-Identifier: Apache-2.0 */
/* The two 16-bit float formats, to and from float: IEEE binary16 (f16) and
 * bfloat16 (bf16, the top half of a float32). Rounding to 16 bits is to
 * nearest, ties to even, as numpy and torch round; NaN stays NaN. Inline,
 * so that the Python extension (which links only the public API) shares
 * them. */
#ifndef EF_COMMON_HALF_H
#define EF_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ef__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float ef__f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float ef__bf16_to_f32(uint16_t h)
{
    return ef__f32_of_bits((uint32_t)h << 16);
}

static inline uint16_t ef__f32_to_bf16(float f)
{
    uint32_t u = ef__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ef__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* infinity or NaN */
        return ef__f32_of_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return ef__f32_of_bits(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t ef__f32_to_f16(float f)
{
    uint32_t u = ef__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return sign | 0x7e00u;
    if (a >= 0x477ff000u) /* rounds past 65504: infinity */
        return sign | 0x7c00u;
    if (a < 0x38800000u) { /* below 2^-14: a subnormal, or zero */
        /* a / 2^-24 rounded to even, in float arithmetic that is exact
         * here: adding 0.5 (2^-1) pushes the bits below the unit out */
        float v = ef__f32_of_bits(a) + 0.5f;
        return sign | (uint16_t)(ef__f32_bits(v) - 0x3f000000u);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return sign | (uint16_t)(r >> 13);
}

#endif
