/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP(S) byte streams through libcurl (see stream_backend.h).
 *
 * Pull design: each stream owns one easy handle on a private multi handle,
 * and nothing runs in the background: http_read drives the transfer on the
 * reading thread. The write callback appends to a bounded buffer and pauses
 * the transfer when the buffer is full; reads drain it and unpause. Memory
 * is therefore the buffer plus curl's own receive buffer, whatever the file
 * size, and the data is fetched only as fast as it is read.
 *
 * Retry and resume: `received` is the offset of the first byte the stream
 * has not yet been given. An attempt that fails for a reason worth another
 * try (connection lost, timeout, short body, stall, HTTP 5xx, 408, 429) is
 * followed, after a backoff, by a request for "Range: bytes=received-". A
 * 206 answer counts only if its Content-Range starts exactly there; a 200
 * answer is the whole file again, and its first `received` bytes are
 * discarded. Bytes are handed on exactly once, in order. A 206 body that
 * runs past its Content-Range is cut at the range's end and the attempt
 * fails: the excess is not the file's.
 *
 * A stream with an end (ef__stream_open_range: one record, read again)
 * asks for "Range: bytes=start-(end - 1)", retries too, and is complete
 * once the byte before `end` came; a server that answers with the whole
 * file is read as usual, and stream.c stops at `end`.
 *
 * Slow servers: bytes alone do not prove progress. A reply's header block
 * must be complete within `timeout_s` of its status line's request (a
 * server that trickles header lines would otherwise hold the stream for
 * ever), and its body must arrive at MIN_BODY_RATE bytes/s or more, judged
 * over each `timeout_s` the reader spends waiting for it.
 *
 * Waits (network and backoff) are sliced to at most POLL_MS so that the
 * cancel flag is seen promptly. */
#include "io/stream_backend.h"

#ifdef EF_HAVE_CURL

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"

#define BUF_CAP (256u << 10) /* read-ahead bound: 16 curl chunks */
#define POLL_MS 100          /* longest wait between looks at the flag */
#define MAX_BACKOFF_S 60.0   /* doubling stops here (or at backoff_s) */
/* The slowest body that still counts as a transfer, in bytes/s: 1 KiB/s
 * is a fifth of a 56k modem, so any real link passes, while a server
 * that drips a byte at a time (and would take days for a shard) fails. */
#define MIN_BODY_RATE 1024
#define STR_(x) #x
#define STR(x) STR_(x)
#define USER_AGENT                                                             \
    "echoflow/" STR(EF_VERSION_MAJOR) "." STR(EF_VERSION_MINOR) "." STR(       \
        EF_VERSION_PATCH)

enum { ST_IDLE, ST_ACTIVE, ST_DONE };

/* Why our callbacks stopped an attempt (curl then says CURLE_WRITE_ERROR,
 * which alone would not tell a 404 from a 503). */
enum { WHY_NONE, WHY_STATUS, WHY_RANGE, WHY_CHANGED, WHY_OVERRUN };

typedef struct {
    char *url;
    CURLM *multi;
    CURL *easy;
    const atomic_int *cancelled;
    int tries;
    double timeout_s, backoff_s;

    /* bytes received and not yet read: buf[pos, len) */
    unsigned char *buf;
    size_t cap, pos, len;
    int paused;         /* the write callback refused a chunk */
    size_t paused_need; /* ... of this size: unpause once it fits */

    int state;
    int attempts;      /* started so far */
    int fruitless;     /* failed attempts in a row that delivered nothing */
    uint64_t received; /* offset of the byte after the last one kept */
    uint64_t end;      /* 0, or where the data asked for ends */
    int64_t total;     /* size of the resource, -1 until a reply says */
    double delay_s;    /* backoff before the next retry */
    uint64_t retry_at; /* ef__now_ns() when the next attempt may start */
    int fail_rc;       /* non-zero: the stream failed for good with fail_msg */
    char fail_msg[EF__ERR_MAX];

    /* the current attempt */
    uint64_t start;     /* the offset asked for */
    uint64_t skip;      /* bytes still to discard (a 200 to a range) */
    int64_t expect_end; /* offset where this reply's body ends, or -1 */
    int checked;        /* the reply's status and range were checked */
    long status;
    int why;
    int64_t changed_to;       /* WHY_CHANGED: the size the reply gave */
    uint64_t last_data;       /* ef__now_ns() of the last byte in */
    uint64_t head_at;         /* ef__now_ns() when this reply's request
                                 went out (or its status line came) */
    int head_done;            /* this reply's header block is complete */
    int in_head;              /* a status line came, the blank line not */
    uint64_t body_bytes;      /* body bytes of this reply seen so far */
    uint64_t win_wait_ns;     /* reader's wait in the speed window */
    uint64_t win_bytes;       /* body bytes in the speed window */
    int have_cr;              /* Content-Range of the latest reply: */
    int64_t cr_start, cr_end; /* -1 for "bytes * /T" */
    int64_t cr_total;         /* -1 for "/ *" */
    char range[48];
    char errbuf[CURL_ERROR_SIZE];
} http_conn;

