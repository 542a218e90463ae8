/* Reports of `echoflow run` (see report.h). */
#include "report.h"

#include <math.h>
#include <string.h>

/* The length of the well-formed UTF-8 sequence at s (Unicode table 3-7:
 * no overlong forms, no surrogates, nothing above U+10FFFF), or, negated,
 * the length of its longest invalid start (at least 1). Stops at the
 * terminating NUL, which is no continuation byte. */
static int utf8_length(const unsigned char *s)
{
    unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
    int n;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3;
        lo = s[0] == 0xe0 ? 0xa0 : lo; /* overlong */
        hi = s[0] == 0xed ? 0x9f : hi; /* surrogates */
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4;
        lo = s[0] == 0xf0 ? 0x90 : lo; /* overlong */
        hi = s[0] == 0xf4 ? 0x8f : hi; /* above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i < n; i++, lo = 0x80, hi = 0xbf)
        if (s[i] < lo || s[i] > hi)
            return -i;
    return n;
}

/* Paths and messages are bytes, not necessarily UTF-8, and a message may
 * be cut mid-character; JSON must be UTF-8. Valid sequences pass through,
 * each invalid byte or cut sequence becomes U+FFFD, the usual
 * replacement. */
static void json_string(FILE *f, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    fputc('"', f);
    while (*s) {
        int n = utf8_length(s);
        if (n < 0) {
            fputs("\\ufffd", f);
            s += -n;
        } else if (*s == '"' || *s == '\\') {
            fprintf(f, "\\%c", *s++);
        } else if (*s < 0x20) {
            fprintf(f, "\\u%04x", *s++);
        } else {
            fwrite(s, 1, (size_t)n, f);
            s += n;
        }
    }
    fputc('"', f);
}

/* JSON has no inf or nan. */
static void json_number(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

void report_json(FILE *f, const ef_pipeline *p, const run_info *ri)
{
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    fputs("{\"spec\": ", f);
    json_string(f, ri->spec);
    fprintf(f,
            ", \"seed\": %llu, \"consume_us\": ", (unsigned long long)ri->seed);
    json_number(f, ri->consume_us);
    fputs(", \"status\": ", f);
    json_string(f, ri->status == EF_END ? "ok" : ef_status_name(ri->status));
    if (ri->status < 0) {
        fputs(", \"error\": ", f);
        json_string(f, ef_pipeline_error(p));
    }
    fprintf(f,
            ", \"items\": %llu, \"elapsed_s\": ", (unsigned long long)ps.items);
    json_number(f, ps.elapsed_s);
    fputs(", \"startup_s\": ", f);
    json_number(f, ps.startup_s);
    fputs(", \"items_per_s\": ", f);
    json_number(f, ps.elapsed_s > 0 ? (double)ps.items / ps.elapsed_s : 0);
    fputs(", \"consumer_wait_s\": ", f);
    json_number(f, ps.consumer_wait_s);
    fputs(", \"consumer_wait_fraction\": ", f);
    json_number(f, ps.consumer_wait_fraction);
    char why[512];
    uint64_t skipped = ef_pipeline_skipped((ef_pipeline *)p, why, sizeof why);
    fprintf(f, ", \"skipped\": %llu", (unsigned long long)skipped);
    if (skipped) {
        fputs(", \"first_skip\": ", f);
        json_string(f, why);
    }
    uint64_t abandoned =
        ef_pipeline_abandoned((ef_pipeline *)p, why, sizeof why);
    fprintf(f, ", \"abandoned\": %llu, \"lost_bytes\": %llu",
            (unsigned long long)abandoned, (unsigned long long)ps.lost_bytes);
    if (abandoned) {
        fputs(", \"first_abandon\": ", f);
        json_string(f, why);
    }
    fprintf(f,
            ", \"memory_budget\": %llu, \"bytes_held\": %llu, "
            "\"peak_bytes_held\": %llu",
            (unsigned long long)ps.memory_budget,
            (unsigned long long)ps.bytes_held,
            (unsigned long long)ps.peak_bytes_held);
    fputs(", \"stages\": [", f);
    for (int i = 0; i < ef_pipeline_stage_count(p); i++) {
        ef_stage_stats st;
        ef_pipeline_stage_stats(p, i, &st);
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        json_string(f, st.name);
        fprintf(f, ", \"items_in\": %llu, \"items_out\": %llu, \"wait_up_s\": ",
                (unsigned long long)st.items_in,
                (unsigned long long)st.items_out);
        json_number(f, st.wait_up_s);
        fputs(", \"wait_down_s\": ", f);
        json_number(f, st.wait_down_s);
        fprintf(f, ", \"skipped\": %llu, \"abandoned\": %llu, "
                   "\"lost_bytes\": %llu",
                (unsigned long long)st.skipped,
                (unsigned long long)st.abandoned,
                (unsigned long long)st.lost_bytes);
        for (int k = 0; k < st.nextra; k++) {
            fputs(", ", f);
            json_string(f, st.extra[k].key);
            fputs(": ", f);
            json_number(f, st.extra[k].value);
        }
        fputc('}', f);
    }
    fputs("]}\n", f);
}

void report_text(FILE *f, const ef_pipeline *p, const run_info *ri)
{
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    fprintf(f, "items           %llu\n", (unsigned long long)ps.items);
    fprintf(f, "startup         %.3f s (opening stages, not counted below)\n",
            ps.startup_s);
    fprintf(f, "elapsed         %.3f s\n", ps.elapsed_s);
    fprintf(f, "rate            %.0f items/s\n",
            ps.elapsed_s > 0 ? (double)ps.items / ps.elapsed_s : 0);
    fprintf(f, "consumer waited %.1f%% of the time (%.3f s)\n",
            100 * ps.consumer_wait_fraction, ps.consumer_wait_s);
    if (ri->status < 0)
        fprintf(f, "ended with      %s\n", ef_status_name(ri->status));
    char why[512];
    uint64_t skipped = ef_pipeline_skipped((ef_pipeline *)p, why, sizeof why);
    if (skipped)
        fprintf(f, "skipped         %llu bad samples; the first: %s\n",
                (unsigned long long)skipped, why);
    uint64_t abandoned =
        ef_pipeline_abandoned((ef_pipeline *)p, why, sizeof why);
    if (abandoned)
        fprintf(f,
                "abandoned       %llu shards or files; %llu bytes of them "
                "left unread (where their size was known); the first: %s\n",
                (unsigned long long)abandoned,
                (unsigned long long)ps.lost_bytes, why);
    fprintf(f, "memory          %llu bytes held at most, ",
            (unsigned long long)ps.peak_bytes_held);
    if (ps.memory_budget)
        fprintf(f, "of a budget of %llu\n",
                (unsigned long long)ps.memory_budget);
    else
        fprintf(f, "no budget\n");
    fprintf(f, "\n%-10s %12s %12s %10s %10s  %s\n", "stage", "items in",
            "items out", "wait up s", "wait dn s", "details");
    for (int i = 0; i < ef_pipeline_stage_count(p); i++) {
        ef_stage_stats st;
        ef_pipeline_stage_stats(p, i, &st);
        fprintf(f, "%-10s %12llu %12llu %10.3f %10.3f ", st.name,
                (unsigned long long)st.items_in,
                (unsigned long long)st.items_out, st.wait_up_s, st.wait_down_s);
        if (st.skipped)
            fprintf(f, " skipped=%llu", (unsigned long long)st.skipped);
        if (st.abandoned)
            fprintf(f, " abandoned=%llu lost_bytes=%llu",
                    (unsigned long long)st.abandoned,
                    (unsigned long long)st.lost_bytes);
        for (int k = 0; k < st.nextra; k++) {
            double v = st.extra[k].value;
            if (v == floor(v) && fabs(v) < 1e15)
                fprintf(f, " %s=%.0f", st.extra[k].key, v);
            else
                fprintf(f, " %s=%.3f", st.extra[k].key, v);
        }
        fputc('\n', f);
    }
    for (int i = 0; i < ef_pipeline_stage_count(p); i++) {
        ef_stage_stats st;
        double is_auto, r, busy, factor;
        ef_pipeline_stage_stats(p, i, &st);
        if (strcmp(st.name, "echo") != 0 ||
            !ef_stage_stats_extra(&st, "auto", &is_auto) || is_auto ||
            !ef_stage_stats_extra(&st, "r_estimate", &r) ||
            !ef_stage_stats_extra(&st, "upstream_busy", &busy) ||
            !ef_stage_stats_extra(&st, "effective_factor", &factor))
            continue;
        if (r > 0 && busy < 0.9)
            fprintf(f,
                    "\nnote: stage %d (echo) is the bottleneck: its factor "
                    "%.2f exceeds the measured R = %.2f, so the upstream "
                    "idles %.0f%% of the time. Use a factor of about %.1f, "
                    "or factor=auto.\n",
                    i + 1, factor, r, 100 * (1 - busy), r < 1 ? 1.0 : r);
    }
}
