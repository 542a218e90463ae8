# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python tests. They run against the build tree:
PYTHONPATH=build/python and ECHOFLOW_CLI=build/echoflow (ctest sets both;
by hand: `cd build && ctest -R python -V`)."""
import os
import subprocess
import sys
import time

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


def start_http_server(root, *extra):
    """Serves `root` with tests/http_server.py (options `extra`) on a free
    port: (the process, the port), once the server says its port."""
    port_file = os.path.join(root, ".port")
    if os.path.exists(port_file):  # an earlier server's
        os.remove(port_file)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests", "http_server.py"),
         "--root", root, "--port-file", port_file, "--quiet", *extra])
    deadline = time.time() + 20
    while not os.path.exists(port_file):
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("tests/http_server.py did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())
