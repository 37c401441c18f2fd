// bpe_ref.js DIR IN.json - encodes each string of the JSON array IN.json with the gpt-3-encoder package in
// DIR (its own JavaScript encoder: the reference test_bpe compares weft's tokenizer with) and prints a JSON
// array of token-id arrays.
const path = require('path');
const fs = require('fs');
const { encode } = require(path.resolve(process.argv[2]));
const input = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
process.stdout.write(JSON.stringify(input.map((s) => encode(s))));
