/* SPDX-License-Identifier: Apache-2.0 */
/* `echoflow serve`: a worker of the preprocessing service, started by
 * mpirun beside the trainers (docs/distributed.md). Uses the public API
 * only. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "json.h"

static void report(const ef_service_info *info, const ef_serve_report *r)
{
    json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w, NULL);
    json_number(&w, "rank", info->rank);
    json_number(&w, "worker", info->role_rank);
    json_number(&w, "splits", (double)r->splits);
    json_number(&w, "items", (double)r->items);
    json_number(&w, "messages", (double)r->messages);
    json_number(&w, "MB", (double)r->bytes / 1e6);
    json_number(&w, "seconds", r->seconds);
    json_number(&w, "items_per_s",
                r->seconds > 0 ? (double)r->items / r->seconds : 0);
    json_number(&w, "credit_wait_s", r->credit_wait_s);
    json_number(&w, "send_s", r->send_s);
    json_number(&w, "dispatch_wait_s", r->dispatch_wait_s);
    json_end(&w);
    putchar('\n');
    fflush(stdout);
}

/* The spec is checked here first, so that a bad one is refused at the
 * start, by the rank given it, rather than at its first split. */
static int spec_ok(const cli_pipeline_opts *po, const char *spec)
{
    ef_pipeline *p = cli_pipeline("echoflow serve", NULL, po, spec, 0, 1);
    ef_pipeline_destroy(p);
    return p != NULL;
}

int cmd_serve(int argc, char **argv)
{
    const char *spec = NULL;
    long splits = 0;
    double throttle = 0;
    int json = 0;
    cli_pipeline_opts po = {0};
    const arg_opt opts[] = {
        {"--splits", ARG_LONG, &splits, NULL, 1, 1000000, NULL, "N",
         "parts each epoch is handed out in, to workers as\n"
         "they ask (default: 8 per worker)"},
        CLI_PIPELINE_ARGS(&po),
        {"--throttle", ARG_DOUBLE, &throttle, NULL, 1e-3, 1e9, NULL, "RATE",
         "send at most RATE items/s (an emulated slow\n"
         "worker; may differ between workers)"},
        {"--json", ARG_FLAG, &json, NULL, 0, 0, NULL, NULL,
         "at the end, this worker's figures as a JSON line"},
    };
    const arg_command cmd = {
        "echoflow serve",
        "SPEC",
        1,
        "A worker of the preprocessing service, under mpirun beside the\n"
        "trainers:\n"
        "  mpirun -np 1 echoflow train --spec 'service:epochs=0 | ...' ... \\\n"
        "       : -np 2 echoflow serve 'tar:urls=... | decode' --splits 6\n"
        "Each worker asks for parts of the data (splits), runs SPEC on\n"
        "them and sends the samples to the trainers as they have room;\n"
        "a trainer's `service` source reads them. Every worker must be\n"
        "given the same SPEC, --splits, --seed and --on-error.\n",
        opts,
        (int)(sizeof opts / sizeof opts[0])};
    int parsed = args_parse(&cmd, argc, argv, &spec);
    if (!ef_service_launched()) {
        if (parsed)
            return parsed == 1 ? 0 : 2;
        fprintf(stderr,
                "echoflow serve: start it with mpirun, beside the trainers: "
                "mpirun -np 1 echoflow train --spec 'service:epochs=0 | ...' "
                "... : "
                "-np 2 echoflow serve SPEC\n");
        return 2;
    }
    /* a rank that cannot serve still meets the others, so that every
     * process ends rather than wait for it */
    int refused = parsed != 0 || !spec_ok(&po, spec);
    char splits_text[32], seed_text[32];
    snprintf(splits_text, sizeof splits_text, "%ld", splits);
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)po.seed);
    const char *names[] = {"the spec", "--splits", "--seed", "--on-error"};
    const char *values[] = {refused ? "" : spec,
                            splits ? splits_text : "(default)", seed_text,
                            po.on_error ? po.on_error : "fail"};
    ef_service_hello hello = {
        sizeof hello, EF_SERVICE_WORKER, refused, names, values, 4};
    ef_service_info info = {.size = sizeof info};
    char err[1024];
    ef_status rc = ef_service_join(&hello, &info, err, sizeof err);
    if (rc != EF_OK || refused) {
        if (err[0])
            fprintf(stderr, "echoflow serve: %s\n", err);
        ef_service_leave(0);
        return parsed == 1 ? 0 : 2;
    }
    if (info.trainers == 0) {
        if (info.role_rank == 0)
            fprintf(stderr, "echoflow serve: no trainer in this job: start "
                            "one before the ':' of the mpirun command\n");
        ef_service_leave(0);
        return 2;
    }
    ef_serve_config config = {
        .size = sizeof config,
        .spec = spec,
        .splits = splits,
        .seed = po.seed,
        .on_error = po.on_error && !strcmp(po.on_error, "skip")
                        ? EF_ON_ERROR_SKIP
                        : EF_ON_ERROR_FAIL,
        .memory_budget = po.budget_given ? (int64_t)po.memory_budget : -1,
        .throttle = throttle,
    };
    ef_serve_report r = {.size = sizeof r};
    rc = ef_service_serve(&config, &r, err, sizeof err);
    if (rc != EF_OK)
        fprintf(stderr, "%s%s\n",
                strncmp(err, "echoflow serve", 14) ? "echoflow serve: " : "",
                err);
    if (json)
        report(&info, &r);
    /* a failure the trainers heard of ends in order; any other ends the
     * job */
    ef_service_leave(rc == EF_OK || r.trainers_left ? 0 : 1);
    return rc == EF_OK ? 0 : 1;
}
