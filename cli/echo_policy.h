/* Which echo policy a training pipeline asks for, read from its text: the
 * trainer feeds each example's value back (ef_pipeline_feedback) only to
 * a pipeline with an echo stage that listens, so that runs without one
 * stay exactly as they were. */
#ifndef EF_CLI_ECHO_POLICY_H
#define EF_CLI_ECHO_POLICY_H

#include <stddef.h>

/* The policy of the first echo stage of `spec` whose policy=NAME is not
 * uniform, into name (len bytes, truncated); "uniform" when there is
 * none, or no echo stage. Returns 1 when one was found, 0 otherwise. */
int echo_policy_of_spec(const char *spec, char *name, size_t len);

/* The same for one echo stage's options ("factor=2,policy=rank"). */
int echo_policy_of_opts(const char *opts, char *name, size_t len);

#endif
