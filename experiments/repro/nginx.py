# SPDX-License-Identifier: Apache-2.0
"""The network experiment's upstream: Fashion-MNIST packed into shards
once, the trainer's rate when data is free measured once, and the shards
served by nginx on loopback at a rate set from it."""
import json
import os
import socket
import subprocess
import time

from .cells import commit_id
from .results import die

FMNIST = "/usr/share/datasets/fashion-mnist"
TRAIN_EXAMPLES = 60000
SHARDS = 6
NGINX = "/usr/sbin/nginx"


class Upstream:
    """One nginx server per R (nginx's limit_rate is per connection, and
    the tar source reads one shard at a time, so the limit is the
    upstream's rate)."""

    def __init__(self, binary, out_dir, work,
                 cal_name="network-calibration.json", cal_args=None,
                 cpu=None):
        """cal_args: the trainer's options for the calibration run (default
        the MLP preset's); a calibration run under `taskset -c` the trainer
        CPU when cpu is given. cpu: the CPU nginx runs pinned to (None: not
        pinned)."""
        self.binary, self.work = binary, work
        self.www = os.path.join(work, "www")
        self.cal_path = os.path.join(out_dir, cal_name)
        self.cal_args = cal_args or ["--data", "fashion-mnist",
                                     "--max-fresh", "40000"]
        self.cal_prefix = []
        self.cpu = cpu
        self.proc, self.R, self.port = None, None, None

    def prepare(self):
        os.makedirs(self.www, exist_ok=True)
        src = ("idx:images=%s/train-images-idx3-ubyte.gz,"
               "labels=%s/train-labels-idx1-ubyte.gz" % (FMNIST, FMNIST))
        p = subprocess.run([self.binary, "pack", "--per-shard",
                            str(TRAIN_EXAMPLES // SHARDS), src,
                            os.path.join(self.www, "train-%06d.tar")],
                           capture_output=True, text=True)
        if p.returncode != 0:
            die("network: echoflow pack into %s failed: %s" %
                (self.www, p.stderr.strip()))
        shards = sorted(os.listdir(self.www))
        if len(shards) != SHARDS:
            die("network: expected %d shards in %s, pack made %s" %
                (SHARDS, self.www, shards))
        self.bytes_per_example = sum(os.path.getsize(
            os.path.join(self.www, s)) for s in shards) / float(TRAIN_EXAMPLES)
        # The calibration is kept beside the CSV: a resumed run must throttle
        # as the first one did, or its cells would not be comparable.
        if os.path.exists(self.cal_path):
            with open(self.cal_path) as f:
                self.rate = json.load(f)["train_examples_per_s"]
            print("network: trainer rate %.0f examples/s, from %s" %
                  (self.rate, self.cal_path))
            return
        # as scripts/demo.sh: the trainer's rate when data is free
        p = subprocess.run(self.cal_prefix + [self.binary, "train"] +
                           self.cal_args + ["--eval-every", "100000000",
                                            "--json"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            die("network: calibration run failed: " + p.stderr.strip())
        self.rate = json.loads(p.stdout)["train_examples_per_s"]
        with open(self.cal_path, "w") as f:
            json.dump({"train_examples_per_s": self.rate,
                       "bytes_per_example": self.bytes_per_example,
                       "commit": commit_id(),
                       "command": " ".join(self.cal_prefix +
                                           ["echoflow", "train"] +
                                           self.cal_args)}, f, indent=1)
        print("network: trainer rate %.0f examples/s (calibration saved to "
              "%s)" % (self.rate, self.cal_path))

    def rate_at(self, R):
        """Examples/s the upstream delivers at R."""
        return self.rate / R

    def limit(self, R):
        return int(self.rate_at(R) * self.bytes_per_example)

    def urls(self):
        """The shards' URLs in the tar source's brace form."""
        return "http://127.0.0.1:%d/train-{%06d..%06d}.tar" % (
            self.port, 0, SHARDS - 1)

    def serve(self, R):
        if self.R == R and self.proc and self.proc.poll() is None:
            return
        self.stop()
        conf_dir = os.path.join(self.work, "nginx")
        os.makedirs(os.path.join(conf_dir, "tmp"), exist_ok=True)
        for _ in range(5):  # a free port may be taken before nginx binds it
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            conf = os.path.join(conf_dir, "nginx.conf")
            t = os.path.join(conf_dir, "tmp")
            with open(conf, "w") as f:
                f.write("""daemon off;
master_process off;
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %(t)s; proxy_temp_path %(t)s;
    fastcgi_temp_path %(t)s; uwsgi_temp_path %(t)s; scgi_temp_path %(t)s;
    server {
        listen 127.0.0.1:%(port)d;
        root %(www)s;
        limit_rate %(limit)d;
    }
}
""" % dict(d=conf_dir, t=t, port=port, www=self.www,
                    limit=self.limit(R)))
            err = open(os.path.join(conf_dir, "start.err"), "a")
            # master_process off: one nginx process does all the serving,
            # so taskset on it pins all of nginx
            pin = [] if self.cpu is None else ["taskset", "-c",
                                               str(self.cpu)]
            proc = subprocess.Popen(pin + [NGINX, "-c", conf, "-p",
                                           conf_dir], stderr=err)
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    self.proc, self.R, self.port = proc, R, port
                    return
                except OSError:
                    if proc.poll() is not None:
                        break
                    time.sleep(0.1)
            proc.kill()
            proc.wait()
        die("network: nginx did not start; see %s/start.err and error.log"
            % conf_dir)

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None
