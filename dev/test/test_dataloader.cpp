// test_dataloader.cpp: host test of llmc/dataloader and llmc/batch_order. Writes small shards
// with known tokens into a temporary directory and checks, token by token:
//  - the unshuffled order across shard boundaries and epoch wrap-arounds, num_batches, reset, and
//    the position/seek round trip (positions carry the epoch);
//  - shuffling: splitmix64 against its published outputs, every epoch a permutation of the
//    batches with each shard's batches together, one pinned order, same seed -> same sequence,
//    other epoch or seed -> another, and first places spread evenly over many epochs;
//  - resuming a shuffled, prefetching loader from saved positions (also in later epochs);
//  - ranks: with world_size 1, 2, 3 rank r serves exactly the batches r, r + W, ... of the
//    single-process sequence, so the ranks' epochs are disjoint and together the whole epoch;
//  - prefetch: the same batches and positions as the synchronous loader at several depths and
//    across resets and seeks; no thread outlives its loader; shutdown never hangs.
// Every failure case runs in a forked child (the loader exits on a user mistake): the child must
// exit with status 1 and its stderr must name the file and the problem; an error the prefetch
// thread meets must read exactly as the synchronous loader's and come at the same batch.
// Ends with "test_dataloader: N passed, M failed"; exits non-zero on any failure.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "batch_order.h"
#include "dataloader.h"

namespace fs = std::filesystem;
using llmc::DataLoader;
using llmc::DataLoaderOptions;
using llmc::DataLoaderPosition;

namespace {

constexpr int kVocab = 50257;  // GPT-2's: ids up to 50256 are valid

struct Tally {
    int passed = 0, failed = 0;
    void check(bool ok, const std::string& what) {
        if (ok) {
            ++passed;
        } else {
            ++failed;
            std::printf("FAIL %s\n", what.c_str());
        }
    }
};

// A shard's tokens as the test wants them: distinct per shard and per position.
std::vector<uint16_t> make_tokens(int shard, int n) {
    std::vector<uint16_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = (uint16_t)(1000 * (shard + 1) + 7 * i);
    return t;
}

// Writes a file with an arbitrary header and payload, for the malformed cases.
void write_raw(const fs::path& path, int magic, int version, int count, size_t payload_tokens) {
    std::vector<int32_t> header(llmc::kShardHeaderInts, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    std::vector<uint16_t> payload(payload_tokens, 1);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) std::exit(2);
    std::fwrite(header.data(), sizeof(int32_t), header.size(), f);
    if (!payload.empty()) std::fwrite(payload.data(), sizeof(uint16_t), payload.size(), f);
    std::fclose(f);
}

DataLoaderOptions opts(bool shuffle, uint64_t seed, int prefetch) {
    DataLoaderOptions o;
    o.shuffle = shuffle;
    o.seed = seed;
    o.prefetch = prefetch;
    return o;
}

DataLoaderPosition pos_of(long long epoch, int shard, long long offset) {
    DataLoaderPosition p;
    p.epoch = epoch;
    p.shard = shard;
    p.offset = offset;
    return p;
}

bool same_pos(DataLoaderPosition a, DataLoaderPosition b) {
    return a.epoch == b.epoch && a.shard == b.shard && a.offset == b.offset;
}

// One served batch and the position reported just before it.
struct Batch {
    DataLoaderPosition pos;
    std::vector<int> inputs, targets;
};

bool same_batch(const Batch& a, const Batch& b) {
    return same_pos(a.pos, b.pos) && a.inputs == b.inputs && a.targets == b.targets;
}

bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!same_batch(a[i], b[i])) return false;
    }
    return true;
}

std::vector<Batch> take(DataLoader* dl, size_t n) {
    const size_t bt = (size_t)dl->B * dl->T;
    std::vector<Batch> out(n);
    for (Batch& b : out) {
        b.pos = llmc::dataloader_position(*dl);
        b.inputs.assign(bt, -1);
        b.targets.assign(bt, -1);
        llmc::dataloader_next_batch(dl, b.inputs.data(), b.targets.data());
    }
    return out;
}

// The batches of one unshuffled epoch, straight from the definition in dataloader.h.
std::vector<Batch> expected_epoch(const std::vector<std::vector<uint16_t>>& shards, int B, int T,
                                  long long epoch = 0) {
    const long long bt = (long long)B * T;
    std::vector<Batch> out;
    for (int s = 0; s < (int)shards.size(); ++s) {
        const long long n = (long long)shards[s].size();
        for (long long off = 0; off + bt + 1 <= n; off += bt) {
            Batch e;
            e.pos = pos_of(epoch, s, off);
            for (long long i = 0; i < bt; ++i) {
                e.inputs.push_back(shards[s][off + i]);
                e.targets.push_back(shards[s][off + i + 1]);
            }
            out.push_back(e);
        }
    }
    return out;
}

