/* SPDX-License-Identifier: Apache-2.0 */
/* Opening a local regular file (regular_file.h). */
#include "io/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ef__open_regular(const char *path, const char *what, int *fd,
                     uint64_t *size, ef__err *err)
{
    *size = 0;
    /* without blocking: a FIFO's open waits for a writer */
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0)
        return ef__err_set(err, EF_EIO, "%s: cannot open %s: %s", path, what,
                           strerror(errno));
    struct stat sb;
    int rc = EF_OK;
    if (fstat(*fd, &sb) != 0)
        rc = ef__err_set(err, EF_EIO, "%s: cannot stat %s: %s", path, what,
                         strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = ef__err_set(err, EF_EIO,
                         "%s: not a regular file (a FIFO, a device or a "
                         "directory), which %s must be",
                         path, what);
    else if (fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = ef__err_set(err, EF_EIO, "%s: cannot open %s: %s", path, what,
                         strerror(errno));
    if (rc != EF_OK) {
        close(*fd);
        *fd = -1;
        return rc;
    }
    *size = (uint64_t)sb.st_size;
    return EF_OK;
}
