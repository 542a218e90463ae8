/* SPDX-License-Identifier: Apache-2.0 */
/* Opening and mapping a local regular file (regular_file.h). */
#include "io/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"

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

typedef struct {
    void *addr;
    size_t len;
} mapping;

static void unmap(void *user)
{
    munmap(((mapping *)user)->addr, ((mapping *)user)->len);
    ef__free(user);
}

int ef__map_regular(const char *path, const char *what, ef_buffer **out,
                    ef__err *err)
{
    int fd;
    uint64_t size;
    *out = NULL;
    int rc = ef__open_regular(path, what, &fd, &size, err);
    if (rc != EF_OK)
        return rc;
    void *addr = size > 0 && size <= SIZE_MAX
                     ? mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0)
                     : MAP_FAILED;
    int mmap_errno = errno;
    close(fd);
    if (size == 0) /* mmap refuses a length of 0 */
        *out = ef_buffer_new(0);
    else if (addr == MAP_FAILED)
        return ef__err_set(err, EF_EIO, "%s: cannot map %s of %llu bytes: %s",
                           path, what, (unsigned long long)size,
                           strerror(mmap_errno));
    mapping *m = size > 0 ? ef__malloc(sizeof *m) : NULL;
    if (m) {
        *m = (mapping){addr, (size_t)size};
        if (!(*out = ef_buffer_wrap(addr, (size_t)size, unmap, m)))
            ef__free(m);
    }
    if (*out)
        return EF_OK;
    if (size > 0)
        munmap(addr, (size_t)size);
    return ef__err_set(err, EF_ENOMEM, "%s: out of memory mapping %s", path,
                       what);
}