/* ---- libcurl's process-wide state ------------------------------- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc;

/* Never undone: curl_global_cleanup is not thread-safe, and other streams
 * (or the application itself) may still be using libcurl at exit. */
static void global_init(void)
{
    g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- failing ------------------------------------------------------ */

static int is_cancelled(const http_conn *h)
{
    return h->cancelled && atomic_load(h->cancelled);
}

/* Ends the stream for good; later reads repeat the message. */
static void fail_for_good(http_conn *h, int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void fail_for_good(http_conn *h, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->fail_msg, sizeof h->fail_msg, fmt, ap);
    va_end(ap);
    h->fail_rc = rc;
}

/* Takes the easy handle off the multi handle, which ends the attempt. */
static void stop_attempt(http_conn *h)
{
    if (h->state == ST_ACTIVE)
        curl_multi_remove_handle(h->multi, h->easy);
    h->state = ST_IDLE;
    h->paused = 0;
}

/* An attempt failed in a way another one may fix: schedule it, or give up
 * when every try is used. */
static void attempt_failed(http_conn *h, const char *what)
{
    stop_attempt(h);
    /* only attempts that delivered nothing count against `tries`: a long
     * shard over a link that drops now and then keeps making progress */
    h->fruitless = h->received > h->start ? 1 : h->fruitless + 1;
    if (h->fruitless >= h->tries) {
        fail_for_good(h, EF_EIO,
                      "%s: giving up at byte %llu after %d %s in a row "
                      "without progress (%d in all); last failure: %s",
                      h->url, (unsigned long long)h->received, h->fruitless,
                      h->fruitless == 1 ? "try" : "tries", h->attempts, what);
        return;
    }
    /* An attempt that delivered data shows the server is alive: the next
     * wait starts over from backoff_s rather than doubling on, so a long
     * download over a link that drops now and then never waits long. */
    double wait = h->received > h->start ? h->backoff_s : h->delay_s;
    double cap = h->backoff_s > MAX_BACKOFF_S ? h->backoff_s : MAX_BACKOFF_S;
    h->delay_s = wait * 2 < cap ? wait * 2 : cap;
    h->retry_at = ef__now_ns() + ef__s_to_ns(wait);
}

/* ---- libcurl callbacks -------------------------------------------- */

/* Reads the digits at *p as a non-negative int64; 0 when none or too
 * big. */
static int parse_i64(const char **p, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;
    if (*s < '0' || *s > '9')
        return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (INT64_MAX - (*s - '0')) / 10)
            return 0;
        v = v * 10 + (*s - '0');
    }
    *p = s;
    *out = v;
    return 1;
}

/* "bytes A-B/T", "bytes * /T" or "bytes A-B/ *" (without the spaces
 * around '/' and '*'). Returns 1 when well formed. */
static int parse_content_range(const char *s, http_conn *h)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (strncasecmp(s, "bytes", 5) != 0)
        return 0;
    s += 5;
    while (*s == ' ' || *s == '\t')
        s++;
    h->cr_start = h->cr_end = h->cr_total = -1;
    if (*s == '*') {
        s++;
    } else if (!parse_i64(&s, &h->cr_start) || *s++ != '-' ||
               !parse_i64(&s, &h->cr_end) || h->cr_end < h->cr_start) {
        return 0;
    }
    if (*s++ != '/')
        return 0;
    if (*s == '*')
        return h->cr_start >= 0; /* "* / *" says nothing */
    return parse_i64(&s, &h->cr_total) && h->cr_end < h->cr_total;
}

