// SPDX-License-Identifier: Apache-2.0
// SentencePiece behind sentencepiece.h's C interface. No C++ exception
// leaves this file: each entry point catches them all (std::bad_alloc
// becomes EF__SPM_NOMEM, anything else EF__SPM_FAILED with its text).
#include "tokenizer/sentencepiece.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "core/alloc.h"
}

struct ef__spm {
    sentencepiece::SentencePieceProcessor sp;
};

static void say(char *why, size_t cap, const char *text)
{
    if (cap)
        std::snprintf(why, cap, "%s", text);
}

extern "C" int ef__spm_load(const void *data, size_t size, ef__spm **out,
                            char *why, size_t cap)
{
    *out = nullptr;
    try {
        ef__spm *m = new ef__spm;
        const auto st = m->sp.LoadFromSerializedProto(
            absl::string_view(static_cast<const char *>(data), size));
        if (!st.ok()) {
            say(why, cap, st.ToString().c_str());
            delete m;
            return EF__SPM_FAILED;
        }
        *out = m;
        return EF__SPM_OK;
    } catch (const std::bad_alloc &) {
        say(why, cap, "out of memory");
        return EF__SPM_NOMEM;
    } catch (const std::exception &e) {
        say(why, cap, e.what());
        return EF__SPM_FAILED;
    } catch (...) {
        say(why, cap, "unknown C++ exception");
        return EF__SPM_FAILED;
    }
}

extern "C" void ef__spm_free(ef__spm *m)
{
    delete m;
}

extern "C" int ef__spm_encode(const ef__spm *m, const char *text, size_t n,
                              int32_t **ids, size_t *count, size_t *cap,
                              char *why, size_t why_cap)
{
    try {
        // kept by each thread between encodes: no allocation per text
        static thread_local std::vector<int> v;
        v.clear();
        const auto st = m->sp.Encode(absl::string_view(text, n), &v);
        if (!st.ok()) {
            say(why, why_cap, st.ToString().c_str());
            return EF__SPM_FAILED;
        }
        if (v.size() > *cap - *count) {
            size_t want = *count + v.size();
            void *p = ef__realloc(*ids, want * sizeof(int32_t));
            if (!p) {
                say(why, why_cap, "out of memory");
                return EF__SPM_NOMEM;
            }
            *ids = static_cast<int32_t *>(p);
            *cap = want;
        }
        for (size_t i = 0; i < v.size(); i++)
            (*ids)[*count + i] = static_cast<int32_t>(v[i]);
        *count += v.size();
        return EF__SPM_OK;
    } catch (const std::bad_alloc &) {
        say(why, why_cap, "out of memory");
        return EF__SPM_NOMEM;
    } catch (const std::exception &e) {
        say(why, why_cap, e.what());
        return EF__SPM_FAILED;
    } catch (...) {
        say(why, why_cap, "unknown C++ exception");
        return EF__SPM_FAILED;
    }
}
