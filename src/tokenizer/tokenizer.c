/* SPDX-License-Identifier: Apache-2.0 */
/* Tokenizers (tokenizer.h): reading the model file, telling its kind
 * from its first bytes, and handing each text to the kind's encoder. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "io/regular_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#ifdef EF_HAVE_SENTENCEPIECE
#include "tokenizer/sentencepiece.h"
#include "tokenizer/spm_check.h"
#endif

struct ef__tokenizer {
    ef__tok_kind kind;
#ifdef EF_HAVE_SENTENCEPIECE
    ef__spm *spm;
#endif
    ef__bpe *bpe;
};

int ef__ids_reserve(ef__ids *ids, size_t more)
{
    if (more <= ids->cap - ids->n)
        return EF_OK;
    size_t cap = ids->cap ? ids->cap : 64;
    while (cap - ids->n < more) {
        if (cap > SIZE_MAX / 2 / sizeof(int32_t))
            return EF_ENOMEM;
        cap *= 2;
    }
    int32_t *v = ef__realloc(ids->v, cap * sizeof *v);
    if (!v)
        return EF_ENOMEM;
    ids->v = v;
    ids->cap = cap;
    return EF_OK;
}

static int too_large(const char *path, ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: larger than %llu MiB, the most a model file may "
                       "have",
                       path, (unsigned long long)(EF__TOK_MAX_MODEL >> 20));
}

/* The whole file at `path` into *data (the caller's, ef__free), *size
 * bytes: a regular file of at most EF__TOK_MAX_MODEL bytes, read to its
 * end even if it grew since fstat, but never past the limit. */