/* Headers of every reply, redirects and 1xx included: a status line
 * starts a new reply, so a Content-Range always belongs to the latest
 * one, and the blank line ends a header block. */
static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    http_conn *h = ud;
    size_t len = size * n;
    static const char name[] = "content-range:";
    const size_t name_len = sizeof name - 1;
    h->last_data = ef__now_ns();
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        h->have_cr = 0;
        /* the reply after a redirect (or a 1xx) answers a newer request:
         * its headers get their own `timeout_s` */
        if (h->head_done)
            h->head_at = h->last_data;
        h->head_done = 0;
        h->in_head = 1;
    } else if ((len == 2 && p[0] == '\r' && p[1] == '\n') ||
               (len == 1 && p[0] == '\n')) {
        h->head_done = 1;
        h->in_head = 0;
    } else if (len > name_len && strncasecmp(p, name, name_len) == 0) {
        char v[128];
        size_t k =
            len - name_len < sizeof v - 1 ? len - name_len : sizeof v - 1;
        memcpy(v, p + name_len, k);
        v[k] = '\0';
        h->have_cr = parse_content_range(v, h);
    }
    return len;
}

/* Decides, at the first body byte (or at the end of an empty body),
 * whether this reply can be used; 0 when it can. */
static int check_reply(http_conn *h)
{
    long code = 0;
    curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &code);
    h->status = code;
    h->checked = 1;
    if (code < 200 || code > 299) {
        h->why = WHY_STATUS;
        return -1;
    }
    int64_t total;
    if (code == 206) {
        if (!h->have_cr || h->cr_start < 0 ||
            (uint64_t)h->cr_start != h->start) {
            h->why = WHY_RANGE;
            return -1;
        }
        total = h->cr_total;
        h->expect_end = h->cr_end + 1;
    } else {
        /* the whole resource (a server may ignore Range): drop what the
         * reader already has */
        curl_off_t cl = -1;
        if (curl_easy_getinfo(h->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T,
                              &cl) != CURLE_OK)
            cl = -1;
        total = cl >= 0 ? (int64_t)cl : -1;
        h->expect_end = total;
        h->skip = h->start;
    }
    if (total >= 0 &&
        ((h->total >= 0 && total != h->total) || (uint64_t)total < h->start)) {
        h->why = WHY_CHANGED;
        h->changed_to = total;
        return -1;
    }
    if (total >= 0)
        h->total = total;
    /* the body's speed is judged from its first byte on */
    h->win_wait_ns = 0;
    h->win_bytes = 0;
    return 0;
}

/* Takes a whole chunk or none of it: curl hands a refused (paused) chunk
 * back whole, so nothing may change before deciding. */
static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    http_conn *h = ud;
    size_t len = size * n;
    h->last_data = ef__now_ns();
    /* returning anything but len (0 here) aborts the transfer; for an
     * empty body there is nothing to abort, and attempt_over reads `why` */
    if (!h->checked && check_reply(h) != 0)
        return 0;
    if (h->why != WHY_NONE)
        return 0;
    size_t drop = h->skip < len ? (size_t)h->skip : len;
    size_t keep = len - drop;
    /* curl holds a body to its Content-Length, not to its Content-Range:
     * bytes past the range's end are not the file's, so they are dropped
     * and the attempt ends (attempt_over reads WHY_OVERRUN) */
    size_t over = 0;
    if (h->expect_end >= 0 && h->received + keep > (uint64_t)h->expect_end) {
        over = (size_t)(h->received + keep - (uint64_t)h->expect_end);
        keep -= over;
    }
    if (keep > h->cap - h->len && h->pos > 0) {
        memmove(h->buf, h->buf + h->pos, h->len - h->pos);
        h->len -= h->pos;
        h->pos = 0;
    }
    if (keep > h->cap - h->len) {
        h->paused = 1;
        h->paused_need = keep;
        return CURL_WRITEFUNC_PAUSE;
    }
    h->skip -= drop;
    memcpy(h->buf + h->len, p + drop, keep);
    h->len += keep;
    h->received += keep;
    h->body_bytes += len;
    h->win_bytes += len;
    if (over > 0) {
        h->why = WHY_OVERRUN;
        return 0;
    }
    return len;
}

