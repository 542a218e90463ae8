#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small HTTP/1.1 file server for echoflow's tests, with faults on demand.

Serves the files under --root (GET and HEAD; directories and paths outside
the root are 404) with Content-Length and single byte ranges: "bytes=N-",
"bytes=N-M" and "bytes=-K" get 206 with Content-Range; a start at or past
the end of the file gets 416 with "Content-Range: bytes */SIZE"; anything
else in a Range header (several ranges, bad syntax) is ignored, as RFC 9110
allows, and the whole file is sent with 200.

Command line (kept stable: other tests start this script too):

  http_server.py --root DIR [--port N] [--port-file PATH] [--quiet]
                 [--cut-every BYTES] [--fail-first N] [--fail-from N]
                 [--stall-after BYTES] [--ignore-range] [--range-shift BYTES]
                 [--cut-first BYTES] [--range-overrun BYTES]
                 [--slow-headers SECONDS] [--slow-body SECONDS]
                 [--redirect-loop] [--huge-header BYTES]
                 [--random-faults SEED] [--fault-rate P]
                 [--fault-counts PATH] [--request-log PATH]
                 [--latency SECONDS]

  --root DIR          directory to serve (required)
  --port N            port on 127.0.0.1; 0 (the default) picks a free one
  --port-file PATH    once listening, write the port number there (written
                      to a temporary name and renamed, so a reader never
                      sees a partial number)
  --cut-every BYTES   in every response, close the connection abruptly once
                      BYTES body bytes past the offset the client asked for
                      have been sent (no more data, no chunk end, just the
                      close). When ranges are honoured that is simply BYTES
                      body bytes per response; with --ignore-range the bytes
                      before the requested offset do not count, so a client
                      that resumes still gets BYTES new bytes each time.
  --fail-first N      answer 503 (with a short body) to the first N requests
                      of each path
  --fail-from N       answer 503 to every request of each path after its
                      first N (a server that goes down mid-file)
  --stall-after BYTES in every response, stop sending once BYTES body bytes
                      past the requested offset have been sent, and keep the
                      connection open (until the client closes it)
  --ignore-range      ignore Range headers: always 200 with the whole file
  --range-shift BYTES answer a range request with a 206 that starts BYTES
                      earlier than asked (not before 0), Content-Range
                      included, as a broken cache might
  --cut-first BYTES   like --cut-every, but only in the first response of
                      each path (so that the client asks for a range next)
  --range-overrun BYTES
                      answer a range request with a 206 whose body carries
                      BYTES bytes (0xEE) after the range its Content-Range
                      names; Content-Length counts them, as a broken server
                      that gets the two out of step would send
  --slow-headers SECONDS
                      after the status line, send one header line every
                      SECONDS, for ever (until the client leaves, or an
                      hour): the headers never end
  --slow-body SECONDS send the body one byte every SECONDS
  --redirect-loop     answer every request with a 302 to its own URL
  --huge-header BYTES add a header line of BYTES bytes to every file reply
  --random-faults SEED
                      draw a fault per request from a generator seeded by
                      SEED: with probability P/3 each (P from --fault-rate)
                      a 503, a cut or a stall after a number of body bytes
                      drawn uniformly from those the reply would carry past
                      the requested offset (0 included); otherwise a clean
                      reply. Cuts and stalls behave as --cut-every and
                      --stall-after do, and the earlier of a drawn and a
                      fixed limit wins; a drawn 503 comes before any other
                      option. For soak tests (bench/soak.sh): every kind
                      of fault, again and again, in one run
  --fault-rate P      with --random-faults: the chance that a request gets
                      a fault, 0 to 1 (default 0.3)
  --fault-counts PATH with --random-faults: after every request, write the
                      counts so far as JSON to PATH (temporary name, then
                      renamed): {"requests", "503", "cut", "stall",
                      "clean"}
  --request-log PATH  append a line per request to PATH, as it comes:
                      the method, the path and the Range header ("-"
                      without one), separated by spaces
  --latency SECONDS   wait SECONDS before answering each request (a
                      distant server: what reading many small files one
                      request at a time suffers from)
  --quiet             do not log requests to stderr

