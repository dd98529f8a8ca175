// test_dataloader.cpp: host test of llmc/dataloader. Writes small shards with known tokens into a
// temporary directory and checks, token by token, the batches and targets across shard boundaries
// and the epoch wrap-around, num_batches, reset, and the position/seek round trip. Every
// malformed-input case runs in a forked child (the loader exits on a user mistake): the child must
// exit with status 1 and its stderr must name the file and the problem.
// Ends with "test_dataloader: N passed, M failed"; exits non-zero on any failure.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "dataloader.h"

namespace fs = std::filesystem;
using llmc::DataLoader;
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

// The batch sequence of one epoch, straight from the definition in dataloader.h.
struct Expected {
    DataLoaderPosition pos;
    std::vector<int> inputs, targets;
};
std::vector<Expected> expected_epoch(const std::vector<std::vector<uint16_t>>& shards, int B,
                                     int T) {
    const long long bt = (long long)B * T;
    std::vector<Expected> out;
    for (int s = 0; s < (int)shards.size(); ++s) {
        const long long n = (long long)shards[s].size();
        for (long long off = 0; off + bt + 1 <= n; off += bt) {
            Expected e;
            e.pos = {s, off};
            for (long long i = 0; i < bt; ++i) {
                e.inputs.push_back(shards[s][off + i]);
                e.targets.push_back(shards[s][off + i + 1]);
            }
            out.push_back(e);
        }
    }
    return out;
}

bool same_batch(DataLoader* dl, const Expected& e) {
    const size_t bt = (size_t)dl->B * dl->T;
    std::vector<int> inputs(bt, -1), targets(bt, -1);
    llmc::dataloader_next_batch(dl, inputs.data(), targets.data());
    return inputs == e.inputs && targets == e.targets;
}

bool same_pos(DataLoaderPosition a, DataLoaderPosition b) {
    return a.shard == b.shard && a.offset == b.offset;
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

void test_batch_order(Tally* tally, const fs::path& dir,
                      const std::vector<std::vector<uint16_t>>& shards) {
    const std::string pattern = (dir / "train_*.bin").string();
    DataLoader dl;
    llmc::dataloader_init(&dl, pattern, 2, 3, kVocab);
    tally->check(dl.files.size() == 3, "pattern matches the three train shards only");
    tally->check(llmc::dataloader_num_batches(dl) == 6, "num_batches is 3 + 1 + 2 at B*T = 6");
    // The spec's walk pinned by hand, so the test's own enumerator cannot drift with the loader.
    const DataLoaderPosition pinned[6] = {{0, 0}, {0, 6}, {0, 12}, {1, 0}, {2, 0}, {2, 6}};
    std::vector<Expected> epoch = expected_epoch(shards, 2, 3);
    tally->check(epoch.size() == 6, "reference enumerates six batches");
    for (int k = 0; k < 6 && k < (int)epoch.size(); ++k) {
        tally->check(same_pos(epoch[k].pos, pinned[k]), "reference walk matches the pinned one");
    }
    // Two and a half epochs: boundaries a->b->c and the wrap c->a, twice.
    for (int k = 0; k < 15; ++k) {
        const Expected& e = epoch[k % epoch.size()];
        const std::string at = "batch " + std::to_string(k);
        tally->check(same_pos(llmc::dataloader_position(dl), e.pos), at + " position");
        tally->check(same_batch(&dl, e), at + " inputs and targets");
    }
    tally->check(epoch[5].targets.back() == kVocab - 1, "largest valid id reaches the targets");

    llmc::dataloader_reset(&dl);
    tally->check(same_pos(llmc::dataloader_position(dl), {0, 0}), "reset goes to shard 0 offset 0");
    tally->check(same_batch(&dl, epoch[0]), "first batch after reset");
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
        std::vector<Expected> epoch = expected_epoch(shards, B, T);
        tally->check(llmc::dataloader_num_batches(dl) == epoch.size(), name + " num_batches");
        bool all_same = true;
        for (size_t k = 0; k < 2 * epoch.size() + 1; ++k) {
            const Expected& e = epoch[k % epoch.size()];
            all_same = all_same && same_pos(llmc::dataloader_position(dl), e.pos);
            all_same = all_same && same_batch(&dl, e);
        }
        tally->check(all_same, name + " batches over two epochs");
    }
}

void test_seek(Tally* tally, const fs::path& dir,
               const std::vector<std::vector<uint16_t>>& shards) {
    const std::string pattern = (dir / "train_*.bin").string();
    std::vector<Expected> epoch = expected_epoch(shards, 2, 3);
    // Positions saved along the way by one loader...
    DataLoader walker;
    llmc::dataloader_init(&walker, pattern, 2, 3, kVocab);
    std::vector<DataLoaderPosition> saved;
    std::vector<int> inputs(6), targets(6);
    for (int k = 0; k < 8; ++k) {
        saved.push_back(llmc::dataloader_position(walker));
        llmc::dataloader_next_batch(&walker, inputs.data(), targets.data());
    }
    // ...resume in another, in reverse order so every seek changes shard or offset.
    DataLoader resumed;
    llmc::dataloader_init(&resumed, pattern, 2, 3, kVocab);
    for (int k = 7; k >= 0; --k) {
        const std::string at = "seek to saved position " + std::to_string(k);
        llmc::dataloader_seek(&resumed, saved[k]);
        tally->check(same_pos(llmc::dataloader_position(resumed), saved[k]), at + " position");
        tally->check(same_batch(&resumed, epoch[k % epoch.size()]), at + " batch");
        tally->check(same_batch(&resumed, epoch[(k + 1) % epoch.size()]), at + " following batch");
    }
}

