# SPDX-License-Identifier: Apache-2.0
"""The reproduction of Choi et al. (2019), "Faster Neural Network Training
with Data Echoing", on the reference trainer (`echoflow train --json`).

  results.py     the CSV columns, reading and appending rows, summaries
  cells.py       a cell (one `echoflow train` run) and running it
  nginx.py       shards served over rate-limited HTTP (network experiment)
  render.py      pieces of RESULTS.md (tables, sections) and gnuplot
  commentary.py  COMMENTARY.md, the person-written comparison, checked
  fresh.py, policy.py, augment.py, policy_cnn.py, batch.py, shuffle.py,
  network.py, network_pinned.py, lm.py
                 one experiment each: its cells, report and plots
  lm_data.py, lm_train.py
                 the language model's corpus and token files; one of its
                 cells (PyTorch)
  experiments.py the experiments in report order
  commands.py    run, plot and report

`experiments/reproduce.py` is the command line on top. Python 3 standard
library only, but for the language model's modules (torch, numpy,
sentencepiece), imported only when its experiment runs.
"""
