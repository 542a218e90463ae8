/* SPDX-License-Identifier: Apache-2.0 */
/* The `files` source: an ImageFolder tree listed in torchvision's order
 * (nested directories sorted by whole path, mixed-case extensions, other
 * files left out, linked directories followed), its fields, empty
 * classes, list files (labels, CSV, comments, relative paths, a bad line
 * named), glob patterns, option errors, unreadable files failing or
 * skipped and counted, shards covering every file once, a shuffle that is
 * a new permutation each epoch, the same stream whatever the readers, and
 * checkpoints resuming mid-epoch with exactly the remaining samples.
 * Fixtures are written into a temporary directory. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "stages/sources/files_list.h"
#include "state_test_util.h"

/* torchvision.datasets.ImageFolder(R).samples for the tree of setup(),
 * relative to R (checked against torchvision by python/tests/
 * test_files.py on real images, and by hand with torchvision 0.14 on this
 * very tree). "cat/sub c" sorts before "cat/sub/z": sorted(os.walk())
 * orders directories by their whole path, ' ' < '/'. */
static const struct {
    const char *path, *field;
    int64_t label;
} k_expected[] = {
    {"cat/a.jpg", "jpg", 0},       {"cat/b.PNG", "png", 0},
    {"cat/sub/c.jpeg", "jpeg", 0}, {"cat/sub c/d.jpg", "jpg", 0},
    {"cat/sub/z/e.Tif", "tif", 0}, {"dog/x.webp", "webp", 1},
    {"dog/link/e.Tif", "tif", 1},  {"emu/c.jpeg", "jpeg", 2},
    {"emu/z/e.Tif", "tif", 2},
};
#define NEXPECTED (sizeof k_expected / sizeof k_expected[0])

static char g_spec[1024];

/* A spec of the tree's root with more options. */
static const char *root_spec(const char *more)
{
    snprintf(g_spec, sizeof g_spec, "files:root=%s%s", tu_at("R"), more);
    return g_spec;
}

static void put(const char *rel, const char *text)
{
    tu_write_file(tu_at(rel), text, strlen(text));
}

static int setup(void **state)
{
    (void)state;
    if (tu_dir_create("ef_files") != 0)
        return -1;
    const char *dirs[] = {"R",           "R/cat", "R/cat/sub", "R/cat/sub c",
                          "R/cat/sub/z", "R/dog", "E",         "E/full",
                          "E/none",      "L",     "L/img"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        if (mkdir(tu_at(dirs[i]), 0755) != 0)
            return -1;
    put("R/cat/a.jpg", "A");
    put("R/cat/b.PNG", "BB");
    put("R/cat/notes.txt", "not an image");
    put("R/cat/sub/c.jpeg", "CCC");
    put("R/cat/sub c/d.jpg", "DDDD");
    put("R/cat/sub/z/e.Tif", "EEEEE");
    put("R/dog/x.webp", "XXXXXX");
    put("R/file.jpg", "a file beside the classes is no class");
    if (symlink("../cat/sub/z", tu_at("R/dog/link")) != 0 ||
        symlink("cat/sub", tu_at("R/emu")) != 0)
        return -1;
    put("E/full/a.png", "1");
    put("E/none/readme.md", "no image");
    put("L/img/one.jpg", "one");
    put("L/img/two.png", "two!");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

static ef_pipeline *make(const char *spec, int skip)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, 7), EF_OK);
    if (skip)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, spec);
    return p;
}

/* The text of u8 field `name`. */
static const char *text_of(const ef_sample *s, const char *name)
{
    static char buf[1024];
    ef_tensor t = tu_field(s, name);
    assert_int_equal(t.dtype, EF_U8);
    assert_int_equal(t.ndim, 1);
    assert_true(t.nbytes < sizeof buf);
    memcpy(buf, t.data, t.nbytes);
    buf[t.nbytes] = '\0';
    return buf;
}

