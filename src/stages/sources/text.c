/* SPDX-License-Identifier: Apache-2.0 */
/* text: plain-text files as a source, one document per line (see
 * lines.h): a u8 field `field` (default "text") holding the line without
 * its end ("\n" or "\r\n"). Blank lines are passed over and counted. */
#include "stages/sources/lines.h"

static int text_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return ef__lines_create(s, o, NULL, err);
}

static const ef__option_def text_options[] = {EF__LINES_OPTIONS};

const ef__stage_def ef__stage_text = {
    .info = {"text", "text files, one document per line (gzip, zstd, URLs)",
             EF__OPTIONS(text_options)},
    .create = text_create,
    EF__RECORD_FILE_STAGE,
};
