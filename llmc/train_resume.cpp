// train_resume.cpp: the options a checkpoint records, from the trainer's option table (see
// train_resume.h).
#include "train_resume.h"

#include <algorithm>
#include <cstdio>

namespace llmc {
namespace {

using cli::Option;
using cli::Resume;

// "a|b|c" -> {"a", "b", "c"}.
std::vector<std::string> split_choices(const char* choices) {
    std::vector<std::string> names(1);
    for (const char* p = choices; *p != '\0'; p++) {
        if (*p == '|')
            names.emplace_back();
        else
            names.back() += *p;
    }
    return names;
}

int64_t choice_index(const char* choices, const std::string& value) {
    const std::vector<std::string> names = split_choices(choices);
    return std::find(names.begin(), names.end(), value) - names.begin();
}

std::string choice_name(const char* choices, int64_t index) {
    const std::vector<std::string> names = split_choices(choices);
    return index >= 0 && index < (int64_t)names.size() ? names[index]
                                                       : "(choice " + std::to_string(index) + ")";
}

// An option's value as its header slot holds it (checkpoint.h, kOptionSlots).
int64_t slot_value(const Option& o) {
    if (int* const* i = std::get_if<int*>(&o.field)) return **i;
    if (long long* const* l = std::get_if<long long*>(&o.field)) return **l;
    if (unsigned long long* const* u = std::get_if<unsigned long long*>(&o.field))
        return (int64_t) * *u;
    if (float* const* f = std::get_if<float*>(&o.field)) return slot_from_double(**f);
    return choice_index(o.choices, **std::get_if<std::string*>(&o.field));
}

// Sets o's field from the value its header slot holds.
void set_from_slot(const Option& o, int64_t v) {
    if (int* const* i = std::get_if<int*>(&o.field)) **i = (int)v;
    if (long long* const* l = std::get_if<long long*>(&o.field)) **l = v;
    if (unsigned long long* const* u = std::get_if<unsigned long long*>(&o.field))
        **u = (unsigned long long)v;
    if (float* const* f = std::get_if<float*>(&o.field)) **f = (float)double_from_slot(v);
    if (std::string* const* t = std::get_if<std::string*>(&o.field))
        **t = choice_name(o.choices, v);
}

bool same_value(const Option& o, const CheckpointMeta& a, const CheckpointMeta& b) {
    return o.slot == kSlotText ? a.option_text == b.option_text
                               : a.options[o.slot] == b.options[o.slot];
}

// "-d (--total-batch)", or the one name an option has.
std::string display_name(const Option& o) {
    const std::vector<std::string> names = cli::option_names(o);
    return names.size() > 1 ? names.front() + " (" + names.back() + ")" : names.front();
}

// A configuration holding the options `m` records, with -b as the global micro-batch (world
// size 1), for messages.
TrainConfig recorded(const CheckpointMeta& m) {
    TrainConfig c;
    c.world_size = 1;
    restore_resume_options(m, &c);
    return c;
}

}  // namespace

CheckpointMeta describe_run(const TrainConfig& tc, const GPT2Config& model, const DataLoader& train,
                            const char* precision, int param_bytes) {
    CheckpointMeta m;
    m.cfg = model;
    m.num_params = (long long)param_layout(model).total;
    m.param_bytes = param_bytes;
    m.precision = precision;
    m.train_shards = (long long)train.files.size();
    for (long long n : train.shard_tokens) m.train_tokens += n;
    TrainConfig c = tc;
    for (const Option& o : train_options(&c)) {
        if (o.resume == Resume::kFree) continue;
        if (o.slot == kSlotText)
            m.option_text = **std::get_if<std::string*>(&o.field);
        else  // -b is per GPU; the checkpoint keeps the global micro-batch
            m.options[o.slot] = slot_value(o) * (o.slot == kSlotB ? tc.world_size : 1);
    }
    return m;
}

void restore_resume_options(const CheckpointMeta& saved, TrainConfig* c) {
    const int world = std::max(1, c->world_size);
    for (const Option& o : train_options(c)) {
        if (o.resume == Resume::kFree) continue;
        if (o.slot == kSlotText)
            **std::get_if<std::string*>(&o.field) = saved.option_text;
        else
            set_from_slot(o, saved.options[o.slot] / (o.slot == kSlotB ? world : 1));
    }
}

std::string resume_mismatch(const CheckpointMeta& s, const CheckpointMeta& n) {
    char buf[1024];
    const GPT2Config &a = s.cfg, &b = n.cfg;
    if (s.precision != n.precision) {
        std::snprintf(buf, sizeof(buf),
                      "the checkpoint was written by the %s build and this is the %s build; "
                      "resume it with the %s build (make PRECISION=%s)",
                      s.precision.c_str(), n.precision.c_str(), s.precision.c_str(),
                      s.precision == "bf16" ? "BF16" : "FP32");
        return buf;
    }
    if (a.max_seq_len != b.max_seq_len || a.vocab_size != b.vocab_size ||
        a.padded_vocab_size != b.padded_vocab_size || a.num_layers != b.num_layers ||
        a.num_heads != b.num_heads || a.channels != b.channels) {
        std::snprintf(buf, sizeof(buf),
                      "the checkpoint holds a model with L=%d NH=%d C=%d V=%d Vp=%d maxT=%d but "
                      "-e gives L=%d NH=%d C=%d V=%d Vp=%d maxT=%d; resume with the run's -e",
                      a.num_layers, a.num_heads, a.channels, a.vocab_size, a.padded_vocab_size,
                      a.max_seq_len, b.num_layers, b.num_heads, b.channels, b.vocab_size,
                      b.padded_vocab_size, b.max_seq_len);
        return buf;
    }
    TrainConfig was = recorded(s), now = recorded(n);
    const std::vector<Option> ws = train_options(&was), ns = train_options(&now);
    for (size_t i = 0; i < ws.size(); i++) {
        if (ws[i].resume != Resume::kMustMatch || same_value(ws[i], s, n)) continue;
        const std::string name = cli::option_names(ws[i]).front();
        const std::string old_v = cli::value_text(ws[i]), new_v = cli::value_text(ns[i]);
        if (ws[i].slot == kSlotB)
            std::snprintf(buf, sizeof(buf),
                          "the checkpoint's run read %s sequences per micro-step (GPUs x -b), "
                          "this one %s; resume with the same batch shape (GPUs x -b = %s)",
                          old_v.c_str(), new_v.c_str(), old_v.c_str());
        else
            std::snprintf(buf, sizeof(buf),
                          "the checkpoint's run had %s %s, this one has %s %s; resume with %s %s",
                          name.c_str(), old_v.c_str(), name.c_str(), new_v.c_str(), name.c_str(),
                          old_v.c_str());
        return buf;
    }
    if (s.train_shards != n.train_shards || s.train_tokens != n.train_tokens) {
        std::snprintf(buf, sizeof(buf),
                      "the train glob '%s' now matches %lld shards of %lld tokens in all, but "
                      "matched %lld shards of %lld tokens when the checkpoint was written; the "
                      "training data changed",
                      n.option_text.c_str(), n.train_shards, n.train_tokens, s.train_shards,
                      s.train_tokens);
        return buf;
    }
    return "";
}

std::vector<std::string> resume_changes(const CheckpointMeta& s, const CheckpointMeta& n) {
    std::vector<std::string> out;
    TrainConfig was = recorded(s), now = recorded(n);
    const std::vector<Option> ws = train_options(&was), ns = train_options(&now);
    for (size_t i = 0; i < ws.size(); i++) {
        if (ws[i].resume != Resume::kMayChange || same_value(ws[i], s, n)) continue;
        out.push_back(display_name(ws[i]) + " changed from " + cli::value_text(ws[i]) + " to " +
                      cli::value_text(ns[i]));
    }
    return out;
}

}  // namespace llmc
