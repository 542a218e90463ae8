/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints of the sources that read a list of files or URLs through
 * streams (tar, tfrecord): what their saved records share.
 *
 * A record names files by their number in the list, so it first checks
 * that the list is the same one: its length and a checksum of the names
 * (the stage's option text is compared too, but a long list may be cut
 * short there). Then the files' compression as first seen: a file is
 * opened again part way (ef__stream_open_at), and for a URL only plain
 * data known to be plain is asked for from the offset on, without its
 * first bytes, where the gzip magic would be. */
#ifndef EF_STAGES_SOURCES_CHECKPOINT_H
#define EF_STAGES_SOURCES_CHECKPOINT_H

#include <stdatomic.h>
#include <stddef.h>

#include "io/paths.h"
#include "io/stream.h"
#include "pipeline/state.h"

/* ---- the file list ------------------------------------------------ */

/* Writes the list's length and the CRC-32C of its names. */
void ef__files_save(const ef__paths *files, ef__state_out *o);
/* Reads them back: EF_EFORMAT naming the counts when the pipeline's list
 * is not the one the state was saved with. `unit` names an entry
 * ("shard", "file"). */
int ef__files_restore(const ef__paths *files, const char *unit,
                      ef__state_in *in);

/* Writes this process's part (shard=I/N, or the pipeline's). */
void ef__part_save(const ef__shard *part, ef__state_out *o);
/* EF_EFORMAT naming both when the state was saved for another part. */
int ef__part_restore(const ef__shard *part, ef__state_in *in);

/* A failure to read an item again (a fetch) that the data itself caused
 * (EF_EFORMAT): the item was read there before the save, so the message
 * adds that the `unit` ("shard", "file") probably changed since. */
void ef__fetch_failed(ef__err *err, int rc, const char *unit);

/* ---- a place in the files ----------------------------------------- */

/* Where a reader of a part's files, record after record, stands: the
 * file being read (or the next), the offset of its next record in the
 * (inflated) data and that record's number in the file; 0, 0 at a file's
 * start. Numbers stay below 2^32: identities hold them in 32 bits. */
void ef__file_place_save(ef__state_out *o, int64_t file, uint64_t offset,
                         int64_t number);
/* Reads it back for `part` of `nfiles` files: EF_EFORMAT naming what is
 * wrong when the file is not one of the part's (or past its last) or the
 * offset and number do not go together. `unit` names a record ("record",
 * "line"). */
int ef__file_place_restore(ef__state_in *in, const ef__shard *part,
                           size_t nfiles, const char *unit, int64_t *file,
                           uint64_t *offset, int64_t *number);

/* ---- compression as seen ------------------------------------------ */

/* One entry per file of the list: 0 while unknown, else 1 + the EF__COMP_*
 * its data turned out to be when read (or as a restored state said). Any
 * thread notes and looks (relaxed atomics: an entry only ever goes from
 * unknown to known, and an unknown one costs reading from the file's
 * start, never a wrong answer); save and restore run on the consumer's
 * thread. */
typedef struct {
    _Atomic unsigned char *kind;
    size_t n;
} ef__comp_seen;

/* All unknown; EF_ENOMEM when out of memory. */
int ef__comp_seen_init(ef__comp_seen *g, size_t n);
void ef__comp_seen_free(ef__comp_seen *g);
/* Notes what stream s, open on file f, found (once it has read). */
void ef__comp_seen_note(ef__comp_seen *g, size_t f, const ef__stream *s);
/* Options for opening file f again part way: o->compression, when it is to be
 * sniffed (-1), set to what the file turned out to be, if known. */
void ef__comp_seen_opts(const ef__comp_seen *g, size_t f, ef__stream_opts *o);
/* Run-length coded: a count of runs, then each run's length and kind. */
void ef__comp_seen_save(const ef__comp_seen *g, ef__state_out *o);
int ef__comp_seen_restore(ef__comp_seen *g, ef__state_in *in);

#endif
