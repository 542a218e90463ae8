/* SPDX-License-Identifier: Apache-2.0 */
/* One JSON writer for every report the command prints: `run --json`,
 * `--stats-every` lines and `train --json`. */
#ifndef EF_CLI_JSON_H
#define EF_CLI_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 8

typedef struct {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH]; /* values written so far at each level */
    char closer[JSON_MAX_DEPTH]; /* '}' or ']' for each open level */
} json_writer;

void json_init(json_writer *w, FILE *f);

/* `key` names the value inside an object; NULL inside an array or at the
 * top. Objects and arrays nest up to JSON_MAX_DEPTH. */
void json_begin_object(json_writer *w, const char *key);
void json_begin_array(json_writer *w, const char *key);
void json_end(json_writer *w); /* closes the innermost object or array */

/* Whole numbers up to 2^53 print exactly, others with 9 significant
 * digits; NaN and infinities as null, since JSON has neither. */
void json_number(json_writer *w, const char *key, double v);
void json_uint(json_writer *w, const char *key, uint64_t v);
void json_bool(json_writer *w, const char *key, int v);
void json_null(json_writer *w, const char *key);
/* Bytes that are not valid UTF-8 become U+FFFD. */
void json_string(json_writer *w, const char *key, const char *text);

#endif
