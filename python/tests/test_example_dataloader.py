# SPDX-License-Identifier: Apache-2.0
"""examples/dataloader_echo.py: a stock torchvision ImageFolder pipeline
(PIL, transforms, two DataLoader workers) behind a slow file system,
trained to a target accuracy as it is and wrapped in echoflow.torch.echo().

The test runs the example's --quick form and checks what its JSON says:
both runs trained and ended for a reason, the echoed run read no more than
it trained on and its echo stage echoed. Times are reported, never
asserted: the machine is shared.
"""
import json
import os
import subprocess
import sys

import pytest

import shards  # examples/shards.py, put on the path by conftest

pytest.importorskip("torchvision")
pytestmark = pytest.mark.skipif(
    not os.path.isdir(shards.FASHION_MNIST),
    reason="needs Fashion-MNIST (scripts/install-deps.sh)")


@pytest.fixture(scope="module")
def quick(examples_dir, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("imagefolder"))
    proc = subprocess.run(
        [sys.executable, os.path.join(examples_dir, "dataloader_echo.py"),
         "--quick", "--json", "--root", root],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stderr
    # the image folder is in torchvision's layout, one folder a class
    assert len(os.listdir(os.path.join(root, "train"))) == 11  # + marker
    return json.loads(proc.stdout)


def test_both_runs_train_and_end_for_a_reason(quick):
    assert [r["run"] for r in quick["runs"]] == ["as it is", "echoed"]
    for r in quick["runs"]:
        assert r["steps"] > 0 and r["epochs"] >= 1
        assert 0 <= r["accuracy"] <= 1
        assert r["reached"] == (r["accuracy"] >= quick["target"])
        assert r["time_s"] > 0
    if all(r["reached"] for r in quick["runs"]):
        assert quick["speedup"] == pytest.approx(
            quick["runs"][0]["time_s"] / quick["runs"][1]["time_s"])


def test_the_upstream_is_set_slower_than_the_trainer(quick):
    assert quick["ratio"] == 4
    assert quick["delay_s"] == pytest.approx(
        2 * quick["ratio"] / quick["trainer_rate"])


def test_the_echoed_run_echoes(quick):
    plain, echoed = quick["runs"]
    assert plain["effective_factor"] == 1.0
    # four times slower upstream than trainer: the echo stage echoes
    assert echoed["effective_factor"] > 1.0
    assert echoed["examples_read"] > 0
