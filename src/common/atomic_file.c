/* SPDX-License-Identifier: Apache-2.0 */
/* See atomic_file.h. */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Records the failed step and errno; returns -1 for the caller's return. */
static int fail(ef__atomic_file *a, ef__atomic_step step, int error)
{
    a->failed = step;
    a->error = error;
    return -1;
}

static char *joined(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (s) {
        memcpy(s, a, na);
        memcpy(s + na, b, nb + 1);
    }
    return s;
}

int ef__atomic_open(ef__atomic_file *a, const char *path, const char *suffix)
{
    memset(a, 0, sizeof *a);
    char pid[32];
    if (!suffix) {
        snprintf(pid, sizeof pid, ".tmp.%ld", (long)getpid());
        suffix = pid;
    }
    a->path = joined(path, "");
    a->tmp = joined(path, suffix);
    if (!a->path || !a->tmp)
        return fail(a, EF__ATOMIC_NOMEM, ENOMEM);
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return fail(a, EF__ATOMIC_CREATE, errno);
    a->f = fdopen(fd, "wb");
    if (!a->f) {
        int e = errno;
        close(fd);
        unlink(a->tmp);
        return fail(a, EF__ATOMIC_CREATE, e);
    }
    return 0;
}

/* fsync of the folder that holds path, so that a rename in it is on disk. */
static int sync_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = !slash          ? joined(".", "")
                : slash == path ? joined("/", "")
                                : strndup(path, (size_t)(slash - path));
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    free(dir);
    if (fd < 0) {
        errno = e;
        return -1;
    }
    int rc = fsync(fd);
    e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Flushes, fsyncs and closes a->f: the first step that fails is kept. */
static int finish_file(ef__atomic_file *a)
{
    int rc = 0;
    if (fflush(a->f) != 0)
        rc = fail(a, EF__ATOMIC_WRITE, errno);
    else if (fsync(fileno(a->f)) != 0)
        rc = fail(a, EF__ATOMIC_FSYNC, errno);
    if (fclose(a->f) != 0 && rc == 0)
        rc = fail(a, EF__ATOMIC_CLOSE, errno);
    a->f = NULL;
    return rc;
}

int ef__atomic_commit(ef__atomic_file *a)
{
    if (!a->f)
        return fail(a, a->failed ? a->failed : EF__ATOMIC_CLOSE, EBADF);
    if (finish_file(a) != 0) {
        unlink(a->tmp);
        return -1;
    }
    if (rename(a->tmp, a->path) != 0) {
        int e = errno;
        unlink(a->tmp);
        return fail(a, EF__ATOMIC_RENAME, e);
    }
    if (sync_folder(a->path) != 0)
        return fail(a, EF__ATOMIC_SYNC_FOLDER, errno);
    return 0;
}

void ef__atomic_abort(ef__atomic_file *a)
{
    if (a->f) {
        fclose(a->f);
        a->f = NULL;
        unlink(a->tmp);
    }
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
}

void ef__atomic_describe(const ef__atomic_file *a, char *buf, size_t cap)
{
    const char *why = strerror(a->error);
    switch (a->failed) {
    case EF__ATOMIC_OK:
        snprintf(buf, cap, "%s: no failure", a->path);
        break;
    case EF__ATOMIC_NOMEM:
        snprintf(buf, cap, "out of memory");
        break;
    case EF__ATOMIC_CREATE:
        snprintf(buf, cap, "%s: cannot create: %s", a->tmp, why);
        break;
    case EF__ATOMIC_WRITE:
    case EF__ATOMIC_FSYNC:
    case EF__ATOMIC_CLOSE:
        snprintf(buf, cap, "%s: cannot write: %s", a->tmp, why);
        break;
    case EF__ATOMIC_RENAME:
        snprintf(buf, cap, "cannot rename %s to %s: %s", a->tmp, a->path, why);
        break;
    case EF__ATOMIC_SYNC_FOLDER:
        snprintf(buf, cap, "%s: cannot fsync its folder: %s", a->path, why);
        break;
    }
}
