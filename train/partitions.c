/* SPDX-License-Identifier: Apache-2.0 */
/* The partitions of a run's data (see partitions.h). */
#include "partitions.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int eft_partition_turn(const eft_partition *parts, int n)
{
    int best = -1;
    for (int k = 0; k < n; k++)
        if (!parts[k].ended &&
            (best < 0 || parts[k].batches < parts[best].batches))
            best = k;
    return best;
}

/* Copies the parts at[p] (n[p] bytes each) into one buffer, in the order
 * `order` gives, or in partition order when it is NULL: *out, allocated. */
static int gather(const unsigned char *const *at, const size_t *n,
                  const int *order, int partitions, unsigned char **out)
{
    size_t total = 0;
    for (int p = 0; p < partitions; p++)
        total += n[p];
    *out = malloc(total ? total : 1);
    if (!*out)
        return -1;
    size_t used = 0;
    for (int i = 0; i < partitions; i++) {
        int p = order ? order[i] : i;
        memcpy(*out + used, at[p], n[p]);
        used += n[p];
    }
    return 0;
}

int eft_parts_from_ranks(const unsigned char *all, const size_t *counts,
                         int ranks, int partitions, unsigned char **out,
                         size_t *part_n)
{
    const unsigned char **at = malloc((size_t)partitions * sizeof *at);
    int rc = at ? 0 : -2;
    *out = NULL;
    for (int r = 0; rc == 0 && r < ranks; r++) {
        size_t left = counts[r];
        for (int p = r; rc == 0 && p < partitions; p += ranks) {
            size_t n = eft_part_size(all, left);
            if (n == 0)
                rc = -1;
            at[p] = all;
            part_n[p] = n;
            all += n;
            left -= n;
        }
        if (left != 0)
            rc = -1;
    }
    if (rc == 0)
        rc = gather(at, part_n, NULL, partitions, out) ? -2 : 0;
    free(at);
    return rc;
}

int eft_parts_to_ranks(const unsigned char *parts, const size_t *part_n,
                       int ranks, int partitions, unsigned char **out,
                       size_t *counts)
{
    const unsigned char **at = malloc((size_t)partitions * sizeof *at);
    int *order = malloc((size_t)partitions * sizeof *order);
    int rc = at && order ? 0 : -1;
    *out = NULL;
    if (rc == 0) {
        for (int p = 0; p < partitions; p++) {
            at[p] = parts;
            parts += part_n[p];
        }
        /* rank r's partitions r, r + ranks, ..., one rank after another */
        int i = 0;
        for (int r = 0; r < ranks; r++) {
            counts[r] = 0;
            for (int p = r; p < partitions; p += ranks) {
                order[i++] = p;
                counts[r] += part_n[p];
            }
        }
        rc = gather(at, part_n, order, partitions, out);
    }
    free(at);
    free(order);
    return rc;
}