/* ---- attempts ----------------------------------------------------- */

/* Errors no retry can fix: the request or the TLS setup is wrong. */
static int curl_error_is_final(CURLcode c)
{
    switch (c) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_LOGIN_DENIED:
    case CURLE_REMOTE_ACCESS_DENIED:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
        return 1;
    default:
        return 0;
    }
}

/* A 416 to bytes=N- with "Content-Range: bytes * /N" (no spaces) says the
 * data ends where the stream stands: a reply of unknown length was cut
 * right after its last byte. Returns 1 then; when an earlier reply gave
 * another size, marks the resource as changed instead. */
static int range_past_end(http_conn *h)
{
    if (h->status != 416 || h->start == 0 || !h->have_cr || h->cr_total < 0)
        return 0;
    if (h->total >= 0 && h->cr_total != h->total) {
        h->why = WHY_CHANGED;
        h->changed_to = h->cr_total;
        return 0;
    }
    return h->cr_total == (int64_t)h->start;
}

/* curl ended the attempt with `res`: says what happened, and retries or
 * fails. The error buffer is only a detail: curl keeps the first message
 * of a transfer there, which may come from a step it then recovered from
 * (a reused connection found dead before a redirect loop ended, say). */
static void curl_failed(http_conn *h, CURLcode res)
{
    char what[CURL_ERROR_SIZE + 128];
    if (res == CURLE_TOO_MANY_REDIRECTS) {
        long n = 0;
        char *last = NULL, *next = NULL;
        curl_easy_getinfo(h->easy, CURLINFO_REDIRECT_COUNT, &n);
        curl_easy_getinfo(h->easy, CURLINFO_EFFECTIVE_URL, &last);
        curl_easy_getinfo(h->easy, CURLINFO_REDIRECT_URL, &next);
        fail_for_good(h, EF_EIO,
                      "%s: too many redirects: %ld followed (the limit), "
                      "and %s redirects again to %s; at byte %llu, not "
                      "retried",
                      h->url, n, last ? last : "the last URL",
                      next ? next : "(no Location)",
                      (unsigned long long)h->received);
        return;
    }
    /* curl refuses a header line over CURL_MAX_HTTP_HEADER bytes with
     * "out of memory" (CURLE_TOO_LARGE from 8.6 on); inside a header
     * block that is the server's doing, not this process's memory */
    int too_large = res == CURLE_OUT_OF_MEMORY;
#if LIBCURL_VERSION_NUM >= 0x080600
    too_large = too_large || res == CURLE_TOO_LARGE;
#endif
    if (too_large && h->in_head) {
        fail_for_good(h, EF_EIO,
                      "%s: the server sent a header line larger than curl "
                      "accepts (%d bytes) at byte %llu; not retried (curl "
                      "error %d: %s)",
                      h->url, CURL_MAX_HTTP_HEADER,
                      (unsigned long long)h->received, (int)res,
                      h->errbuf[0] ? h->errbuf : curl_easy_strerror(res));
        return;
    }
    if (h->errbuf[0])
        snprintf(what, sizeof what, "%s (curl error %d: %s)",
                 curl_easy_strerror(res), (int)res, h->errbuf);
    else
        snprintf(what, sizeof what, "%s (curl error %d)",
                 curl_easy_strerror(res), (int)res);
    if (curl_error_is_final(res))
        fail_for_good(h, res == CURLE_OUT_OF_MEMORY ? EF_ENOMEM : EF_EIO,
                      "%s: %s at byte %llu; not retried", h->url, what,
                      (unsigned long long)h->received);
    else
        attempt_failed(h, what);
}

/* A reply sent more body than it announced (WHY_OVERRUN): what came up
 * to its end was kept; the rest is not the file's. */