static int read_all(const char *path, unsigned char **data, size_t *size,
                    ef__err *err)
{
    *data = NULL;
    int fd;
    uint64_t stated = 0;
    int rc = ef__open_regular(path, "the model", &fd, &stated, err);
    if (rc != EF_OK)
        return rc;
    if (stated > EF__TOK_MAX_MODEL) {
        close(fd);
        return too_large(path, err);
    }
    /* one byte more than stated: a file that grew shows at once */
    size_t n = 0, cap = (size_t)stated + 1;
    unsigned char *buf = ef__malloc(cap);
    rc = buf ? EF_OK : EF_ENOMEM;
    while (rc == EF_OK) {
        if (n == cap) {
            if (cap > EF__TOK_MAX_MODEL) {
                rc = too_large(path, err);
                break;
            }
            size_t more = cap * 2 > EF__TOK_MAX_MODEL + 1
                              ? (size_t)EF__TOK_MAX_MODEL + 1
                              : cap * 2;
            unsigned char *p = ef__realloc(buf, more);
            if (!p) {
                rc = EF_ENOMEM;
                break;
            }
            buf = p;
            cap = more;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = ef__err_set(err, EF_EIO, "%s: read error at byte %zu: %s",
                             path, n, strerror(errno));
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (rc == EF_ENOMEM)
        rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory reading it", path);
    if (rc != EF_OK) {
        ef__free(buf);
        return rc;
    }
    *data = buf;
    *size = n;
    return EF_OK;
}

/* Whether the first line of data[0, size) is "BASE64 RANK". */
static int looks_like_ranks(const unsigned char *p, size_t size)
{
    size_t i = 0, b64 = 0, digits = 0;
    while (i < size && (p[i] == '+' || p[i] == '/' || p[i] == '=' ||
                        (p[i] >= '0' && p[i] <= '9') ||
                        ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z')))
        i++, b64++;
    if (!b64 || i == size || p[i++] != ' ')
        return 0;
    while (i < size && p[i] >= '0' && p[i] <= '9')
        i++, digits++;
    return digits && (i == size || p[i] == '\n' || p[i] == '\r');
}

/* `sniffed`: the kind was auto, and the first line no rank file's. */
static int load_sentencepiece(ef__tokenizer *t, const char *path,
                              const unsigned char *data, size_t size,
                              int sniffed, ef__err *err)
{
#ifdef EF_HAVE_SENTENCEPIECE
    char why[256] = "";
    /* before the library loads it: its load encodes the model's self-test
     * samples, through the normalizer whose trie it never checks */
    int rc = ef__spm_model_check(data, size, why, sizeof why);
    if (rc == EF_OK) {
        rc = ef__spm_load(data, size, &t->spm, why, sizeof why);
        rc = rc == EF__SPM_OK      ? EF_OK
             : rc == EF__SPM_NOMEM ? EF_ENOMEM
                                   : EF_EFORMAT;
    }
    if (rc == EF_ENOMEM)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", path);
    if (rc != EF_OK)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: not a SentencePiece model (%s); expected "
                           "the .model file spm_train writes%s",
                           path, why,
                           sniffed ? ", or a tiktoken rank file, whose "
                                     "first line is \"BASE64 RANK\""
                                   : "");
    return EF_OK;
#else
    (void)t, (void)data, (void)size, (void)sniffed;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: SentencePiece models need libsentencepiece, "
                       "which this build lacks; install "
                       "libsentencepiece-dev and build again",
                       path);
#endif
}

int ef__tokenizer_load(const char *path, ef__tok_kind kind, ef__tokenizer **out,
                       ef__err *err)
{
    *out = NULL;
    unsigned char *data;
    size_t size = 0;
    int rc = read_all(path, &data, &size, err);
    if (rc != EF_OK)
        return rc;
    int sniffed = kind == EF__TOK_AUTO;
    if (sniffed)
        kind = looks_like_ranks(data, size) ? EF__TOK_TIKTOKEN
                                            : EF__TOK_SENTENCEPIECE;
    ef__tokenizer *t = ef__calloc(1, sizeof *t);
    if (!t) {
        ef__free(data);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", path);
    }
    t->kind = kind;
    if (kind == EF__TOK_SENTENCEPIECE) {
        rc = load_sentencepiece(t, path, data, size, sniffed, err);
    } else {
        ef__bpe_ranks *ranks;
        rc = ef__bpe_ranks_parse(data, size, path, &ranks, err);
        if (rc == EF_OK)
            rc = ef__bpe_new(ranks, &t->bpe, err);
    }
    ef__free(data);
    if (rc != EF_OK) {
        ef__tokenizer_free(t);
        return rc;
    }
    *out = t;
    return EF_OK;
}

void ef__tokenizer_free(ef__tokenizer *t)
{
    if (!t)
        return;
#ifdef EF_HAVE_SENTENCEPIECE
    ef__spm_free(t->spm);
#endif
    ef__bpe_free(t->bpe);
    ef__free(t);
}

const char *ef__tokenizer_kind_name(const ef__tokenizer *t)
{
    return t->kind == EF__TOK_SENTENCEPIECE ? "sentencepiece" : "tiktoken";
}

struct ef__tok_scratch {
    ef__bpe_scratch *bpe; /* NULL for SentencePiece, which keeps its own */
    ef__tok_charge charge; /* NULL: nothing counted */
    void *charge_arg;
};

/* SentencePiece's working memory per byte of text, which the library
 * does not say: libsentencepiece 0.1.97 peaked at about 230 bytes per
 * byte on one long word (unigram and BPE models), 70 on plain words. */
#define SPM_WORK_PER_BYTE 256

ef__tok_scratch *ef__tokenizer_scratch_new(const ef__tokenizer *t)
{
    ef__tok_scratch *s = ef__calloc(1, sizeof *s);
    if (s && t->bpe && !(s->bpe = ef__bpe_scratch_new(t->bpe))) {
        ef__free(s);
        s = NULL;
    }
    return s;
}

void ef__tokenizer_scratch_charge(ef__tok_scratch *s, ef__tok_charge fn,
                                  void *arg)
{
    s->charge = fn;
    s->charge_arg = arg;
    if (s->bpe)
        ef__bpe_scratch_charge(s->bpe, fn, arg);
}

void ef__tokenizer_scratch_free(ef__tok_scratch *s)
{
    if (s)
        ef__bpe_scratch_free(s->bpe);
    ef__free(s);
}

int ef__tokenizer_encode(const ef__tokenizer *t, ef__tok_scratch *scratch,
                         const void *text, size_t n, ef__ids *ids, ef__err *err)
{
    if (t->bpe)
        return ef__bpe_encode(t->bpe, scratch ? scratch->bpe : NULL, text, n,
                              ids, err);
#ifdef EF_HAVE_SENTENCEPIECE
    char why[256] = "";
    int64_t work = 0;
    if (scratch && scratch->charge) {
        work = n > INT64_MAX / SPM_WORK_PER_BYTE ? INT64_MAX
                                                 : (int64_t)n * SPM_WORK_PER_BYTE;
        int rc = scratch->charge(scratch->charge_arg, work, err);
        if (rc != EF_OK) {
            char what[96];
            snprintf(what, sizeof what, "SentencePiece, a text of %zu bytes",
                     n);
            ef__err_prefix(err, what);
            return rc;
        }
    }
    int rc = ef__spm_encode(t->spm, text, n, &ids->v, &ids->n, &ids->cap, why,
                            sizeof why);
    if (work)
        scratch->charge(scratch->charge_arg, -work, NULL);
    if (rc == EF__SPM_NOMEM)
        return ef__err_set(err, EF_ENOMEM, "out of memory");
    if (rc != EF__SPM_OK)
        return ef__err_set(err, EF_EFORMAT, "SentencePiece: %s", why);
    return EF_OK;
#else
    (void)text, (void)n, (void)ids;
    return ef__err_set(err, EF_EUNSUPPORTED, "built without SentencePiece");
#endif
}