The process serves until killed (SIGTERM or SIGKILL are both fine: handler
threads are daemons). Only the Python 3 standard library is used.
"""

import argparse
import http.server
import json
import os
import random
import re
import select
import socket
import sys
import threading
import time
import urllib.parse

CHUNK = 64 * 1024


class Faults:
    """The options, plus the per-path request counts --fail-first needs
    and the generator and fault counts of --random-faults."""

    def __init__(self, args):
        self.root = os.path.realpath(args.root)
        self.cut_every = args.cut_every
        self.fail_first = args.fail_first
        self.fail_from = args.fail_from
        self.stall_after = args.stall_after
        self.ignore_range = args.ignore_range
        self.range_shift = args.range_shift
        self.cut_first = args.cut_first
        self.range_overrun = args.range_overrun
        self.slow_headers = args.slow_headers
        self.slow_body = args.slow_body
        self.redirect_loop = args.redirect_loop
        self.huge_header = args.huge_header
        self.quiet = args.quiet
        self.latency = args.latency
        self._lock = threading.Lock()
        self._seen = {}
        self._rng = None
        if args.random_faults is not None:
            self._rng = random.Random(args.random_faults)
        self.fault_rate = args.fault_rate
        self.fault_counts = args.fault_counts
        self._counts = dict.fromkeys(
            ("requests", "503", "cut", "stall", "clean"), 0)
        self.request_log = args.request_log

    def log_request_line(self, method, path, range_header):
        """--request-log: one line, written whole and flushed."""
        if self.request_log:
            with self._lock, open(self.request_log, "a") as fh:
                fh.write("%s %s %s\n" % (method, path, range_header or "-"))

    def count_request(self, path):
        """Returns how many requests for `path` came before this one."""
        with self._lock:
            n = self._seen.get(path, 0)
            self._seen[path] = n + 1
            return n

    def draw_fault(self):
        """(kind, fraction) for this request under --random-faults:
        kind "503", "cut", "stall" or "clean", and where in the body a cut
        or stall starts, as a fraction in [0, 1). (None, 0) without the
        option."""
        if self._rng is None:
            return None, 0.0
        with self._lock:
            u = self._rng.random()
            share = self.fault_rate / 3
            if u < share:
                kind = "503"
            elif u < 2 * share:
                kind = "cut"
            elif u < 3 * share:
                kind = "stall"
            else:
                kind = "clean"
            frac = self._rng.random()
            self._counts["requests"] += 1
            self._counts[kind] += 1
            self._write_counts()
            return kind, frac

    def _write_counts(self):
        """--fault-counts; called under the lock, so one writer of the
        temporary file at a time."""
        if self.fault_counts:
            tmp = self.fault_counts + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(self._counts, fh)
            os.replace(tmp, self.fault_counts)

    def start_counts(self):
        """Writes the zero counts, so a reader finds the file from the
        start."""
        with self._lock:
            self._write_counts()


def parse_range(header, size):
    """(start, end) inclusive for a single satisfiable byte range,
    "unsatisfiable" for a start at or past the end, None to ignore."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    first, last = m.group(1), m.group(2)
    if first == "":  # suffix: the last K bytes
        k = int(last)
        if k == 0:
            return "unsatisfiable"
        return (max(0, size - k), size - 1)
    start = int(first)
    if last != "" and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    end = size - 1 if last == "" else int(last)
    return (start, min(end, size - 1))