static void expect_spec_error(const char *spec, const char *needle)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    int rc = ef_pipeline_parse(p, spec);
    if (rc == EF_OK)
        fail_msg("%s: parsed, expected an error with \"%s\"", spec, needle);
    if (!strstr(ef_pipeline_error(p), needle))
        fail_msg("%s: message \"%s\" lacks \"%s\"", spec, ef_pipeline_error(p),
                 needle);
    ef_pipeline_destroy(p);
}

/* ---- ImageFolder --------------------------------------------------- */

static void test_folder_order_and_fields(void **state)
{
    (void)state;
    ef_pipeline *p = make(root_spec(",readers=3"), 0);
    char want[1024];
    for (size_t i = 0; i < NEXPECTED; i++) {
        ef_sample *s = tu_next(p);
        snprintf(want, sizeof want, "%s/%s", tu_at("R"), k_expected[i].path);
        assert_string_equal(text_of(s, "__url__"), want);
        /* the key: relative to the root, without the extension */
        const char *dot = strrchr(k_expected[i].path, '.');
        assert_string_equal(
            text_of(s, "__key__"),
            (snprintf(want, sizeof want, "%.*s",
                      (int)(dot - k_expected[i].path), k_expected[i].path),
             want));
        assert_int_equal(tu_i64(s, "label"), k_expected[i].label);
        ef_tensor t = tu_field(s, k_expected[i].field);
        assert_int_equal(t.dtype, EF_U8);
        assert_int_equal(t.ndim, 1);
        assert_int_equal(ef_sample_field_count(s), 4);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, (int64_t)i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    /* the length is known once listed */
    int64_t n = 0;
    assert_int_equal(ef_pipeline_length(p, &n), EF_OK);
    assert_int_equal(n, (int64_t)NEXPECTED);
    ef_pipeline_destroy(p);
}

static void test_folder_bytes(void **state)
{
    (void)state;
    ef_pipeline *p =
        make(root_spec(",extensions=\"png, .WEBP\",allow_empty=true"), 0);
    ef_sample *s = tu_next(p);
    assert_string_equal(text_of(s, "png"), "BB");
    ef_sample_free(s);
    s = tu_next(p);
    assert_string_equal(text_of(s, "webp"), "XXXXXX");
    assert_int_equal(tu_i64(s, "label"), 1);
    ef_sample_free(s);
    tu_expect_end(p); /* emu has no png or webp: an error unless allowed */
    ef_pipeline_destroy(p);
}

static void test_folder_empty_class(void **state)
{
    (void)state;
    char spec[600];
    snprintf(spec, sizeof spec, "files:root=%s", tu_at("E"));
    expect_spec_error(spec, "no valid file for the class none in");
    snprintf(spec, sizeof spec, "files:root=%s,allow_empty=true", tu_at("E"));
    ef_pipeline *p = make(spec, 0);
    ef_sample *s = tu_next(p);
    assert_int_equal(tu_i64(s, "label"), 0);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    /* a root without class folders, and one that is not there */
    snprintf(spec, sizeof spec, "files:root=%s", tu_at("L/img"));
    expect_spec_error(spec, "no class folder in");
    snprintf(spec, sizeof spec, "files:root=%s", tu_at("nowhere"));
    expect_spec_error(spec, "nowhere");
}

static void test_options(void **state)
{
    (void)state;
    expect_spec_error("files", "exactly one of the options 'root'");
    snprintf(g_spec, sizeof g_spec, "files:root=%s,glob=%s/*", tu_at("R"),
             tu_at("R"));
    expect_spec_error(g_spec, "exactly one of the options 'root'");
    expect_spec_error(root_spec(",extensions=\"jpg,,png\""),
                      "option 'extensions'");
    snprintf(g_spec, sizeof g_spec, "files:glob=%s/*,allow_empty=true",
             tu_at("L/img"));
    expect_spec_error(g_spec, "apply to 'root' only");
    expect_spec_error(root_spec(",shard=12/13"), "gets no file");
}

/* ---- lists and globs ---------------------------------------------- */

static void test_list(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof text,
             "# a comment\n\nimg/one.jpg 3\n  %s,5  \r\nimg/two.png\t-1\n",
             tu_at("L/img/two.png"));
    put("L/list.txt", text);
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("L/list.txt"));
    ef_pipeline *p = make(g_spec, 0);
    const int64_t labels[] = {3, 5, -1};
    for (int i = 0; i < 3; i++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(tu_i64(s, "label"), labels[i]);
        assert_string_equal(text_of(s, i ? "png" : "jpg"), i ? "two!" : "one");
        if (i == 0) {
            assert_string_equal(text_of(s, "__url__"), tu_at("L/img/one.jpg"));
            assert_string_equal(text_of(s, "__key__"), "img/one");
        }
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* without labels: no label field */
    put("L/plain.txt", "img/two.png\nimg/one.jpg\n");
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("L/plain.txt"));
    p = make(g_spec, 0);
    ef_sample *s = tu_next(p);
    ef_tensor t;
    assert_int_not_equal(ef_sample_get(s, "label", &t), EF_OK);
    assert_int_equal(ef_sample_field_count(s), 3);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

