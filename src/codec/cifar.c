/* SPDX-License-Identifier: Apache-2.0 */
/* CIFAR-10 binary records (see cifar.h). */
#include "codec/cifar.h"

int ef__cifar_count(size_t size, const char *name, int64_t *n, ef__err *err)
{
    *n = (int64_t)(size / EF__CIFAR_RECORD);
    size_t extra = size % EF__CIFAR_RECORD;
    if (extra == 0)
        return EF_OK;
    return ef__err_set(err, EF_EFORMAT,
                       "%s: %zu bytes is not a whole number of %d-byte CIFAR "
                       "records: a partial record of %zu bytes starts at "
                       "offset %zu",
                       name, size, EF__CIFAR_RECORD, extra, size - extra);
}

void ef__cifar_convert(const unsigned char *data, int64_t n,
                       unsigned char *images, int64_t *labels)
{
    enum { PLANE = EF__CIFAR_SIDE * EF__CIFAR_SIDE };
    for (int64_t r = 0; r < n; r++) {
        const unsigned char *rec = data + (size_t)r * EF__CIFAR_RECORD;
        unsigned char *dst = images + (size_t)r * EF__CIFAR_IMAGE;
        labels[r] = rec[0];
        const unsigned char *red = rec + 1, *green = red + PLANE,
                            *blue = green + PLANE;
        for (int p = 0; p < PLANE; p++) {
            dst[3 * p] = red[p];
            dst[3 * p + 1] = green[p];
            dst[3 * p + 2] = blue[p];
        }
    }
}

int ef__cifar_check_label(const char *name, int64_t record, int64_t label,
                          ef__err *err)
{
    if (label >= 0 && label < EF__CIFAR_CLASSES)
        return EF_OK;
    return ef__err_set(err, EF_EFORMAT,
                       "%s: record %lld at offset %lld has label %lld "
                       "(expected 0 to 9)",
                       name, (long long)record,
                       (long long)(record * EF__CIFAR_RECORD),
                       (long long)label);
}