// Does `b` hold the tokens the definition puts at its (shard, offset)?
bool holds_its_tokens(const Batch& b, const std::vector<Batch>& reference) {
    for (const Batch& r : reference) {
        if (r.pos.shard == b.pos.shard && r.pos.offset == b.pos.offset) {
            return r.inputs == b.inputs && r.targets == b.targets;
        }
    }
    return false;
}

// Threads of this process.
int thread_count() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
    }
    return -1;
}

// Three shards written out of name order, plus files the pattern must not match.
// Sorted: train_a (20 tokens), train_b (7 = one batch exactly at B*T = 6), train_c (13).
std::vector<std::vector<uint16_t>> write_good_shards(const fs::path& dir) {
    std::vector<std::vector<uint16_t>> shards = {make_tokens(0, 20), make_tokens(1, 7),
                                                 make_tokens(2, 13)};
    shards[2].back() = kVocab - 1;  // the largest valid id, read as a target of the last batch
    llmc::write_shard((dir / "train_c.bin").string(), shards[2].data(), shards[2].size());
    llmc::write_shard((dir / "train_a.bin").string(), shards[0].data(), shards[0].size());
    llmc::write_shard((dir / "train_b.bin").string(), shards[1].data(), shards[1].size());
    std::vector<uint16_t> other = make_tokens(9, 30);
    llmc::write_shard((dir / "val_a.bin").string(), other.data(), other.size());
    write_raw(dir / "train_notes.txt", 0, 0, 0, 0);
    return shards;
}

// Five shards of 9, 5, 12, 7 and 3 batches at B*T = 6 (36 in all), for the order tests.
std::vector<std::vector<uint16_t>> write_many_shards(const fs::path& dir) {
    const int sizes[] = {55, 31, 73, 43, 20};
    std::vector<std::vector<uint16_t>> shards;
    for (int s = 0; s < 5; ++s) {
        shards.push_back(make_tokens(s, sizes[s]));
        const std::string name = "shard_" + std::to_string(s) + ".bin";
        llmc::write_shard((dir / name).string(), shards[s].data(), shards[s].size());
    }
    return shards;
}

void test_batch_order(Tally* tally, const fs::path& dir,
                      const std::vector<std::vector<uint16_t>>& shards) {
    const std::string pattern = (dir / "train_*.bin").string();
    DataLoader dl;
    llmc::dataloader_init(&dl, pattern, 2, 3, kVocab);
    tally->check(dl.files.size() == 3, "pattern matches the three train shards only");
    tally->check(llmc::dataloader_num_batches(dl) == 6, "num_batches is 3 + 1 + 2 at B*T = 6");
    // The spec's walk pinned by hand, so the test's own enumerator cannot drift with the loader.
    const int pinned[6][2] = {{0, 0}, {0, 6}, {0, 12}, {1, 0}, {2, 0}, {2, 6}};
    std::vector<Batch> epoch = expected_epoch(shards, 2, 3);
    tally->check(epoch.size() == 6, "reference enumerates six batches");
    for (int k = 0; k < 6 && k < (int)epoch.size(); ++k) {
        tally->check(same_pos(epoch[k].pos, pos_of(0, pinned[k][0], pinned[k][1])),
                     "reference walk matches the pinned one");
    }
    // Two and a half epochs: boundaries a->b->c and the wrap c->a, twice.
    const std::vector<Batch> got = take(&dl, 15);
    for (int k = 0; k < 15; ++k) {
        Batch e = epoch[k % epoch.size()];
        e.pos.epoch = k / (long long)epoch.size();
        tally->check(same_batch(got[k], e), "batch " + std::to_string(k) + " position and tokens");
    }
    tally->check(epoch[5].targets.back() == kVocab - 1, "largest valid id reaches the targets");

    llmc::dataloader_reset(&dl);
    tally->check(same_pos(llmc::dataloader_position(dl), pos_of(0, 0, 0)),
                 "reset goes to epoch 0, shard 0, offset 0");
    tally->check(same_batch(take(&dl, 1)[0], epoch[0]), "first batch after reset");
}

// Other shapes (B = 1, odd T, a shape that skips shard tails) against the enumerator.
void test_other_shapes(Tally* tally, const fs::path& dir,
                       const std::vector<std::vector<uint16_t>>& shards) {
    const std::string pattern = (dir / "train_*.bin").string();
    const int shapes[][2] = {{1, 1}, {1, 5}, {3, 2}, {1, 6}};
    for (const auto& shape : shapes) {
        const int B = shape[0], T = shape[1];
        const std::string name = "B=" + std::to_string(B) + " T=" + std::to_string(T);
        DataLoader dl;
        llmc::dataloader_init(&dl, pattern, B, T, kVocab);
        std::vector<Batch> want = expected_epoch(shards, B, T, 0);
        const std::vector<Batch> second = expected_epoch(shards, B, T, 1);
        tally->check(llmc::dataloader_num_batches(dl) == want.size(), name + " num_batches");
        want.insert(want.end(), second.begin(), second.end());
        want.push_back(expected_epoch(shards, B, T, 2)[0]);
        tally->check(same_batches(take(&dl, want.size()), want), name + " batches over two epochs");
    }
}

