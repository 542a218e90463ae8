/* SPDX-License-Identifier: Apache-2.0 */
/* A service trainer's checkpoint record (src/service/progress.c): what
 * the consumer was handed, by split and position, read back as saved;
 * epochs delivered whole leave it; records of other workers' settings,
 * and corrupt ones, are refused with what differs; the records of
 * several trainers join into the job's (their union), refusing records
 * that disagree. No MPI is started:
 * the record reads only the job's workers and their settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "service/service.h"

/* "the spec", "idx", "--splits", "4", "--seed", "3" with their zeros */
static char settings[] = "the spec\0idx\0--splits\0" "4\0--seed\0" "3";

static ef__service_job job_of(int nworkers, char *text, int len)
{
    ef__service_job j;
    memset(&j, 0, sizeof j);
    j.nworkers = nworkers;
    j.ntrainers = 1;
    j.worker_settings = text;
    j.worker_settings_len = len;
    return j;
}

static void save(ef__progress *p, const ef__service_job *job,
                 ef__state_out *o)
{
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__progress_save(p, job, o, &err), EF_OK);
}

static int restore(const ef__state_out *o, const ef__service_job *job,
                   ef__progress **out, ef__err *err)
{
    ef__err_clear(err);
    ef__state_in in = {.p = o->buf, .len = o->len, .err = err};
    int rc = ef__progress_restore(&in, job, out, err);
    if (rc == EF_OK && ef__state_in_done(&in) != EF_OK) {
        ef__progress_free(*out);
        return err->status;
    }
    return rc;
}

static void test_round_trip_and_prune(void **state)
{
    (void)state;
    ef__service_job job = job_of(2, settings, sizeof settings);
    ef__progress *p = ef__progress_new(0);
    assert_non_null(p);
    /* epoch 0: split 1 whole (3 of 3), split 0 half; epoch 1 begun */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ef__progress_delivered(p, 0, 1, i), EF_OK);
    ef__progress_split_end(p, 0, 1, 3);
    ef__progress_delivered(p, 0, 0, 0);
    ef__progress_delivered(p, 0, 0, 70); /* past the first word */
    ef__progress_split_end(p, 0, 0, 100);
    ef__progress_delivered(p, 1, 0, 5);
    ef__progress_epoch_end(p, 0, 2);
    ef__progress_epoch_end(p, 0, 2);
    assert_int_equal(ef__progress_first(p), 0); /* split 0 is not whole */
    ef__state_out o = {0};
    save(p, &job, &o);
    ef__progress *q = NULL;
    ef__err err;
    assert_int_equal(restore(&o, &job, &q, &err), EF_OK);
    /* saved again, the same bytes */
    ef__state_out again = {0};
    save(q, &job, &again);
    assert_int_equal(again.len, o.len);
    assert_memory_equal(again.buf, o.buf, o.len);
    /* the OPEN message names both epochs' splits with their bitmaps */
    int64_t *msg;
    int n;
    assert_int_equal(ef__progress_open_msg(q, 0, 1, &msg, &n), EF_OK);
    assert_int_equal(msg[0], 0);
    assert_int_equal(msg[1], 1);
    assert_int_equal(msg[2], 3); /* records: (0, 0), (0, 1), (1, 0) */
    assert_int_equal(msg[3], 0);  /* epoch */
    assert_int_equal(msg[4], 0);  /* split */
    assert_int_equal(msg[5], 100); /* its length */
    assert_int_equal(msg[6], 2);  /* words */
    assert_int_equal((uint64_t)msg[7], 1);
    assert_int_equal((uint64_t)msg[8], (uint64_t)1 << 6);
    ef__free(msg);
    /* the rest of split 0 delivered: epoch 0 leaves the record */
    for (int i = 1; i < 100; i++)
        ef__progress_delivered(q, 0, 0, i);
    ef__state_out still = {0}; /* but not before every worker ended it */
    save(q, &job, &still);
    assert_int_equal(ef__progress_first(q), 0);
    ef__progress_epoch_end(q, 0, 2);
    ef__progress_epoch_end(q, 0, 2);
    ef__state_out later = {0};
    save(q, &job, &later);
    assert_int_equal(ef__progress_first(q), 1);
    ef__progress_free(p);
    ef__progress_free(q);
    ef__state_out_free(&o);
    ef__state_out_free(&again);
    ef__state_out_free(&later);
    ef__state_out_free(&still);
}

