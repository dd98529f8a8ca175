// dataloader.cpp: token shards -> (inputs, targets) batches. See dataloader.h for the file format,
// the epoch order and the prefetch thread. Plain stdio: a shard is read whole with one fread, then
// the file is closed, so no file handle outlives a call. Reading functions return their error as a
// sentence instead of exiting, so the prefetch thread can hand it to the main thread.
#include "dataloader.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "batch_order.h"
#include "check.h"

namespace llmc {

// The header ints and token ids are read straight into host integers.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are little-endian");

namespace {

constexpr long long kHeaderBytes = kShardHeaderInts * (long long)sizeof(int32_t);

__attribute__((format(printf, 1, 2))) std::string strprintf(const char* fmt, ...) {
    va_list args, again;
    va_start(args, fmt);
    va_copy(again, args);
    const int len = std::vsnprintf(nullptr, 0, fmt, args);
    std::string out(len > 0 ? (size_t)len : 0, '\0');
    std::vsnprintf(out.data(), out.size() + 1, fmt, again);  // writes the '\0' into out's spare
    va_end(again);
    va_end(args);
    return out;
}

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

// Opens a shard and checks its header against the file's size; sets *n to its token count and
// leaves the file positioned at the first token. On failure returns null and sets *err.
FILE* open_shard(const std::string& path, long long* n, std::string* err) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        *err = strprintf("cannot open token shard %s: %s", path.c_str(), std::strerror(errno));
        return nullptr;
    }
    std::error_code ec;
    const long long file_bytes = (long long)std::filesystem::file_size(path, ec);
    int32_t header[kShardHeaderInts];
    const bool got_header =
        !ec && file_bytes >= kHeaderBytes &&
        std::fread(header, sizeof(int32_t), kShardHeaderInts, f) == (size_t)kShardHeaderInts;
    *n = got_header ? header[2] : 0;
    const long long want_bytes = kHeaderBytes + *n * (long long)sizeof(uint16_t);
    if (ec) {
        *err = strprintf("cannot read the size of token shard %s: %s", path.c_str(),
                         ec.message().c_str());
    } else if (file_bytes < kHeaderBytes) {
        *err =
            strprintf("%s is %lld bytes, too small to hold the %lld-byte header of a token shard",
                      path.c_str(), file_bytes, kHeaderBytes);
    } else if (!got_header) {
        *err = strprintf("could not read the header of token shard %s", path.c_str());
    } else if (header[0] != kShardMagic) {
        *err = strprintf("%s is not a token shard: its magic number is %d, expected %d",
                         path.c_str(), header[0], kShardMagic);
    } else if (header[1] != kShardVersion) {
        *err = strprintf(
            "%s has shard version %d, but this loader reads version %d; regenerate the shard",
            path.c_str(), header[1], kShardVersion);
    } else if (*n < 0) {
        *err = strprintf("%s has a negative token count %lld in its header", path.c_str(), *n);
    } else if (file_bytes < want_bytes) {
        *err = strprintf(
            "%s says it holds %lld tokens (%lld bytes with the header) but the file is only "
            "%lld bytes; it is truncated, regenerate it",
            path.c_str(), *n, want_bytes, file_bytes);
    } else if (file_bytes != want_bytes) {
        *err = strprintf(
            "%s is %lld bytes, larger than the %lld bytes its header's %lld tokens need; the "
            "file or its header is corrupt, regenerate it",
            path.c_str(), file_bytes, want_bytes, *n);
    } else {
        return f;
    }
    std::fclose(f);
    return nullptr;
}

// The tokens of one shard, read whole.
struct ShardCache {
    int shard = -1;  // which shard `tokens` holds (-1: none)
    std::vector<uint16_t> tokens;
};

