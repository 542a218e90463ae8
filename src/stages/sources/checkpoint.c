/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints of the file sources (see checkpoint.h). */
#include "stages/sources/checkpoint.h"

#include <stdio.h>
#include <string.h>

#include "common/crc32c.h"
#include "core/alloc.h"

/* ---- the file list ------------------------------------------------ */

/* The names with their NULs, so "ab c" and "a bc" differ. */
static uint32_t names_crc(const ef__paths *files)
{
    uint32_t crc = 0;
    for (size_t i = 0; i < files->n; i++)
        crc = ef__crc32c(crc, files->names[i], strlen(files->names[i]) + 1);
    return crc;
}

void ef__files_save(const ef__paths *files, ef__state_out *o)
{
    ef__put_u64(o, files->n);
    ef__put_u64(o, names_crc(files));
}

int ef__files_restore(const ef__paths *files, const char *unit,
                      ef__state_in *in)
{
    uint64_t n, crc;
    ef__get_u64(in, "the number of files", &n);
    int rc = ef__get_u64(in, "the checksum of the names", &crc);
    if (rc != EF_OK)
        return rc;
    if (n != files->n)
        return ef__state_bad(in,
                             "saved over %llu %ss, the pipeline lists %zu "
                             "(a state names them by number: the same list "
                             "is needed)",
                             (unsigned long long)n, unit, files->n);
    uint32_t now = names_crc(files);
    if (crc != now)
        return ef__state_bad(in,
                             "saved over another list of %zu %ss: the names "
                             "differ (CRC-32C %08llx, now %08lx; a state "
                             "names them by number: the same list is needed)",
                             files->n, unit, (unsigned long long)crc,
                             (unsigned long)now);
    return EF_OK;
}

void ef__part_save(const ef__shard *part, ef__state_out *o)
{
    ef__put_i64(o, part->i);
    ef__put_i64(o, part->n);
}

int ef__part_restore(const ef__shard *part, ef__state_in *in)
{
    int64_t i, n;
    ef__get_i64(in, "the part read", &i);
    int rc = ef__get_i64(in, "the number of parts", &n);
    if (rc == EF_OK && (i != part->i || n != part->n))
        return ef__state_bad(in,
                             "saved while reading part %lld of %lld, the "
                             "pipeline reads part %lld of %lld",
                             (long long)i, (long long)n, (long long)part->i,
                             (long long)part->n);
    return rc;
}

void ef__fetch_failed(ef__err *err, int rc, const char *unit)
{
    if (rc != EF_EFORMAT)
        return;
    char msg[EF__ERR_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    ef__err_set(err, rc,
                "%s (reading again what was read there before the state was "
                "saved: the %s changed since?)",
                msg, unit);
}

/* ---- a place in the files ----------------------------------------- */

void ef__file_place_save(ef__state_out *o, int64_t file, uint64_t offset,
                         int64_t number)
{
    ef__put_i64(o, file);
    ef__put_u64(o, offset);
    ef__put_i64(o, number);
}

int ef__file_place_restore(ef__state_in *in, const ef__shard *part,
                           size_t nfiles, const char *unit, int64_t *file,
                           uint64_t *offset, int64_t *number)
{
    char what_offset[64], what_number[64];
    snprintf(what_offset, sizeof what_offset, "the offset of its next %s",
             unit);
    snprintf(what_number, sizeof what_number, "the number of its next %s",
             unit);
    ef__get_i64(in, "the file being read", file);
    ef__get_u64(in, what_offset, offset);
    int rc = ef__get_i64(in, what_number, number);
    if (rc != EF_OK)
        return rc;
    /* past the last file is the end: the file steps by part->n */
    int64_t n = (int64_t)nfiles, f = *file, k = *number;
    if (f < part->i || f > n + part->n || (f < n && f % part->n != part->i))
        return ef__state_bad(in,
                             "file %lld, expected one of part %lld of %lld "
                             "of %lld files",
                             (long long)f, (long long)part->i,
                             (long long)part->n, (long long)n);
    if (k < 0 || k > (int64_t)1 << 32 || (k == 0) != (*offset == 0) ||
        *offset > (uint64_t)INT64_MAX)
        return ef__state_bad(in,
                             "%s %lld at byte %llu of file %lld: expected "
                             "both 0 (the file's start) or both positive",
                             unit, (long long)k, (unsigned long long)*offset,
                             (long long)f);
    return EF_OK;
}

/* ---- compression as seen ------------------------------------------ */

int ef__comp_seen_init(ef__comp_seen *g, size_t n)
{
    g->n = n;
    g->kind = ef__calloc(n ? n : 1, sizeof *g->kind);
    return g->kind ? EF_OK : EF_ENOMEM;
}

void ef__comp_seen_free(ef__comp_seen *g)
{
    ef__free((void *)g->kind);
    g->kind = NULL;
    g->n = 0;
}

void ef__comp_seen_note(ef__comp_seen *g, size_t f, const ef__stream *s)
{
    int c = ef__stream_compression(s);
    if (c == EF__COMP_SNIFF || f >= g->n)
        return;
    atomic_store_explicit(&g->kind[f], (unsigned char)(c + 1),
                          memory_order_relaxed);
}

void ef__comp_seen_opts(const ef__comp_seen *g, size_t f, ef__stream_opts *o)
{
    if (o->compression >= 0 || f >= g->n)
        return;
    unsigned char k = atomic_load_explicit(&g->kind[f], memory_order_relaxed);
    if (k != 0)
        o->compression = k - 1;
}

/* Readers note kinds while a save runs (they are not paused), so the
 * runs are counted and written from one snapshot. */
void ef__comp_seen_save(const ef__comp_seen *g, ef__state_out *o)
{
    unsigned char *k = ef__malloc(g->n ? g->n : 1);
    if (!k) {
        o->failed = 1;
        return;
    }
    uint64_t runs = 0;
    for (size_t f = 0; f < g->n; f++) {
        k[f] = atomic_load_explicit(&g->kind[f], memory_order_relaxed);
        runs += f == 0 || k[f] != k[f - 1];
    }
    ef__put_u64(o, runs);
    for (size_t f = 0; f < g->n;) {
        size_t end = f + 1;
        while (end < g->n && k[end] == k[f])
            end++;
        ef__put_u64(o, end - f);
        ef__put_u64(o, k[f]);
        f = end;
    }
    ef__free(k);
}

int ef__comp_seen_restore(ef__comp_seen *g, ef__state_in *in)
{
    uint64_t runs;
    int rc = ef__get_count(in, "the runs of file kinds", g->n, &runs);
    size_t f = 0;
    for (uint64_t r = 0; r < runs && rc == EF_OK; r++) {
        uint64_t len, kind;
        ef__get_count(in, "a run of file kinds", g->n - f, &len);
        rc = ef__get_count(in, "a file kind", EF__COMP_ZSTD + 1, &kind);
        for (uint64_t k = 0; k < len && rc == EF_OK; k++)
            atomic_store_explicit(&g->kind[f++], (unsigned char)kind,
                                  memory_order_relaxed);
    }
    if (rc == EF_OK && f != g->n)
        return ef__state_bad(in, "the file kinds cover %zu files, expected %zu",
                             f, g->n);
    return rc;
}
