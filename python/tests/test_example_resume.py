# SPDX-License-Identifier: Apache-2.0
"""Kill and resume of a data-parallel PyTorch job: examples/pytorch_resume.py
on 2 gloo processes over 2,048 Fashion-MNIST examples in its default 6
partitions (11 batches each, 3 partitions per rank: 33 steps per epoch, 2
epochs, shuffle and echo:factor=2), a checkpoint every 10 steps. The last
rank kills itself with SIGKILL after step 45, in the middle of the second
epoch (last checkpoint: step 40); the same command resumes there and must
end with the model bytes of a run that was never interrupted. The
checkpoint is then refused on 1 rank by a Loader without partitions (one
part per rank: 1 partition, not 6). Resuming on other counts is
test_example_elastic.py's."""
import os
import subprocess
import sys

import pytest
import torch

import echoflow
import echoflow.torch

ARGS = ["--examples", "2048", "--shuffle", "512",
        "--echo", "factor=2,shuffle=128", "--epochs", "2", "--every", "10",
        "--hidden", "32", "--world-size", "2", "--no-eval"]


def run(examples_dir, *args):
    return subprocess.run(
        [sys.executable, os.path.join(examples_dir, "pytorch_resume.py"),
         *ARGS, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.fixture(scope="module")
def runs(examples_dir, tmp_path_factory):
    """(folder, output of the killed run, of the resumed one) after an
    uninterrupted run and an interrupted and resumed one."""
    d = tmp_path_factory.mktemp("resume")
    whole = run(examples_dir, "--checkpoint", str(d / "whole.ckpt"),
                "--final", str(d / "whole.pt"))
    assert whole.returncode == 0, whole.stdout
    killed = run(examples_dir, "--checkpoint", str(d / "cut.ckpt"),
                 "--kill-at", "45")
    resumed = run(examples_dir, "--checkpoint", str(d / "cut.ckpt"),
                  "--final", str(d / "cut.pt"))
    return d, killed.returncode, killed.stdout, resumed


def test_killed_mid_epoch_resumes_to_the_same_model(runs):
    d, killed_rc, killed_out, resumed = runs
    assert killed_rc != 0, killed_out
    assert "rank 1: killed after step 45" in killed_out, killed_out
    assert "SIGKILL" in killed_out, killed_out
    assert resumed.returncode == 0, resumed.stdout
    assert "resumed at step 40 (epoch 1)" in resumed.stdout, resumed.stdout
    assert "epoch 1: step 66" in resumed.stdout, resumed.stdout
    whole, cut = torch.load(d / "whole.pt"), torch.load(d / "cut.pt")
    assert list(whole) == list(cut)
    for name in whole:
        assert torch.equal(whole[name], cut[name]), name
    # rank 0 wrote it by a rename: no temporary left beside it
    assert sorted(os.listdir(d)) == ["cut.ckpt", "cut.pt", "whole.ckpt",
                                     "whole.pt"]


def test_checkpoint_of_2_ranks_refused_on_1_without_partitions(
        runs, examples_dir):
    d = runs[0]
    sys.path.insert(0, examples_dir)
    import pytorch_resume
    args = pytorch_resume.parse_args(ARGS + ["--checkpoint", "unused"])
    model = pytorch_resume.mlp(args.hidden)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loader = echoflow.torch.Loader(pytorch_resume.pipeline_spec(args),
                                   even_steps="pad")
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.torch.load_checkpoint(str(d / "cut.ckpt"), model, None,
                                       loader)
    assert "rank 0 of 1, loader 0: state: saved by a Loader of " \
        "partitions=6, this Loader has partitions=None (one part per " \
        "rank: 1): build it with partitions=6" in str(e.value)
    assert "resumes on any number of ranks that divides 6" in str(e.value)
    for k, v in model.state_dict().items():  # left as it was
        assert torch.equal(v, before[k])