static void expect_list_error(const char *text, const char *needle)
{
    put("L/bad.txt", text);
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("L/bad.txt"));
    char want[600];
    snprintf(want, sizeof want, "%s: %s", tu_at("L/bad.txt"), needle);
    expect_spec_error(g_spec, want);
}

static void test_list_errors(void **state)
{
    (void)state;
    expect_list_error("img/one.jpg 1\n# c\nimg/two.png x\n",
                      "line 3: the label 'x' is not a decimal integer");
    expect_list_error("a.jpg 1 2\n", "line 1: expected 'path'");
    expect_list_error("a.jpg 1\nb.jpg\n", "line 2: has no label");
    expect_list_error(",4\n", "line 1: no path");
    expect_list_error("\n\nnoext 1\n", "line 3: '");
    expect_list_error("# nothing\n", "no entries");
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("L/missing.txt"));
    expect_spec_error(g_spec, "cannot open the list file");
}

/* `text` copied to the end of a page that an unreadable page follows,
 * as a list file's bytes without a NUL after them: a read past the end
 * faults. Returns the mapping (2 pages) for munmap. */
static char *at_page_end(const char *text, size_t n, const char **out)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    assert_true(n <= page);
    char *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + page, page, PROT_NONE), 0);
    memset(m, 'x', page); /* no NUL before the end either */
    memcpy(m + page - n, text, n);
    *out = m + page - n;
    return m;
}

/* A list's last line need not end in a newline nor a NUL: a URL's key
 * is found within the line (a host alone gives an empty key). */
static void test_list_url_line_unterminated(void **state)
{
    (void)state;
    static const char *const lines[] = {"http://h/a/b.jpg", "https://h/c.png",
                                        "http://h.jpg"};
    static const char *const keys[] = {"a/b", "c", ""};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        const char *text;
        size_t n = strlen(lines[i]);
        char *m = at_page_end(lines[i], n, &text);
        ef__file_list l;
        ef__err err;
        ef__err_clear(&err);
        int rc = ef__files_parse_list(text, n, "list.txt", "", &l, &err);
        assert_int_equal(rc, EF_OK);
        assert_int_equal(l.n, 1);
        assert_string_equal(ef__file_url(&l, 0), lines[i]);
        assert_string_equal(ef__file_key(&l, 0), keys[i]);
        ef__file_list_free(&l);
        munmap(m, 2 * (size_t)sysconf(_SC_PAGESIZE));
    }
}

static void expect_parse_error(const char *text, size_t n, const char *needle)
{
    ef__file_list l;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__files_parse_list(text, n, "list.txt", "", &l, &err);
    if (rc != EF_EFORMAT || !strstr(err.msg, needle))
        fail_msg("expected EF_EFORMAT with \"%s\", got %s: %s", needle,
                 ef_strerror(rc), err.msg);
    assert_int_equal(l.n, 0);
}