void test_seek(Tally* tally, const fs::path& dir) {
    const std::string pattern = (dir / "train_*.bin").string();
    // Positions saved along the way by one loader...
    DataLoader walker;
    llmc::dataloader_init(&walker, pattern, 2, 3, kVocab);
    const std::vector<Batch> walked = take(&walker, 10);
    tally->check(same_pos(walked[7].pos, pos_of(1, 0, 6)), "position 7 is in epoch 1");
    // ...resume in another, in reverse order so every seek changes epoch, shard or offset.
    DataLoader resumed;
    llmc::dataloader_init(&resumed, pattern, 2, 3, kVocab);
    for (int k = 7; k >= 0; --k) {
        const std::string at = "seek to saved position " + std::to_string(k);
        llmc::dataloader_seek(&resumed, walked[k].pos);
        tally->check(same_pos(llmc::dataloader_position(resumed), walked[k].pos), at + " position");
        const std::vector<Batch> next = take(&resumed, 2);
        tally->check(same_batch(next[0], walked[k]), at + " batch");
        tally->check(same_batch(next[1], walked[k + 1]), at + " following batch");
    }
}

void test_single_shard(Tally* tally, const fs::path& dir,
                       const std::vector<std::vector<uint16_t>>& shards) {
    // An exact path is a pattern too; one shard of exactly B*T+1 tokens wraps onto itself.
    DataLoader dl;
    llmc::dataloader_init(&dl, (dir / "train_b.bin").string(), 2, 3, kVocab);
    std::vector<Batch> epoch = expected_epoch({shards[1]}, 2, 3);
    tally->check(llmc::dataloader_num_batches(dl) == 1, "single shard num_batches");
    tally->check(same_batch(take(&dl, 1)[0], epoch[0]), "single shard batch");
    tally->check(same_pos(llmc::dataloader_position(dl), pos_of(1, 0, 0)),
                 "single shard wraps to itself in epoch 1");
    epoch[0].pos.epoch = 1;
    tally->check(same_batch(take(&dl, 1)[0], epoch[0]), "single shard batch after the wrap");
}

void test_splitmix(Tally* tally) {
    // Published splitmix64 outputs for the seed 1234567 (Rosetta Code, "Splitmix64"): the
    // shuffles are reproducible only if this generator is bit-exact everywhere.
    const uint64_t published[5] = {6457827717110365317ull, 3203168211198807973ull,
                                   9817491932198370423ull, 4593380528125082431ull,
                                   16408922859458223821ull};
    uint64_t state = 1234567;
    bool same = true;
    for (uint64_t want : published) same = same && llmc::splitmix64_next(&state) == want;
    tally->check(same, "splitmix64 gives the published outputs for seed 1234567");
}

// (shard, batch number) of each batch, as "s:b s:b ...": a compact picture of an order.
std::string order_string(const std::vector<Batch>& batches, long long bt) {
    std::string s;
    for (const Batch& b : batches) {
        s += (s.empty() ? "" : " ") + std::to_string(b.pos.shard) + ":" +
             std::to_string(b.pos.offset / bt);
    }
    return s;
}

// Every batch once, each with its own tokens, in the given epoch, a shard's batches together.
bool is_shuffled_epoch(const std::vector<Batch>& got, const std::vector<Batch>& reference,
                       long long epoch) {
    std::set<std::pair<int, long long>> seen;
    std::set<int> finished;
    for (size_t i = 0; i < got.size(); ++i) {
        const Batch& b = got[i];
        if (b.pos.epoch != epoch || !holds_its_tokens(b, reference)) return false;
        if (!seen.insert({b.pos.shard, b.pos.offset}).second) return false;
        if (i > 0 && got[i - 1].pos.shard != b.pos.shard) {
            if (!finished.insert(got[i - 1].pos.shard).second || finished.count(b.pos.shard)) {
                return false;
            }
        }
    }
    return got.size() == reference.size() && seen.size() == reference.size();
}

