#!/usr/bin/env node
// make_fixtures.mjs: writes the small dataset fixtures of dev/test/data/ that dev/test/test_datasets.sh
// prepares into shards. Run once by hand (the outputs are committed); it is kept so that they can
// be made again and checked:
//
//   node dev/test/data/make_fixtures.mjs            # writes dev/test/data/fineweb_sample.parquet, ...
//
// fineweb_sample.parquet      FineWeb's columns (text, id, dump, url, date, file_path, language,
//                             language_score, token_count), snappy, row groups of 3 rows
// fineweb_edu_sample.parquet  FineWeb-Edu's (also score, int_score), zstd, row groups of 4 rows
// tinystories_sample.json     TinyStories' data*.json layout: one JSON array of objects with
//                             "story", "instruction", "summary", "source"
// tinystories_sample.jsonl    the same stories, one object per line
// *.expected.jsonl            the Parquet files' texts, from the arrays here (no Parquet reader)
// The texts are made up here. The Parquet files are written by parquet-wasm (the Rust parquet
// crate compiled to WebAssembly), from Arrow tables built with apache-arrow: a different
// implementation from the reader scripts/data/parquet_to_jsonl.mjs uses (hyparquet), as FineWeb's
// own files come from yet another writer. Both packages are installed at pinned versions into
// build/npm-fixtures on first use.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const prefix = join(here, '..', '..', '..', 'build', 'npm-fixtures');
const pins = ['parquet-wasm@0.8.0', 'apache-arrow@21.2.0'];
if (!existsSync(join(prefix, 'node_modules', 'parquet-wasm', 'package.json'))) {
  mkdirSync(prefix, { recursive: true });
  writeFileSync(join(prefix, 'package.json'), '{"private": true}\n');
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--save-exact', ...pins],
               { cwd: prefix, stdio: 'inherit' });
}
const require = createRequire(join(prefix, 'package.json'));
const arrow = require('apache-arrow');
const pq = require('parquet-wasm/node');

const web = [
  'The harbour town holds a market every Saturday. Fishermen sell the morning catch from ' +
    'crates on the quay, and by noon the gulls have taken whatever is left.',
  'How to repot a cactus: wear thick gloves, loosen the soil with a chopstick, and lift the ' +
    'plant by its base. Let the roots dry for a day before planting it in gritty mix.',
  'Our library extends its opening hours during exam weeks. Study rooms can be booked online ' +
    'up to seven days ahead; please cancel bookings you cannot use.',
  'A caf\u00e9 on the corner serves cr\u00e8me br\u00fbl\u00e9e and espresso. Prices: 3,50 \u20ac ' +
    'and 2,10 \u20ac. Open daily 7:00\u201319:00.',
  'Release notes 2.4.1\n- fixed a crash when the config file is empty\n- faster startup on ' +
    'large projects\n- the --quiet flag now silences warnings too',
  'Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens in ' +
    'the chloroplasts, mostly in the leaves.',
  'Tokyo (\u6771\u4eac) and Kyoto (\u4eac\u90fd) are linked by the Shinkansen; the fastest ' +
    'trains take a little over two hours. \ud83d\ude84',
];
const edu = [
  'Fractions name parts of a whole. In 3/4 the denominator, 4, tells how many equal parts the ' +
    'whole is cut into, and the numerator, 3, how many of them we take.',
  'Plate tectonics explains why earthquakes cluster along certain lines: the crust is broken ' +
    'into plates that slide past, pull apart from, or push under one another.',
  'A sonnet has fourteen lines. The Petrarchan form splits them into an octave and a sestet; ' +
    'the Shakespearean into three quatrains and a closing couplet.',
  'To measure the speed of sound, clap in front of a wall 85 m away and time the echo: sound ' +
    'covers 170 m there and back in about half a second.',
  'Cells divide by mitosis to grow and repair tissue. The chromosomes are copied, lined up ' +
    'and pulled apart, so each daughter cell gets a full set.',
];

function rows(texts, edu_scores) {
  const n = texts.length;
  const cols = {
    text: texts,
    id: texts.map((_, i) => `<urn:uuid:0000${i}-fixture>`),
    dump: texts.map(() => 'CC-MAIN-2024-10'),
    url: texts.map((_, i) => `https://example.org/page/${i}`),
    date: texts.map(() => '2024-02-21T10:00:00Z'),
    file_path: texts.map(() => 's3://example/fixture.warc.gz'),
    language: texts.map(() => 'en'),
    language_score: Float64Array.from(texts, (_, i) => 0.9 + i / 100),
    token_count: BigInt64Array.from(texts, (t) => BigInt(t.split(/\s+/).length)),
  };
  if (edu_scores) {
    cols.score = Float64Array.from(texts, (_, i) => 2.5 + i / 10);
    cols.int_score = BigInt64Array.from(texts, (_, i) => BigInt(3 + (i % 2)));
  }
  if (edu_scores) delete cols.date;  // FineWeb-Edu has no date column
  return arrow.tableFromArrays(cols);
}

function write_parquet(path, table, compression, group_rows) {
  const wasm_table = pq.Table.fromIPCStream(arrow.tableToIPC(table, 'stream'));
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(compression)
    .setMaxRowGroupSize(group_rows)
    .build();
  writeFileSync(path, pq.writeParquet(wasm_table, props));
  console.log(`wrote ${path}`);
}

write_parquet(join(here, 'fineweb_sample.parquet'), rows(web, false), pq.Compression.SNAPPY, 3);
write_parquet(join(here, 'fineweb_edu_sample.parquet'), rows(edu, true), pq.Compression.ZSTD, 4);
// The texts as the converter should give them back, written from the arrays above (no Parquet
// reader involved), for the test to compare against.
for (const [name, texts] of [['fineweb_sample', web], ['fineweb_edu_sample', edu]]) {
  writeFileSync(join(here, `${name}.expected.jsonl`),
                texts.map((text) => JSON.stringify({ text }) + '\n').join(''));
}

const stories = [
  ['Tom had a red kite. One windy day the string broke and the kite flew over the hill. Tom ' +
     'ran after it and found it in a tree. His sister helped him get it down.',
   ['kite', 'run', 'tree'], 'Tom loses his kite in the wind and his sister helps him find it.'],
  ['Mia wanted to bake a cake for her mom. She mixed flour, eggs and sugar, but she forgot the ' +
     'butter. The cake was flat. Mom laughed and said it was the best flat cake ever.',
   ['cake', 'forget', 'happy'], 'Mia bakes a flat cake and her mom loves it anyway.'],
  ['A little frog lived by a quiet pond. Every night he sang to the moon. One night the moon ' +
     'seemed to smile back, and the frog sang louder than ever. "Goodnight, moon!" he said.',
   ['frog', 'sing', 'moon'], 'A frog sings to the moon every night.'],
  ['Ben and Sam built a fort out of boxes. It was dark inside, so they brought a torch. They ' +
     'told stories until it was time for dinner.',
   ['box', 'dark', 'story'], 'Two friends build a box fort and tell stories in it.'],
];
const objects = stories.map(([story, words, summary]) => ({
  story,
  instruction: { prompt: 'Write a short story (3-5 paragraphs) using the words:', words, features: [] },
  summary,
  source: 'GPT-4',
}));
writeFileSync(join(here, 'tinystories_sample.json'),
              '[' + objects.map((o) => JSON.stringify(o)).join(',\n ') + ']\n');
writeFileSync(join(here, 'tinystories_sample.jsonl'),
              objects.map((o) => JSON.stringify(o)).join('\n') + '\n');
console.log(`wrote ${join(here, 'tinystories_sample.json')} and .jsonl`);