// Reads the tokens of shard `index` into cache (unless they are there already) and checks every
// id against the vocabulary: an out-of-range id would index past the embedding table.
bool load_shard(const DataLoader& dl, int index, ShardCache* cache, std::string* err) {
    if (cache->shard == index) return true;
    cache->shard = -1;
    const std::string& path = dl.files[index];
    long long n = 0;
    FILE* f = open_shard(path, &n, err);
    if (f == nullptr) return false;
    // The header was checked at init; a file rewritten since then is refused rather than misread.
    if (n != dl.shard_tokens[index]) {
        std::fclose(f);
        *err = strprintf(
            "%s now holds %lld tokens but held %lld when the data loader started; do not "
            "rewrite shards during training",
            path.c_str(), n, dl.shard_tokens[index]);
        return false;
    }
    cache->tokens.resize((size_t)n);
    const size_t got = std::fread(cache->tokens.data(), sizeof(uint16_t), (size_t)n, f);
    std::fclose(f);
    if (got != (size_t)n) {
        *err = strprintf("could not read %s: got %zu of its %lld tokens", path.c_str(), got, n);
        return false;
    }
    for (long long i = 0; i < n; ++i) {
        const int id = cache->tokens[(size_t)i];
        if (id >= dl.vocab_size) {
            *err = strprintf(
                "%s has token id %d at position %lld, not below the vocabulary size %d; the "
                "shard was made with a different tokenizer",
                path.c_str(), id, i, dl.vocab_size);
            return false;
        }
    }
    cache->shard = index;
    return true;
}

// Writes the batch at token `offset` of shard `shard`.
bool fill_batch(const DataLoader& dl, int shard, long long offset, ShardCache* cache, int* inputs,
                int* targets, std::string* err) {
    if (!load_shard(dl, shard, cache, err)) return false;
    const long long bt = batch_tokens(dl);
    const uint16_t* src = cache->tokens.data() + offset;
    for (long long i = 0; i < bt; ++i) {
        inputs[i] = src[i];
        targets[i] = src[i + 1];
    }
    return true;
}

// One producer thread fills a ring of slots ahead of one consumer. The producer writes only the
// slot after the ready ones and the consumer reads only the oldest ready one, so the lock guards
// just the counters, never a copy.
struct PrefetchSlot {
    long long epoch = 0;
    int shard = 0;
    long long batch = 0;
    std::vector<int> tokens;  // inputs[B*T] then targets[B*T]
    std::string error;        // set instead of the tokens when reading failed
};

class Prefetcher {
  public:
    Prefetcher(const DataLoader& dl, const BatchOrder& order, const BatchCursor& start,
               ShardCache cache, int depth)
        : dl_(dl), order_(order), cursor_(start), cache_(std::move(cache)), ring_((size_t)depth) {
        for (PrefetchSlot& s : ring_) s.tokens.resize((size_t)(2 * batch_tokens(dl)));
        thread_ = std::thread([this] { run(); });
    }
    ~Prefetcher() { stop(); }

    // Waits for the oldest filled slot; it stays valid until pop().
    const PrefetchSlot& front() {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return ready_ > 0; });
        return ring_[head_];
    }

    void pop() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            head_ = (head_ + 1) % ring_.size();
            --ready_;
        }
        cv_.notify_all();
    }

    // Stops and joins the thread; hands back its loaded shard so a restart need not reread it.
    ShardCache stop() {
        if (thread_.joinable()) {
            {
                std::lock_guard<std::mutex> lock(mu_);
                stopping_ = true;
            }
            cv_.notify_all();
            thread_.join();
        }
        return std::move(cache_);
    }

  private:
    void run() {
        const long long bt = batch_tokens(dl_);
        for (;;) {
            size_t next = 0;
            {
                std::unique_lock<std::mutex> lock(mu_);
                cv_.wait(lock, [this] { return stopping_ || ready_ < ring_.size(); });
                if (stopping_) return;
                next = (head_ + ready_) % ring_.size();
            }
            PrefetchSlot& s = ring_[next];
            s.epoch = cursor_.epoch;
            s.shard = cursor_.shard;
            s.batch = cursor_.batch;
            s.error.clear();
            bool ok = false;
            try {
                int* in = s.tokens.data();
                ok = fill_batch(dl_, s.shard, s.batch * bt, &cache_, in, in + bt, &s.error);
                if (ok) cursor_advance(order_, &cursor_);
            } catch (const std::exception& e) {  // bad_alloc: reported like a bad shard
                s.error = strprintf("the data loader's prefetch thread failed: %s", e.what());
                ok = false;
            }
            {
                std::lock_guard<std::mutex> lock(mu_);
                ++ready_;
            }
            cv_.notify_all();
            if (!ok) return;  // the consumer reports the error when it reaches this slot
        }
    }

    const DataLoader& dl_;
    const BatchOrder& order_;
    BatchCursor cursor_;  // the producer's: the next batch to fill
    ShardCache cache_;
    std::vector<PrefetchSlot> ring_;
    std::mutex mu_;
    std::condition_variable cv_;
    size_t head_ = 0;   // oldest ready slot
    size_t ready_ = 0;  // filled slots not yet popped
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace

