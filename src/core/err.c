/* Detailed error messages (see err.h). */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ef__err_clear(ef__err *err)
{
    err->status = EF_OK;
    err->msg[0] = '\0';
}

int ef__err_set(ef__err *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

int ef__err_prefix(ef__err *err, const char *prefix)
{
    char tmp[EF__ERR_MAX];
    size_t n = strlen(prefix);
    if (n > sizeof tmp - 3)
        n = sizeof tmp - 3;
    memcpy(tmp, prefix, n);
    memcpy(tmp + n, ": ", 2);
    size_t m = strlen(err->msg);
    if (m > sizeof tmp - n - 3)
        m = sizeof tmp - n - 3;
    memcpy(tmp + n + 2, err->msg, m);
    tmp[n + 2 + m] = '\0';
    memcpy(err->msg, tmp, sizeof tmp);
    return err->status;
}
