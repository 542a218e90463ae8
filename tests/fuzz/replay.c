/* SPDX-License-Identifier: Apache-2.0 */
/* Replays a corpus through a fuzz target without libFuzzer: every regular
 * file of each directory argument (in name order), or each file argument,
 * is read into a buffer of exactly its size and handed to
 * LLVMFuzzerTestOneInput. Built once per target (fuzz_replay_idx,
 * fuzz_replay_spec) and run by ctest, so the corpus, crash reproducers
 * included, is checked by every build, sanitized ones too.
 *
 * Usage: fuzz_replay_TARGET DIR|FILE...
 * Exits 0 after running at least one input, 1 on a read error or an empty
 * corpus; a violated invariant aborts inside the target. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 12, size = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        if (size == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
            continue;
        }
        size_t n = fread(buf + size, 1, cap - size, f);
        size += n;
        if (n == 0)
            break;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "fuzz_replay: %s: cannot read\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy, so ASan catches a read past the end */
    unsigned char *exact = malloc(size ? size : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, size);
    free(buf);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    return 1;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of `dir`; returns how many, or -1. */
static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn =
                realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = -1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        struct stat st;
        if (stat(names[i], &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        int r = run_file(names[i]);
        rc = r < 0 ? -1 : rc + r;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int r = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)
                    ? run_dir(argv[i])
                    : run_file(argv[i]);
        if (r < 0)
            return 1;
        printf("fuzz_replay: %s: %d inputs\n", argv[i], r);
        total += r;
    }
    if (total == 0) {
        fprintf(stderr, "fuzz_replay: no inputs found\n");
        return 1;
    }
    return 0;
}
