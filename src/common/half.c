/* SPDX-License-Identifier: Apache-2.0 */
/* The 16-bit floats of the public API (echoflow.h), for callers that read
 * f16 and bf16 fields: the Python extension among them. */
#include "common/half.h"

#include "echoflow/echoflow.h"

float ef_f16_to_float(uint16_t bits)
{
    return ef__f16_to_f32(bits);
}

float ef_bf16_to_float(uint16_t bits)
{
    return ef__bf16_to_f32(bits);
}