static void test_other_workers_refused(void **state)
{
    (void)state;
    ef__service_job job = job_of(2, settings, sizeof settings);
    ef__progress *p = ef__progress_new(0);
    ef__progress_delivered(p, 0, 0, 1);
    ef__state_out o = {0};
    save(p, &job, &o);
    ef__progress_free(p);
    static char other[] = "the spec\0idx\0--splits\0" "6\0--seed\0" "3";
    ef__service_job job2 = job_of(2, other, sizeof other);
    ef__progress *q = NULL;
    ef__err err;
    assert_int_equal(restore(&o, &job2, &q, &err), EF_ESPEC);
    assert_non_null(strstr(err.msg, "--splits differs between the workers "
                                    "of the checkpoint and this job's: 4 "
                                    "then, 6 now"));
    /* another worker count is fine with --splits given ... */
    ef__service_job job3 = job_of(3, settings, sizeof settings);
    assert_int_equal(restore(&o, &job3, &q, &err), EF_OK);
    ef__progress_free(q);
    ef__state_out_free(&o);
    /* ... not when it was left to its default, 8 per worker */
    static char dflt[] = "the spec\0idx\0--splits\0(default)\0--seed\0" "3";
    ef__service_job job4 = job_of(2, dflt, sizeof dflt);
    ef__state_out o2 = {0};
    save(NULL, &job4, &o2);
    ef__service_job job5 = job_of(3, dflt, sizeof dflt);
    assert_int_equal(restore(&o2, &job5, &q, &err), EF_ESPEC);
    assert_non_null(strstr(err.msg, "saved beside 2 workers, this job has 3"));
    ef__state_out_free(&o2);
}

/* A record by hand: no settings, 1 worker, first 0, one epoch (0) of
 * one split (0) of length `size`, `words` words each `word`, the split
 * named `times` times. */
static void hand_record(ef__state_out *o, int64_t size, uint64_t word,
                        int times)
{
    ef__put_u64(o, 0);
    ef__put_u64(o, 1);
    ef__put_u64(o, 0);
    ef__put_u64(o, 1);
    ef__put_u64(o, 0);
    ef__put_u64(o, (uint64_t)times);
    for (int i = 0; i < times; i++) {
        ef__put_u64(o, 0);
        ef__put_i64(o, size);
        ef__put_u64(o, 1);
        ef__put_u64(o, word);
    }
}

static void test_corrupt_records_refused(void **state)
{
    (void)state;
    ef__service_job job = job_of(1, NULL, 0);
    ef__progress *q = NULL;
    ef__err err;
    ef__state_out o = {0};
    hand_record(&o, 3, 0xff, 1); /* 8 delivered of 3 */
    assert_int_equal(restore(&o, &job, &q, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "split 0: 8 positions delivered of 3"));
    ef__state_out_free(&o);
    ef__state_out o2 = {0};
    hand_record(&o2, 10, 1, 2);
    assert_int_equal(restore(&o2, &job, &q, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "split 0 named twice"));
    ef__state_out_free(&o2);
    ef__state_out o3 = {0};
    hand_record(&o3, 10, 1, 1);
    o3.len -= 1; /* cut short */
    assert_int_equal(restore(&o3, &job, &q, &err), EF_EFORMAT);
    ef__state_out_free(&o3);
}

/* Trainer records packed one after another, as the trainers gather
 * them (receive.c), joined into the job's. */
static int join(ef__progress *const *recs, int n, ef__progress **out,
                ef__err *err)
{
    ef__state_out all = {0};
    size_t counts[4];
    for (int t = 0; t < n; t++) {
        size_t before = all.len;
        assert_int_equal(ef__progress_pack(recs[t], &all, err), EF_OK);
        counts[t] = all.len - before;
    }
    ef__err_clear(err);
    int rc = ef__progress_join(all.buf, counts, n, out, err);
    ef__state_out_free(&all);
    return rc;
}