static void overrun(http_conn *h)
{
    char what[256];
    if (h->status == 206)
        snprintf(what, sizeof what,
                 "HTTP 206 for bytes %lld-%lld (%lld bytes) sent at least "
                 "%llu body bytes; the excess was dropped",
                 (long long)h->cr_start, (long long)h->cr_end,
                 (long long)(h->cr_end - h->cr_start + 1),
                 (unsigned long long)h->body_bytes);
    else
        snprintf(what, sizeof what,
                 "HTTP %ld of %lld bytes sent at least %llu body bytes; the "
                 "excess was dropped",
                 h->status, (long long)h->expect_end,
                 (unsigned long long)h->body_bytes);
    attempt_failed(h, what);
}

/* The transfer ended (curl's result `res`): done, retry, or fail. */
static void attempt_over(http_conn *h, CURLcode res)
{
    char what[CURL_ERROR_SIZE + 64];
    stop_attempt(h);
    if (res == CURLE_OK && !h->checked)
        check_reply(h); /* an empty body never reached on_body */
    if (h->why == WHY_STATUS && range_past_end(h)) {
        h->state = ST_DONE;
        return;
    }
    if (h->why == WHY_STATUS) {
        long s = h->status;
        snprintf(what, sizeof what, "HTTP status %ld", s);
        /* 408 and 429 mean "not now" rather than "not this" */
        if (s >= 500 || s == 408 || s == 429)
            attempt_failed(h, what);
        else if (s == 416 && h->have_cr && h->cr_total >= 0)
            fail_for_good(h, EF_EIO,
                          "%s: cannot read from byte %llu: the resource has "
                          "%lld bytes (HTTP 416); not retried",
                          h->url, (unsigned long long)h->start,
                          (long long)h->cr_total);
        else
            fail_for_good(h, EF_EIO,
                          "%s: HTTP status %ld at byte %llu (expected 200 "
                          "or 206); not retried",
                          h->url, s, (unsigned long long)h->received);
        return;
    }
    if (h->why == WHY_RANGE) {
        if (h->have_cr)
            snprintf(what, sizeof what,
                     "HTTP 206 for bytes %lld-%lld, expected a range "
                     "starting at %llu",
                     (long long)h->cr_start, (long long)h->cr_end,
                     (unsigned long long)h->start);
        else
            snprintf(what, sizeof what,
                     "HTTP 206 without a usable Content-Range, expected "
                     "bytes %llu-",
                     (unsigned long long)h->start);
        attempt_failed(h, what);
        return;
    }
    if (h->why == WHY_OVERRUN) {
        overrun(h);
        return;
    }
    if (h->why == WHY_CHANGED || (res == CURLE_OK && h->skip > 0)) {
        /* a whole-file reply shorter than what was read already */
        if (h->why != WHY_CHANGED)
            h->changed_to = (int64_t)(h->start - h->skip);
        fail_for_good(h, EF_EIO,
                      "%s: the resource changed between attempts: a reply "
                      "gave %lld bytes (earlier ones %lld; -1: unknown) "
                      "after %llu were read",
                      h->url, (long long)h->changed_to, (long long)h->total,
                      (unsigned long long)h->received);
        return;
    }
    if (res != CURLE_OK) {
        curl_failed(h, res);
        return;
    }
    int64_t end = h->total >= 0 ? h->total : h->expect_end;
    if (h->end > 0 && (end < 0 || h->end < (uint64_t)end))
        end = (int64_t)h->end; /* nothing after it was asked for */
    if (end >= 0 && h->received < (uint64_t)end) {
        snprintf(what, sizeof what,
                 "the body ended at byte %llu of %lld (short reply)",
                 (unsigned long long)h->received, (long long)end);
        attempt_failed(h, what);
        return;
    }
    h->state = ST_DONE;
}

/* Starts the next attempt once its backoff is over; until then sleeps at
 * most POLL_MS and returns, so the caller looks at the cancel flag. */
