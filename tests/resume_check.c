/* SPDX-License-Identifier: Apache-2.0 */
/* Runs a pipeline whole, or up to a checkpoint, or on from one, printing
 * one line per item: its identity and a hash of its fields. The HTTP
 * integration test compares the lines of a run cut by a checkpoint with
 * those of the whole run, and looks at what the server was asked for
 * after the restore. Uses the public API only.
 *
 * usage: resume_check run SPEC
 *        resume_check save SPEC K STATE_FILE   (the first K items)
 *        resume_check restore SPEC STATE_FILE  (the rest)
 * A restore also prints the first stage's "bytes" figure to stderr.
 * Exits 1 on any failure, naming it. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echoflow/echoflow.h"

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "resume_check: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static uint64_t hash_sample(const ef_sample *s)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ef_sample_field_count(s); i++) {
        ef_tensor t;
        if (ef_sample_field(s, i, &t) != EF_OK)
            continue;
        const unsigned char *p = t.data;
        for (size_t j = 0; j < t.nbytes; j++)
            h = (h ^ p[j]) * 1099511628211ull;
        for (const char *c = t.name; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
    }
    return h;
}

/* Prints up to `max` items (all: -1); returns 0, or 1 on a failure. */
static int print_items(ef_pipeline *p, long long max)
{
    for (long long n = 0; max < 0 || n < max; n++) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_END)
            return max < 0 ? 0 : fail("the data ended after %lld items", n);
        if (rc != EF_OK)
            return fail("item %lld: %s", n, ef_pipeline_error(p));
        ef_sample_id id = ef_sample_identity(s);
        printf("%" PRId64 " %" PRId64 " %d %016" PRIx64 "\n", id.index,
               id.epoch, (int)id.echo_copy, hash_sample(s));
        ef_sample_free(s);
    }
    return 0;
}

static int save(ef_pipeline *p, const char *path)
{
    size_t size = 0;
    if (ef_pipeline_save_state(p, NULL, 0, &size) != EF_OK)
        return fail("save: %s", ef_pipeline_error(p));
    void *buf = malloc(size);
    int rc = buf && ef_pipeline_save_state(p, buf, size, &size) == EF_OK
                 ? 0
                 : fail("save: %s", ef_pipeline_error(p));
    FILE *f = rc == 0 ? fopen(path, "wb") : NULL;
    if (rc == 0 && (!f || fwrite(buf, 1, size, f) != size))
        rc = fail("cannot write %s", path);
    if (f && fclose(f) != 0 && rc == 0)
        rc = fail("cannot write %s", path);
    free(buf);
    return rc;
}

static int restore(ef_pipeline *p, const char *path)
{
    FILE *f = fopen(path, "rb");
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    unsigned char *buf = size >= 0 ? malloc(size ? (size_t)size : 1) : NULL;
    int rc = buf && fseek(f, 0, SEEK_SET) == 0 &&
                     fread(buf, 1, (size_t)size, f) == (size_t)size
                 ? 0
                 : fail("cannot read %s", path);
    if (f)
        fclose(f);
    if (rc == 0 && ef_pipeline_restore_state(p, buf, (size_t)size) != EF_OK)
        rc = fail("restore: %s", ef_pipeline_error(p));
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[1] : "";
    int run = strcmp(mode, "run") == 0 && argc == 3;
    int saving = strcmp(mode, "save") == 0 && argc == 5;
    int restoring = strcmp(mode, "restore") == 0 && argc == 4;
    if (!run && !saving && !restoring) {
        fprintf(stderr, "usage: resume_check run SPEC\n"
                        "       resume_check save SPEC K STATE_FILE\n"
                        "       resume_check restore SPEC STATE_FILE\n");
        return 2;
    }
    ef_pipeline *p = NULL;
    if (ef_pipeline_create(&p) != EF_OK || ef_pipeline_parse(p, argv[2]))
        return fail("%s: %s", argv[2], p ? ef_pipeline_error(p) : "no memory");
    int rc = 0;
    if (run) {
        rc = print_items(p, -1);
    } else if (saving) {
        rc = print_items(p, atoll(argv[3]));
        if (rc == 0)
            rc = save(p, argv[4]);
    } else {
        rc = restore(p, argv[3]);
        if (rc == 0)
            rc = print_items(p, -1);
        ef_stage_stats st;
        double bytes = -1;
        if (ef_pipeline_stage_stats(p, 0, &st) == EF_OK)
            ef_stage_stats_extra(&st, "bytes", &bytes);
        fprintf(stderr, "resume_check: the source read %.0f bytes\n", bytes);
    }
    ef_pipeline_destroy(p);
    return rc;
}
