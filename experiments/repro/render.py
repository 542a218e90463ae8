# SPDX-License-Identifier: Apache-2.0
"""How results become RESULTS.md and pictures: Markdown tables and
sections, and gnuplot."""
import math
import subprocess

from .results import die, num, reached_value, summary

GNUPLOT = "gnuplot"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---" if i < 2 else "---:"
                             for i in range(len(header))) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def section(lines, title, cmd, body):
    lines += ["", "### " + title, "", "```sh", cmd, "```", "", body]


def cell_summary(rs, col, digits=0):
    """Median, range and seeds reached of column col over a cell's rows
    (as table text), and the median as a number."""
    s = summary([reached_value(r, col) for r in rs])
    return (num(s[0], digits), "%s to %s" % (num(s[1], digits),
                                            num(s[2], digits)),
            "%d/%d" % (s[3], s[4]), s[0])


def gnuplot(script):
    p = subprocess.run([GNUPLOT], input=script, capture_output=True,
                       text=True)
    if p.returncode != 0:
        die("gnuplot failed: %s\nscript:\n%s" % (p.stderr.strip(), script))


def write_points(path, points):
    """A gnuplot data file of (x, summary) points: x, median, min, max (a
    max not reached drawn at the median); points not reached are left
    out."""
    with open(path, "w") as f:
        for x, s in points:
            if s[0] < math.inf:
                f.write("%s %g %g %g\n" % (x, s[0], s[1],
                                           s[2] if s[2] < math.inf else s[0]))
