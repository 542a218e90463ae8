/* SPDX-License-Identifier: Apache-2.0 */
/* `echoflow tokens`: runs a pipeline of documents and writes their token
 * ids into one nanoGPT-style token file (raw uint16 or uint32, eos after
 * each document when asked), what nanoGPT's prepare.py does, for the
 * tokens source to read. Uses the public API only. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* SIGINT/SIGTERM: the loop stops between documents and the writer's
 * temporary file is removed. */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    if (!g_signal)
        g_signal = sig;
}

/* A u8 field is bytes (text not yet tokenized, an encoded file) far more
 * often than token ids: written as they are they make a token file that
 * trains on nothing meant, with no error. Refused unless --bytes says a
 * byte-level vocabulary is meant. */
static int refuse_bytes(const ef_sample *s, const char *field)
{
    ef_tensor t;
    if (ef_sample_get(s, field, &t) != EF_OK || t.dtype != EF_U8)
        return 0;
    fprintf(stderr,
            "echoflow tokens: field '%s' of sample %lld is u8: bytes (a text "
            "before tokenize, an encoded file), not token ids; put a "
            "tokenize stage in the spec and give its ids' field with "
            "--field, or give --bytes to write each byte as a token id\n",
            field, (long long)ef_sample_identity(s).index);
    return 1;
}

int cmd_tokens(int argc, char **argv)
{
    const char *field = "tokens", *dtype = "uint16";
    long eos = -1;
    int eos_given = 0, bytes = 0;
    cli_pipeline_opts po = {0};
    const arg_opt opts[] = {
        {"--field", ARG_STRING, &field, NULL, 0, 0, NULL, "NAME",
         "the documents' field of token ids"},
        {"--dtype", ARG_CHOICE, &dtype, NULL, 0, 0, "uint16|uint32", NULL,
         "the file's token type"},
        {"--eos", ARG_LONG, &eos, &eos_given, 0, 2147483647.0, NULL, "ID",
         "a token id written after each document"},
        {"--bytes", ARG_FLAG, &bytes, NULL, 0, 0, NULL, NULL,
         "a u8 field's bytes are token ids (else refused)"},
        CLI_PIPELINE_ARGS(&po),
    };
    const arg_command cmd = {
        "echoflow tokens",
        "SPEC OUT",
        2,
        "Writes the token ids of every sample of the pipeline SPEC (an\n"
        "integer field [n], i32 as the tokenize stage makes it; u8 only\n"
        "with --bytes) one after\n"
        "another into OUT as raw little-endian uint16 or uint32, with --eos\n"
        "after each document: the token files nanoGPT's prepare.py writes,\n"
        "which the tokens source reads. An id that does not fit the dtype\n"
        "is an error. OUT is written as OUT.tmp.PID and renamed when\n"
        "complete. For example\n"
        "  echoflow tokens \"jsonl:files=train.jsonl | tokenize:...\" "
        "train.bin --eos 50256\n",
        opts,
        (int)(sizeof opts / sizeof opts[0])};
    const char *pos[2];
    int parsed = args_parse(&cmd, argc, argv, pos);
    if (parsed)
        return parsed == 1 ? 0 : 2;
    if (!field[0]) {
        fprintf(stderr, "echoflow tokens: --field needs a name\n");
        return 2;
    }
    ef_pipeline *p = cli_pipeline("echoflow tokens", NULL, &po, pos[0], 0, 1);
    if (!p)
        return 2;
    ef_token_writer *w = NULL;
    ef_status rc = ef_token_writer_create(&w, pos[1], dtype);
    if (rc != EF_OK) {
        fprintf(stderr, "echoflow tokens: %s\n",
                w ? ef_token_writer_error(w) : ef_strerror(rc));
        ef_token_writer_destroy(w);
        ef_pipeline_destroy(p);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    ef_sample *s;
    int refused = 0;
    while (!g_signal && (rc = ef_pipeline_next(p, &s)) == EF_OK) {
        refused = !bytes && refuse_bytes(s, field);
        if (!refused)
            rc = ef_token_writer_add(w, s, field, eos_given ? eos : -1);
        ef_sample_free(s);
        if (refused || rc != EF_OK)
            break;
    }
    int status = 0;
    if (refused) {
        status = 1;
    } else if (g_signal) {
        printf("interrupted by %s: removed the unfinished %s\n",
               g_signal == SIGINT ? "SIGINT" : "SIGTERM", pos[1]);
        status = 128 + g_signal;
    } else if (rc == EF_END && (rc = ef_token_writer_finish(w)) == EF_OK) {
        printf("wrote %lld tokens of %lld documents (%s) to %s\n",
               (long long)ef_token_writer_tokens(w),
               (long long)ef_token_writer_documents(w), dtype, pos[1]);
        char why[512];
        uint64_t skipped = ef_pipeline_skipped(p, why, sizeof why);
        if (skipped)
            printf("skipped %llu bad samples; the first: %s\n",
                   (unsigned long long)skipped, why);
    } else {
        fprintf(stderr, "echoflow tokens: %s\n",
                ef_pipeline_error(p)[0] ? ef_pipeline_error(p)
                                        : ef_token_writer_error(w));
        status = 1;
    }
    ef_token_writer_destroy(w); /* removes an unfinished file */
    ef_pipeline_destroy(p);
    return status;
}
