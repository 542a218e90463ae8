/* SPDX-License-Identifier: Apache-2.0 */
/* Every echo policy (echo:policy=NAME) besides uniform, once: each NAME in
 * the list below is the policy ef__policy_NAME of
 * src/stages/flow/echo_policy_NAME.c. The declarations, the names the
 * spec takes and the build's list of policy files follow from it
 * (echo_policy.h, CMakeLists.txt). */
#ifndef EF_STAGES_FLOW_ECHO_POLICIES_H
#define EF_STAGES_FLOW_ECHO_POLICIES_H

/* clang-format off: one policy a line */
#define EF__ECHO_POLICIES(X) \
    X(rank)
/* clang-format on */

#endif
