# SPDX-License-Identifier: Apache-2.0
"""What the examples share: Fashion-MNIST packed into WebDataset shards by
the `echoflow` command, and nginx serving them on loopback.

    with shards.served(shards.pack_fashion_mnist(workdir)) as base_url:
        spec = "tar:urls=%s/train-{000000..000005}.tar | decode" % base_url
"""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

FASHION_MNIST = os.environ.get("EF_FASHION_MNIST_DIR",
                               "/usr/share/datasets/fashion-mnist")
NGINX = "/usr/sbin/nginx"


def find_cli():
    """The echoflow command: $ECHOFLOW_CLI, build/echoflow of this
    checkout, or the installed one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.environ.get("ECHOFLOW_CLI"),
                 os.path.join(here, "..", "build", "echoflow"),
                 shutil.which("echoflow")):
        if path and os.access(path, os.X_OK):
            return path
    sys.exit("the echoflow command was not found: build it (cmake --build "
             "build) or set ECHOFLOW_CLI")


def fashion_mnist(split="train"):
    """The idx source spec of a Fashion-MNIST split ("train" or "t10k")."""
    images = os.path.join(FASHION_MNIST, "%s-images-idx3-ubyte.gz" % split)
    labels = os.path.join(FASHION_MNIST, "%s-labels-idx1-ubyte.gz" % split)
    if not os.path.exists(images):
        sys.exit("Fashion-MNIST is missing under %s (apt-get install "
                 "dataset-fashion-mnist)" % FASHION_MNIST)
    return "idx:images=%s,labels=%s" % (images, labels)


def pack_fashion_mnist(out_dir, split="train", per_shard=10000):
    """Packs a Fashion-MNIST split into WebDataset shards (PNG images, cls
    labels) in out_dir, once: a complete set of the same shard size is
    kept. Returns the
    brace pattern of the shard names, relative to out_dir."""
    n = 60000 if split == "train" else 10000
    count = (n + per_shard - 1) // per_shard
    pattern = "%s-{%06d..%06d}.tar" % (split, 0, count - 1)
    # the stamp says a pack of this split and shard size completed here
    stamp = os.path.join(out_dir, ".packed-%s-%d" % (split, per_shard))
    if os.path.exists(stamp):
        return pattern
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.startswith(".packed-%s-" % split):
            os.remove(os.path.join(out_dir, f))
    subprocess.run([find_cli(), "pack", "--per-shard", str(per_shard),
                    fashion_mnist(split),
                    os.path.join(out_dir, split + "-%06d.tar")],
                   check=True, stdout=subprocess.DEVNULL)
    open(stamp, "w").close()
    return pattern


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(root, limit_rate=None):
    """nginx serving `root` on a free loopback port, with its own config and
    temporary files; yields the base URL. limit_rate: bytes/s per
    connection (nginx's limit_rate), to emulate a slow network."""
    if not os.access(NGINX, os.X_OK):
        sys.exit("%s is missing (apt-get install nginx)" % NGINX)
    conf_dir = tempfile.mkdtemp(prefix="echoflow-nginx.")
    rate = "limit_rate %d;" % limit_rate if limit_rate else ""
    proc = None
    try:
        for _ in range(5):  # the port may be taken before nginx binds it
            port = _free_port()
            temp = os.path.join(conf_dir, "tmp")
            os.makedirs(temp, exist_ok=True)
            with open(os.path.join(conf_dir, "nginx.conf"), "w") as f:
                f.write("""daemon off; master_process off; worker_processes 1;
pid %(d)s/nginx.pid; error_log %(d)s/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %(t)s; proxy_temp_path %(t)s;
    fastcgi_temp_path %(t)s; uwsgi_temp_path %(t)s; scgi_temp_path %(t)s;
    server { listen 127.0.0.1:%(p)d; root %(r)s; %(rate)s }
}
""" % {"d": conf_dir, "t": temp, "p": port, "r": os.path.abspath(root),
                    "rate": rate})
            proc = subprocess.Popen(
                [NGINX, "-c", os.path.join(conf_dir, "nginx.conf"), "-p",
                 conf_dir], stderr=subprocess.DEVNULL)
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    if proc.poll() is not None:
                        break
                    time.sleep(0.1)
            else:
                proc.kill()
                proc.wait()
                continue
            if proc.poll() is None:
                break
        else:
            raise RuntimeError("nginx did not start; see %s/error.log"
                               % conf_dir)
        yield "http://127.0.0.1:%d" % port
    finally:
        if proc and proc.poll() is None:
            proc.terminate()
            proc.wait()
        shutil.rmtree(conf_dir, ignore_errors=True)
