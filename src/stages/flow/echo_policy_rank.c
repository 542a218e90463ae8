/* SPDX-License-Identifier: Apache-2.0 */
/* policy=rank: the item of the k-th largest value among the m with one
 * weighs RANK_PRESSURE^(-k / (m - 1)), so the most likely is this many
 * times as likely as the least (the selection pressure of Loshchilov and
 * Hutter, 2015). Ranks rather than values: the draw does not depend on the
 * scale of the losses. */
#include <math.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "stages/flow/echo_policy.h"

#define RANK_PRESSURE 100.0

typedef struct {
    double value;
    size_t k;
} ranked;

static int by_value_desc(const void *a, const void *b)
{
    double x = ((const ranked *)a)->value, y = ((const ranked *)b)->value;
    return (x < y) - (x > y);
}

static int rank_weigh(const double *values, size_t m, double *weights)
{
    ranked *order = ef__malloc(m * sizeof *order);
    if (!order)
        return -1;
    for (size_t k = 0; k < m; k++)
        order[k] = (ranked){values[k], k};
    qsort(order, m, sizeof *order, by_value_desc);
    for (size_t r = 0; r < m; r++)
        weights[order[r].k] =
            m > 1 ? pow(RANK_PRESSURE, -(double)r / (double)(m - 1)) : 1.0;
    ef__free(order);
    return 0;
}

const ef__policy_def ef__policy_rank = {"rank", rank_weigh};