/* A NUL byte is refused, naming its line: C strings would end at it, and
 * "1\0junk" would be the label 1. */
static void test_list_nul_refused(void **state)
{
    (void)state;
    static const char one[] = "a.png 1\0junk\n";
    expect_parse_error(one, sizeof one - 1,
                       "list.txt: line 1: a NUL byte at column 8");
    static const char two[] = "b.png 0\n# c\na\0.png 1";
    expect_parse_error(two, sizeof two - 1,
                       "list.txt: line 3: a NUL byte at column 2");
}

/* A UTF-8 byte order mark before the first line is no part of its path. */
static void test_list_bom_skipped(void **state)
{
    (void)state;
    put("L/bom.txt", "\xEF\xBB\xBFimg/one.jpg 3\nimg/two.png 4\n");
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("L/bom.txt"));
    ef_pipeline *p = make(g_spec, 0);
    ef_sample *s = tu_next(p);
    assert_string_equal(text_of(s, "__key__"), "img/one");
    assert_string_equal(text_of(s, "jpg"), "one");
    assert_int_equal(tu_i64(s, "label"), 3);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

static void test_glob(void **state)
{
    (void)state;
    snprintf(g_spec, sizeof g_spec, "files:glob=%s/*/*.jpg", tu_at("R"));
    ef_pipeline *p = make(g_spec, 0);
    ef_sample *s = tu_next(p);
    assert_string_equal(text_of(s, "__url__"), tu_at("R/cat/a.jpg"));
    ef_tensor t;
    assert_int_not_equal(ef_sample_get(s, "label", &t), EF_OK);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    snprintf(g_spec, sizeof g_spec, "files:glob=%s/*.nothing", tu_at("R"));
    expect_spec_error(g_spec, "matches no file");
}

/* ---- failures ------------------------------------------------------ */

/* Under on_error=skip: files 1 and 3, the bad one between them skipped,
 * its message into msg (cap bytes; NULL, 0: not wanted). */
static void expect_skipped_between(const char *spec, char *msg, size_t cap)
{
    ef_pipeline *p = make(spec, 1);
    ef_sample *s = tu_next(p);
    assert_string_equal(text_of(s, "jpg"), "1");
    ef_sample_free(s);
    s = tu_next(p);
    assert_string_equal(text_of(s, "jpg"), "3");
    ef_sample_free(s);
    tu_expect_end(p);
    assert_int_equal(ef_pipeline_skipped(p, msg, cap), 1);
    ef_pipeline_destroy(p);
}

static void test_unreadable(void **state)
{
    (void)state;
    if (mkdir(tu_at("U"), 0755) != 0 || mkdir(tu_at("U/a"), 0755) != 0)
        fail_msg("mkdir");
    put("U/a/1.jpg", "1");
    put("U/a/3.jpg", "3");
    /* a dangling link is a file to os.walk, and cannot be read */
    assert_int_equal(symlink("gone.jpg", tu_at("U/a/2.jpg")), 0);
    snprintf(g_spec, sizeof g_spec, "files:root=%s,readers=2", tu_at("U"));
    ef_pipeline *p = make(g_spec, 0);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(ef_pipeline_next(p, &s), EF_EIO);
    if (!strstr(ef_pipeline_error(p), tu_at("U/a/2.jpg")) ||
        !strstr(ef_pipeline_error(p), "files: file 1"))
        fail_msg("message \"%s\" lacks the file", ef_pipeline_error(p));
    assert_int_equal(ef_pipeline_next(p, &s), EF_EIO); /* sticky */
    ef_pipeline_destroy(p);

    char msg[512];
    expect_skipped_between(g_spec, msg, sizeof msg);
    if (!strstr(msg, tu_at("U/a/2.jpg")))
        fail_msg("skip message \"%s\" lacks the file", msg);
}