void test_shuffle(Tally* tally, const fs::path& dir,
                  const std::vector<std::vector<uint16_t>>& shards) {
    const std::string pattern = (dir / "shard_*.bin").string();
    const std::vector<Batch> reference = expected_epoch(shards, 2, 3);
    const size_t n = reference.size();
    DataLoader a, b, off, other_seed;
    llmc::dataloader_init(&a, pattern, 2, 3, kVocab, 0, 1, opts(true, 1234, 0));
    llmc::dataloader_init(&b, pattern, 2, 3, kVocab, 0, 1, opts(true, 1234, 0));
    llmc::dataloader_init(&off, pattern, 2, 3, kVocab, 0, 1, opts(false, 1234, 0));
    llmc::dataloader_init(&other_seed, pattern, 2, 3, kVocab, 0, 1, opts(true, 1235, 0));
    tally->check(n == 36 && llmc::dataloader_num_batches(a) == n, "36 batches in five shards");
    std::vector<std::vector<Batch>> epochs;
    for (int e = 0; e < 3; ++e) {
        epochs.push_back(take(&a, n));
        const std::string at = "shuffled epoch " + std::to_string(e);
        tally->check(is_shuffled_epoch(epochs[e], reference, e),
                     at + " is a permutation of the batches, each shard's together");
        tally->check(same_batches(take(&b, n), epochs[e]), at + " is the same for the same seed");
        tally->check(same_batches(take(&off, n), expected_epoch(shards, 2, 3, e)),
                     "unshuffled epoch " + std::to_string(e) + " is in name order");
    }
    tally->check(order_string(epochs[0], 6) != order_string(epochs[1], 6),
                 "epochs 0 and 1 are in different orders");
    tally->check(order_string(take(&other_seed, n), 6) != order_string(epochs[0], 6),
                 "seeds 1234 and 1235 give different orders");
    // Pinned: a change of generator, stream hashing or Fisher-Yates direction shows here, and
    // would make checkpoints resume into other batches.
    const std::string pinned =
        "0:0 0:4 0:2 0:7 0:1 0:5 0:8 0:3 0:6 4:2 4:1 4:0 1:4 1:0 1:1 1:2 1:3 3:2 3:3 3:1 3:4 3:5 "
        "3:0 3:6 2:0 2:3 2:10 2:4 2:11 2:1 2:5 2:2 2:7 2:8 2:9 2:6";
    tally->check(order_string(epochs[0], 6) == pinned, "seed 1234 epoch 0 is the pinned order");
    if (order_string(epochs[0], 6) != pinned) {
        std::printf("  got %s\n", order_string(epochs[0], 6).c_str());
    }

    // Over 2000 epochs each shard leads about 1/5 of them and each of shard 2's 12 batches opens
    // it about 1/12 of the times: a biased shuffle (e.g. swapping with any index) fails this.
    // The counts are fixed by the seed, so the bounds (about 5 standard deviations) cannot flake.
    llmc::BatchOrder order;
    order.shard_batches = {9, 5, 12, 7, 3};
    order.total = 36;
    order.shuffle = true;
    order.seed = 99;
    std::vector<int> leads(5, 0), opens(12, 0);
    llmc::BatchCursor c;
    for (long long e = 0; e < 2000; ++e) {
        llmc::cursor_start_epoch(order, &c, e);
        ++leads[c.shard];  // rank 0's first batch is the first batch of the first shard
        llmc::cursor_find(order, &c, e, 2, 0);  // builds shard 2's batch order
        ++opens[c.batch_order[0]];
    }
    bool even = true;
    for (int k : leads) even = even && k > 400 - 90 && k < 400 + 90;
    for (int k : opens) even = even && k > 167 - 62 && k < 167 + 62;
    tally->check(even, "shard and batch orders are spread evenly over 2000 epochs");
}

// A shuffled loader saves positions as it goes (prefetching, as the trainer runs); loaders built
// afresh, with and without prefetch, seek to them and must continue exactly as it did.
void test_resume(Tally* tally, const fs::path& dir) {
    const std::string pattern = (dir / "shard_*.bin").string();
    DataLoader walker;
    llmc::dataloader_init(&walker, pattern, 2, 3, kVocab, 0, 1, opts(true, 7, 3));
    const std::vector<Batch> walked = take(&walker, 36 * 5 + 10);
    const int saved[] = {0, 1, 8, 35, 36, 50, 71, 100, 143, 144, 179};
    for (int prefetch : {0, 2}) {
        DataLoader resumed;
        llmc::dataloader_init(&resumed, pattern, 2, 3, kVocab, 0, 1, opts(true, 7, prefetch));
        for (int k : saved) {
            llmc::dataloader_seek(&resumed, walked[k].pos);
            const std::vector<Batch> want(walked.begin() + k, walked.begin() + k + 10);
            tally->check(same_batches(take(&resumed, 10), want),
                         "prefetch " + std::to_string(prefetch) + ": resume at batch " +
                             std::to_string(k) + " (epoch " + std::to_string(walked[k].pos.epoch) +
                             ") continues as the uninterrupted run");
        }
        llmc::dataloader_reset(&resumed);
        tally->check(same_batches(take(&resumed, 40),
                                  std::vector<Batch>(walked.begin(), walked.begin() + 40)),
                     "prefetch " + std::to_string(prefetch) + ": reset replays from epoch 0");
    }
    // A seek straight into a later epoch needs no walk through the earlier ones.
    DataLoader direct;
    llmc::dataloader_init(&direct, pattern, 2, 3, kVocab, 0, 1, opts(true, 7, 0));
    llmc::dataloader_seek(&direct, walked[150].pos);
    tally->check(same_batches(take(&direct, 20),
                              std::vector<Batch>(walked.begin() + 150, walked.begin() + 170)),
                 "seek into epoch 4 of a new loader");
}

