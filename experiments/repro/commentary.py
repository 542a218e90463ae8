# SPDX-License-Identifier: Apache-2.0
"""COMMENTARY.md: the comparison with the paper, written by a person after
reading the tables, beside the CSVs, one '## NAME' section per experiment.
It is text about the figures, so it lives with them. A section that cannot
be placed (a name that is no experiment's, or one that appears twice, so
that one of the two would be shown and the other silently dropped) is an
error, not a guess."""
import os

from .results import die


def read(path, names):
    """{experiment name: its section's text} from the file at path (none if
    there is no file); names are the experiments'."""
    out, name = {}, None
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("## "):
                name = line[3:].strip()
                if name in out:
                    die("%s:%d: heading '## %s' appears twice; merge the "
                        "two sections into one" % (path, n, name))
                if name not in names:
                    die("%s:%d: heading '## %s' names no experiment (known: "
                        "%s)" % (path, n, name, ", ".join(names)))
                out[name] = []
            elif name:
                out[name].append(line.rstrip("\n"))
    return {k: "\n".join(v).strip() for k, v in out.items()}
