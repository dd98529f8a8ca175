"""make_shards.py: the token shard and tokenizer files of this project (no torch needed).

Used by train_gpt2.py, which holds the command line (--tokenize, --write-tokenizer,
--random-shards); formats in llmc/dataloader.h and llmc/model_file.h.

  shard      256 x int32 header (magic 20240520, version 1, token count), then uint16 token ids
  tokenizer  256 x int32 header (magic 20240328, version 2, vocab size, EOT id), then for each
             token id a uint8 length and the token's raw bytes
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deps"))
from pydeps import optional, require  # noqa: E402 (after the path)

np = optional("numpy")  # train_gpt2.py, which holds the command line, requires it

TOKENIZER_MAGIC, SHARD_MAGIC = 20240328, 20240520
HEADER_INTS = 256
GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


class UsageError(Exception):
    """A user's mistake: printed as one sentence, exit code 2."""


def fail(msg):
    raise UsageError(msg)


def header(*values):
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[:len(values)] = values
    return h.tobytes()


def write_shard(path, tokens):
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 65535):
        fail(f"token ids must fit uint16 to be written to {path}")
    with open(path, "wb") as f:
        f.write(header(SHARD_MAGIC, 1, tokens.size))
        f.write(tokens.astype("<u2").tobytes())
    print(f"wrote {path}: {tokens.size} tokens")


def read_shard_count(path):
    """Checks a shard's header against its size (as the C++ loader does); returns the count."""
    size = os.path.getsize(path)
    if size < 4 * HEADER_INTS:
        fail(f"{path} is too short to be a token shard ({size} bytes)")
    h = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if h[0] != SHARD_MAGIC:
        fail(f"{path} is not a token shard: its magic number is {h[0]}, expected {SHARD_MAGIC}")
    if h[1] != 1:
        fail(f"{path} has shard version {h[1]}, expected 1; regenerate the shard")
    if size != 4 * HEADER_INTS + 2 * int(h[2]):
        fail(f"{path} says it holds {h[2]} tokens but its size is {size} bytes; it is truncated")
    return int(h[2])


def byte_to_unicode():
    """GPT-2's table: printable bytes map to their own code point, the rest to 256+n in order."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def load_encoder(enc_dir):
    """encoder.json (or HF's vocab.json) -> dict, checked to hold ids 0..n-1 and <|endoftext|>."""
    if not enc_dir:
        fail("this mode needs --encoder-dir DIR holding GPT-2's encoder.json and vocab.bpe")
    for name in ("encoder.json", "vocab.json"):
        path = os.path.join(enc_dir, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                enc = json.load(f)
            break
    else:
        fail(f"{enc_dir} holds neither encoder.json nor vocab.json (GPT-2's token table)")
    if sorted(enc.values()) != list(range(len(enc))):
        fail(f"the token ids in {path} are not 0..{len(enc) - 1} without gaps")
    if "<|endoftext|>" not in enc:
        fail(f"{path} has no <|endoftext|> token")
    return enc


def write_tokenizer(path, enc_dir):
    enc = load_encoder(enc_dir)
    decode = {u: b for b, u in byte_to_unicode().items()}
    by_id = sorted(enc.items(), key=lambda kv: kv[1])
    eot = enc["<|endoftext|>"]
    with open(path, "wb") as f:
        f.write(header(TOKENIZER_MAGIC, 2, len(by_id), eot))
        for text, i in by_id:
            raw = text.encode("utf-8") if i == eot else bytes(decode[c] for c in text)
            if not 0 < len(raw) < 256:
                fail(f"token {i} is {len(raw)} bytes long; the tokenizer file stores 1..255")
            f.write(struct.pack("<B", len(raw)) + raw)
    print(f"wrote {path}: {len(by_id)} tokens, EOT {eot}")


class BPE:
    """GPT-2 byte-level BPE: regex pre-tokenisation, bytes -> unicode, merges by rank."""

    def __init__(self, enc_dir):
        regex = require("regex", "GPT-2's pre-tokenizer pattern, for --tokenize")
        self.pattern = regex.compile(GPT2_PATTERN)
        self.encoder = load_encoder(enc_dir)
        self.eot = self.encoder["<|endoftext|>"]
        for name in ("vocab.bpe", "merges.txt"):
            path = os.path.join(enc_dir, name)
            if os.path.isfile(path):
                break
        else:
            fail(f"{enc_dir} holds neither vocab.bpe nor merges.txt (GPT-2's merge list)")
        with open(path, encoding="utf-8") as f:
            lines = [ln for ln in f.read().split("\n") if ln and not ln.startswith("#version")]
        self.ranks = {tuple(ln.split()): r for r, ln in enumerate(lines)}
        self.byte_map = byte_to_unicode()
        self.cache = {}

    def _merge(self, word):
        parts = list(word)
        while len(parts) > 1:
            ranked = [(self.ranks.get(pair, math.inf), i)
                      for i, pair in enumerate(zip(parts, parts[1:]))]
            rank, first = min(ranked)  # the lowest-ranked adjacent pair merges first
            if rank == math.inf:
                break
            a, b = parts[first], parts[first + 1]
            out, i = [], 0
            while i < len(parts):  # merge every non-overlapping (a, b), left to right
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        return [self.encoder[p] for p in parts]

    def encode(self, text):
        ids = []
        for piece in self.pattern.findall(text):
            if piece not in self.cache:
                word = "".join(self.byte_map[b] for b in piece.encode("utf-8"))
                self.cache[piece] = self._merge(word)
            ids.extend(self.cache[piece])
        return ids


def tokenize_file(args):
    if not os.path.isfile(args.tokenize):
        fail(f"the text file {args.tokenize} does not exist")
    if not args.out_dir:
        fail("--tokenize needs --out-dir DIR for the shards")
    if not 0.0 <= args.val_fraction < 1.0:
        fail(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    bpe = BPE(args.encoder_dir)
    with open(args.tokenize, encoding="utf-8") as f:
        text = f.read()
    docs = text.split(args.doc_sep) if args.doc_sep else [text]
    tokens = []
    for doc in docs:
        if doc:
            tokens.append(bpe.eot)  # EOT opens every document, as in GPT-2's training data
            tokens.extend(bpe.encode(doc))
    prefix = args.prefix or os.path.splitext(os.path.basename(args.tokenize))[0]
    n_val = int(math.ceil(len(tokens) * args.val_fraction))
    write_split_shards(np.array(tokens, dtype=np.int64), args.out_dir, prefix, n_val)


def write_split_shards(tokens, out_dir, prefix, n_val):
    os.makedirs(out_dir, exist_ok=True)
    write_shard(os.path.join(out_dir, f"{prefix}_val_000000.bin"), tokens[:n_val])
    write_shard(os.path.join(out_dir, f"{prefix}_train_000000.bin"), tokens[n_val:])


def random_shards(args, vocab_size):
    if args.num_tokens is None or args.num_tokens < 2:
        fail("--random-shards needs --num-tokens N with N >= 2")
    if vocab_size > 65536:
        fail(f"token shards store uint16 ids, so the vocabulary size {vocab_size} is too large")
    if not 0.0 <= args.val_fraction < 1.0:
        fail(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    n_val = max(1, int(args.num_tokens * args.val_fraction))
    tokens = np.random.RandomState(args.seed).randint(0, vocab_size, size=args.num_tokens + n_val)
    # N train tokens, and a val shard of val_fraction * N more before them
    write_split_shards(tokens, args.random_shards, args.prefix or "random", n_val)