// Rank r of W must serve the single-process sequence's batches r, r + W, r + 2W, ... of each
// epoch, and its next epoch after its share of one.
void test_ranks(Tally* tally, const fs::path& dir,
                const std::vector<std::vector<uint16_t>>& shards) {
    const std::string pattern = (dir / "shard_*.bin").string();
    const std::vector<Batch> reference = expected_epoch(shards, 2, 3);
    const long long total = (long long)reference.size();
    for (bool shuffle : {false, true}) {
        DataLoader single;
        llmc::dataloader_init(&single, pattern, 2, 3, kVocab, 0, 1, opts(shuffle, 5, 0));
        const std::vector<Batch> seq = take(&single, 3 * total);
        for (int world : {1, 2, 3, 5}) {
            const std::string cfg = std::string(shuffle ? "shuffled" : "unshuffled") +
                                    ", world_size " + std::to_string(world);
            std::set<std::pair<int, long long>> union_of_epoch0;
            size_t sum_batches = 0;
            for (int rank = 0; rank < world; ++rank) {
                DataLoader dl;
                llmc::dataloader_init(&dl, pattern, 2, 3, kVocab, rank, world,
                                      opts(shuffle, 5, rank % 2 == 0 ? 0 : 2));
                const size_t nb = llmc::dataloader_num_batches(dl);
                sum_batches += nb;
                const std::vector<Batch> got = take(&dl, 2 * nb + 1);
                bool matches = true;
                for (size_t k = 0; k < got.size(); ++k) {
                    const long long epoch = (long long)(k / nb);
                    const long long index = rank + (long long)(k % nb) * world;
                    matches = matches && same_batch(got[k], seq[epoch * total + index]);
                }
                tally->check(matches, cfg + ", rank " + std::to_string(rank) +
                                          " serves batches rank, rank + W, ... of each epoch");
                for (size_t k = 0; k < nb; ++k) {
                    union_of_epoch0.insert({got[k].pos.shard, got[k].pos.offset});
                }
            }
            tally->check(sum_batches == (size_t)total, cfg + ": num_batches add up to the epoch");
            // nb batches each, adding up to the epoch, and all distinct: a partition.
            tally->check(union_of_epoch0.size() == (size_t)total,
                         cfg + ": the ranks' epochs are disjoint and cover the whole epoch");
        }
    }
}

// The prefetching loader against the synchronous one, through the same calls.
void test_prefetch_equals_sync(Tally* tally, const fs::path& dir) {
    const int threads_before = thread_count();  // 1, or 2 under ThreadSanitizer
    const std::string pattern = (dir / "shard_*.bin").string();
    for (int depth : {1, 2, 3, 8, 40}) {
        for (bool shuffle : {false, true}) {
            const std::string cfg =
                "prefetch " + std::to_string(depth) + (shuffle ? " shuffled" : " unshuffled");
            DataLoader sync, ahead;
            llmc::dataloader_init(&sync, pattern, 2, 3, kVocab, 1, 2, opts(shuffle, 11, 0));
            llmc::dataloader_init(&ahead, pattern, 2, 3, kVocab, 1, 2, opts(shuffle, 11, depth));
            bool same = same_batches(take(&ahead, 45), take(&sync, 45));
            const DataLoaderPosition back = take(&sync, 1)[0].pos;
            llmc::dataloader_reset(&sync);
            llmc::dataloader_reset(&ahead);
            same = same && same_batches(take(&ahead, 7), take(&sync, 7));
            llmc::dataloader_seek(&sync, back);
            llmc::dataloader_seek(&ahead, back);
            same = same && same_batches(take(&ahead, 30), take(&sync, 30));
            // Reset and seek while the ring is full, then a re-init of a running loader.
            llmc::dataloader_init(&ahead, pattern, 2, 3, kVocab, 1, 2, opts(shuffle, 11, depth));
            llmc::dataloader_reset(&sync);
            same = same && same_batches(take(&ahead, 20), take(&sync, 20));
            tally->check(same, cfg + ": same batches and positions as the synchronous loader");
        }
    }
    // A joined thread can still be counted in /proc for a moment (the kernel wakes the joiner
    // before it reaps the thread), which a loaded machine showed once: wait up to 2 s for the
    // count to come back; a thread that really outlives its loader never leaves it.
    int threads_after = thread_count();
    for (int i = 0; i < 200 && threads_after != threads_before; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        threads_after = thread_count();
    }
    tally->check(threads_after == threads_before, "no prefetch thread outlives its loader");
}
struct ChildResult {
    int exit_code;    // -1 when the child did not exit normally
    std::string err;  // everything it wrote to stderr
};

