/* SPDX-License-Identifier: Apache-2.0 */
/* The partitions of a run's data (see eft_job in trainer.h): which one a
 * process takes its next batch from, and how their parts of a checkpoint
 * go from the processes that host them to the file, in partition order,
 * and back to another number of processes. */
#ifndef EFT_PARTITIONS_H
#define EFT_PARTITIONS_H

#include <stddef.h>
#include <stdint.h>

#include "echoflow/echoflow.h"

/* One partition a process hosts, and what it gave the run. */
typedef struct {
    ef_pipeline *p;
    long fresh, batches, feedback_values;
    uint64_t samples_hash; /* chained over its batches, in order */
    int ended;             /* its pipeline's data has ended */
} eft_partition;

/* The hosted partition whose turn it is: of those whose data has not
 * ended, the one that has given the fewest batches, the first among
 * equals; -1 when every one's has ended. */
int eft_partition_turn(const eft_partition *parts, int n);

/* From the processes' parts (rank r's counts[r] bytes: the parts of the
 * partitions it hosts, r, r + ranks, ..., one after another as
 * eft_part_encode wrote them) to the same parts in partition order,
 * into *out (allocated; the caller frees it), with each one's size in
 * part_n[] (`partitions` entries, the caller's). Returns 0; -1 when a
 * process's bytes are not partitions / ranks whole parts, -2 without
 * memory (*out NULL). */
int eft_parts_from_ranks(const unsigned char *all, const size_t *counts,
                         int ranks, int partitions, unsigned char **out,
                         size_t *part_n);

/* The reverse: the parts in partition order (part_n[p] bytes for
 * partition p) dealt to `ranks` processes, each one's in *out one after
 * another (allocated; the caller frees it) with its size in counts[]
 * (`ranks` entries, the caller's). Returns 0, or -1 without memory. */
int eft_parts_to_ranks(const unsigned char *parts, const size_t *part_n,
                       int ranks, int partitions, unsigned char **out,
                       size_t *counts);

#endif
