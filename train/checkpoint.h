/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints of a training run: the model's weights and momentum, the
 * loop's counters and the training pipeline's state in one file, so that
 * a run killed at any moment resumes from its last checkpoint and ends
 * as the uninterrupted run would, bit for bit.
 *
 * The file is written whole or not at all: to PATH.tmp.PID (the
 * writer's own; a second run on the path is refused by the lock on
 * PATH.lock, eft_checkpoint_lock), fsync'd,
 * renamed over PATH, then the folder fsync'd; removed when a step fails.
 * Reading refuses anything but a regular file, without blocking on a
 * named pipe. Layout, integers and floats
 * little-endian:
 *   "EFTCKPT\0" | u32 format version | u32 partitions | u64 payload bytes |
 *   payload | u32 CRC-32C of everything before it
 *   payload: the settings (u32 count; each a name (u8 length, bytes), a
 *            kind (u8: 0 integer, 1 float) and 8 bytes of value), the
 *            counters (eft_run_state, fixed order), the model (u32
 *            tensors; each a u64 count, its values, its momentum), then
 *            version 1 (one process outside mpirun reading its data as
 *            one partition; partitions 0): the pipeline state (u64
 *            bytes, the bytes);
 *            version 2 (a run of `partitions` partitions, under mpirun
 *            or not): each partition's part (eft_part) in partition
 *            order, each as u64 bytes and the bytes.
 * A run writes the version of its kind and reads only that kind with its
 * own number of partitions, on any number of processes that divides it
 * (trainer.h says how partitions are dealt to processes): a checkpoint
 * of another is refused naming both counts.
 * The settings are those of eft_config that shape the run (not threads,
 * a speed setting) and a hash of the held-out set: a checkpoint of
 * another run is refused, naming the setting and both values. In a
 * version 2 file, the counters and the model are process 0's: every
 * process applies the same summed update, so their models are equal. The
 * version 2 files of runs with one partition per process (before
 * partitions could be chosen) read as they were written. */
#ifndef EFT_CHECKPOINT_H
#define EFT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "trainer.h"

#define EFT_LOSS_WINDOW 50 /* steps the reported training loss is over */

/* Everything of a run besides the model and the pipeline that later steps
 * or the report depend on. */
typedef struct {
    eft_result res;    /* counters, last evaluation, time-to-target */
    long next_eval;    /* fresh count of the next evaluation */
    long evaluated_at; /* fresh count of the last evaluation, or -1 */
    double loss_window[EFT_LOSS_WINDOW];
    int finished; /* the run ended (budget, target, divergence, data) */
} eft_run_state;

/* What the run is, for a checkpoint to be checked against. */
typedef struct {
    const eft_config *cfg;
    uint64_t test_hash; /* eft_hash of the held-out set; 0: none */
} eft_run_id;

/* Writes a checkpoint to `path`; the pipeline state is `pipe_n` bytes at
 * `pipe`. Returns 0, or -1 with a message naming the file in err. */
int eft_checkpoint_save(const char *path, const eft_run_id *id, eft_model *m,
                        const eft_run_state *st, const void *pipe,
                        size_t pipe_n, char *err, size_t len);

/* Reads the checkpoint at `path` into m and *st, and its pipeline state
 * into *pipe (the caller frees it) and *pipe_n. Returns 0; 1 when there
 * is no file at path (nothing changed); -1 with a message naming the
 * file and what is wrong (unreadable, truncated, corrupt, another format
 * version, another run's settings or model, a data-parallel run's), m
 * and *st unchanged. */
int eft_checkpoint_load(const char *path, const eft_run_id *id, eft_model *m,
                        eft_run_state *st, void **pipe, size_t *pipe_n,
                        char *err, size_t len);

/* One partition's part of a version 2 checkpoint: what is its own rather
 * than the run's. Its bytes, little-endian: u64 fresh, u64 batches, u64
 * samples_hash, u64 feedback_values, u64 state bytes, the state. */
typedef struct {
    long fresh, batches, feedback_values;
    uint64_t samples_hash;
    const void *state; /* its pipeline's (ef_pipeline_save_state) */
    size_t state_n;
} eft_part;

#define EFT_PART_HEADER 40 /* the bytes of a part before its state */

/* Writes p's EFT_PART_HEADER + p->state_n bytes to out. */
void eft_part_encode(const eft_part *p, unsigned char *out);

/* Reads the part in n bytes at `bytes` into *p, whose state then points
 * into them. Returns 0, or -1 when the bytes are not one part (too short,
 * or a state size that disagrees with n). */
int eft_part_decode(const void *bytes, size_t n, eft_part *p);

/* The size of the encoded part at the start of n bytes (several parts
 * one after another), or 0 when they do not start with a whole one. */
size_t eft_part_size(const void *bytes, size_t n);

/* Writes the checkpoint of a run of `nparts` partitions (format version
 * 2): process 0's counters and model, and each partition's part as
 * eft_part_encode wrote it, one after another in `parts`, part_n[p]
 * bytes for partition p. Returns 0, or -1 with a message naming the file
 * in err. */
int eft_checkpoint_save_parts(const char *path, const eft_run_id *id,
                              eft_model *m, const eft_run_state *st, int nparts,
                              const unsigned char *parts, const size_t *part_n,
                              char *err, size_t len);

/* Reads the checkpoint of a run of `nparts` partitions at `path` into m
 * and *st, and its parts into *parts, one after another (the caller
 * frees it), with their sizes in *part_n (nparts of them; the caller
 * frees it). Returns 0; 1 when there is no file at path; -1 with a
 * message naming the file and what is wrong, as eft_checkpoint_load, or
 * that it was saved with another number of partitions (or by one process
 * reading one, version 1), m and *st unchanged. */
int eft_checkpoint_load_parts(const char *path, const eft_run_id *id,
                              int nparts, eft_model *m, eft_run_state *st,
                              unsigned char **parts, size_t **part_n, char *err,
                              size_t len);

/* Claims `path` for this run: an advisory lock (flock) on PATH.lock, so
 * that a second run given the same path is refused rather than both
 * replacing each other's checkpoints. Returns the lock's descriptor for
 * eft_checkpoint_unlock; -1 with a message naming the path in err. */
int eft_checkpoint_lock(const char *path, char *err, size_t len);

/* Removes PATH.lock and lets the path go. Accepts -1. */
void eft_checkpoint_unlock(const char *path, int fd);

/* A 64-bit hash of n bytes, chained through h (start from 0): for the
 * samples trained on, the held-out set and the weights. Not for
 * security. */
uint64_t eft_hash(uint64_t h, const void *data, size_t n);

/* eft_hash over every parameter tensor's values. */
uint64_t eft_model_hash(eft_model *m);

#endif
