#!/usr/bin/env node
// parquet_to_jsonl.mjs: the text column of Parquet files (FineWeb, FineWeb-Edu) as JSONL, one
// {"text": ...} object per row, for prepare_data (which reads JSONL, not Parquet).
//
//   node scripts/data/parquet_to_jsonl.mjs [--column text] [-o OUT.jsonl] IN.parquet...
//
// Rows are written in file order, row group by row group, so memory stays at one row group
// (FineWeb's are ~100 MB of text) whatever the file's size. The reader is hyparquet with
// hyparquet-compressors (snappy, zstd, gzip, brotli, lz4), pure JavaScript, pinned in
// scripts/data/package.json and installed into build/npm on first use (npm ci). Without -o the JSONL
// goes to standard output; with -o it is written under a temporary name and renamed at the end,
// so a failure leaves no partial file. A missing file, a file that is not Parquet or a missing
// column: one sentence and exit 1.
import { execFileSync } from 'node:child_process';
import { closeSync, copyFileSync, createWriteStream, existsSync, mkdirSync, openSync, readFileSync,
         readSync, renameSync, rmSync, fstatSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

function die(sentence) {
  process.stderr.write(`error: ${sentence}\n`);
  process.exit(1);
}

// The pinned readers, installed from scripts/data/package.json + package-lock.json into build/npm.
async function load_reader() {
  const prefix = join(here, '..', '..', 'build', 'npm');
  const pinned = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8')).dependencies;
  const installed = (name) => {
    const p = join(prefix, 'node_modules', name, 'package.json');
    return existsSync(p) && JSON.parse(readFileSync(p, 'utf8')).version === pinned[name];
  };
  if (!installed('hyparquet') || !installed('hyparquet-compressors')) {
    mkdirSync(prefix, { recursive: true });
    for (const f of ['package.json', 'package-lock.json']) copyFileSync(join(here, f), join(prefix, f));
    process.stderr.write(`installing hyparquet into ${prefix} (npm ci)\n`);
    try {
      execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'],
                   { cwd: prefix, stdio: ['ignore', 'ignore', 'inherit'] });
    } catch (e) {
      die(`npm ci in ${prefix} failed; the npm registry is needed once to install hyparquet`);
    }
  }
  const require = createRequire(join(prefix, 'package.json'));
  const entry = (name) => pathToFileURL(require.resolve(name)).href;
  const hyparquet = await import(entry('hyparquet'));
  const { compressors } = await import(entry('hyparquet-compressors'));
  return { hyparquet, compressors };
}

// An AsyncBuffer over a file, read on demand (Parquet readers seek to the footer and to each
// column chunk), so a 2 GB file is never held whole.
function file_buffer(path) {
  let fd;
  try {
    fd = openSync(path, 'r');
  } catch (e) {
    die(`cannot read ${path}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  }
  return {
    byteLength: fstatSync(fd).size,
    slice(start, end) {
      const n = (end ?? this.byteLength) - start;
      const buf = Buffer.alloc(n);
      let got = 0;
      while (got < n) {
        const r = readSync(fd, buf, got, n - got, start + got);
        if (r === 0) break;
        got += r;
      }
      return buf.buffer.slice(buf.byteOffset, buf.byteOffset + got);
    },
    close() { closeSync(fd); },
  };
}

function write_line(out, line) {
  return out.write(line) ? Promise.resolve() : new Promise((ok) => out.once('drain', ok));
}

async function main() {
  // A reader that stops early (| head) is not an error.
  process.stdout.on('error', (e) => process.exit(e.code === 'EPIPE' ? 0 : 1));
  const args = process.argv.slice(2);
  let column = 'text', output = null;
  const inputs = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--column' || args[i] === '-o') {
      if (i + 1 >= args.length) die(`${args[i]} needs a value`);
      if (args[i] === '--column') column = args[++i]; else output = args[++i];
    } else if (args[i] === '-h' || args[i] === '--help') {
      process.stdout.write('usage: node scripts/data/parquet_to_jsonl.mjs [--column text] [-o OUT.jsonl] IN.parquet...\n');
      return;
    } else {
      inputs.push(args[i]);
    }
  }
  if (inputs.length === 0) die('no input: name one or more Parquet files');
  const { hyparquet, compressors } = await load_reader();
  const tmp = output ? `${output}.tmp` : null;
  const out = output ? createWriteStream(tmp) : process.stdout;
  let rows = 0;
  try {
    for (const path of inputs) {
      const file = file_buffer(path);
      let meta;
      try {
        meta = await hyparquet.parquetMetadataAsync(file);
      } catch (e) {
        throw new Error(`${path} is not a Parquet file (${e.message})`);
      }
      const names = hyparquet.parquetSchema(meta).children.map((c) => c.element.name);
      if (!names.includes(column)) {
        throw new Error(`${path} has no column '${column}' (it has ${names.join(', ')}); pass --column NAME`);
      }
      let start = 0;
      for (const group of meta.row_groups) {
        const end = start + Number(group.num_rows);
        const objects = await hyparquet.parquetReadObjects({
          file, metadata: meta, columns: [column], rowStart: start, rowEnd: end, compressors,
        });
        for (const o of objects) {
          const text = o[column];
          if (typeof text !== 'string') {
            throw new Error(`${path} row ${start}: column '${column}' holds ${text === null ? 'null' : typeof text}, not text`);
          }
          await write_line(out, JSON.stringify({ text }) + '\n');
          rows++;
        }
        start = end;
      }
      file.close();
    }
  } catch (e) {
    if (tmp) {
      out.destroy();
      rmSync(tmp, { force: true });
    }
    die(e.message);
  }
  if (tmp) {
    await new Promise((ok, fail) => out.end((err) => (err ? fail(err) : ok())));
    renameSync(tmp, output);
  }
  process.stderr.write(`parquet_to_jsonl: ${rows} rows of '${column}' from ${inputs.length} file(s)\n`);
}

main().catch((e) => die(e.message));
