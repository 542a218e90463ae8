/* The entry point every fuzz target defines. libFuzzer calls it with each
 * input; replay.c calls it with each file of a corpus, so a corpus also runs
 * as an ordinary test (and under the ASan and TSan builds). */
#ifndef EF_FUZZ_H
#define EF_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input; returns 0. A violated invariant calls abort(), which
 * libFuzzer and ctest both report as a failure. `data` is borrowed. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
