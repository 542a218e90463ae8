# SPDX-License-Identifier: Apache-2.0
"""The package installs the Python way: pyproject.toml and setup.py build a
wheel against the C library, and the wheel installs into a fresh virtual
environment and runs a pipeline there, away from the source tree.

The library is the build tree's when ECHOFLOW_BUILD_DIR names one (ctest
sets it), else the installed one pkg-config finds; with neither, the
wheel is skipped. One wheel is built, for the whole module."""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def package_version():
    """The C library's version, from the header that defines it."""
    with open(os.path.join(ROOT, "include", "echoflow", "echoflow.h")) as f:
        text = f.read()
    return ".".join(re.search(r"^#define EF_VERSION_%s (\d+)$" % p, text,
                              re.M).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


def library_findable():
    if os.environ.get("ECHOFLOW_BUILD_DIR"):
        return True
    return shutil.which("pkg-config") is not None and subprocess.run(
        ["pkg-config", "--exists", "echoflow"]).returncode == 0


def clean_env(**extra):
    """The environment without the build tree's package on the path (ctest
    puts it there) or sanitizer runtimes, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_ROOT_USER_ACTION="ignore", **extra)
    return env


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of what the package is built from, so that setuptools'
    build/ and egg-info stay out of the checkout."""
    d = tmp_path_factory.mktemp("source")
    for f in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(os.path.join(ROOT, f), d)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for sub in ("include", os.path.join("python", "src"),
                os.path.join("python", "echoflow")):
        shutil.copytree(os.path.join(ROOT, sub), d / sub, ignore=skip)
    return d


def build_wheel(source, out, env):
    return subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel",
         "--outdir", str(out), str(source)], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_wheel_installs_in_a_fresh_venv_and_runs_a_pipeline(source,
                                                                  tmp_path):
    if not library_findable():
        pytest.skip("the echoflow C library is not installed (pkg-config "
                    "knows no echoflow) and ECHOFLOW_BUILD_DIR names no "
                    "build tree")
    r = build_wheel(source, tmp_path / "dist", clean_env())
    assert r.returncode == 0, r.stdout

    # the extension's ABI in the tag and the name, stubs beside it
    version = package_version()
    tag = "cp%d%d" % sys.version_info[:2]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    wheel = tmp_path / "dist" / ("echoflow-%s-%s-%s-%s.whl"
                                 % (version, tag, tag, platform))
    assert os.listdir(tmp_path / "dist") == [wheel.name]
    names = set(zipfile.ZipFile(wheel).namelist())
    module = "echoflow/_echoflow" + sysconfig.get_config_var("EXT_SUFFIX")
    for f in (module, "echoflow/__init__.py", "echoflow/__init__.pyi",
              "echoflow/torch.py", "echoflow/torch.pyi",
              "echoflow/_distributed.py", "echoflow/_partitions.py",
              "echoflow/py.typed"):
        assert f in names, sorted(names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    str(venv)], check=True, env=clean_env())
    python = str(venv / "bin" / "python")
    r = subprocess.run([python, "-m", "pip", "install", "--no-index",
                        "--no-deps", str(wheel)], env=clean_env(), text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert r.returncode == 0, r.stdout

    # from a folder outside the checkout, so that only the venv's copy
    # can be the one imported
    script = (
        "import echoflow, json\n"
        "with echoflow.Pipeline('range:n=10 | batch:5') as p:\n"
        "    batches = [memoryview(b['index']).tolist() for b in p]\n"
        "print(json.dumps([echoflow.__file__, echoflow.__version__,"
        " batches]))\n")
    r = subprocess.run([python, "-c", script], cwd=tmp_path, env=clean_env(),
                       text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    path, got_version, batches = json.loads(r.stdout)
    assert path.startswith(str(venv) + os.sep)
    assert got_version == version
    assert batches == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


# ---- what the build says when it cannot find the library -------------------

def test_no_library_found_says_where_it_looked(source, tmp_path):
    empty = tmp_path / "pkgconfig"
    empty.mkdir()
    env = clean_env(PKG_CONFIG_LIBDIR=str(empty), PKG_CONFIG_PATH="")
    env.pop("ECHOFLOW_BUILD_DIR", None)
    r = build_wheel(source, tmp_path / "dist", env)
    assert r.returncode != 0
    assert ("the echoflow C library was not found: pkg-config knows no "
            "'echoflow'") in r.stdout
    assert "ECHOFLOW_BUILD_DIR" in r.stdout


def test_a_build_dir_that_is_no_build_tree_is_named(source, tmp_path):
    r = build_wheel(source, tmp_path / "dist",
                    clean_env(ECHOFLOW_BUILD_DIR=str(tmp_path)))
    assert r.returncode != 0
    assert ("ECHOFLOW_BUILD_DIR=%s is not a CMake build tree (no "
            "CMakeCache.txt)" % tmp_path) in r.stdout


def test_a_sanitizer_build_tree_is_refused(source, tmp_path):
    (tmp_path / "CMakeCache.txt").write_text(
        "echoflow_SOURCE_DIR:STATIC=%s\nEF_SANITIZE:STRING=thread\n" % ROOT)
    r = build_wheel(source, tmp_path / "dist",
                    clean_env(ECHOFLOW_BUILD_DIR=str(tmp_path)))
    assert r.returncode != 0
    assert "is a sanitizer build (EF_SANITIZE=thread)" in r.stdout


def test_a_library_of_another_version_is_refused(source, tmp_path):
    include = tmp_path / "src" / "include" / "echoflow"
    include.mkdir(parents=True)
    (include / "echoflow.h").write_text(
        "#define EF_VERSION_MAJOR 9\n#define EF_VERSION_MINOR 8\n"
        "#define EF_VERSION_PATCH 7\n")
    build = tmp_path / "build"
    build.mkdir()
    (build / "CMakeCache.txt").write_text(
        "echoflow_SOURCE_DIR:STATIC=%s\n" % (tmp_path / "src"))
    (build / "libechoflow.a").write_bytes(b"")
    r = build_wheel(source, tmp_path / "dist",
                    clean_env(ECHOFLOW_BUILD_DIR=str(build)))
    assert r.returncode != 0
    assert ("version 9.8.7) is not this package's version %s"
            % package_version()) in r.stdout
