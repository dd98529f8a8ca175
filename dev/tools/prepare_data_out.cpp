// prepare_data_out.cpp: the shard writer, which leaves nothing behind when a run fails or is
// interrupted, and the thread that waits for SIGINT, SIGTERM and SIGHUP. See prepare_data_io.h
// for the contracts.
//
// Why a thread and not a signal handler: undoing a run means removing files and folders and
// printing a sentence, none of which a handler may do (they are not async-signal-safe), and the
// main thread may be blocked in a read of standard input when the signal comes, so it cannot be
// asked to do it either. The signals are blocked in every thread and one thread takes them with
// sigwait(), where any function may be called. It then takes the writer's lock, which every
// creation, rename and removal of a file holds, so it never misses a file that is being created
// and never undoes half of a commit.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "dataloader.h"
#include "prepare_data_io.h"
#include "tokenizer.h"

namespace fs = std::filesystem;

namespace prep {

namespace {

const char* const kSplitNames[2] = {"train", "val"};

const char* signal_name(int sig) {
    switch (sig) {
        case SIGINT:
            return "SIGINT";
        case SIGTERM:
            return "SIGTERM";
        case SIGHUP:
            return "SIGHUP";
        default:
            return "a signal";
    }
}

std::string plural(size_t n, const char* noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

void clear_progress_bar() {
    if (isatty(2)) std::fputs("\r\033[K", stderr);
}

}  // namespace

// ---- shard writer ------------------------------------------------------------------------

ShardWriter::ShardWriter(std::string dir, std::string name, long long shard_tokens)
    : dir_(std::move(dir)), name_(std::move(name)), cap_(shard_tokens) {}

void ShardWriter::create() {
    std::string why;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        // The folders that do not exist yet, the deepest first: the ones this run creates.
        std::error_code ec;
        // Named as the user named them (lexically: a relative path stays relative).
        const fs::path full = fs::path(dir_).lexically_normal();
        for (fs::path p = full; p.has_relative_path(); p = p.parent_path()) {
            if (!p.has_filename()) continue;  // "a/b/" ends in an empty name
            std::error_code es;
            if (fs::exists(fs::symlink_status(p, es))) break;
            created_dirs_.push_back(p.string());
        }
        fs::create_directories(dir_, ec);
        if (ec || !fs::is_directory(dir_)) {
            why = "cannot create the output folder " + dir_ + ": " +
                  (ec ? ec.message() : std::string("a file has that name"));
        }
    }
    if (!why.empty()) fail(why);
}

std::string ShardWriter::shard_name(int split, int index) const {
    char num[16];
    std::snprintf(num, sizeof(num), "%06d", index);
    return name_ + "_" + kSplitNames[split] + "_" + num + ".bin";
}

std::string ShardWriter::shard_glob(int split) const {
    return (fs::path(dir_) / (name_ + "_" + kSplitNames[split] + "_*.bin")).string();
}

// Registers and creates a temporary file under the lock, so an undo never misses it.
std::FILE* ShardWriter::create_temp(const std::string& tmp, const std::string& final_path) {
    std::lock_guard<std::mutex> lock(mutex_);
    temps_.emplace_back(tmp, final_path);
    return std::fopen(tmp.c_str(), "wb");
}

void ShardWriter::write_tokenizer(const llmc::Tokenizer& tok) {
    const std::string tmp = (fs::path(dir_) / ".tokenizer.bin.tmp").string();
    std::string why;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        temps_.emplace_back(tmp, (fs::path(dir_) / "tokenizer.bin").string());
        if (!tok.write_tokenizer_file(tmp, &why)) {
            why = "cannot write in the output folder " + dir_ + ": " + why;
        }
    }
    if (!why.empty()) fail(why);
}

void ShardWriter::open_shard(int split) {
    if (stats_[split].shards == kMaxShardsPerSplit) {
        fail("the " + std::string(kSplitNames[split]) + " split needs more than " +
             std::to_string(kMaxShardsPerSplit) + " shards of --shard-tokens " +
             std::to_string(cap_) + " tokens; give a larger --shard-tokens (the default is " +
             "100000000)");
    }
    const std::string final_name = shard_name(split, stats_[split].shards);
    const std::string tmp = (fs::path(dir_) / ("." + final_name + ".tmp")).string();
    f_[split] = create_temp(tmp, (fs::path(dir_) / final_name).string());
    if (f_[split] == nullptr) fail("cannot create " + tmp + ": " + std::strerror(errno));
    const int32_t header[llmc::kShardHeaderInts] = {};  // the real one is written on close
    if (std::fwrite(header, sizeof(header), 1, f_[split]) != 1) {
        fail("cannot write " + tmp + ": " + std::strerror(errno));
    }
    in_shard_[split] = 0;
    stats_[split].shards++;
}

void ShardWriter::close_shard(int split) {
    std::FILE* f = f_[split];
    f_[split] = nullptr;
    int32_t header[llmc::kShardHeaderInts] = {};
    header[0] = llmc::kShardMagic;
    header[1] = llmc::kShardVersion;
    header[2] = (int32_t)in_shard_[split];
    stats_[split].last_shard_tokens = in_shard_[split];
    bool ok = std::fseek(f, 0, SEEK_SET) == 0 && std::fwrite(header, sizeof(header), 1, f) == 1;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) fail("cannot write a token shard in " + dir_ + ": " + std::strerror(errno));
}