static int start_attempt(http_conn *h, ef__err *err)
{
    uint64_t now = ef__now_ns();
    if (h->attempts > 0 && now < h->retry_at) {
        uint64_t ns = h->retry_at - now;
        if (ns > (uint64_t)POLL_MS * 1000000u)
            ns = (uint64_t)POLL_MS * 1000000u;
        struct timespec ts = ef__ns_to_timespec(ns);
        nanosleep(&ts, NULL);
        return EF_OK;
    }
    h->start = h->received;
    h->skip = 0;
    h->expect_end = -1;
    h->checked = 0;
    h->status = 0;
    h->why = WHY_NONE;
    h->have_cr = 0;
    h->errbuf[0] = '\0'; /* curl writes it only when empty */
    h->last_data = now;
    h->head_at = now;
    h->head_done = 0;
    h->in_head = 0;
    h->body_bytes = 0;
    h->win_wait_ns = 0;
    h->win_bytes = 0;
    const char *range = NULL;
    if (h->end > h->start) {
        snprintf(h->range, sizeof h->range, "%llu-%llu",
                 (unsigned long long)h->start,
                 (unsigned long long)(h->end - 1));
        range = h->range;
    } else if (h->start > 0) {
        snprintf(h->range, sizeof h->range, "%llu-",
                 (unsigned long long)h->start);
        range = h->range;
    }
    CURLcode c = curl_easy_setopt(h->easy, CURLOPT_RANGE, range);
    CURLMcode mc =
        c == CURLE_OK ? curl_multi_add_handle(h->multi, h->easy) : CURLM_OK;
    if (c != CURLE_OK || mc != CURLM_OK)
        return ef__err_set(err, EF_EIO,
                           "%s: cannot start a request at byte "
                           "%llu: %s",
                           h->url, (unsigned long long)h->start,
                           c != CURLE_OK ? curl_easy_strerror(c)
                                         : curl_multi_strerror(mc));
    h->attempts++;
    h->state = ST_ACTIVE;
    return EF_OK;
}

/* The stream cannot go on: libcurl itself failed. */
static int multi_failed(http_conn *h, CURLMcode mc, ef__err *err)
{
    int rc = mc == CURLM_OUT_OF_MEMORY ? EF_ENOMEM : EF_EIO;
    stop_attempt(h);
    fail_for_good(h, rc, "%s: libcurl failed at byte %llu: %s", h->url,
                  (unsigned long long)h->received, curl_multi_strerror(mc));
    return ef__err_set(err, rc, "%s", h->fail_msg);
}

/* Whether the attempt is too slow to go on; says why in what[cap]. Three
 * clocks: no byte at all for timeout_s; a header block not complete
 * timeout_s after its request (header lines count as bytes, so a server
 * could trickle them for ever); a body under MIN_BODY_RATE over a window
 * of timeout_s. The window counts only time the reader spent waiting in
 * pump, so a reader that is slow itself never makes the server look
 * slow. */
static int too_slow(http_conn *h, uint64_t now, char *what, size_t cap)
{
    uint64_t limit = ef__s_to_ns(h->timeout_s);
    if (now - h->last_data >= limit) {
        snprintf(what, cap, "no data for %.3g s (the timeout)", h->timeout_s);
        return 1;
    }
    if (!h->head_done && now - h->head_at >= limit) {
        snprintf(what, cap,
                 "headers did not complete within %.3g s (the timeout)",
                 h->timeout_s);
        return 1;
    }
    if (!h->checked || h->win_wait_ns < limit)
        return 0;
    double window_s = ef__ns_to_s(h->win_wait_ns);
    if ((double)h->win_bytes < MIN_BODY_RATE * window_s) {
        snprintf(what, cap,
                 "body slower than %d bytes/s for %.3g s at byte %llu "
                 "(%llu bytes came in that time)",
                 MIN_BODY_RATE, window_s, (unsigned long long)h->received,
                 (unsigned long long)h->win_bytes);
        return 1;
    }
    h->win_wait_ns = 0;
    h->win_bytes = 0;
    return 0;
}

/* Lets curl work, collects its verdict, and waits (at most POLL_MS) when
 * no data came. */