void test_single_shard(Tally* tally, const fs::path& dir,
                       const std::vector<std::vector<uint16_t>>& shards) {
    // An exact path is a pattern too; one shard of exactly B*T+1 tokens wraps onto itself.
    DataLoader dl;
    llmc::dataloader_init(&dl, (dir / "train_b.bin").string(), 2, 3, kVocab);
    std::vector<Expected> epoch = expected_epoch({shards[1]}, 2, 3);
    tally->check(llmc::dataloader_num_batches(dl) == 1, "single shard num_batches");
    tally->check(same_batch(&dl, epoch[0]), "single shard batch");
    tally->check(same_pos(llmc::dataloader_position(dl), {0, 0}), "single shard wraps to itself");
    tally->check(same_batch(&dl, epoch[0]), "single shard batch after the wrap");
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
void expect_refusal(Tally* tally, const std::string& name, const std::function<void()>& body,
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
    // An id equal to vocab_size in the first shard is refused at init.
    fs::path dir = root / "bad_id_first";
    fs::create_directories(dir);
    std::vector<uint16_t> t = make_tokens(0, 20);
    t[3] = kVocab;
    llmc::write_shard((dir / "train_0.bin").string(), t.data(), t.size());
    expect_refusal(tally, "token id >= vocab_size in the first shard", init_in(dir),
                   {(dir / "train_0.bin").string(), "token id 50257", "position 3", "50257"});

    // In the second shard it is found when that shard is loaded, after the first shard's batches.
    dir = case_dir(root, "bad_id_second");
    t = make_tokens(1, 20);
    t[19] = 60000;
    llmc::write_shard((dir / "train_1.bin").string(), t.data(), t.size());
    expect_refusal(
        tally, "token id >= vocab_size found when the second shard loads",
        [=] {
            DataLoader dl;
            llmc::dataloader_init(&dl, (dir / "train_*.bin").string(), 2, 3, kVocab);
            std::vector<int> inputs(6), targets(6);
            for (int k = 0; k < 3; ++k) {
                llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
            }
            std::fprintf(stderr, "first shard served\n");
            llmc::dataloader_next_batch(&dl, inputs.data(), targets.data());
        },
        {"first shard served", (dir / "train_1.bin").string(), "token id 60000", "position 19"});

    // A smaller vocabulary turns a valid file into an invalid one.
    dir = root / "small_vocab";
    fs::create_directories(dir);
    t = make_tokens(0, 20);
    llmc::write_shard((dir / "train_0.bin").string(), t.data(), t.size());
    expect_refusal(tally, "vocab_size below the ids in the file", init_in(dir, 2, 3, 1000),
                   {(dir / "train_0.bin").string(), "token id 1000", "position 0", "size 1000"});
}

void test_bad_arguments(Tally* tally, const fs::path& good_dir) {
    expect_refusal(tally, "B = 0", init_in(good_dir, 0, 3), {"B > 0", "B = 0"});
    expect_refusal(tally, "T negative", init_in(good_dir, 2, -1), {"T > 0", "T = -1"});
    expect_refusal(tally, "vocab_size 0", init_in(good_dir, 2, 3, 0), {"vocab_size", "0"});
    const std::string pattern = (good_dir / "train_*.bin").string();
    auto seek_to = [=](int shard, long long offset) {
        return [=] {
            DataLoader dl;
            llmc::dataloader_init(&dl, pattern, 2, 3, kVocab);
            llmc::dataloader_seek(&dl, {shard, offset});
        };
    };
    expect_refusal(tally, "seek to a shard past the last", seek_to(3, 0),
                   {"shard 3", "matches 3 shards", pattern});
    expect_refusal(tally, "seek to a negative shard", seek_to(-1, 0), {"shard -1"});
    const std::string a = (good_dir / "train_a.bin").string();
    expect_refusal(tally, "seek to an offset between batches", seek_to(0, 3),
                   {"offset 3", a, "B*T = 6"});
    expect_refusal(tally, "seek past the last batch of a shard", seek_to(0, 18),
                   {"offset 18", a, "20 tokens"});
    expect_refusal(tally, "seek to a negative offset", seek_to(0, -6), {"offset -6", a});
}

}  // namespace

int main() {
    char templ[] = "/tmp/test_dataloader_XXXXXX";
    if (mkdtemp(templ) == nullptr) {
        std::printf("cannot create a temporary directory\n");
        return 2;
    }
    const fs::path root = templ;
    const fs::path good_dir = root / "good";
    fs::create_directories(good_dir);
    const std::vector<std::vector<uint16_t>> shards = write_good_shards(good_dir);

    Tally tally;
    test_batch_order(&tally, good_dir, shards);
    test_other_shapes(&tally, good_dir, shards);
    test_seek(&tally, good_dir, shards);
    test_single_shard(&tally, good_dir, shards);
    test_bad_headers(&tally, root);
    test_bad_tokens(&tally, root);
    test_bad_arguments(&tally, good_dir);

    fs::remove_all(root);
    std::printf("test_dataloader: %d passed, %d failed\n", tally.passed, tally.failed);
    return tally.failed == 0 ? 0 : 1;
}