void ShardWriter::write(int split, const uint16_t* tokens, size_t n) {
    while (n > 0) {
        if (f_[split] == nullptr) open_shard(split);
        const size_t k = std::min(n, (size_t)(cap_ - in_shard_[split]));
        if (std::fwrite(tokens, sizeof(uint16_t), k, f_[split]) != k) {
            fail("cannot write a token shard in " + dir_ + ": " + std::strerror(errno) +
                 " (disk full?)");
        }
        in_shard_[split] += (long long)k;
        stats_[split].tokens += (long long)k;
        tokens += k;
        n -= k;
        if (in_shard_[split] == cap_) close_shard(split);
    }
}

void ShardWriter::remove_stale_shards(const std::set<std::string>& fresh) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
        const std::string f = e.path().filename().string();
        for (const char* split : kSplitNames) {
            const std::string prefix = name_ + "_" + split + "_";
            const bool ours = f.size() == prefix.size() + 10 && f.rfind(prefix, 0) == 0 &&
                              f.compare(f.size() - 4, 4, ".bin") == 0 &&
                              f.find_first_not_of("0123456789", prefix.size()) == f.size() - 4;
            std::error_code er;
            if (ours && fresh.count(f) == 0 && fs::remove(e.path(), er)) ++stale_removed_;
        }
    }
}

void ShardWriter::finish() {
    for (int split : {kTrain, kVal}) {
        if (f_[split] != nullptr) close_shard(split);
    }
    std::string why;
    {
        // One commit under the lock: a signal sees the run either undone or complete.
        std::lock_guard<std::mutex> lock(mutex_);
        std::set<std::string> fresh;
        for (const auto& t : temps_) fresh.insert(fs::path(t.second).filename().string());
        while (!temps_.empty() && why.empty()) {
            const auto& t = temps_.back();
            if (std::rename(t.first.c_str(), t.second.c_str()) != 0) {
                why = "cannot rename " + t.first + " to " + t.second + ": " + std::strerror(errno);
            } else {
                temps_.pop_back();
            }
        }
        if (why.empty()) {
            remove_stale_shards(fresh);
            committed_ = true;
        }
    }
    if (!why.empty()) fail(why);
}

std::string ShardWriter::undo() {
    const size_t temps = temps_.size();
    for (const auto& t : temps_) std::remove(t.first.c_str());
    temps_.clear();
    std::string removed_dir;
    for (const std::string& d : created_dirs_) {  // rmdir removes only an empty folder
        if (::rmdir(d.c_str()) != 0) break;
        removed_dir = d;
    }
    const bool made_dir = !created_dirs_.empty();
    created_dirs_.clear();
    std::string what = temps > 0 ? "removed its " + plural(temps, "temporary file") : "";
    if (!removed_dir.empty()) {
        what += (what.empty() ? "removed " : " and ") + std::string("the folder ") + removed_dir +
                " that it had created";
    } else if (made_dir) {
        what += (what.empty() ? "" : "; ") + std::string("kept the folder ") + dir_ +
                " that it had created, as something else is in it now";
    } else if (temps > 0) {
        what += "; " + dir_ + " holds what it held before";
    }
    return what.empty() ? "nothing was written yet" : what;
}

void ShardWriter::fail(const std::string& sentence) {
    for (std::FILE*& f : f_) {
        if (f != nullptr) std::fclose(f);
        f = nullptr;
    }
    mutex_.lock();  // held until exit, so a signal now finds nothing left to undo
    undo();
    clear_progress_bar();
    std::fprintf(stderr, "error: %s\n", sentence.c_str());
    std::exit(1);
}

void ShardWriter::interrupt(int sig) {
    // Runs on the watcher's thread while others may still write: the open files are not closed
    // here (removing a file that is open is fine), and the lock is never released.
    mutex_.lock();
    const std::string what = committed_ ? "after " + dir_ + " was complete, so it is kept" : undo();
    clear_progress_bar();
    std::fprintf(stderr, "prepare_data: interrupted by %s; %s\n", signal_name(sig), what.c_str());
    // Die by the same signal, as a shell expects of a program it interrupted (a loop stops).
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
    _exit(128 + sig);
}

// ---- signal watcher ----------------------------------------------------------------------

SignalWatcher::SignalWatcher(ShardWriter* out) : out_(out) {
    sigemptyset(&set_);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction old {};
        if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) {
            sigaddset(&set_, sig);
            if (wake_signal_ == 0) wake_signal_ = sig;
        }
    }
    if (wake_signal_ == 0) return;  // all ignored: nothing to wait for
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    // A small stack of its own: it does little, and a huge `ulimit -s` must not stop it starting.
    pthread_attr_setstacksize(&attr, 256 << 10);
    running_ = pthread_create(&thread_, &attr, wait_loop, this) == 0;
    pthread_attr_destroy(&attr);
    if (!running_) pthread_sigmask(SIG_UNBLOCK, &set_, nullptr);  // no watcher: default deaths
}

SignalWatcher::~SignalWatcher() {
    if (!running_) return;
    stopping_.store(true);
    pthread_kill(thread_, wake_signal_);
    pthread_join(thread_, nullptr);
}

void* SignalWatcher::wait_loop(void* self) {
    SignalWatcher* w = static_cast<SignalWatcher*>(self);
    for (;;) {
        int sig = 0;
        if (sigwait(&w->set_, &sig) != 0) continue;
        // After the destructor's wake-up the run is complete; a late signal changes nothing.
        if (w->stopping_.load()) return nullptr;
        w->out_->interrupt(sig);
    }
}

}  // namespace prep