struct DataLoaderState {
    BatchOrder order;
    BatchCursor next;  // the consumer's: the batch dataloader_next_batch returns next
    ShardCache cache;  // synchronous reads; parked here while the prefetch thread is stopped
    std::unique_ptr<Prefetcher> prefetcher;
};

DataLoader::DataLoader() = default;
DataLoader::~DataLoader() = default;

namespace {

void stop_prefetch(DataLoader* dl) {
    DataLoaderState& st = *dl->state;
    if (st.prefetcher) {
        st.cache = st.prefetcher->stop();
        st.prefetcher.reset();
    }
}

// Makes `cursor` the next batch: loads its shard here, on the caller's thread, so a bad shard is
// refused at init / seek / reset in both modes, then (re)starts the prefetch thread from there.
void restart_at(DataLoader* dl, const BatchCursor& cursor) {
    stop_prefetch(dl);
    DataLoaderState& st = *dl->state;
    st.next = cursor;
    std::string err;
    if (!load_shard(*dl, st.next.shard, &st.cache, &err)) LLMC_FAIL("%s", err.c_str());
    if (dl->options.prefetch > 0) {
        st.prefetcher = std::make_unique<Prefetcher>(*dl, st.order, st.next, std::move(st.cache),
                                                     dl->options.prefetch);
        st.cache = ShardCache{};
    }
}

DataLoaderState& checked_state(const DataLoader& dl) {
    LLMC_CHECK(dl.state != nullptr, "the data loader is used before dataloader_init");
    return *dl.state;
}

bool same_place(const BatchCursor& a, const BatchCursor& b) {
    return a.epoch == b.epoch && a.index == b.index;
}

}  // namespace

void dataloader_init(DataLoader* dl, const std::string& pattern, int B, int T, int vocab_size,
                     int rank, int world_size, const DataLoaderOptions& options) {
    dl->state.reset();  // joins the thread of an earlier init
    LLMC_CHECK(B > 0 && T > 0, "the data loader needs B > 0 and T > 0, got B = %d, T = %d", B, T);
    LLMC_CHECK((long long)B * T < INT_MAX,
               "the data loader's B*T = %lld is too large for int "
               "indexing; use a smaller B or T",
               (long long)B * T);
    LLMC_CHECK(vocab_size > 0, "the data loader needs a positive vocab_size, got %d", vocab_size);
    LLMC_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
               "the data loader needs world_size >= 1 and 0 <= rank < world_size, got rank %d of "
               "world_size %d",
               rank, world_size);
    LLMC_CHECK(options.prefetch >= 0,
               "the data loader's prefetch depth must be 0 (off) or a number of batches, got %d",
               options.prefetch);
    dl->B = B;
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->rank = rank;
    dl->world_size = world_size;
    dl->options = options;
    dl->pattern = pattern;
    dl->files = expand_pattern(pattern);
    dl->shard_tokens.clear();
    auto state = std::make_unique<DataLoaderState>();
    BatchOrder& order = state->order;
    const long long bt = batch_tokens(*dl);
    for (const std::string& path : dl->files) {
        long long n = 0;
        std::string err;
        FILE* f = open_shard(path, &n, &err);
        if (f == nullptr) LLMC_FAIL("%s", err.c_str());
        std::fclose(f);
        LLMC_CHECK(n >= bt + 1,
                   "%s holds %lld tokens, fewer than the B*T+1 = %lld that one batch needs; use "
                   "a smaller B or T, or remove this shard",
                   path.c_str(), n, bt + 1);
        dl->shard_tokens.push_back(n);
        order.shard_batches.push_back(batches_in_shard(n, bt));
        order.total += order.shard_batches.back();
    }
    LLMC_CHECK(order.total >= world_size,
               "the pattern '%s' gives %lld batches of B*T = %lld tokens per epoch, fewer than "
               "the %d processes that share them; use a smaller B or T, or more data",
               pattern.c_str(), order.total, bt, world_size);
    order.shuffle = options.shuffle;
    order.seed = options.seed;
    order.rank = rank;
    order.world_size = world_size;
    dl->state = std::move(state);
    BatchCursor first;
    cursor_start_epoch(dl->state->order, &first, 0);
    restart_at(dl, first);
}

