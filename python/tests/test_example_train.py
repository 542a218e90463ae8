# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch_train.py: a CNN trained to a target accuracy without
and with data echoing, behind a throttled HTTP upstream.

The test runs the example's --quick form once (it packs the shards, serves
them with nginx, measures the trainer, throttles, trains both runs) and
checks what its JSON says against how the runs must relate: every example
fresh without echoing, fresh counts bounded by what the echo stage emitted
and by what was trained on, the runs ending for a reason. Times are
reported, never asserted: the machine is shared.
"""
import json
import math
import os
import subprocess
import sys

import pytest

import shards  # examples/shards.py, put on the path by conftest

pytestmark = pytest.mark.skipif(
    not os.access(shards.NGINX, os.X_OK)
    or not os.path.isdir(shards.FASHION_MNIST),
    reason="needs nginx and Fashion-MNIST (scripts/install-deps.sh)")


def run_example(examples_dir, *options, timeout=300):
    return subprocess.run(
        [sys.executable, os.path.join(examples_dir, "pytorch_train.py"),
         *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder of the module's own: the first run packs the shards."""
    return str(tmp_path_factory.mktemp("train-work"))


@pytest.fixture(scope="module")
def quick(examples_dir, work):
    """The JSON of one --quick run."""
    proc = run_example(examples_dir, "--quick", "--json", "--seed", "3",
                       "--work", work)
    assert proc.returncode == 0, proc.stderr
    # it packed the training split there, as the shards it served
    assert {"train-%06d.tar" % i for i in range(6)} <= set(os.listdir(work))
    return json.loads(proc.stdout)


def is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) \
        and value > 0


def runs(out):
    return {r["name"]: r for r in out["runs"]}


def test_both_runs_with_their_specs(quick):
    assert quick["quick"] is True and quick["seed"] == 3
    by_name = runs(quick)
    assert sorted(by_name) == ["auto echo", "no echo"]
    for r in by_name.values():
        assert r["spec"].startswith("tar:urls=http://127.0.0.1:")
        assert "| throttle:rate=" in r["spec"]
        assert r["spec"].endswith(
            "| batch:size=%d,drop_remainder=true" % quick["batch"])
    assert "echo:factor=1 |" in by_name["no echo"]["spec"]
    # the echo stage stands after the throttle, before the batch
    spec = by_name["auto echo"]["spec"]
    assert spec.index("throttle:") < spec.index(
        "echo:factor=auto,max=8,shuffle=10000") < spec.index("batch:")


def test_upstream_is_throttled_to_the_trainer_rate_over_r(quick):
    assert quick["trainer_examples_per_s"] > 0
    assert quick["ratio"] == 4
    assert quick["throttle_rate"] == pytest.approx(
        quick["trainer_examples_per_s"] / 4)
    # the spec carries that rate, to the tenth
    spec = quick["runs"][0]["spec"]
    assert "throttle:rate=%.1f " % quick["throttle_rate"] in spec


def test_counts_are_positive_and_batches_full(quick):
    for r in quick["runs"]:
        for key in ("fresh", "steps", "examples"):
            assert is_count(r[key]), (r["name"], key, r[key])
        # drop_remainder: every step trains on a whole batch
        assert r["examples"] == r["steps"] * quick["batch"]
        assert r["fresh"] <= r["examples"]


def test_without_echoing_every_example_is_fresh(quick):
    r = runs(quick)["no echo"]
    assert r["fresh"] == r["steps"] * quick["batch"]
    assert r["effective_factor"] == 1.0
    assert r["echo_stage"]["echoed"] == 0


def test_echo_run_counts_match_its_echo_stage(quick):
    r = runs(quick)["auto echo"]
    stage = r["echo_stage"]
    assert r["effective_factor"] >= 1.0
    assert r["effective_factor"] == stage["effective_factor"]
    # what the trainer counted fresh, the stage emitted fresh (it may have
    # emitted more: items in its shuffle buffer, in the batch being built);
    # what it trained on, the stage emitted as fresh or echoed
    assert r["fresh"] <= stage["fresh"]
    assert r["examples"] <= stage["fresh"] + stage["echoed"]


def test_r_estimate_reported(quick):
    for r in quick["runs"]:
        assert isinstance(r["r_estimate"], float), r["name"]
        # measured over seconds of training in which both sides moved
        assert math.isfinite(r["r_estimate"]) and r["r_estimate"] > 0


def test_each_run_ends_at_the_target_or_the_budget(quick):
    for r in quick["runs"]:
        evals = r["evaluations"]
        assert evals, r["name"]
        fresh = [e["fresh"] for e in evals]
        assert fresh == sorted(set(fresh))
        assert evals[-1]["fresh"] == r["fresh"]
        assert all(0 <= e["accuracy"] <= 1 for e in evals)
        # an evaluation after every eval_every fresh examples
        for k, f in enumerate(fresh[:-1]):
            assert f >= (k + 1) * quick["eval_every"]
        if r["reached"]:
            assert evals[-1]["accuracy"] >= quick["target"]
            assert all(e["accuracy"] < quick["target"] for e in evals[:-1])
            assert r["fresh_to_target"] == r["fresh"]
            assert r["steps_to_target"] == r["steps"]
            assert r["time_to_target_s"] == evals[-1]["train_s"] > 0
        else:
            assert r["fresh"] >= quick["max_fresh"]
            assert r["time_to_target_s"] is None


def test_speedup_is_the_ratio_of_the_times(quick):
    base, echo = runs(quick)["no echo"], runs(quick)["auto echo"]
    if base["reached"] and echo["reached"]:
        assert quick["speedup"] == pytest.approx(
            base["time_to_target_s"] / echo["time_to_target_s"])
    else:
        assert quick["speedup"] is None


def test_without_echoing_a_seed_repeats_its_run(quick, examples_dir, work):
    """Without echoing nothing depends on timing: the same seed, at another
    upstream rate, evaluates at the same fresh counts with the same
    accuracies."""
    again = run_example(examples_dir, "--quick", "--json", "--seed", "3",
                        "--work", work, "--rate", "4000")
    assert again.returncode == 0, again.stderr
    base = runs(json.loads(again.stdout))["no echo"]
    first = runs(quick)["no echo"]
    assert [(e["fresh"], e["accuracy"]) for e in base["evaluations"]] == \
        [(e["fresh"], e["accuracy"]) for e in first["evaluations"]]


@pytest.mark.parametrize("option, value", [
    ("--target", "1.5"), ("--max-fresh", "0"), ("--ratio", "-1")])
def test_bad_option_is_refused_by_name(examples_dir, tmp_path, option,
                                       value):
    proc = run_example(examples_dir, "--quick", "--work", str(tmp_path),
                       option, value, timeout=60)
    assert proc.returncode == 2
    assert option in proc.stderr
    assert not os.listdir(str(tmp_path))  # refused before packing
