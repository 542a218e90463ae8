/* Fuzz target for whole-file reads (src/io/file.c), gzip included.
 *
 * Each input is written to a temporary file and read back. A file without
 * the gzip magic must come back byte for byte; a gzip one must inflate or
 * fail with EF_EFORMAT and a message naming the file. Any violation aborts,
 * which libFuzzer reports as a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/file.h"

static char path[64];

static void remove_file(void)
{
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        strcpy(path, "/tmp/ef_fuzz_file.XXXXXX");
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);

    ef_buffer *b = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__read_file(path, &b, &err);
    int gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (rc == EF_OK) {
        CHECK(b != NULL);
        if (!gzip) {
            CHECK(ef_buffer_size(b) == size);
            CHECK(size == 0 || memcmp(ef_buffer_data(b), data, size) == 0);
        }
        ef_buffer_release(b);
    } else {
        CHECK(b == NULL);
        CHECK(gzip); /* a plain file on disk always reads */
        CHECK(rc == EF_EFORMAT || rc == EF_EUNSUPPORTED);
        CHECK(err.status == rc);
        CHECK(strstr(err.msg, path) != NULL);
    }
    return 0;
}