void dataloader_next_batch(DataLoader* dl, int* inputs, int* targets) {
    DataLoaderState& st = checked_state(*dl);
    const long long bt = batch_tokens(*dl);
    if (st.prefetcher) {
        const PrefetchSlot& s = st.prefetcher->front();
        if (!s.error.empty()) {
            const std::string err = s.error;
            stop_prefetch(dl);
            LLMC_FAIL("%s", err.c_str());
        }
        // The thread walks its own copy of the cursor; both must name the same batch.
        LLMC_CHECK(s.epoch == st.next.epoch && s.shard == st.next.shard && s.batch == st.next.batch,
                   "internal error: the prefetch thread filled epoch %lld shard %d batch %lld "
                   "where epoch %lld shard %d batch %lld was due",
                   s.epoch, s.shard, s.batch, st.next.epoch, st.next.shard, st.next.batch);
        std::memcpy(inputs, s.tokens.data(), (size_t)bt * sizeof(int));
        std::memcpy(targets, s.tokens.data() + bt, (size_t)bt * sizeof(int));
        st.prefetcher->pop();
    } else {
        std::string err;
        if (!fill_batch(*dl, st.next.shard, st.next.batch * bt, &st.cache, inputs, targets, &err)) {
            LLMC_FAIL("%s", err.c_str());
        }
    }
    cursor_advance(st.order, &st.next);
}

void dataloader_reset(DataLoader* dl) {
    DataLoaderState& st = checked_state(*dl);
    BatchCursor first = st.next;  // a copy keeps the built orders when it is still epoch 0
    cursor_start_epoch(st.order, &first, 0);
    if (!same_place(first, st.next)) restart_at(dl, first);
}

size_t dataloader_num_batches(const DataLoader& dl) {
    const long long total = checked_state(dl).order.total;
    return (size_t)((total - dl.rank + dl.world_size - 1) / dl.world_size);
}

DataLoaderPosition dataloader_position(const DataLoader& dl) {
    const BatchCursor& next = checked_state(dl).next;
    DataLoaderPosition pos;
    pos.epoch = next.epoch;
    pos.shard = next.shard;
    pos.offset = next.batch * batch_tokens(dl);
    return pos;
}

void dataloader_seek(DataLoader* dl, DataLoaderPosition pos) {
    DataLoaderState& st = checked_state(*dl);
    LLMC_CHECK(pos.epoch >= 0, "cannot seek the data loader to epoch %lld: epochs count from 0",
               pos.epoch);
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
    BatchCursor target = st.next;  // a copy keeps the built orders when the epoch is the same
    const long long index = cursor_find(st.order, &target, pos.epoch, pos.shard, pos.offset / bt);
    const int owner = (int)(index % dl->world_size);
    LLMC_CHECK(owner == dl->rank,
               "cannot seek the data loader to offset %lld of %s in epoch %lld: rank %d of %d "
               "serves that batch, not this rank %d; resume with the process count, shuffle "
               "setting and seed the checkpoint was written with",
               pos.offset, dl->files[pos.shard].c_str(), pos.epoch, owner, dl->world_size,
               dl->rank);
    if (!same_place(target, st.next)) restart_at(dl, target);
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