static int pump_once(http_conn *h, ef__err *err)
{
    int running = 0;
    CURLMcode mc = curl_multi_perform(h->multi, &running);
    if (mc != CURLM_OK)
        return multi_failed(h, mc, err);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left)) != NULL) {
        if (m->msg == CURLMSG_DONE && m->easy_handle == h->easy) {
            attempt_over(h, m->data.result);
            return EF_OK; /* m went with the handle's removal */
        }
    }
    uint64_t now = ef__now_ns();
    uint64_t limit = ef__s_to_ns(h->timeout_s);
    char what[160];
    /* also when data came: a body that drips a byte per round would
     * otherwise rarely be looked at (what came is still handed out) */
    if (too_slow(h, now, what, sizeof what)) {
        attempt_failed(h, what);
        return EF_OK;
    }
    if (h->len > h->pos)
        return EF_OK;
    uint64_t left_ms = (h->last_data + limit - now + 999999) / 1000000;
    int ms = left_ms < POLL_MS ? (int)left_ms : POLL_MS;
    mc = curl_multi_poll(h->multi, NULL, 0, ms, NULL);
    return mc == CURLM_OK ? EF_OK : multi_failed(h, mc, err);
}

/* One round of the transfer, its time counted as the reader's wait for
 * the body's speed check. */
static int pump(http_conn *h, ef__err *err)
{
    uint64_t t0 = ef__now_ns();
    int rc = pump_once(h, err);
    h->win_wait_ns += ef__now_ns() - t0;
    return rc;
}

/* After a read made room: lets a paused transfer go on. */
static void maybe_unpause(http_conn *h)
{
    if (!h->paused || h->cap - (h->len - h->pos) < h->paused_need)
        return;
    h->paused = 0;
    h->last_data = ef__now_ns(); /* the stall clock stood still meanwhile */
    /* may call on_body at once with the refused chunk */
    CURLcode c = curl_easy_pause(h->easy, CURLPAUSE_CONT);
    if (c != CURLE_OK) {
        char what[128];
        snprintf(what, sizeof what, "cannot resume the transfer: %s",
                 curl_easy_strerror(c));
        attempt_failed(h, what);
    }
}

/* ---- the backend -------------------------------------------------- */

static int http_read(void *impl, void *buf, size_t n, size_t *got, ef__err *err)
{
    http_conn *h = impl;
    *got = 0;
    if (n == 0)
        return EF_OK;
    for (;;) {
        /* data kept before a failure is good: hand it out first */
        if (h->len > h->pos) {
            size_t k = h->len - h->pos < n ? h->len - h->pos : n;
            memcpy(buf, h->buf + h->pos, k);
            h->pos += k;
            if (h->pos == h->len)
                h->pos = h->len = 0;
            *got = k;
            maybe_unpause(h);
            return EF_OK;
        }
        /* all that was asked for came (a server that ignored the range
         * may still be sending the rest) */
        if (h->state == ST_DONE || (h->end > 0 && h->received >= h->end))
            return EF_OK;
        if (h->fail_rc)
            return ef__err_set(err, h->fail_rc, "%s", h->fail_msg);
        if (is_cancelled(h))
            return ef__err_set(err, EF_ECANCELED,
                               "%s: pipeline stopped while reading at byte "
                               "%llu",
                               h->url, (unsigned long long)h->received);
        /* the refused chunk needs more room than the whole buffer (curl
         * promises chunks of at most 16 KiB, so this is a safety net) */
        if (h->paused && h->paused_need > h->cap) {
            unsigned char *nb = ef__realloc(h->buf, h->paused_need);
            if (!nb)
                return ef__err_set(err, EF_ENOMEM, "%s: out of memory", h->url);
            h->buf = nb;
            h->cap = h->paused_need;
            maybe_unpause(h);
            continue;
        }
        int rc = h->state == ST_IDLE ? start_attempt(h, err) : pump(h, err);
        if (rc != EF_OK)
            return rc;
    }
}

static uint64_t http_retries(const void *impl)
{
    const http_conn *h = impl;
    return h->attempts > 1 ? (uint64_t)(h->attempts - 1) : 0;
}

static void http_close(void *impl)
{
    http_conn *h = impl;
    if (!h)
        return;
    if (h->multi && h->easy)
        stop_attempt(h);
    if (h->easy)
        curl_easy_cleanup(h->easy);
    if (h->multi)
        curl_multi_cleanup(h->multi);
    ef__free(h->buf);
    ef__free(h->url);
    ef__free(h);
}

