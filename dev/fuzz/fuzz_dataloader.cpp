// fuzz_dataloader.cpp: libFuzzer harness of the token shard reader (llmc/dataloader.cpp: header,
// size and token checks at init and at every shard load). Input: up to two shards, matched by a
// glob as the trainer's -i does. The loader then serves a shuffled epoch and a bit more, seeks
// back to where it was, and every batch must be well formed. Seeds: shards from write_shard.
#include "dataloader.h"
#include "fuzz_util.h"

namespace {

constexpr int kB = 2, kT = 3, kVocab = 50257;

void check_batch(const std::vector<int>& in, const std::vector<int>& tg) {
    for (int i = 0; i < kB * kT; ++i) {
        LLMC_FUZZ_ASSERT(in[i] >= 0 && in[i] < kVocab && tg[i] >= 0 && tg[i] < kVocab);
        if (i + 1 < kB * kT) LLMC_FUZZ_ASSERT(in[i + 1] == tg[i]);  // targets = inputs shifted
    }
}

void parse(const std::vector<std::string>& paths) {
    const std::string dir = paths[0].substr(0, paths[0].rfind('/'));
    llmc::DataLoaderOptions options;
    options.shuffle = true;
    options.seed = 7;
    llmc::DataLoader dl;
    llmc::dataloader_init(&dl, dir + "/shard_*.bin", kB, kT, kVocab, 0, 1, options);
    const size_t batches = llmc::dataloader_num_batches(dl);
    LLMC_FUZZ_ASSERT(batches >= 1);
    std::vector<int> in(kB * kT), tg(kB * kT);
    std::vector<int> first_in;
    const llmc::DataLoaderPosition start = llmc::dataloader_position(dl);
    for (size_t b = 0; b < batches + 2 && b < 64; ++b) {  // into the second epoch
        llmc::dataloader_next_batch(&dl, in.data(), tg.data());
        check_batch(in, tg);
        if (b == 0) first_in = in;
    }
    llmc::dataloader_seek(&dl, start);  // back to the first batch: the same tokens again
    llmc::dataloader_next_batch(&dl, in.data(), tg.data());
    LLMC_FUZZ_ASSERT(in == first_in);
}

void write_seeds(const std::string& dir) {
    std::vector<uint16_t> a(20), b(9);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (uint16_t)((i * 7919) % kVocab);
    for (size_t i = 0; i < b.size(); ++i) b[i] = (uint16_t)(kVocab - 1 - i);
    const std::string tmp_a = dir + "/.a.tmp", tmp_b = dir + "/.b.tmp";
    llmc::write_shard(tmp_a, a.data(), a.size());
    llmc::write_shard(tmp_b, b.data(), b.size());
    const std::string sa = llmc::fuzz::read_file(tmp_a), sb = llmc::fuzz::read_file(tmp_b);
    std::remove(tmp_a.c_str());
    std::remove(tmp_b.c_str());
    llmc::fuzz::write_seed(dir, "one_shard", {sa});
    llmc::fuzz::write_seed(dir, "two_shards", {sa, sb});
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"shard_000.bin", "shard_001.bin"}, parse, write_seeds, {"shard_*.bin"}};
    return t;
}
