/* SPDX-License-Identifier: Apache-2.0 */
/* How many cores this process may run on. */
#ifndef EF_CORE_CORES_H
#define EF_CORE_CORES_H

/* The CPUs in the process's affinity mask (sched_getaffinity: what
 * taskset or a container's cpuset allows), or the online CPUs where the
 * mask cannot be read; at least 1. */
int ef__usable_cores(void);

#endif