/* What the replies said (Content-Length, or Content-Range's total). */
static int64_t http_size(const void *impl)
{
    const http_conn *h = impl;
    return h->total;
}

static const ef__stream_backend http_backend = {http_read, http_retries,
                                                http_close, http_size};

/* Options through one checked path: out of range is an error, never
 * clamped. */
static int check_opts(const char *url, const ef__stream_opts *o, ef__err *err)
{
    if (o->tries < 1)
        return ef__err_set(err, EF_EINVAL,
                           "%s: tries must be at least 1, got %d", url,
                           o->tries);
    if (!isfinite(o->timeout_s) || o->timeout_s <= 0 || o->timeout_s > 1e6)
        return ef__err_set(err, EF_EINVAL,
                           "%s: timeout_s must be in (0, 1e6] seconds, got %g",
                           url, o->timeout_s);
    if (!isfinite(o->backoff_s) || o->backoff_s < 0 || o->backoff_s > 1e6)
        return ef__err_set(err, EF_EINVAL,
                           "%s: backoff_s must be in [0, 1e6] seconds, got %g",
                           url, o->backoff_s);
    return EF_OK;
}

static CURLcode configure(http_conn *h)
{
    CURL *e = h->easy;
    CURLcode c = CURLE_OK;
#define SET(opt, val)                                                          \
    do {                                                                       \
        if (c == CURLE_OK)                                                     \
            c = curl_easy_setopt(e, opt, val);                                 \
    } while (0)
    SET(CURLOPT_URL, h->url);
    SET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM for timeouts: threads */
    SET(CURLOPT_FOLLOWLOCATION, 1L);
    SET(CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    SET(CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)ceil(h->timeout_s * 1000));
    SET(CURLOPT_USERAGENT, USER_AGENT);
    SET(CURLOPT_ERRORBUFFER, h->errbuf);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, h);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, h);
    /* CURLOPT_ACCEPT_ENCODING stays unset: offsets and ranges must count
     * the bytes of the file itself, not of a compressed transfer */
#undef SET
    return c;
}

int ef__http_open(void **impl, const ef__stream_backend **backend,
                  const char *url, const ef__stream_opts *o, uint64_t offset,
                  uint64_t end, ef__err *err)
{
    *impl = NULL;
    *backend = NULL;
    int rc = check_opts(url, o, err);
    if (rc != EF_OK)
        return rc;
    pthread_once(&g_once, global_init);
    if (g_init_rc != CURLE_OK)
        return ef__err_set(err, EF_EIO, "%s: cannot initialise libcurl: %s",
                           url, curl_easy_strerror(g_init_rc));
    http_conn *h = ef__calloc(1, sizeof *h);
    if (!h)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", url);
    h->url = ef__strdup(url);
    h->buf = ef__malloc(BUF_CAP);
    h->easy = curl_easy_init();
    h->multi = curl_multi_init();
    if (!h->url || !h->buf || !h->easy || !h->multi) {
        http_close(h);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", url);
    }
    h->cap = BUF_CAP;
    h->cancelled = o->cancelled;
    h->tries = o->tries;
    h->timeout_s = o->timeout_s;
    h->backoff_s = o->backoff_s;
    h->delay_s = o->backoff_s;
    h->total = -1;
    /* as if the bytes before had been read: the first attempt asks for
     * the rest with a Range request, and a 200 reply's head is dropped */
    h->received = offset;
    h->end = end;
    CURLcode c = configure(h);
    if (c != CURLE_OK) {
        http_close(h);
        return ef__err_set(err, EF_EIO, "%s: libcurl refused the settings: %s",
                           url, curl_easy_strerror(c));
    }
    *impl = h;
    *backend = &http_backend;
    return EF_OK;
}

#else /* !EF_HAVE_CURL */

int ef__http_open(void **impl, const ef__stream_backend **backend,
                  const char *url, const ef__stream_opts *o, uint64_t offset,
                  uint64_t end, ef__err *err)
{
    (void)impl;
    (void)backend;
    (void)o;
    (void)offset;
    (void)end;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: echoflow was built without libcurl, so it cannot "
                       "read URLs (apt-get install libcurl4-openssl-dev, then "
                       "rebuild)",
                       url);
}

#endif
