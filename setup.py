# SPDX-License-Identifier: Apache-2.0
"""Builds the echoflow Python package against the echoflow C library.

pyproject.toml holds the package's metadata; this file adds what
setuptools can only take from code: the extension module
echoflow._echoflow (python/src, on the public header alone), and the
version, read from include/echoflow/echoflow.h, where the C library's
version is defined.

Where the C library comes from, in this order:
  1. ECHOFLOW_BUILD_DIR, when set: a CMake build tree of echoflow
     (`cmake -S . -B build && cmake --build build`), used in place.
  2. pkg-config's `echoflow`: the library `cmake --install` put under a
     prefix (/usr/local by default, as scripts/demo.sh does). For another
     prefix, PKG_CONFIG_PATH=PREFIX/lib/pkgconfig.
The library's static archive goes inside the module with its symbols
hidden, as python/CMakeLists.txt builds it, so the installed package needs
no libechoflow.so at run time; the module links the archive's own
dependencies (libjpeg, libcurl, ...) as shared libraries.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join("include", "echoflow", "echoflow.h")


def python_src(pattern):
    """The files of python/src matching pattern, relative to this folder
    (the C files are the ones python/CMakeLists.txt lists)."""
    return sorted(os.path.relpath(p, HERE) for p in
                  glob.glob(os.path.join(HERE, "python", "src", pattern)))


def fail(message):
    """Stops the build with a message that says what to do."""
    sys.exit("echoflow setup.py: " + message)


def header_version(header):
    """MAJOR.MINOR.PATCH from an echoflow.h's EF_VERSION_* defines."""
    with open(header, encoding="utf-8") as f:
        text = f.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define EF_VERSION_%s (\d+)$" % part, text, re.M)
        if m is None:
            fail("%s: no '#define EF_VERSION_%s N' line" % (header, part))
        parts.append(m.group(1))
    return ".".join(parts)


def pkg_config(args, env):
    """pkg-config's output for args."""
    r = subprocess.run(["pkg-config"] + args, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        fail("pkg-config %s failed: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def cmake_cache(build_dir):
    """The entries of a CMake build tree's CMakeCache.txt, as a dict."""
    path = os.path.join(build_dir, "CMakeCache.txt")
    if not os.path.isfile(path):
        fail("ECHOFLOW_BUILD_DIR=%s is not a CMake build tree (no "
             "CMakeCache.txt); configure one with: cmake -S . -B build"
             % build_dir)
    cache = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z_][^:=]*):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                cache[m.group(1)] = m.group(2)
    return cache


def from_build_tree(build_dir):
    """(include dir, pkg-config environment, archive) of a build tree."""
    cache = cmake_cache(build_dir)
    if cache.get("EF_SANITIZE"):
        fail("ECHOFLOW_BUILD_DIR=%s is a sanitizer build (EF_SANITIZE=%s), "
             "which an interpreter without sanitizers cannot load; use a "
             "build without EF_SANITIZE" % (build_dir, cache["EF_SANITIZE"]))
    source_dir = cache.get("echoflow_SOURCE_DIR")
    archive = os.path.join(build_dir, "libechoflow.a")
    if not source_dir or not os.path.isfile(archive):
        fail("ECHOFLOW_BUILD_DIR=%s holds no echoflow library (expected "
             "%s); build it with: cmake --build %s --target echoflow_static"
             % (build_dir, archive, build_dir))
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join(
        p for p in (build_dir, env.get("PKG_CONFIG_PATH")) if p)
    return os.path.join(source_dir, "include"), env, archive


def from_pkg_config():
    """(include dir, pkg-config environment, archive) of the installed
    library."""
    env = dict(os.environ)
    if subprocess.run(["pkg-config", "--exists", "echoflow"],
                      env=env).returncode != 0:
        fail("the echoflow C library was not found: pkg-config knows no "
             "'echoflow' (echoflow.pc). Install the library (scripts/demo.sh, "
             "or cmake --install build), set PKG_CONFIG_PATH=PREFIX/lib/"
             "pkgconfig for a prefix pkg-config does not search, or set "
             "ECHOFLOW_BUILD_DIR to a CMake build tree of echoflow")
    include_dir = pkg_config(["--variable=includedir", "echoflow"], env).strip()
    lib_dir = pkg_config(["--variable=libdir", "echoflow"], env).strip()
    archive = os.path.join(lib_dir, "libechoflow.a")
    if not os.path.isfile(archive):
        fail("pkg-config's echoflow has no static library %s, which the "
             "module links; install echoflow with cmake --install, which "
             "puts it there" % archive)
    return include_dir, env, archive


def archive_dependencies(env):
    """The link flags of what libechoflow.a needs: the libraries of
    echoflow.pc's Requires.private, linked as shared ones (their own
    private dependencies are not needed then, nor installed as a rule),
    and its Libs.private (-lpthread -lm)."""
    # one module a line, perhaps with a version condition after it
    requires = [line.split()[0] for line in pkg_config(
        ["--print-requires-private", "echoflow"], env).splitlines()
        if line.strip()]
    libs = pkg_config(["--libs"] + requires, env).split() if requires else []
    return libs + ["-lpthread", "-lm"]


def require_header(path, package):
    if not os.path.isfile(path):
        fail("%s not found; install it with: apt-get install %s"
             % (path, package))


class BuildExt(build_ext):
    """Finds the C library when the extension is built, not before, so
    that metadata and source distributions need no library."""

    def build_extensions(self):
        if shutil.which("pkg-config") is None:
            fail("pkg-config is needed to find the echoflow library and "
                 "what it links (apt-get install pkg-config)")
        build_dir = os.environ.get("ECHOFLOW_BUILD_DIR")
        if build_dir:
            found = from_build_tree(os.path.abspath(build_dir))
        else:
            found = from_pkg_config()
        include_dir, env, archive = found
        library_version = header_version(
            os.path.join(include_dir, "echoflow", "echoflow.h"))
        if library_version != self.distribution.get_version():
            fail("the echoflow library found (%s, version %s) is not this "
                 "package's version %s; build the package from the same "
                 "release as the library" % (archive, library_version,
                                             self.distribution.get_version()))
        require_header(os.path.join(sysconfig.get_paths()["include"],
                                    "Python.h"), "python3-dev")
        if not any(os.path.isfile(os.path.join(d, "dlpack", "dlpack.h"))
                   for d in (include_dir, "/usr/local/include",
                             "/usr/include")):
            fail("dlpack/dlpack.h not found; install it with: "
                 "apt-get install libdlpack-dev")
        libs = archive_dependencies(env)
        # setuptools rebuilds only when a source is newer than the module,
        # which misses a switch to another library (or another build of
        # it): build every time, the extension is small
        self.force = True
        for ext in self.extensions:
            ext.include_dirs.append(include_dir)
            ext.extra_objects.append(archive)
            ext.extra_link_args += libs + ["-Wl,--exclude-libs,ALL"]
        super().build_extensions()


setup(
    version=header_version(os.path.join(HERE, HEADER)),
    ext_modules=[Extension(
        "echoflow._echoflow",
        sources=python_src("*.c"),
        depends=python_src("*.h"),
        define_macros=[("_POSIX_C_SOURCE", "200809L")],
        extra_compile_args=["-std=c11", "-fvisibility=hidden"],
    )],
    cmdclass={"build_ext": BuildExt},
)
