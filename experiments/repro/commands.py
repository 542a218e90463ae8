# SPDX-License-Identifier: Apache-2.0
"""The three commands: run the cells not yet in the CSVs, plot, report."""
import concurrent.futures
import os
import shutil
import tempfile
import time

from . import commentary
from .cells import commit_id, run_cell, smoke_cells
from .experiments import ALL, BY_NAME, NAMES
from .render import GNUPLOT
from .results import (COLUMNS, ROOT, SETTINGS, append_row, die, fmt,
                      key_of, load, read_csv, report_dir, results_dir)


def parse_list(opt, text, ranges=False):
    """The values of a filter option ("a,b"; "0-4" too where ranges), as
    the CSV writes them (fmt), or None when the option is not given."""
    if text is None:
        return None
    out = set()
    for x in text.split(","):
        x = x.strip()
        if ranges and "-" in x[1:]:
            lo, hi = x.split("-", 1)
            try:
                out.update(str(i) for i in range(int(lo), int(hi) + 1))
            except ValueError:
                die("%s: '%s' is not a range of integers like 0-4" % (opt, x))
            continue
        if ranges:
            try:
                x = str(int(x))
            except ValueError:
                die("%s: '%s' is not an integer" % (opt, x))
        elif opt in ("--lrs", "--es") and x != "auto":
            try:
                x = fmt(float(x))
            except ValueError:
                die("%s: '%s' is not a number" % (opt, x))
        out.add(x)
    return out


def cell_filter(a):
    """Which cells --variants, --lrs, --es and --seeds keep. --es leaves the
    cells without echo (e = 1, the baselines) alone: they have no e to
    choose, and every e is compared with them."""
    want = {"variant": parse_list("--variants", getattr(a, "variants", None)),
            "lr": parse_list("--lrs", getattr(a, "lrs", None)),
            "e": parse_list("--es", getattr(a, "es", None)),
            "seed": parse_list("--seeds", getattr(a, "seeds", None), True)}

    def keep(c):
        for k, vals in want.items():
            if vals is None or (k == "e" and fmt(c["e"]) == "1"):
                continue
            if fmt(c[k]) not in vals:
                return False
        return True
    return keep


def cmd_run(a):
    binary = os.path.join(a.build, "echoflow")
    if not os.access(binary, os.X_OK):
        die("%s not found or not executable: build first (cmake -B build "
            "-S . && cmake --build build)" % binary)
    if a.jobs < 1:
        die("--jobs expects a number of processes >= 1, got %d" % a.jobs)
    out = a.out or os.path.join(ROOT, "experiments", "results-quick" if
                                a.quick else "results")
    if a.smoke:
        plan = [("smoke", None, smoke_cells())]
    else:
        only = a.only.split(",") if a.only else NAMES
        for x in only:
            if x not in BY_NAME:
                die("--only: unknown experiment '%s' (known: %s)" %
                    (x, ", ".join(NAMES)))
        keep = cell_filter(a)
        plan = [(m.NAME, m, [c for c in m.cells(a.quick) if keep(c)])
                for m in ALL if m.NAME in only]
    os.makedirs(out, exist_ok=True)
    commit = commit_id()
    ran = skipped = failed = 0
    t_start = time.monotonic()
    work = tempfile.mkdtemp(prefix="echoflow-repro.")
    envs = []
    try:
        for name, mod, cells in plan:
            path = os.path.join(out, name + ".csv")
            # An experiment whose cells are not `echoflow train` runs (the
            # language model's, in PyTorch) has its own columns and runs
            # its cells itself.
            settings = getattr(mod, "SETTINGS", SETTINGS)
            columns = getattr(mod, "COLUMNS", COLUMNS)
            run = getattr(mod, "run_cell", run_cell)
            done = {key_of(r, settings) for r in read_csv(path)}
            todo = [c for c in cells if key_of(c, settings) not in done]
            skipped += len(cells) - len(todo)
            print("%s: %d cells, %d already in %s" %
                  (name, len(cells), len(cells) - len(todo), path))
            t_exp = time.monotonic()
            env = None
            if todo and hasattr(mod, "setup"):
                env = mod.setup(binary, out, work)
                envs.append(env)
            # Single-threaded cells count fresh examples the same however
            # busy the machine is, so they run side by side; the rest, and
            # the cells of a timed experiment (TIMED: the network's), one at
            # a time.
            jobs = a.jobs if all(fmt(c["threads"]) == "1" for c in todo) \
                and not getattr(mod, "TIMED", False) else 1
            with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
                running = [pool.submit(run, binary, c, env, commit)
                           for c in todo]
                for i, f in enumerate(concurrent.futures.as_completed(
                        running)):
                    row = f.result()
                    if row is None:
                        failed += 1
                        continue
                    append_row(path, row, columns)
                    ran += 1
                    print("  [%d/%d] %s e=%s lr=%s seed=%s batch=%s R=%s: %s"
                          % (i + 1, len(todo), row["variant"],
                             fmt(row["e"]), fmt(row["lr"]), fmt(row["seed"]),
                             fmt(row["batch"]), fmt(row.get("R")) or "-",
                             "fresh %s, %.1f s" % (row["fresh_to_target"],
                                                   row["time_to_target_s"])
                             if row["reached"] else "not reached"),
                          flush=True)
            print("%s: %.0f s" % (name, time.monotonic() - t_exp))
    finally:
        for env in envs:
            env.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("ran %d cells, %d already done, %d failed, in %.0f s" %
          (ran, skipped, failed, time.monotonic() - t_start))
    return 1 if failed else 0