// Runs `body` in a forked child with stderr captured through a pipe.
ChildResult run_in_child(const std::function<void()>& body) {
    std::fflush(stdout);  // or the child's exit would print our buffered output a second time
    std::fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) std::exit(2);
    const pid_t pid = fork();
    if (pid < 0) std::exit(2);
    if (pid == 0) {
        alarm(60);  // a hung child (a join that never returns) dies and fails its check
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        body();
        std::fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    ChildResult r{-1, ""};
    char buf[512];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof(buf))) > 0) r.err.append(buf, (size_t)got);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    return r;
}

// The child must exit 1 and its message must contain every one of `words`.
// Returns the child's result for further checks.
ChildResult expect_refusal(Tally* tally, const std::string& name, const std::function<void()>& body,
                           const std::vector<std::string>& words) {
    ChildResult r = run_in_child(body);
    bool ok = r.exit_code == 1;
    for (const std::string& w : words) ok = ok && r.err.find(w) != std::string::npos;
    tally->check(ok, name);
    if (!ok) {
        std::printf("  exit code %d, stderr:\n%s  expected words:", r.exit_code, r.err.c_str());
        for (const std::string& w : words) std::printf(" [%s]", w.c_str());
        std::printf("\n");
    }
    return r;
}

// The one-sentence message, without the "(at file:line)" that follows it.
std::string message_of(const ChildResult& r) {
    const size_t start = r.err.find("error: ");
    if (start == std::string::npos) return "";
    return r.err.substr(start, r.err.find('\n', start) - start);
}

// A case directory holding one good shard (train_0.bin) and one bad one (train_1.bin), so the
// loader must check every shard at init, not only the first.
fs::path case_dir(const fs::path& root, const std::string& name) {
    fs::path dir = root / name;
    fs::create_directories(dir);
    std::vector<uint16_t> good = make_tokens(0, 20);
    llmc::write_shard((dir / "train_0.bin").string(), good.data(), good.size());
    return dir;
}

std::function<void()> init_in(const fs::path& dir, int B = 2, int T = 3, int vocab = kVocab) {
    return [=] {
        DataLoader dl;
        llmc::dataloader_init(&dl, (dir / "train_*.bin").string(), B, T, vocab);
    };
}

void test_bad_headers(Tally* tally, const fs::path& root) {
    expect_refusal(tally, "no file matches", init_in(root / "nowhere"),
                   {"no file matches", (root / "nowhere" / "train_*.bin").string()});

    fs::path dir = case_dir(root, "short");
    write_raw(dir / "train_1.bin", llmc::kShardMagic, 1, 0, 0);
    fs::resize_file(dir / "train_1.bin", 100);
    const std::string short_file = (dir / "train_1.bin").string();
    expect_refusal(tally, "file shorter than the header", init_in(dir),
                   {short_file, "100 bytes", "too small", "header"});

    dir = case_dir(root, "magic");
    write_raw(dir / "train_1.bin", 20240326, 1, 10, 10);
    expect_refusal(tally, "wrong magic", init_in(dir),
                   {(dir / "train_1.bin").string(), "magic", "20240326", "20240520"});

    dir = case_dir(root, "version");
    write_raw(dir / "train_1.bin", llmc::kShardMagic, 2, 10, 10);
    expect_refusal(tally, "wrong version", init_in(dir),
                   {(dir / "train_1.bin").string(), "version 2"});

    dir = case_dir(root, "negative");
    write_raw(dir / "train_1.bin", llmc::kShardMagic, 1, -5, 0);
    expect_refusal(tally, "negative token count", init_in(dir),
                   {(dir / "train_1.bin").string(), "negative", "-5"});

    // Header says 50 tokens (1024 + 100 bytes), the file holds 40 (1024 + 80).
    dir = case_dir(root, "truncated");
    write_raw(dir / "train_1.bin", llmc::kShardMagic, 1, 50, 40);
    expect_refusal(tally, "token count larger than the file holds", init_in(dir),
                   {(dir / "train_1.bin").string(), "50 tokens", "1124", "1104", "truncated"});

    // Header says 10 tokens (1044 bytes), the file holds 12 (1048).
    dir = case_dir(root, "larger");
    write_raw(dir / "train_1.bin", llmc::kShardMagic, 1, 10, 12);
    expect_refusal(tally, "file larger than the count says", init_in(dir),
                   {(dir / "train_1.bin").string(), "larger", "1048", "1044"});

    // B*T = 6 tokens is one short of a batch.
    dir = case_dir(root, "few");
    std::vector<uint16_t> six = make_tokens(1, 6);
    llmc::write_shard((dir / "train_1.bin").string(), six.data(), six.size());
    expect_refusal(tally, "shard with fewer than B*T+1 tokens", init_in(dir),
                   {(dir / "train_1.bin").string(), "6 tokens", "fewer", "7"});
}

