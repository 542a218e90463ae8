# SPDX-License-Identifier: Apache-2.0
"""A trainer for tests/service_test.sh that records what the service sent
it: run under mpirun beside `echoflow serve` workers,

    mpirun -np 1 python3 service_trainer.py OUT EPOCHS [CUT] : -np 3 echoflow serve SPEC

it reads EPOCHS epochs through echoflow.Pipeline("service"), one pipeline
per epoch, and writes OUT.<rank>.json: for each epoch the key of every
sample it received (its __key__ where the samples have one, else its
index) and the epoch each sample said it belonged to. With CUT, the first
epoch's pipeline is closed after CUT samples: the service drops the rest
of that epoch, and the next pipeline reads the next epoch whole.
"""
import json
import os
import sys

import echoflow


def key_of(sample):
    key = sample.get("__key__")
    return int(sample.identity.index) if key is None else str(key)


def main():
    out, epochs = sys.argv[1], int(sys.argv[2])
    cut = int(sys.argv[3]) if len(sys.argv) > 3 else None
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    record = {"epochs": []}
    for e in range(epochs):
        keys, said = [], set()
        with echoflow.Pipeline("service") as p:
            for s in p:
                keys.append(key_of(s))
                said.add(int(s.identity.epoch))
                if e == 0 and cut is not None and len(keys) == cut:
                    break
            stats = p.stats()
        record["epochs"].append({"keys": keys, "said": sorted(said)})
        record["stats"] = stats["stages"][0]
    with open("%s.%d.json" % (out, rank), "w") as f:
        json.dump(record, f)


main()
