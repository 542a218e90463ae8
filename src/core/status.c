/* SPDX-License-Identifier: Apache-2.0 */
/* Status codes: texts and names from the one X-macro list in the header. */
#include "echoflow/echoflow.h"

const char *ef_strerror(int status)
{
    switch (status) {
#define EF__STATUS_TEXT(name, value, text)                                     \
    case value:                                                                \
        return text;
        EF_STATUS_MAP(EF__STATUS_TEXT)
#undef EF__STATUS_TEXT
    }
    return "unknown status";
}

const char *ef_status_name(int status)
{
    switch (status) {
#define EF__STATUS_NAME(name, value, text)                                     \
    case value:                                                                \
        return #name;
        EF_STATUS_MAP(EF__STATUS_NAME)
#undef EF__STATUS_NAME
    }
    return "UNKNOWN";
}

unsigned ef_version_number(void)
{
    return EF_VERSION_NUMBER;
}

const char *ef_version_string(void)
{
    return EF_VERSION_STRING;
}