static void expect_not_regular(const char *spec, const char *fifo)
{
    ef_pipeline *p = make(spec, 0);
    ef_sample *s = tu_next(p);
    assert_string_equal(text_of(s, "jpg"), "1");
    ef_sample_free(s);
    assert_int_equal(ef_pipeline_next(p, &s), EF_EIO);
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, fifo) || !strstr(msg, "not a regular file"))
        fail_msg("%s: message \"%s\" does not name %s as not a regular file",
                 spec, msg, fifo);
    ef_pipeline_destroy(p); /* returns: no reader waits on the FIFO */
    expect_skipped_between(spec, NULL, 0);
}

/* A FIFO found in the tree or named by a list is refused, naming it: its
 * open would wait for a writer for good, and the pipeline's close with
 * it. */
static void test_fifo_refused(void **state)
{
    (void)state;
    alarm(60); /* a hang is a failure, not a stuck test */
    if (mkdir(tu_at("F"), 0755) != 0 || mkdir(tu_at("F/a"), 0755) != 0)
        fail_msg("mkdir");
    put("F/a/1.jpg", "1");
    put("F/a/3.jpg", "3");
    assert_int_equal(mkfifo(tu_at("F/a/2.jpg"), 0644), 0);
    snprintf(g_spec, sizeof g_spec, "files:root=%s,readers=2", tu_at("F"));
    expect_not_regular(g_spec, tu_at("F/a/2.jpg"));
    put("F/list.txt", "a/1.jpg 0\na/2.jpg 1\na/3.jpg 2\n");
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("F/list.txt"));
    expect_not_regular(g_spec, tu_at("F/a/2.jpg"));
    alarm(0);
}

/* ---- order --------------------------------------------------------- */

/* The indices of a whole run. */
static size_t indices(ef_pipeline *p, int64_t *out, size_t max)
{
    size_t n = 0;
    for (ef_sample *s; (s = tu_next_or_end(p, "files")) != NULL;) {
        assert_true(n < max);
        out[n++] = ef_sample_identity(s).index;
        ef_sample_free(s);
    }
    return n;
}

static void test_shards(void **state)
{
    (void)state;
    int seen[NEXPECTED] = {0};
    for (int i = 0; i < 4; i++) {
        char more[32];
        snprintf(more, sizeof more, ",shard=%d/4", i);
        ef_pipeline *p = make(root_spec(more), 0);
        int64_t idx[NEXPECTED];
        size_t n = indices(p, idx, NEXPECTED);
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(idx[k] % 4, i);
            seen[idx[k]]++;
        }
        ef_pipeline_destroy(p);
        /* the pipeline's part reads the same */
        ef_pipeline *q = NULL;
        assert_int_equal(ef_pipeline_create(&q), EF_OK);
        assert_int_equal(ef_pipeline_set_shard(q, i, 4), EF_OK);
        tu_parse(q, root_spec(""));
        int64_t idx2[NEXPECTED];
        assert_int_equal(indices(q, idx2, NEXPECTED), n);
        assert_memory_equal(idx, idx2, n * sizeof *idx);
        ef_pipeline_destroy(q);
    }
    for (size_t k = 0; k < NEXPECTED; k++)
        assert_int_equal(seen[k], 1);
}

