/* SPDX-License-Identifier: Apache-2.0 */
/* Option rows: the public descriptions the registry copies out of them,
 * and the flags that stay inside the library (speed-only options left
 * out of the options a checkpoint compares). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "pipeline/stage.h"

/* Fails unless stage i's public description is its def's rows, field by
 * field (the very strings, not copies of them). */
static void check_public_copy(int i)
{
    const ef_stage_info *pub = ef_stage_registry_get(i);
    assert_non_null(pub);
    const ef__stage_def *def = ef__stage_find(pub->name);
    assert_non_null(def);
    assert_ptr_equal(pub->name, def->info.name);
    assert_ptr_equal(pub->help, def->info.help);
    assert_int_equal(pub->noptions, def->info.noptions);
    for (int k = 0; k < pub->noptions; k++) {
        const ef_option_info *o = &pub->options[k];
        const ef__option_def *d = &def->info.options[k];
        assert_ptr_equal(o->name, d->name);
        assert_int_equal(o->type, d->type);
        assert_ptr_equal(o->default_value, d->default_value);
        assert_ptr_equal(o->help, d->help);
        assert_true(o->min == d->min);
        assert_true(o->max == d->max);
    }
}

static void *read_registry(void *arg)
{
    (void)arg;
    for (int i = 0; i < ef_stage_registry_count(); i++)
        if (!ef_stage_registry_get(i))
            return (void *)1;
    return NULL;
}

/* The public copies are made at first use: several threads asking at
 * once all see them whole. Runs first, so that it is the first use. */
static void test_public_copies_made_once_under_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, read_registry, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *failed;
        assert_int_equal(pthread_join(t[i], &failed), 0);
        assert_null(failed);
    }
    for (int i = 0; i < ef_stage_registry_count(); i++)
        check_public_copy(i);
}

static void test_public_copies_are_static(void **state)
{
    (void)state;
    int n = ef_stage_registry_count();
    assert_true(n > 0);
    for (int i = 0; i < n; i++)
        assert_ptr_equal(ef_stage_registry_get(i), ef_stage_registry_get(i));
    assert_null(ef_stage_registry_get(-1));
    assert_null(ef_stage_registry_get(n));
}

/* Whether "name=" starts a field of the comma-separated text. */
static int has_field(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p++)
        if ((p == text || p[-1] == ',') && p[len] == '=')
            return 1;
    return 0;
}

/* The options `text` gives stage `stage`, formatted for a checkpoint. */
static void formatted(const char *stage, const char *text, char *buf,
                      size_t cap)
{
    const ef__stage_def *def = ef__stage_find(stage);
    assert_non_null(def);
    ef__opts o;
    ef__err err = {0};
    if (ef__opts_parse(&o, def, text, strlen(text), &err) != EF_OK)
        fail_msg("%s: %s", stage, err.msg);
    ef__opts_format(&o, buf, cap);
    ef__opts_free(&o);
}

/* A flagged option of a stage is left out, an unflagged one of the same
 * stage kept: the rows of EF__MAP_OPTIONS and a stage's own. */
static void test_format_skips_speed_only_options(void **state)
{
    (void)state;
    char buf[1024];
    formatted("map", "fn=noop,threads=3,run=4,inline=never,ordered=false", buf,
              sizeof buf);
    assert_string_equal(buf, "fn=noop,ordered=false");

    formatted("tar", "urls=a.tar,cycle=2,queue=3,tries=2,max_inflate=7", buf,
              sizeof buf);
    assert_true(has_field(buf, "cycle"));
    assert_true(has_field(buf, "max_inflate"));
    assert_false(has_field(buf, "queue"));
    assert_false(has_field(buf, "tries"));
    assert_false(has_field(buf, "timeout"));

    /* and so two specs differing only there read alike */
    char a[1024], b[1024];
    ef__err err = {0};
    assert_int_equal(
        ef__spec_canonical("range:n=8 | prefetch:depth=2", a, sizeof a, &err),
        EF_OK);
    assert_int_equal(ef__spec_canonical("range:n=8 | prefetch:depth=auto", b,
                                        sizeof b, &err),
                     EF_OK);
    assert_string_equal(a, b);
}

/* Every stage's formatted options are exactly its unflagged ones: not
 * speed-only, nor start-only (the service's from_epoch). */
static void test_format_follows_the_flag_on_every_stage(void **state)
{
    (void)state;
    int flagged = 0, start_only = 0;
    for (int i = 0; i < ef_stage_registry_count(); i++) {
        const ef__stage_def *def =
            ef__stage_find(ef_stage_registry_get(i)->name);
        ef__opts o = {.n = def->info.noptions, .defs = def->info.options};
        char buf[4096];
        ef__opts_format(&o, buf, sizeof buf);
        for (int k = 0; k < o.n; k++) {
            const ef__option_def *d = &o.defs[k];
            int left = (d->flags & (EF__SPEED_ONLY | EF__START_ONLY)) != 0;
            flagged += left;
            start_only += (d->flags & EF__START_ONLY) != 0;
            if (has_field(buf, d->name) == left)
                fail_msg("%s: option %s is %sflagged speed- or start-only, "
                         "yet %s in '%s'",
                         def->info.name, d->name, left ? "" : "not ",
                         left ? "is" : "is not", buf);
        }
    }
    assert_true(flagged > start_only);
    assert_int_equal(start_only, 1);
}

/* The options that change only how fast a stage runs carry the flag
 * wherever their rows are: in a stage's own table or a shared macro. */
static void test_speed_settings_are_flagged(void **state)
{
    (void)state;
    static const char *const rows[][2] = {
        {"map", "threads"},       {"map", "run"},
        {"map", "inline"},        {"decode", "threads"},
        {"tokenize", "threads"},  {"prefetch", "depth"},
        {"tar", "queue"},         {"tar", "tries"},
        {"tar", "timeout"},       {"jsonl", "tries"},
        {"files", "readers"},     {"files", "queue"},
        {"files", "tries"},       {"files", "timeout"},
        {"files", "max_entries"}, {"tfrecord", "timeout"}};
    static const char *const output[][2] = {
        {"map", "ordered"},     {"tar", "ordered"},   {"tar", "cycle"},
        {"tar", "max_inflate"}, {"files", "shuffle"}, {"echo", "factor"}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const ef__stage_def *def = ef__stage_find(rows[r][0]);
        assert_non_null(def);
        int found = 0;
        for (int k = 0; k < def->info.noptions; k++)
            if (!strcmp(def->info.options[k].name, rows[r][1])) {
                found = 1;
                if (!(def->info.options[k].flags & EF__SPEED_ONLY))
                    fail_msg("%s: %s is not flagged speed-only", rows[r][0],
                             rows[r][1]);
            }
        if (!found)
            fail_msg("%s: no option %s", rows[r][0], rows[r][1]);
    }
    for (size_t r = 0; r < sizeof output / sizeof output[0]; r++) {
        const ef__stage_def *def = ef__stage_find(output[r][0]);
        assert_non_null(def);
        for (int k = 0; k < def->info.noptions; k++)
            if (!strcmp(def->info.options[k].name, output[r][1]) &&
                def->info.options[k].flags)
                fail_msg("%s: %s changes the output, yet is flagged",
                         output[r][0], output[r][1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_public_copies_made_once_under_threads),
        cmocka_unit_test(test_public_copies_are_static),
        cmocka_unit_test(test_format_skips_speed_only_options),
        cmocka_unit_test(test_format_follows_the_flag_on_every_stage),
        cmocka_unit_test(test_speed_settings_are_flagged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