void test_bad_tokens(Tally* tally, const fs::path& root) {
    // An id equal to vocab_size in the first shard is refused at init, prefetching or not.
    fs::path dir = root / "bad_id_first";
    fs::create_directories(dir);
    std::vector<uint16_t> t = make_tokens(0, 20);
    t[3] = kVocab;
    llmc::write_shard((dir / "train_0.bin").string(), t.data(), t.size());
    for (int prefetch : {0, 2}) {
        expect_refusal(
            tally,
            "token id >= vocab_size in the first shard, prefetch " + std::to_string(prefetch),
            [=] {
                DataLoader dl;
                llmc::dataloader_init(&dl, (dir / "train_*.bin").string(), 2, 3, kVocab, 0, 1,
                                      opts(false, 0, prefetch));
                std::fprintf(stderr, "init passed\n");
            },
            {(dir / "train_0.bin").string(), "token id 50257", "position 3", "50257"});
    }

    // In the second shard it is found when that shard is loaded, after the first shard's batches;
    // the prefetch thread meets it early but the main thread reports it at the same batch, in the
    // same words.
    dir = case_dir(root, "bad_id_second");
    t = make_tokens(1, 20);
    t[19] = 60000;
    llmc::write_shard((dir / "train_1.bin").string(), t.data(), t.size());
    std::vector<std::string> messages;
    for (int prefetch : {0, 1, 4}) {
        ChildResult r =
            expect_refusal(tally,
                           "token id >= vocab_size found when the second shard loads, prefetch " +
                               std::to_string(prefetch),
                           [=] {
                               DataLoader dl;
                               llmc::dataloader_init(&dl, (dir / "train_*.bin").string(), 2, 3,
                                                     kVocab, 0, 1, opts(false, 0, prefetch));
                               std::vector<int> inputs(6), targets(6);
                               for (int k = 0; k < 3; ++k) {
                                   llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
                               }
                               std::fprintf(stderr, "first shard served\n");
                               llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
                           },
                           {"first shard served", (dir / "train_1.bin").string(), "token id 60000",
                            "position 19"});
        messages.push_back(message_of(r));
    }
    tally->check(!messages[0].empty() && messages[1] == messages[0] && messages[2] == messages[0],
                 "the prefetch thread's error reads as the synchronous loader's");

    // A smaller vocabulary turns a valid file into an invalid one.
    dir = root / "small_vocab";
    fs::create_directories(dir);
    t = make_tokens(0, 20);
    llmc::write_shard((dir / "train_0.bin").string(), t.data(), t.size());
    expect_refusal(tally, "vocab_size below the ids in the file", init_in(dir, 2, 3, 1000),
                   {(dir / "train_0.bin").string(), "token id 1000", "position 0", "size 1000"});
}

// A shard rewritten after init is found by whoever loads it next. With depth 2 the thread is at
// most two batches ahead, so it cannot have read train_1 before the child rewrites it.
void test_rewritten_shard(Tally* tally, const fs::path& root) {
    std::vector<std::string> messages;
    for (int prefetch : {0, 2}) {
        const fs::path dir = case_dir(root, "rewritten_" + std::to_string(prefetch));
        const std::vector<uint16_t> t = make_tokens(1, 20);
        llmc::write_shard((dir / "train_1.bin").string(), t.data(), t.size());
        ChildResult r = expect_refusal(
            tally, "shard rewritten during training, prefetch " + std::to_string(prefetch),
            [=] {
                DataLoader dl;
                llmc::dataloader_init(&dl, (dir / "train_*.bin").string(), 2, 3, kVocab, 0, 1,
                                      opts(false, 0, prefetch));
                const std::vector<uint16_t> longer = make_tokens(1, 30);
                llmc::write_shard((dir / "train_1.bin").string(), longer.data(), longer.size());
                std::vector<int> inputs(6), targets(6);
                for (int k = 0; k < 3; ++k) {
                    llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
                }
                std::fprintf(stderr, "first shard served\n");
                llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
            },
            {"first shard served", (dir / "train_1.bin").string(), "now holds 30 tokens",
             "held 20"});
        std::string m = message_of(r);
        const size_t at = m.find("rewritten_");  // the directories differ by name only
        if (at != std::string::npos) m.erase(at, 11);
        messages.push_back(m);
    }
    tally->check(!messages[0].empty() && messages[0] == messages[1],
                 "a rewritten shard reads the same with and without prefetch");
}

// Loaders destroyed, re-initialized, reset and sought at every stage of their thread: the child
// must finish (its alarm kills a hung join) with no thread left behind.
void test_shutdown(Tally* tally, const fs::path& dir) {
    const std::string pattern = (dir / "shard_*.bin").string();
    ChildResult r = run_in_child([=] {
        const int threads_before = thread_count();
        std::vector<int> inputs(6), targets(6);
        for (int i = 0; i < 200; ++i) {
            DataLoader dl;
            llmc::dataloader_init(&dl, pattern, 2, 3, kVocab, 0, 1, opts(i % 2 == 0, i, 1 + i % 5));
            for (int k = 0; k < i % 11; ++k) {
                llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
            }
            if (i % 3 == 0) llmc::dataloader_reset(&dl);
            if (i % 4 == 0)
                llmc::dataloader_init(&dl, pattern, 2, 3, kVocab, 0, 1, opts(true, 3, 2));
        }
        std::exit(thread_count() == threads_before ? 0 : 3);
    });
    tally->check(r.exit_code == 0, "prefetching loaders shut down cleanly (exit code " +
                                       std::to_string(r.exit_code) + ")");
}