static void test_shuffle(void **state)
{
    (void)state;
    int64_t a[3 * NEXPECTED], b[3 * NEXPECTED];
    ef_pipeline *p = make(root_spec(",shuffle=true,readers=4 | repeat:3"), 0);
    assert_int_equal(indices(p, a, 3 * NEXPECTED), 3 * NEXPECTED);
    ef_pipeline_destroy(p);
    p = make(root_spec(",shuffle=true,readers=1 | repeat:3"), 0);
    assert_int_equal(indices(p, b, 3 * NEXPECTED), 3 * NEXPECTED);
    ef_pipeline_destroy(p);
    /* the readers change nothing */
    assert_memory_equal(a, b, sizeof a);
    for (int e = 0; e < 3; e++) {
        int seen[NEXPECTED] = {0};
        for (size_t k = 0; k < NEXPECTED; k++)
            seen[a[e * NEXPECTED + k]]++;
        for (size_t k = 0; k < NEXPECTED; k++)
            assert_int_equal(seen[k], 1);
    }
    assert_memory_not_equal(a, a + NEXPECTED, NEXPECTED * sizeof *a);
    assert_memory_not_equal(a + NEXPECTED, a + 2 * NEXPECTED,
                            NEXPECTED * sizeof *a);
    /* unshuffled: list order */
    p = make(root_spec(",readers=5"), 0);
    assert_int_equal(indices(p, a, NEXPECTED), NEXPECTED);
    for (size_t k = 0; k < NEXPECTED; k++)
        assert_int_equal(a[k], (int64_t)k);
    ef_pipeline_destroy(p);
}

static void test_echo_auto(void **state)
{
    (void)state;
    /* poll() never blocks: automatic echo may follow the source */
    ef_pipeline *p = make(root_spec(" | echo:factor=auto,max=3"), 0);
    long n = tu_drain(p);
    assert_true(n >= (long)NEXPECTED && n <= 3 * (long)NEXPECTED);
    ef_pipeline_destroy(p);
}

/* ---- checkpoints ---------------------------------------------------- */

static ef_pipeline *make_for(const char *spec, const void *arg)
{
    return make(spec, arg != NULL);
}

static void test_resume(void **state)
{
    (void)state;
    char spec[1024], other[1024];
    /* mid-epoch, the next epochs reshuffled, other readers on restore */
    snprintf(spec, sizeof spec,
             "files:root=%s,shuffle=true,readers=3 | repeat:3", tu_at("R"));
    snprintf(other, sizeof other,
             "files:root=%s,shuffle=true,readers=2 | repeat:3", tu_at("R"));
    assert_int_equal(
        tu_check_resume(make_for, NULL, spec, other, NULL, 27, 100),
        3 * NEXPECTED);
    /* held items fetched again: a shuffle buffer and batches downstream */
    snprintf(spec, sizeof spec,
             "files:root=%s,readers=4,extensions=tif | shuffle:3 | repeat:2",
             tu_at("R"));
    assert_int_equal(tu_check_resume(make_for, NULL, spec, spec, NULL, 6, 100),
                     2 * 3);
    /* a skipped file keeps the count */
    snprintf(spec, sizeof spec, "files:root=%s,readers=2", tu_at("U"));
    assert_int_equal(
        tu_check_resume(make_for, "skip", spec, spec, NULL, 2, 100), 2);
}

static void test_resume_changed(void **state)
{
    (void)state;
    char spec[600];
    snprintf(spec, sizeof spec, "files:root=%s | shuffle:4", tu_at("R"));
    ef_pipeline *p = make(spec, 0);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    size_t size;
    void *st = tu_save(p, &size);
    ef_pipeline_destroy(p);
    /* a file the shuffle buffer holds changes size */
    put("R/cat/b.PNG", "BBB");
    put("R/cat/a.jpg", "AA");
    put("R/cat/sub/c.jpeg", "CCCC");
    put("R/cat/sub c/d.jpg", "DDDDD");
    p = make(spec, 0);
    int rc = ef_pipeline_restore_state(p, st, size);
    if (rc == EF_OK) /* the pipeline may fetch at its first next */
        rc = ef_pipeline_next(p, &s);
    assert_int_equal(rc, EF_EFORMAT);
    if (!strstr(ef_pipeline_error(p), "the file changed"))
        fail_msg("message \"%s\"", ef_pipeline_error(p));
    ef_pipeline_destroy(p);
    put("R/cat/b.PNG", "BB");
    put("R/cat/a.jpg", "A");
    put("R/cat/sub/c.jpeg", "CCC");
    put("R/cat/sub c/d.jpg", "DDDD");
    free(st);
}

