# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python tests. They run against the build tree:
PYTHONPATH=build/python and ECHOFLOW_CLI=build/echoflow (ctest sets both;
by hand: `cd build && ctest -R python -V`)."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import shards  # noqa: E402  (examples/shards.py)


@pytest.fixture(scope="session")
def fmnist_spec():
    """The idx source of Fashion-MNIST's training split."""
    return shards.fashion_mnist("train")


@pytest.fixture(scope="session")
def fmnist_shards(tmp_path_factory):
    """Fashion-MNIST's training split as 6 WebDataset shards of 10,000:
    (folder, brace pattern of the names)."""
    d = tmp_path_factory.mktemp("shards")
    return str(d), shards.pack_fashion_mnist(str(d))


@pytest.fixture(scope="session")
def examples_dir():
    return os.path.join(ROOT, "examples")
