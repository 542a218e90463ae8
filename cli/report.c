/* SPDX-License-Identifier: Apache-2.0 */
/* Reports of `echoflow run` (see report.h). */
#include "report.h"

#include <math.h>
#include <string.h>

#include "json.h"

/* One figure of a stats struct `st`, for EF_..._STATS_FIGURES */
#define FIGURE_JSON(member, kind) FIGURE_JSON_##kind(#member, st.member);
#define FIGURE_JSON_UINT(key, v) json_uint(w, key, (uint64_t)(v))
#define FIGURE_JSON_REAL(key, v) json_number(w, key, v)

/* Every stage's counters and figures, as the array "stages". */
static void stages_json(json_writer *w, const ef_pipeline *p)
{
    json_begin_array(w, "stages");
    for (int i = 0; i < ef_pipeline_stage_count(p); i++) {
        ef_stage_stats st;
        ef_pipeline_stage_stats(p, i, &st);
        json_begin_object(w, NULL);
        json_string(w, "name", st.name);
        EF_STAGE_STATS_FIGURES(FIGURE_JSON)
        for (int k = 0; k < st.nextra; k++)
            json_number(w, st.extra[k].key, st.extra[k].value);
        json_end(w);
    }
    json_end(w);
}

/* The pipeline's figures, then every stage's, into the open object. */
static void figures_json(json_writer *w, const ef_pipeline *p)
{
    ef_pipeline_stats st;
    ef_pipeline_stats_get(p, &st);
    EF_PIPELINE_STATS_FIGURES(FIGURE_JSON)
    json_number(w, "items_per_s",
                st.elapsed_s > 0 ? (double)st.items / st.elapsed_s : 0);
    char why[512];
    uint64_t skipped = ef_pipeline_skipped((ef_pipeline *)p, why, sizeof why);
    if (skipped)
        json_string(w, "first_skip", why);
    json_begin_array(w, "skips"); /* why each of the first few was */
    for (uint64_t i = 0; i < skipped && i < EF_SKIPS_KEPT; i++) {
        ef_pipeline_skip((ef_pipeline *)p, i, why, sizeof why);
        json_string(w, NULL, why);
    }
    json_end(w);
    if (ef_pipeline_abandoned((ef_pipeline *)p, why, sizeof why))
        json_string(w, "first_abandon", why);
    stages_json(w, p);
}

void report_json(FILE *f, const ef_pipeline *p, const run_info *ri)
{
    json_writer w;
    json_init(&w, f);
    json_begin_object(&w, NULL);
    json_string(&w, "spec", ri->spec);
    json_uint(&w, "seed", ri->seed);
    json_number(&w, "consume_us", ri->consume_us);
    json_string(&w, "status",
                ri->status == EF_END ? "ok" : ef_status_name(ri->status));
    if (ri->status < 0)
        json_string(&w, "error", ef_pipeline_error(p));
    figures_json(&w, p);
    json_end(&w);
    fputc('\n', f);
}

void report_stats_line(FILE *f, const ef_pipeline *p, double t)
{
    json_writer w;
    json_init(&w, f);
    json_begin_object(&w, NULL);
    json_number(&w, "t", t);
    figures_json(&w, p);
    json_end(&w);
    fputc('\n', f);
    fflush(f);
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
        /* threads and depth now: what threads=auto and depth=auto chose */
        if (st.threads)
            fprintf(f, " threads=%d", st.threads);
        if (st.depth)
            fprintf(f, " depth=%d", st.depth);
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

void report_warnings(FILE *f, ef_pipeline *p, uint64_t *seen)
{
    uint64_t n = ef_pipeline_warning(p, *seen, NULL, 0);
    for (; *seen < n; ++*seen) {
        char text[512];
        ef_pipeline_warning(p, *seen, text, sizeof text);
        fprintf(f, "echoflow: warning: %s\n",
                text[0] ? text : "(more warnings than the pipeline keeps)");
    }
}
