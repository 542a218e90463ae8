"""COMMENTARY.md: the comparison with the paper, written by a person after
reading the tables, beside the CSVs, one '## NAME' section per experiment.
It is text about the figures, so it lives with them."""
import os


def read(path, names):
    """{experiment name: its section's text} from the file at path (none if
    there is no file); names are the experiments'."""
    out, name = {}, None
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                name = line[3:].strip()
                out[name] = []
            elif name:
                out[name].append(line.rstrip("\n"))
    return {k: "\n".join(v).strip() for k, v in out.items()}