class Handler(http.server.BaseHTTPRequestHandler):
    # keep-alive, so that a retry may reuse the connection a 503 came on
    protocol_version = "HTTP/1.1"
    server_version = "echoflow-test/1"

    def log_message(self, fmt, *args):
        if not self.server.faults.quiet:
            sys.stderr.write("http_server: %s %s\n" % (self.address_string(),
                                                       fmt % args))

    def do_GET(self):
        if self.server.faults.latency:
            time.sleep(self.server.faults.latency)
        self.serve(send_body=True)

    def do_HEAD(self):
        self.serve(send_body=False)

    def send_small(self, code, text, extra=()):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def resolve(self):
        """The file the request names, or None (404)."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        full = os.path.realpath(os.path.join(self.server.faults.root,
                                             path.lstrip("/")))
        root = self.server.faults.root
        if full != root and not full.startswith(root + os.sep):
            return None
        return full if os.path.isfile(full) else None

    def serve(self, send_body):
        f = self.server.faults
        try:
            f.log_request_line(self.command, self.path,
                               self.headers.get("Range"))
            n = f.count_request(self.path)
            fault, frac = f.draw_fault()
            if fault == "503":
                self.send_small(503, "failing on purpose (--random-faults)",
                                [("Retry-After", "0")])
                return
            if n < f.fail_first or (f.fail_from >= 0 and n >= f.fail_from):
                self.send_small(503, "failing on purpose (--fail-first or "
                                "--fail-from)", [("Retry-After", "0")])
                return
            if f.redirect_loop:
                self.send_small(302, "redirecting to myself (--redirect-loop)",
                                [("Location", self.path)])
                return
            if f.slow_headers is not None:
                self.drip_headers(f.slow_headers)
                return
            full = self.resolve()
            if full is None:
                self.send_small(404, "no such file")
                return
            size = os.path.getsize(full)
            header = self.headers.get("Range")
            rng = None
            if header is not None and not f.ignore_range:
                rng = parse_range(header, size)
            if rng == "unsatisfiable":
                self.send_small(416, "range not satisfiable",
                                [("Content-Range", "bytes */%d" % size)])
                return
            # where the client wants its data to start: the reference for
            # --cut-every and --stall-after, also when the range is ignored
            asked = 0
            if header is not None:
                r = parse_range(header, size)
                if isinstance(r, tuple):
                    asked = r[0]
            extra = 0
            if rng is None:
                start, end = 0, size - 1
                self.send_response(200)
            else:
                start, end = rng
                start = max(0, start - f.range_shift)
                extra = f.range_overrun
                self.send_response(206)
                self.send_header("Content-Range",
                                 "bytes %d-%d/%d" % (start, end, size))
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start + 1 + extra))
            self.send_header("Accept-Ranges",
                             "none" if f.ignore_range else "bytes")
            if f.huge_header:
                self.send_header("X-Huge", "h" * f.huge_header)
            self.end_headers()
            if send_body and self.send_file(full, start, end + 1, asked,
                                            first=n == 0, fault=fault,
                                            frac=frac) and extra:
                self.wfile.write(b"\xee" * extra)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def drip_headers(self, seconds):
        """A 200 status line, then one header line every `seconds` and
        never the blank line that would end them."""
        self.close_connection = True
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        deadline = time.monotonic() + 3600
        k = 0
        while time.monotonic() < deadline:
            self.wfile.write(b"X-Slow-%d: still coming\r\n" % k)
            k += 1
            time.sleep(seconds)

    def send_file(self, full, start, stop, asked, first=False, fault=None,
                  frac=0.0):
        """Body bytes [start, stop) of the file, with the faults asked for
        (`fault` and `frac`: a drawn "cut" or "stall", see draw_fault).
        Limits count bytes from max(start, asked) on. Returns True when all
        of them went out."""
        f = self.server.faults
        base = max(start, asked)
        cut_at = stall_at = None
        if f.cut_every is not None:
            cut_at = base + f.cut_every
        if f.cut_first is not None and first and (
                cut_at is None or base + f.cut_first < cut_at):
            cut_at = base + f.cut_first
        if f.stall_after is not None:
            stall_at = base + f.stall_after
        if fault in ("cut", "stall") and stop > base:
            mark = base + int(frac * (stop - base))
            if fault == "cut" and (cut_at is None or mark < cut_at):
                cut_at = mark
            if fault == "stall" and (stall_at is None or mark < stall_at):
                stall_at = mark
        with open(full, "rb") as fh:
            fh.seek(start)
            pos = start
            while pos < stop:
                limit = stop
                for mark in (cut_at, stall_at):
                    if mark is not None and mark < limit:
                        limit = mark
                if pos == limit:
                    break
                data = fh.read(min(CHUNK, limit - pos))
                if not data:
                    break
                if f.slow_body is not None:
                    # one byte at a time; the file is read again from
                    # the next byte on
                    data = data[:1]
                    fh.seek(pos + 1)
                    time.sleep(f.slow_body)
                self.wfile.write(data)
                pos += len(data)
        if pos >= stop:
            return True
        if stall_at is not None and pos == stall_at and (
                cut_at is None or stall_at <= cut_at):
            self.stall()
        else:
            self.cut()
        return False

    def cut(self):
        """Closes the connection mid-body: the client sees it end early."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def stall(self):
        """Sends nothing more, holding the connection until the client
        leaves (a read of b"" or an error) or an hour has passed."""
        self.close_connection = True
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.connection], [], [], 0.5)
            if ready:
                try:
                    if not self.connection.recv(4096):
                        return
                except OSError:
                    return


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops the SYNs of clients that
    # open more connections at once (the files source's readers), which
    # then wait a second to retry: no server a test stands for does that
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # clients under test hang up mid-reply or on an idle keep-alive
        # connection all the time: that is not a server error
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--cut-every", type=int, metavar="BYTES")
    ap.add_argument("--fail-first", type=int, default=0, metavar="N")
    ap.add_argument("--fail-from", type=int, default=-1, metavar="N")
    ap.add_argument("--stall-after", type=int, metavar="BYTES")
    ap.add_argument("--ignore-range", action="store_true")
    ap.add_argument("--range-shift", type=int, default=0, metavar="BYTES")
    ap.add_argument("--cut-first", type=int, metavar="BYTES")
    ap.add_argument("--range-overrun", type=int, default=0, metavar="BYTES")
    ap.add_argument("--slow-headers", type=float, metavar="SECONDS")
    ap.add_argument("--slow-body", type=float, metavar="SECONDS")
    ap.add_argument("--redirect-loop", action="store_true")
    ap.add_argument("--huge-header", type=int, default=0, metavar="BYTES")
    ap.add_argument("--random-faults", type=int, metavar="SEED")
    ap.add_argument("--fault-rate", type=float, default=0.3, metavar="P")
    ap.add_argument("--fault-counts", metavar="PATH")
    ap.add_argument("--request-log", metavar="PATH")
    ap.add_argument("--latency", type=float, default=0, metavar="SECONDS")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if not 0 <= args.fault_rate <= 1:
        ap.error("--fault-rate must be between 0 and 1")
    if args.fault_counts and args.random_faults is None:
        ap.error("--fault-counts needs --random-faults")
    for name in ("range_shift", "range_overrun", "huge_header", "latency"):
        if getattr(args, name) < 0:
            ap.error("--%s must not be negative" % name.replace("_", "-"))
    for name in ("slow_headers", "slow_body"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            ap.error("--%s must be positive" % name.replace("_", "-"))
    for name in ("cut_every", "stall_after", "cut_first"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error("--%s must be at least 1" % name.replace("_", "-"))
    if not os.path.isdir(args.root):
        ap.error("--root %s is not a directory" % args.root)

    server = Server(("127.0.0.1", args.port), Handler)
    server.faults = Faults(args)
    server.faults.start_counts()
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    if not args.quiet:
        sys.stderr.write("http_server: serving %s on 127.0.0.1:%d\n"
                         % (args.root, port))
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
