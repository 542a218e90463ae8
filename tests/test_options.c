/* SPDX-License-Identifier: Apache-2.0 */
/* Option rows: the public descriptions the registry copies out of them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_public_copies_made_once_under_threads),
        cmocka_unit_test(test_public_copies_are_static),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
