#!/usr/bin/env node
// tokenizer_parity.js: reference token ids from tiktoken's "gpt2" encoding (the npm package
// tiktoken, Rust compiled to WASM, which ships its ranks: no download at run time), for
// dev/test/test_tokenizer to compare with llmc/tokenizer.
//
//   node scripts/test/tokenizer_parity.js IN OUT [--records] [--time]
//
// IN is read as bytes and decoded as UTF-8 by TextDecoder, which puts one U+FFFD per maximal
// ill-formed subpart, then encoded with encode_ordinary (no special tokens).
// OUT: the ids as little-endian uint32.
// --records: IN is a sequence of records (uint32 LE byte count, then the bytes), each encoded on
//            its own; OUT holds, per record, a uint32 id count and then the ids.
// --time:    prints the encoding speed (one thread, after a 1M-character warm-up) on stderr.
// tiktoken is installed on first use into build/npm (ignored by git) from scripts/data/package.json
// and package-lock.json, so the version is pinned.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

function load_tiktoken() {
  const prefix = path.join(__dirname, '..', '..', 'build', 'npm');
  const pins = path.join(__dirname, '..', 'data');  // package.json, package-lock.json
  const module_dir = path.join(prefix, 'node_modules', 'tiktoken');
  const pinned = require(path.join(pins, 'package.json')).dependencies.tiktoken;
  const installed = path.join(module_dir, 'package.json');
  if (!fs.existsSync(installed) || require(installed).version !== pinned) {
    fs.mkdirSync(prefix, { recursive: true });
    for (const f of ['package.json', 'package-lock.json']) {
      fs.copyFileSync(path.join(pins, f), path.join(prefix, f));
    }
    console.error(`installing tiktoken into ${prefix} (npm ci)`);
    try {
      execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'],
                   { cwd: prefix, stdio: ['ignore', 'ignore', 'inherit'] });
    } catch (e) {
      console.error(`error: npm ci in ${prefix} failed; tiktoken is needed for the reference ids`);
      process.exit(1);
    }
  }
  return require(module_dir);
}

function main() {
  const args = process.argv.slice(2);
  const files = args.filter((a) => !a.startsWith('--'));
  const records = args.includes('--records'), time = args.includes('--time');
  const known = ['--records', '--time'];
  if (files.length !== 2 || args.some((a) => a.startsWith('--') && !known.includes(a))) {
    console.error('usage: node scripts/test/tokenizer_parity.js IN OUT [--records] [--time]');
    process.exit(2);
  }
  const { get_encoding } = load_tiktoken();
  const enc = get_encoding('gpt2');
  const input = fs.readFileSync(files[0]);
  const texts = [];
  if (records) {
    for (let at = 0; at < input.length;) {
      const n = input.readUInt32LE(at);
      texts.push(input.subarray(at + 4, at + 4 + n));
      at += 4 + n;
    }
  } else {
    texts.push(input);
  }
  const decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
  const strings = texts.map((t) => decoder.decode(t));
  if (time) enc.encode_ordinary(strings.join('').slice(0, 1 << 20));  // warm-up (JIT)
  const t0 = process.hrtime.bigint();
  const ids = strings.map((s) => enc.encode_ordinary(s));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const chunks = [];
  for (const a of ids) {
    if (records) chunks.push(Buffer.from(new Uint32Array([a.length]).buffer));
    chunks.push(Buffer.from(a.buffer, a.byteOffset, a.byteLength));
  }
  fs.writeFileSync(files[1], Buffer.concat(chunks));
  enc.free();
  if (time) {
    const bytes = texts.reduce((s, t) => s + t.length, 0);
    const n = ids.reduce((s, a) => s + a.length, 0);
    const mbps = (bytes / 1e6 / seconds).toFixed(2);
    console.error(`tiktoken (npm, WASM): ${bytes} bytes -> ${n} tokens in ` +
                  `${seconds.toFixed(3)} s, ${mbps} MB/s (one thread)`);
  }
}

main();