def cmd_plot(a):
    if not shutil.which(GNUPLOT):
        die("gnuplot not found on PATH (apt-get install gnuplot-nox)")
    img = os.path.join(report_dir(a), "img")
    os.makedirs(img, exist_ok=True)
    work = tempfile.mkdtemp(prefix="echoflow-plot.")
    made = []
    try:
        for m in ALL:
            rows = load(a, m.NAME)
            if rows and hasattr(m, "plot"):
                made += m.plot(rows, work, img)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for m in made:
        print("wrote", os.path.relpath(m, ROOT))
    if not made:
        die("no results in %s to plot" % results_dir(a))
    return 0


def prose(lines, notes, mod):
    if notes is None:  # quick mode: nothing to compare with the paper
        return
    text = notes.get(mod.NAME)
    if text:
        lines += ["", "### Against the paper", "", text]
    else:
        lines += ["", "> *Comparison with the paper (%s): not written yet; "
                  "it goes in the '## %s' section of COMMENTARY.md beside "
                  "the CSVs.*" % (mod.PAPER, mod.NAME)]


def cmd_report(a):
    rdir = results_dir(a)
    rel = os.path.relpath(rdir, ROOT)
    flag = " --quick" if a.quick else ""
    run_cmd = "/usr/bin/python3 experiments/reproduce.py run%s --only " % flag
    rep_cmd = "/usr/bin/python3 experiments/reproduce.py report%s" % flag
    lines = ["# Reproducing data echoing (Choi et al. 2019)", "",
             "Generated by `%s` from the CSVs in `%s/`; do not edit the "
             "tables by hand (rerun the command)." % (rep_cmd, rel)]
    if a.quick:
        lines += ["", "**These are quick-mode figures** (`run --quick`: one "
                  "seed, fewer factors, lower targets, small fresh-example "
                  "caps). They show the harness works end to end; they are "
                  "not the reproduction, which is `docs/RESULTS.md`, made "
                  "from the full run's CSVs in `experiments/results/`."]
    rows = {m.NAME: load(a, m.NAME) for m in ALL}
    commits = sorted({r["commit"] for rs in rows.values() for r in rs})
    dates = sorted(r["date"] for rs in rows.values() for r in rs)
    if dates:
        lines += ["", "echoflow commit(s): %s; runs from %s to %s (UTC)." %
                  (", ".join(commits), dates[0], dates[-1])]
    lines += ["", "Cells give the median over seeds, the range (min to max) "
              "and how many seeds reached the target; a seed that did not "
              "reach it within `max_fresh` counts as infinitely slow. Times "
              "are training and data time with evaluation apart, compared "
              "only as ratios within one run."]

    notes = None if a.quick else commentary.read(
        os.path.join(rdir, "COMMENTARY.md"), NAMES)
    for m in ALL:
        lines += ["", "## " + m.TITLE]
        if not rows[m.NAME]:
            lines += ["", "No results yet (`%s%s`)." % (run_cmd, m.NAME)]
            continue
        lines += m.report(rows[m.NAME], run_cmd + m.NAME)
        prose(lines, notes, m)
    text = "\n".join(lines) + "\n"
    path = os.path.join(report_dir(a), "RESULTS.md")
    with open(path, "w") as f:
        f.write(text)
    print("wrote", os.path.relpath(path, ROOT))
    return 0
