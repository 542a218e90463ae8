/* SPDX-License-Identifier: Apache-2.0 */
/* Runs a small pipeline through the installed library and checks that the
 * header and the library agree on the version. */
#include <stdio.h>
#include <string.h>

#include <echoflow/echoflow.h>

int main(void)
{
    if (strcmp(EF_VERSION_STRING, ef_version_string()) != 0) {
        fprintf(stderr, "header %s, library %s\n", EF_VERSION_STRING,
                ef_version_string());
        return 1;
    }
    ef_pipeline *p;
    if (ef_pipeline_create(&p) != EF_OK ||
        ef_pipeline_parse(p, "range:n=10 | batch:5") != EF_OK) {
        fprintf(stderr, "building: %s\n", p ? ef_pipeline_error(p) : "");
        return 1;
    }
    int batches = 0, rc;
    ef_sample *s;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        ef_sample_free(s);
        batches++;
    }
    ef_pipeline_destroy(p);
    if (rc != EF_END || batches != 2) {
        fprintf(stderr, "status %d after %d batches, expected END after 2\n",
                rc, batches);
        return 1;
    }
    printf("echoflow %s: 2 batches through echoflow::echoflow\n",
           ef_version_string());
    return 0;
}
