/* HTTP(S) byte streams through libcurl (see stream_backend.h). */
#include "io/stream_backend.h"

int ef__http_open(void **impl, const ef__stream_backend **backend,
                  const char *url, const ef__stream_opts *o, ef__err *err)
{
    (void)impl;
    (void)backend;
    (void)o;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: echoflow was built without libcurl, so it cannot "
                       "read URLs (apt-get install libcurl4-openssl-dev, then "
                       "rebuild)",
                       url);
}
