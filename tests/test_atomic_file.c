/* SPDX-License-Identifier: Apache-2.0 */
/* The atomic-file helper (src/common/atomic_file.h): a committed file
 * appears whole under its name and nothing else stays beside it; every
 * failure says which step failed and leaves no temporary file behind. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "ef_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("test_atomic_file");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* The number of entries in `dir`, "." and ".." aside. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* The whole of the file `path`, NUL-terminated, in static storage. */
static const char *contents(const char *path)
{
    static char buf[256];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void commit_replaces_the_target(void **state)
{
    (void)state;
    const char *path = tu_at("out.bin");
    tu_write_file(path, "old", 3);
    ef__atomic_file a;
    assert_int_equal(ef__atomic_open(&a, path, ".partial"), 0);
    char want[512];
    snprintf(want, sizeof want, "%s.partial", path);
    assert_string_equal(a.tmp, want);
    fputs("new content", a.f);
    /* until the commit, readers of the target see the old file */
    assert_string_equal(contents(path), "old");
    assert_int_equal(ef__atomic_commit(&a), 0);
    assert_int_equal(a.failed, EF__ATOMIC_OK);
    assert_null(a.f);
    ef__atomic_abort(&a); /* after a commit: frees, removes nothing */
    assert_string_equal(contents(path), "new content");
    assert_int_equal(entries(tu_dir()), 1);
}

static void default_temporary_is_this_process_own(void **state)
{
    (void)state;
    const char *path = tu_at("pid.bin");
    ef__atomic_file a;
    assert_int_equal(ef__atomic_open(&a, path, NULL), 0);
    char want[512];
    snprintf(want, sizeof want, "%s.tmp.%ld", path, (long)getpid());
    assert_string_equal(a.tmp, want);
    assert_int_equal(access(want, F_OK), 0);
    assert_int_equal(ef__atomic_commit(&a), 0);
    ef__atomic_abort(&a);
    assert_int_equal(access(want, F_OK), -1);
    assert_int_equal(entries(tu_dir()), 1);
}

static void missing_folder_fails_the_open(void **state)
{
    (void)state;
    const char *path = tu_at("no/such/folder/out.bin");
    ef__atomic_file a;
    assert_int_equal(ef__atomic_open(&a, path, ".partial"), -1);
    assert_int_equal(a.failed, EF__ATOMIC_CREATE);
    assert_int_equal(a.error, ENOENT);
    assert_null(a.f);
    char msg[1024];
    ef__atomic_describe(&a, msg, sizeof msg);
    tu_expect_once(msg, "folder/out.bin.partial: cannot create: ");
    tu_expect_once(msg, strerror(ENOENT));
    /* a commit of what never opened fails too, and changes nothing */
    assert_int_equal(ef__atomic_commit(&a), -1);
    ef__atomic_abort(&a);
    assert_int_equal(entries(tu_dir()), 0);
}

static void failed_rename_leaves_no_temporary(void **state)
{
    (void)state;
    /* a folder that is not empty cannot be renamed over */
    const char *path = tu_at("taken");
    assert_int_equal(mkdir(path, 0755), 0);
    tu_write_file(tu_at("taken/inside"), "x", 1);
    ef__atomic_file a;
    assert_int_equal(ef__atomic_open(&a, path, ".partial"), 0);
    fputs("data", a.f);
    assert_int_equal(ef__atomic_commit(&a), -1);
    assert_int_equal(a.failed, EF__ATOMIC_RENAME);
    assert_true(a.error == EISDIR || a.error == ENOTEMPTY || a.error == EEXIST);
    assert_null(a.f);
    char msg[1024], want[1100];
    ef__atomic_describe(&a, msg, sizeof msg);
    snprintf(want, sizeof want, "cannot rename %s.partial to %s: %s", path,
             path, strerror(a.error));
    assert_string_equal(msg, want);
    ef__atomic_abort(&a);
    assert_int_equal(entries(tu_dir()), 1); /* the folder, and nothing else */
    assert_int_equal(entries(path), 1);
}

static void abort_leaves_nothing_behind(void **state)
{
    (void)state;
    const char *kept = tu_at("kept.bin"), *fresh = tu_at("fresh.bin");
    tu_write_file(kept, "before", 6);
    ef__atomic_file a, b;
    assert_int_equal(ef__atomic_open(&a, kept, NULL), 0);
    assert_int_equal(ef__atomic_open(&b, fresh, ".partial"), 0);
    fputs("never seen", a.f);
    fputs("never seen", b.f);
    ef__atomic_abort(&a);
    ef__atomic_abort(&b);
    ef__atomic_abort(&b); /* twice is harmless */
    assert_null(a.path);
    assert_string_equal(contents(kept), "before");
    assert_int_equal(access(fresh, F_OK), -1);
    assert_int_equal(entries(tu_dir()), 1);
    ef__atomic_file zero = {0};
    ef__atomic_abort(&zero);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(commit_replaces_the_target, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(default_temporary_is_this_process_own,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(missing_folder_fails_the_open, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(failed_rename_leaves_no_temporary,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(abort_leaves_nothing_behind, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
