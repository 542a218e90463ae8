// SPDX-License-Identifier: Apache-2.0
// js-tiktoken as the reference of the tokenize stage's BPE (test_tokenize.py).
//   node tiktoken_ref.cjs NODE_MODULES ranks OUT
//     writes GPT-2's ranks as a tiktoken rank file: "BASE64 RANK" lines
//   node tiktoken_ref.cjs NODE_MODULES encode IN OUT
//     IN: a JSON array of strings; OUT: a JSON array of their ids, as
//     tiktoken's encode_ordinary gives them (special tokens are text)
"use strict";
const fs = require("fs");
const [nodeModules, what, a, b] = process.argv.slice(2);
const from = { paths: [nodeModules] };
const { Tiktoken } = require(require.resolve("js-tiktoken/lite", from));
const gpt2 = require(require.resolve("js-tiktoken/ranks/gpt2", from));
const enc = new Tiktoken(gpt2);
if (what === "ranks") {
  // textMap: rank -> the token's bytes (js-tiktoken's decoded bpe_ranks)
  const lines = [...enc.textMap.entries()]
    .sort((x, y) => x[0] - y[0])
    .map(([rank, bytes]) => Buffer.from(bytes).toString("base64") + " " + rank);
  fs.writeFileSync(a, lines.join("\n") + "\n");
} else if (what === "encode") {
  const texts = JSON.parse(fs.readFileSync(a, "utf8"));
  // no special token allowed nor disallowed: all of them are text
  fs.writeFileSync(b, JSON.stringify(texts.map((t) => enc.encode(t, [], []))));
} else {
  process.stderr.write("usage: tiktoken_ref.cjs NODE_MODULES ranks OUT | encode IN OUT\n");
  process.exit(2);
}
