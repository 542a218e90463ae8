/* SPDX-License-Identifier: Apache-2.0 */
/* jsonl: JSON Lines files as a source, one document per line (see
 * lines.h): each line is a JSON object, and the string value of its key
 * `key` (default "text"), escapes decoded to UTF-8, becomes the u8 field
 * `field` (default "text"). Other keys are checked and ignored. Blank
 * lines are passed over and counted; a line that is not an object with
 * that key holding a string is an error naming the file, line and byte. */
#include "stages/sources/lines.h"

static int jsonl_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return ef__lines_create(s, o, ef__opt_string(o, "key"), err);
}

static const ef__option_def jsonl_options[] = {
    EF__OPT("key", EF_OPT_STRING, "text",
            "the key of each line's object whose string is the document", 0, 0),
    EF__LINES_OPTIONS,
};

const ef__stage_def ef__stage_jsonl = {
    .info = {"jsonl",
             "JSON Lines files, one document per line (gzip, zstd, "
             "URLs)",
             EF__OPTIONS(jsonl_options)},
    .create = jsonl_create,
    EF__RECORD_FILE_STAGE,
};