/* A list that is not a regular file is refused before a byte is read:
 * /dev/zero would be read until memory ran out, a FIFO would block. The
 * alarm turns a hang into a failure. */
static void test_list_not_regular(void **state)
{
    (void)state;
    alarm(60);
    expect_spec_error("files:list=/dev/zero",
                      "/dev/zero: not a regular file (a FIFO, a device or a "
                      "directory), which the list file must be");
    assert_int_equal(mkfifo(tu_at("list.fifo"), 0644), 0);
    snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("list.fifo"));
    expect_spec_error(g_spec, "not a regular file");
    unlink(tu_at("list.fifo"));
    alarm(0);
}

/* A line of EF__FILES_MAX_LINE bytes is read; one byte more is refused,
 * naming the line, read from a file or parsed from memory. */
static void test_list_long_line(void **state)
{
    (void)state;
    const size_t max = EF__FILES_MAX_LINE;
    char *text = malloc(2 * max + 64);
    assert_non_null(text);
    int head = snprintf(text, 64, "a.jpg 0\n");
    char *line = text + head;
    memset(line, 'x', max);
    memcpy(line + max - 6, ".jpg 1", 6); /* exactly max bytes */
    line[max] = '\n';
    size_t n = (size_t)head + max + 1;
    ef__file_list l;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__files_parse_list(text, n, "list.txt", "", &l, &err),
                     EF_OK);
    assert_int_equal(l.n, 2);
    assert_int_equal(strlen(ef__file_url(&l, 1)), max - 2);
    ef__file_list_free(&l);
    /* one more byte, in the path */
    memset(line, 'x', max + 1);
    memcpy(line + max + 1 - 6, ".jpg 1", 6);
    line[max + 1] = '\n';
    char want[128];
    snprintf(want, sizeof want, "list.txt: line 2: longer than %zu bytes", max);
    expect_parse_error(text, n + 1, want);
    /* the same from a file, the line last and unended, and followed */
    for (int ended = 0; ended < 2; ended++) {
        tu_write_file(tu_at("L/long.txt"), text, n + (size_t)ended);
        snprintf(g_spec, sizeof g_spec, "files:list=%s", tu_at("L/long.txt"));
        snprintf(want, sizeof want, "long.txt: line 2: longer than %zu bytes",
                 max);
        expect_spec_error(g_spec, want);
    }
    free(text);
}

/* A list of more than 64 KiB, read through the reader's buffer: every
 * line whole, in order; max_entries stops it at the line past the
 * limit. */
static void test_list_large_and_bounded(void **state)
{
    (void)state;
    enum { N = 6000 };
    char *text = malloc((size_t)N * 40);
    assert_non_null(text);
    size_t n = 0, line = 0; /* the line of the last entry */
    for (int i = 0; i < N; i++) {
        n += (size_t)sprintf(text + n, "%sdir/file-%05d.png %d\n",
                             i % 7 ? "" : "\n# c\n", i, i);
        line += i % 7 ? 1 : 3;
    }
    assert_true(n > 2 * 65536);
    tu_write_file(tu_at("L/large.txt"), text, n);
    ef__file_list l;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__files_from_list(tu_at("L/large.txt"), N, &l, &err),
                     EF_OK);
    assert_int_equal(l.n, N);
    for (int i = 0; i < N; i++) {
        char want[64];
        snprintf(want, sizeof want, "%s/dir/file-%05d.png", tu_at("L"), i);
        assert_string_equal(ef__file_url(&l, (size_t)i), want);
        assert_int_equal(l.v[i].label, i);
    }
    ef__file_list_free(&l);
    assert_int_equal(ef__files_from_list(tu_at("L/large.txt"), N - 1, &l, &err),
                     EF_EFORMAT);
    char want[128];
    snprintf(want, sizeof want,
             "line %zu: more than %d entries; max_entries=N raises the limit",
             line, N - 1);
    if (!strstr(err.msg, want))
        fail_msg("\"%s\" lacks \"%s\"", err.msg, want);
    assert_int_equal(l.n, 0);
    snprintf(g_spec, sizeof g_spec, "files:list=%s,max_entries=10",
             tu_at("L/large.txt"));
    expect_spec_error(g_spec, "more than 10 entries; max_entries=N raises");
    free(text);
}

