/* SPDX-License-Identifier: Apache-2.0 */
/* Stream options from a source's options (see stream_options.h). */
#include "stages/sources/stream_options.h"

void ef__stream_opts_http(const ef__opts *o, ef__stream_opts *out)
{
    ef__stream_opts_init(out);
    out->tries = (int)ef__opt_int(o, "tries");
    out->timeout_s = ef__opt_float(o, "timeout");
}

void ef__stream_opts_from(const ef__opts *o, ef__stream_opts *out)
{
    ef__stream_opts_http(o, out);
    out->max_inflate = (int)ef__opt_int(o, "max_inflate");
}
