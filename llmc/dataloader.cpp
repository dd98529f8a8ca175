// dataloader.cpp: token shards -> (inputs, targets) batches. See dataloader.h for the file format
// and the order batches are served in. Plain stdio: a shard is read whole with one fread, then
// the file is closed, so no file handle outlives a call.
#include "dataloader.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "check.h"

namespace llmc {

// The header ints and token ids are read straight into host integers.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are little-endian");

namespace {

constexpr long long kHeaderBytes = kShardHeaderInts * (long long)sizeof(int32_t);

long long batch_tokens(const DataLoader& dl) { return (long long)dl.B * dl.T; }

// A shard of n tokens holds batches at offsets 0, BT, 2*BT, ... while offset + BT + 1 <= n.
long long batches_in_shard(long long n, long long bt) { return n < bt + 1 ? 0 : (n - 1) / bt; }

// Every file the glob matches, sorted by name. glob's own sort follows the locale's collation, so
// we sort by bytes instead: the shard order (and so a saved position) must not depend on LC_ALL.
std::vector<std::string> expand_pattern(const std::string& pattern) {
    glob_t g;
    std::memset(&g, 0, sizeof(g));
    int rc = glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
        globfree(&g);
        LLMC_FAIL(
            "no file matches the data pattern '%s'; check the path and that the dataset "
            "has been prepared",
            pattern.c_str());
    }
    LLMC_CHECK(rc == 0, "could not expand the data pattern '%s' (glob error %d)", pattern.c_str(),
               rc);
    std::vector<std::string> files(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    std::sort(files.begin(), files.end());
    return files;
}

FILE* open_shard(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    LLMC_CHECK(f != nullptr, "cannot open token shard %s: %s", path.c_str(), std::strerror(errno));
    return f;
}

// Reads and checks the header of an open shard against the file's size; returns the token count.
long long read_shard_header(const std::string& path, FILE* f) {
    std::error_code ec;
    const long long file_bytes = (long long)std::filesystem::file_size(path, ec);
    LLMC_CHECK(!ec, "cannot read the size of token shard %s: %s", path.c_str(),
               ec.message().c_str());
    LLMC_CHECK(file_bytes >= kHeaderBytes,
               "%s is %lld bytes, too small to hold the %lld-byte header of a token shard",
               path.c_str(), file_bytes, kHeaderBytes);
    int32_t header[kShardHeaderInts];
    LLMC_CHECK(std::fread(header, sizeof(int32_t), kShardHeaderInts, f) == (size_t)kShardHeaderInts,
               "could not read the header of token shard %s", path.c_str());
    LLMC_CHECK(header[0] == kShardMagic,
               "%s is not a token shard: its magic number is %d, expected %d", path.c_str(),
               header[0], kShardMagic);
    LLMC_CHECK(header[1] == kShardVersion,
               "%s has shard version %d, but this loader reads version %d; regenerate the shard",
               path.c_str(), header[1], kShardVersion);
    const long long n = header[2];
    LLMC_CHECK(n >= 0, "%s has a negative token count %lld in its header", path.c_str(), n);
    const long long want_bytes = kHeaderBytes + n * (long long)sizeof(uint16_t);
    LLMC_CHECK(file_bytes >= want_bytes,
               "%s says it holds %lld tokens (%lld bytes with the header) but the file is only "
               "%lld bytes; it is truncated, regenerate it",
               path.c_str(), n, want_bytes, file_bytes);
    LLMC_CHECK(file_bytes == want_bytes,
               "%s is %lld bytes, larger than the %lld bytes its header's %lld tokens need; the "
               "file or its header is corrupt, regenerate it",
               path.c_str(), file_bytes, want_bytes, n);
    return n;
}

// Reads the tokens of shard `index` into dl->tokens (unless they are there already) and checks
// every id against the vocabulary: an out-of-range id would index past the embedding table.
void load_shard(DataLoader* dl, int index) {
    if (dl->loaded_shard == index) return;
    const std::string& path = dl->files[index];
    FILE* f = open_shard(path);
    const long long n = read_shard_header(path, f);
    // The header was checked at init; a file rewritten since then is refused rather than misread.
    LLMC_CHECK(n == dl->shard_tokens[index],
               "%s now holds %lld tokens but held %lld when the data loader started; do not "
               "rewrite shards during training",
               path.c_str(), n, dl->shard_tokens[index]);
    dl->tokens.resize((size_t)n);
    const size_t got = std::fread(dl->tokens.data(), sizeof(uint16_t), (size_t)n, f);
    std::fclose(f);
    LLMC_CHECK(got == (size_t)n, "could not read %s: got %zu of its %lld tokens", path.c_str(), got,
               n);
    for (long long i = 0; i < n; ++i) {
        const int id = dl->tokens[(size_t)i];
        LLMC_CHECK(id < dl->vocab_size,
                   "%s has token id %d at position %lld, not below the vocabulary size %d; the "
                   "shard was made with a different tokenizer",
                   path.c_str(), id, i, dl->vocab_size);
    }
    dl->loaded_shard = index;
}

}  // namespace

void dataloader_init(DataLoader* dl, const std::string& pattern, int B, int T, int vocab_size) {
    LLMC_CHECK(B > 0 && T > 0, "the data loader needs B > 0 and T > 0, got B = %d, T = %d", B, T);
    LLMC_CHECK((long long)B * T < INT_MAX,
               "the data loader's B*T = %lld is too large for int "
               "indexing; use a smaller B or T",
               (long long)B * T);
    LLMC_CHECK(vocab_size > 0, "the data loader needs a positive vocab_size, got %d", vocab_size);
    *dl = DataLoader{};
    dl->B = B;
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->pattern = pattern;
    dl->files = expand_pattern(pattern);
    const long long bt = batch_tokens(*dl);
    for (const std::string& path : dl->files) {
        FILE* f = open_shard(path);
        const long long n = read_shard_header(path, f);
        std::fclose(f);
        LLMC_CHECK(n >= bt + 1,
                   "%s holds %lld tokens, fewer than the B*T+1 = %lld that one batch needs; use "
                   "a smaller B or T, or remove this shard",
                   path.c_str(), n, bt + 1);
        dl->shard_tokens.push_back(n);
    }
    load_shard(dl, 0);
}

void dataloader_next_batch(DataLoader* dl, int* inputs, int* targets) {
    load_shard(dl, dl->next.shard);
    const long long bt = batch_tokens(*dl);
    const uint16_t* src = dl->tokens.data() + dl->next.offset;
    for (long long i = 0; i < bt; ++i) {
        inputs[i] = src[i];
        targets[i] = src[i + 1];
    }
    // Step to the next batch that exists, so the position is always a valid resume point.
    dl->next.offset += bt;
    if (dl->next.offset + bt + 1 > dl->shard_tokens[dl->next.shard]) {
        dl->next.shard = (dl->next.shard + 1) % (int)dl->files.size();
        dl->next.offset = 0;
    }
}

void dataloader_reset(DataLoader* dl) {
    dl->next = DataLoaderPosition{};
    load_shard(dl, 0);
}

size_t dataloader_num_batches(const DataLoader& dl) {
    size_t total = 0;
    for (long long n : dl.shard_tokens) total += (size_t)batches_in_shard(n, batch_tokens(dl));
    return total;
}

DataLoaderPosition dataloader_position(const DataLoader& dl) { return dl.next; }

void dataloader_seek(DataLoader* dl, DataLoaderPosition pos) {
    const int num_shards = (int)dl->files.size();
    LLMC_CHECK(pos.shard >= 0 && pos.shard < num_shards,
               "cannot seek the data loader to shard %d: the pattern '%s' matches %d shards",
               pos.shard, dl->pattern.c_str(), num_shards);
    const long long bt = batch_tokens(*dl);
    const long long n = dl->shard_tokens[pos.shard];
    LLMC_CHECK(pos.offset >= 0 && pos.offset % bt == 0 && pos.offset + bt + 1 <= n,
               "cannot seek the data loader to offset %lld of %s: it is not the start of a batch "
               "of B*T = %lld tokens in its %lld tokens; resume with the batch shape the "
               "checkpoint was written with",
               pos.offset, dl->files[pos.shard].c_str(), bt, n);
    dl->next = pos;
    load_shard(dl, pos.shard);
}

void write_shard(const std::string& path, const uint16_t* tokens, size_t n) {
    LLMC_CHECK(n <= (size_t)INT32_MAX,
               "cannot write %zu tokens to %s: a shard's header holds at most %d tokens", n,
               path.c_str(), INT32_MAX);
    int32_t header[kShardHeaderInts] = {};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = (int32_t)n;
    FILE* f = std::fopen(path.c_str(), "wb");
    LLMC_CHECK(f != nullptr, "cannot create token shard %s: %s", path.c_str(),
               std::strerror(errno));
    bool ok = std::fwrite(header, sizeof(int32_t), kShardHeaderInts, f) == (size_t)kShardHeaderInts;
    ok = ok && (n == 0 || std::fwrite(tokens, sizeof(uint16_t), n, f) == n);
    ok = (std::fclose(f) == 0) && ok;
    LLMC_CHECK(ok, "could not write token shard %s (disk full?)", path.c_str());
}

}  // namespace llmc