/* A list file 1000 bytes deep: a bad line's message names the list by
 * its tail, the line and what was wrong with it. */
static void test_list_long_name(void **state)
{
    (void)state;
    char path[2048], spec[2100];
    int n = snprintf(path, sizeof path, "%s/LONG", tu_dir());
    assert_int_equal(mkdir(path, 0755), 0);
    for (int i = 0; i < 9; i++) {
        path[n++] = '/';
        memset(path + n, 'a' + i, 100);
        n += 100;
        path[n] = '\0';
        assert_int_equal(mkdir(path, 0755), 0);
    }
    snprintf(path + n, sizeof path - (size_t)n, "/the-list-tail.txt");
    tu_write_file(path, "a.jpg 1\nb.jpg\n", 14);
    snprintf(spec, sizeof spec, "files:list=%s", path);
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_not_equal(ef_pipeline_parse(p, spec), EF_OK);
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, "the-list-tail.txt: line 2: has no label"))
        fail_msg("message \"%s\" does not name the list's tail, the line "
                 "and the reason",
                 msg);
    ef_pipeline_destroy(p);
}

/* A chain of 8 folders, each linking twice to the next, the last with
 * one image: 2^8 paths to it, some 1000 names to walk. The walk stops
 * at max_entries with a message naming the root, the limit and the
 * option. */
static void test_link_dag_bounded(void **state)
{
    (void)state;
    char rel[64], target[64];
    assert_int_equal(mkdir(tu_at("DAG"), 0755), 0);
    assert_int_equal(mkdir(tu_at("DAG/root"), 0755), 0);
    for (int k = 0; k <= 8; k++) {
        snprintf(rel, sizeof rel, "DAG/d%d", k);
        assert_int_equal(mkdir(tu_at(rel), 0755), 0);
        if (k == 8)
            break;
        snprintf(target, sizeof target, "../d%d", k + 1);
        for (char name = 'a'; name <= 'b'; name++) {
            snprintf(rel, sizeof rel, "DAG/d%d/%c", k, name);
            assert_int_equal(symlink(target, tu_at(rel)), 0);
        }
    }
    put("DAG/d8/x.jpg", "X");
    assert_int_equal(symlink("../d0", tu_at("DAG/root/cls")), 0);

    snprintf(g_spec, sizeof g_spec, "files:root=%s", tu_at("DAG/root"));
    ef_pipeline *p = make(g_spec, 0);
    assert_int_equal(tu_drain(p), 256);
    ef_pipeline_destroy(p);

    char want[600];
    snprintf(want, sizeof want,
             "%s has more than 100 files and folders (links followed); the "
             "walk stopped there: max_entries=N raises the limit",
             tu_at("DAG/root"));
    snprintf(g_spec, sizeof g_spec, "files:root=%s,max_entries=100",
             tu_at("DAG/root"));
    expect_spec_error(g_spec, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folder_order_and_fields),
        cmocka_unit_test(test_folder_bytes),
        cmocka_unit_test(test_folder_empty_class),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_link_dag_bounded),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_list_errors),
        cmocka_unit_test(test_list_long_name),
        cmocka_unit_test(test_list_not_regular),
        cmocka_unit_test(test_list_long_line),
        cmocka_unit_test(test_list_large_and_bounded),
        cmocka_unit_test(test_list_url_line_unterminated),
        cmocka_unit_test(test_list_nul_refused),
        cmocka_unit_test(test_list_bom_skipped),
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_unreadable),
        cmocka_unit_test(test_fifo_refused),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_shuffle),
        cmocka_unit_test(test_echo_auto),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_resume_changed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