void test_bad_arguments(Tally* tally, const fs::path& good_dir) {
    expect_refusal(tally, "B = 0", init_in(good_dir, 0, 3), {"B > 0", "B = 0"});
    expect_refusal(tally, "T negative", init_in(good_dir, 2, -1), {"T > 0", "T = -1"});
    expect_refusal(tally, "vocab_size 0", init_in(good_dir, 2, 3, 0), {"vocab_size", "0"});
    const std::string pattern = (good_dir / "train_*.bin").string();
    auto init_with = [=](int rank, int world, int prefetch) {
        return [=] {
            DataLoader dl;
            llmc::dataloader_init(&dl, pattern, 2, 3, kVocab, rank, world,
                                  opts(false, 0, prefetch));
        };
    };
    expect_refusal(tally, "rank = world_size", init_with(2, 2, 0), {"rank 2 of world_size 2"});
    expect_refusal(tally, "negative rank", init_with(-1, 2, 0), {"rank -1"});
    expect_refusal(tally, "world_size 0", init_with(0, 0, 0), {"world_size 0"});
    expect_refusal(tally, "more processes than batches", init_with(0, 7, 0),
                   {pattern, "6 batches", "fewer than the 7 processes"});
    expect_refusal(tally, "negative prefetch depth", init_with(0, 1, -1), {"prefetch", "-1"});
    auto seek_to = [=](long long epoch, int shard, long long offset, int rank, int world,
                       bool shuffle) {
        return [=] {
            DataLoader dl;
            llmc::dataloader_init(&dl, pattern, 2, 3, kVocab, rank, world, opts(shuffle, 1, 2));
            llmc::dataloader_seek(&dl, pos_of(epoch, shard, offset));
        };
    };
    expect_refusal(tally, "seek to a shard past the last", seek_to(0, 3, 0, 0, 1, false),
                   {"shard 3", "matches 3 shards", pattern});
    expect_refusal(tally, "seek to a negative shard", seek_to(0, -1, 0, 0, 1, false), {"shard -1"});
    expect_refusal(tally, "seek to a negative epoch", seek_to(-1, 0, 0, 0, 1, false), {"epoch -1"});
    const std::string a = (good_dir / "train_a.bin").string();
    expect_refusal(tally, "seek to an offset between batches", seek_to(0, 0, 3, 0, 1, false),
                   {"offset 3", a, "B*T = 6"});
    expect_refusal(tally, "seek past the last batch of a shard", seek_to(0, 0, 18, 0, 1, false),
                   {"offset 18", a, "20 tokens"});
    expect_refusal(tally, "seek to a negative offset", seek_to(0, 0, -6, 0, 1, false),
                   {"offset -6", a});
    // Unshuffled, batch 1 of the epoch (train_a offset 6) belongs to rank 1 of 2.
    expect_refusal(tally, "seek to another rank's batch", seek_to(3, 0, 6, 0, 2, false),
                   {"offset 6", a, "epoch 3", "rank 1 of 2", "this rank 0"});
}

}  // namespace

int main() {
    char templ[] = "/tmp/test_dataloader_XXXXXX";
    if (mkdtemp(templ) == nullptr) {
        std::printf("cannot create a temporary directory\n");
        return 2;
    }
    const fs::path root = templ;
    const fs::path good_dir = root / "good", many_dir = root / "many";
    fs::create_directories(good_dir);
    fs::create_directories(many_dir);
    const std::vector<std::vector<uint16_t>> shards = write_good_shards(good_dir);
    const std::vector<std::vector<uint16_t>> many = write_many_shards(many_dir);

    Tally tally;
    test_batch_order(&tally, good_dir, shards);
    test_other_shapes(&tally, good_dir, shards);
    test_seek(&tally, good_dir);
    test_single_shard(&tally, good_dir, shards);
    test_splitmix(&tally);
    test_shuffle(&tally, many_dir, many);
    test_resume(&tally, many_dir);
    test_ranks(&tally, many_dir, many);
    test_prefetch_equals_sync(&tally, many_dir);
    // Forks only from here: no loader thread is alive in this process (checked just above).
    test_shutdown(&tally, many_dir);
    test_bad_headers(&tally, root);
    test_bad_tokens(&tally, root);
    test_rewritten_shard(&tally, root);
    test_bad_arguments(&tally, good_dir);

    fs::remove_all(root);
    std::printf("test_dataloader: %d passed, %d failed\n", tally.passed, tally.failed);
    return tally.failed == 0 ? 0 : 1;
}