static void test_trainers_joined(void **state)
{
    (void)state;
    ef__service_job job = job_of(2, settings, sizeof settings);
    job.ntrainers = 2;
    ef__progress *a = ef__progress_new(0), *b = ef__progress_new(0);
    /* epoch 0, 2 splits dealt to both trainers: whole in neither
     * record, whole in their union */
    for (int i = 0; i < 10; i++)
        ef__progress_delivered(i % 3 ? a : b, 0, 0, i);
    for (int i = 0; i < 3; i++)
        ef__progress_delivered(a, 0, 1, i);
    ef__progress *both[] = {a, b};
    for (int t = 0; t < 2; t++) {
        ef__progress_split_end(both[t], 0, 0, 10);
        ef__progress_split_end(both[t], 0, 1, 3);
    }
    /* epoch 1 begun: a position each, of a split of 200 */
    ef__progress_delivered(a, 1, 0, 5);
    ef__progress_delivered(b, 1, 0, 130);
    ef__progress_split_end(b, 1, 0, 200);
    /* the end marks of epoch 0: every worker's reached a, one b */
    ef__progress_epoch_end(a, 0, 2);
    ef__progress_epoch_end(a, 0, 2);
    ef__progress_epoch_end(b, 0, 2);
    assert_int_equal(ef__progress_first(a), 0);
    assert_int_equal(ef__progress_first(b), 0);
    ef__progress *j = NULL;
    ef__err err;
    assert_int_equal(join(both, 2, &j, &err), EF_OK);
    /* saved, epoch 0 leaves the record: whole in the union */
    ef__state_out o = {0};
    save(j, &job, &o);
    assert_int_equal(ef__progress_first(j), 1);
    int64_t *msg;
    int n;
    assert_int_equal(ef__progress_open_msg(j, 1, 1, &msg, &n), EF_OK);
    assert_int_equal(msg[2], 1);   /* one record: epoch 1, split 0 */
    assert_int_equal(msg[3], 1);   /* epoch */
    assert_int_equal(msg[4], 0);   /* split */
    assert_int_equal(msg[5], 200); /* b's length, a knew none */
    assert_true(msg[6] >= 3);      /* words */
    assert_int_equal((uint64_t)msg[7], (uint64_t)1 << 5);
    assert_int_equal((uint64_t)msg[8], 0);
    assert_int_equal((uint64_t)msg[9], (uint64_t)1 << 2); /* 130 */
    ef__free(msg);
    ef__progress_free(j);
    /* a alone is not whole: without b's positions, epoch 0 stays */
    ef__progress *one[] = {a};
    assert_int_equal(join(one, 1, &j, &err), EF_OK);
    ef__state_out o2 = {0};
    save(j, &job, &o2);
    assert_int_equal(ef__progress_first(j), 0);
    ef__progress_free(j);
    /* a trainer whose record dropped epoch 0 (it took all of it) and
     * one that took none of it: the union dropped it too */
    ef__progress *c = ef__progress_new(0), *d = ef__progress_new(0);
    ef__progress_delivered(c, 0, 0, 0);
    ef__progress_split_end(c, 0, 0, 1);
    ef__progress_split_end(d, 0, 0, 1);
    ef__progress_delivered(d, 1, 0, 7);
    ef__progress_epoch_end(c, 0, 1);
    assert_int_equal(ef__progress_first(c), 1);
    ef__progress *cd[] = {d, c};
    assert_int_equal(join(cd, 2, &j, &err), EF_OK);
    assert_int_equal(ef__progress_first(j), 1);
    assert_int_equal(ef__progress_open_msg(j, 1, 1, &msg, &n), EF_OK);
    assert_int_equal(msg[2], 1); /* only epoch 1's split */
    assert_int_equal(msg[3], 1);
    ef__free(msg);
    ef__progress_free(j);
    ef__progress_free(a);
    ef__progress_free(b);
    ef__progress_free(c);
    ef__progress_free(d);
    ef__state_out_free(&o);
    ef__state_out_free(&o2);
}

static void test_trainers_disagreeing_refused(void **state)
{
    (void)state;
    ef__progress *a = ef__progress_new(0), *b = ef__progress_new(0);
    ef__progress_delivered(a, 0, 2, 1);
    ef__progress_split_end(a, 0, 2, 10);
    ef__progress_split_end(b, 0, 2, 12);
    ef__progress *ab[] = {a, b}, *j = NULL;
    ef__err err;
    assert_int_equal(join(ab, 2, &j, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "trainer 1's record: service: the "
                                    "trainers' records differ: split 2 of "
                                    "epoch 0 is 10 samples long in one, 12 "
                                    "in another"));
    /* positions past the length the other trainer knows */
    ef__progress *c = ef__progress_new(0), *d = ef__progress_new(0);
    for (int i = 0; i < 4; i++)
        ef__progress_delivered(c, 0, 0, i);
    ef__progress_delivered(d, 0, 0, 4);
    ef__progress_split_end(d, 0, 0, 4);
    ef__progress *cd[] = {c, d};
    assert_int_equal(join(cd, 2, &j, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "split 0 of epoch 0 has 5 positions "
                                    "delivered of 4"));
    /* a record cut short */
    ef__state_out o = {0};
    assert_int_equal(ef__progress_pack(a, &o, &err), EF_OK);
    size_t cut = o.len - 1;
    assert_int_equal(ef__progress_join(o.buf, &cut, 1, &j, &err),
                     EF_EFORMAT);
    assert_non_null(strstr(err.msg, "trainer 0's record"));
    ef__state_out_free(&o);
    ef__progress_free(a);
    ef__progress_free(b);
    ef__progress_free(c);
    ef__progress_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_prune),
        cmocka_unit_test(test_other_workers_refused),
        cmocka_unit_test(test_corrupt_records_refused),
        cmocka_unit_test(test_trainers_joined),
        cmocka_unit_test(test_trainers_disagreeing_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
