/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the checks of SentencePiece models
 * (src/tokenizer/spm_check.c).
 *
 * An input starting with "M" is a model: the rest goes to
 * ef__spm_model_check, which must pass it or refuse it with a message;
 * with libsentencepiece, a model it passes is loaded and encodes its own
 * bytes and a few texts without crashing. Any other input is a
 * precompiled_charsmap: one ef__spm_charsmap_check passes must be safe to
 * walk, which this target checks by walking it as darts-clone's
 * commonPrefixSearch does (the library's walk has no bounds checks; this
 * one checks every read) from every offset of the input's own bytes and
 * of a few UTF-8 texts. Any violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "fuzz.h"
#include "tokenizer/spm_check.h"
#ifdef EF_HAVE_SENTENCEPIECE
#include "tokenizer/sentencepiece.h"
#endif

static const char *const texts[] = {
    "hello world", "\xef\xbc\xa1\xef\xbc\xa2 \xef\xac\x81ne \xe2\x84\xab",
    "\xe2\x91\xa0 \xc3\x85 \xff\xfe", "  spaces  ", "\xe6\x97\xa5\xe6\x9c\xac"};
#define NTEXTS (sizeof texts / sizeof texts[0])

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

typedef struct {
    const unsigned char *units, *strings;
    size_t n, nstrings;
} charsmap;

static uint32_t unit(const charsmap *m, size_t i)
{
    CHECK(i < m->n);
    return le32(m->units + 4 * i);
}

static size_t offset(uint32_t u)
{
    return (size_t)((u >> 10) << ((u & (1u << 9)) >> 6));
}

/* commonPrefixSearch over key[0, len), every read checked; each match's
 * value must start a NUL-terminated string inside the strings. */
static void search(const charsmap *m, const unsigned char *key, size_t len)
{
    size_t pos = offset(unit(m, 0));
    for (size_t i = 0; i < len; i++) {
        pos ^= key[i];
        uint32_t u = unit(m, pos);
        if ((u & (0x80000000u | 0xFF)) != key[i])
            return;
        pos ^= offset(u);
        if (u >> 8 & 1) {
            uint32_t v = unit(m, pos) & 0x7FFFFFFFu;
            CHECK(v < m->nstrings);
            CHECK(memchr(m->strings + v, '\0', m->nstrings - v) != NULL);
        }
    }
}

/* Every suffix of text[0, len), as the normalizer tries each position. */
static void search_all(const charsmap *m, const unsigned char *text, size_t len)
{
    for (size_t at = 0; at < len; at++)
        search(m, text + at, len - at);
}

static void fuzz_charsmap(const unsigned char *data, size_t size)
{
    char why[256] = "";
    int rc = ef__spm_charsmap_check(data, size, why, sizeof why);
    if (rc != EF_OK) {
        CHECK(rc == EF_EFORMAT || rc == EF_ENOMEM);
        fuzz_check_message(why, sizeof why, NULL);
        return;
    }
    size_t trie = le32(data);
    CHECK(trie >= 4 && trie % 4 == 0 && trie <= size - 4);
    const charsmap m = {data + 4, data + 4 + trie, trie / 4, size - 4 - trie};
    search_all(&m, data, size);
    for (size_t i = 0; i < NTEXTS; i++)
        search_all(&m, (const unsigned char *)texts[i], strlen(texts[i]));
    /* every byte, and each lead byte of UTF-8 with every continuation */
    for (unsigned c = 0; c < 256; c++) {
        unsigned char k[2] = {(unsigned char)c, 0x80};
        search(&m, k, 1);
        for (; c >= 0xC0 && k[1] < 0xC0; k[1]++)
            search(&m, k, 2);
    }
}

static void fuzz_model(const unsigned char *data, size_t size)
{
    char why[256] = "";
    int rc = ef__spm_model_check(data, size, why, sizeof why);
    if (rc != EF_OK) {
        CHECK(rc == EF_EFORMAT || rc == EF_ENOMEM);
        fuzz_check_message(why, sizeof why, NULL);
        return;
    }
#ifdef EF_HAVE_SENTENCEPIECE
    ef__spm *sp = NULL;
    if (ef__spm_load(data, size, &sp, why, sizeof why) != EF__SPM_OK)
        return; /* the library's own refusal: not ours to judge */
    int32_t *ids = NULL;
    size_t count = 0, cap = 0;
    ef__spm_encode(sp, (const char *)data, size < 256 ? size : 256, &ids,
                   &count, &cap, why, sizeof why);
    for (size_t i = 0; i < NTEXTS; i++)
        ef__spm_encode(sp, texts[i], strlen(texts[i]), &ids, &count, &cap, why,
                       sizeof why);
    free(ids);
    ef__spm_free(sp);
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == 'M')
        fuzz_model(data + 1, size - 1);
    else
        fuzz_charsmap(data, size);
    return 0;
}
