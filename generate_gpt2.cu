// generate_gpt2.cu: generate_gpt2cu, text from a trained model. Loads a model file, a checkpoint
// or a run directory, encodes the prompt with GPT-2's tokenizer, continues it token by token
// (llmc/sampler.cuh: one forward per token, temperature / top-k sampling from a seed) and prints
// the text as it comes.
//
//   ./generate_gpt2cu --load out/run --prompt "The meaning of life is" --max-tokens 100
//   ./generate_gpt2cu --load out/run/state_00001000.bin --prompt-ids 50256 --temperature 0
//
// Every option is checked before the GPU is touched: a bad value gets one sentence and exit
// code 2, a bad file exit code 1.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "cli.h"
#include "context.cuh"
#include "gpt2.cuh"
#include "sampler.cuh"
#include "tokenizer.h"

using namespace llmc;

namespace {

struct GenerateConfig {
    std::string load;                // --load
    std::string prompt;              // --prompt
    bool has_prompt = false;         //     given (may be empty text, which is refused)
    std::string prompt_ids;          // --prompt-ids
    int max_tokens = 64;             // --max-tokens
    float temperature = 1.0f;        // --temperature
    int top_k = 0;                   // --top-k
    unsigned long long seed = 1337;  // --sample-seed
    std::string tokenizer;           // --tokenizer ("" = the defaults of the help)
    int print_ids = 0;               // --print-ids
    int device = 0;                  // --device
};

cli::Program generate_program(GenerateConfig* c) {
    using cli::option;
    cli::Program p;
    p.usage = "generate_gpt2cu --load PATH (--prompt TEXT | --prompt-ids IDS) [options]";
    p.about = "Continues a prompt with a trained GPT-2 and prints the text.";
    p.options = {
        option("--load", "PATH", "load", &c->load,
               "a model file (llm.c format), a checkpoint's state_SSSSSSSS.bin, or a run "
               "directory (its newest checkpoint, else its model.bin)")
            .must_be_given("a model is required: pass --load MODEL_OR_CHECKPOINT"),
        option("--prompt", "TEXT", "prompt", &c->prompt,
               "the prompt, encoded with GPT-2's tokenizer (needs --tokenizer DIR)")
            .mark_given(&c->has_prompt),
        option("--prompt-ids", "IDS", "prompt_ids", &c->prompt_ids,
               "the prompt as token ids, comma-separated (e.g. 50256 for a start from "
               "<|endoftext|>)"),
        option("--max-tokens", "N", "max_tokens", &c->max_tokens, 1, 1 << 20, "tokens to generate"),
        option("--temperature", "T", "temperature", &c->temperature, 0.0, 100.0, "0 = greedy"),
        option("--top-k", "K", "top_k", &c->top_k, 0, 1 << 24,
               "sample among the K most likely tokens, 0 = all"),
        option("--sample-seed", "S", "sample_seed", &c->seed, 0, 1ll << 62,
               "seed of the sampler: one seed, one text"),
        option("--tokenizer", "PATH", "tokenizer", &c->tokenizer,
               "a directory with GPT-2's encoder.json and vocab.bpe, or an llm.c tokenizer.bin, "
               "which decodes but cannot encode a --prompt")
            .with_default("data/gpt2_tokenizer, then build/tokenizer"),
        option("--print-ids", "0|1", "print_ids", &c->print_ids, 0, 1,
               "also print the new token ids on a line 'ids: ...'"),
        option("--device", "N", "device", &c->device, 0, 1024, "CUDA device"),
    };
    return p;
}

GenerateConfig parse_args(int argc, char** argv) {
    GenerateConfig c;
    cli::parse_or_exit(generate_program(&c), argc, argv);
    if (c.has_prompt == !c.prompt_ids.empty())
        cli::usage_error("pass exactly one of --prompt TEXT and --prompt-ids IDS");
    if (c.has_prompt && c.prompt.empty())
        cli::usage_error(
            "--prompt is empty; give some text, or --prompt-ids 50256 to start from "
            "<|endoftext|>");
    return c;
}

// "1,2, 3" -> ids; exits 2 on anything else.
std::vector<int> parse_ids(const std::string& text) {
    std::vector<int> ids;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t end = std::min(text.find(',', pos), text.size());
        std::string item = text.substr(pos, end - pos);
        item.erase(0, item.find_first_not_of(' '));
        item.erase(item.find_last_not_of(' ') + 1);
        ids.push_back((int)cli::parse_int("--prompt-ids", item, 0, (1 << 30)));
        pos = end + 1;
    }
    if (ids.empty()) cli::usage_error("--prompt-ids holds no ids; give e.g. --prompt-ids 50256");
    return ids;
}

bool is_dir(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The model file that --load names, checked: a checkpoint's model must match its state file.
std::string load_weights(const std::string& load, GPT2Config* cfg, std::vector<float>* params) {
    std::string state, model = load;
    if (is_dir(load)) {
        const std::vector<long long> steps = list_checkpoints(load);
        if (!steps.empty())
            state = checkpoint_state_path(load, steps.back());
        else
            model = load + "/model.bin";
    } else {
        char magic[8] = {};
        if (std::FILE* f = std::fopen(load.c_str(), "rb")) {
            const size_t got = std::fread(magic, 1, sizeof(magic), f);
            std::fclose(f);
            if (got == sizeof(magic) && std::memcmp(magic, "LLMCCKPT", 8) == 0) state = load;
        }
    }
    if (!state.empty()) {
        CheckpointMeta meta;
        read_checkpoint_meta(state, &meta);
        model = model_path_for_state(state);
        read_checkpoint_model(model, meta, params);
        *cfg = meta.cfg;
        std::printf("model        %s (checkpoint of step %lld)\n", model.c_str(), meta.step);
        return model;
    }
    int version = 0;
    read_model_file(model, cfg, params, &version);
    std::printf("model        %s (version %d)\n", model.c_str(), version);
    return model;
}

}  // namespace

int main(int argc, char** argv) {
    const GenerateConfig gc = parse_args(argc, argv);
    std::vector<int> ids = gc.has_prompt ? std::vector<int>() : parse_ids(gc.prompt_ids);
    SamplerOptions opts;
    opts.temperature = gc.temperature;
    opts.top_k = gc.top_k;

    // The tokenizer: an encoder for a text prompt, a decoder for the output.
    std::vector<std::string> candidates = {gc.tokenizer};
    if (gc.tokenizer.empty()) candidates = {"data/gpt2_tokenizer", "build/tokenizer"};
    TokenTable decoder;
    bool has_decoder = false;
    std::string why;
    for (const std::string& path : candidates) {
        if (!gc.tokenizer.empty() || is_dir(path)) {
            has_decoder = decoder.load(path, &why);
            if (gc.has_prompt && has_decoder) {
                Tokenizer encoder;
                LLMC_CHECK(is_dir(path) && encoder.load(path, &why),
                           "--prompt needs GPT-2's encoder.json and vocab.bpe, and %s %s; pass "
                           "--tokenizer DIR (scripts/data/tokenizer_files.sh DIR fetches them)",
                           path.c_str(), is_dir(path) ? why.c_str() : "is a tokenizer file");
                encoder.encode(gc.prompt, &ids);
            }
            if (has_decoder) break;
        }
    }
    LLMC_CHECK(has_decoder || gc.tokenizer.empty(), "--tokenizer: %s.", why.c_str());
    LLMC_CHECK(!gc.has_prompt || has_decoder,
               "--prompt needs GPT-2's tokenizer and none is in data/gpt2_tokenizer or "
               "build/tokenizer; pass --tokenizer DIR (scripts/data/tokenizer_files.sh DIR fetches "
               "encoder.json and vocab.bpe) or give the prompt as --prompt-ids");

    GPT2Config cfg;
    std::vector<float> params;
    load_weights(gc.load, &cfg, &params);
    for (int id : ids)
        LLMC_CHECK(id >= 0 && id < cfg.vocab_size,
                   "prompt token %d is outside the model's vocabulary of %d tokens", id,
                   cfg.vocab_size);
    LLMC_CHECK(!has_decoder || decoder.vocab_size() == cfg.vocab_size,
               "the tokenizer has %d tokens but the model %d; pass the model's --tokenizer",
               decoder.vocab_size(), cfg.vocab_size);

    Context ctx;
    // Full fp32 matmuls in the fp32 build: generation is not throughput-bound, and TF32's 10-bit
    // mantissa would move logits by more than the greedy test's fp32 bound.
    context_init(&ctx, gc.device, /*tf32=*/false);
    // One sequence of the prompt and the new tokens, up to the model's maximum (a longer text
    // slides its window).
    const int T = (int)std::min<long long>((long long)ids.size() + gc.max_tokens, cfg.max_seq_len);
    GPT2 model;
    gpt2_create(ctx, &model, cfg, params, 1, T);
    EvalIO io;
    eval_io_create(&io, 1, T);
    std::printf("build        %s\n", kPrecisionName);
    std::printf("prompt       %zu tokens; %d new, temperature %g, top-k %d, seed %llu\n",
                ids.size(), gc.max_tokens, gc.temperature, gc.top_k, gc.seed);
    std::printf("---\n");
    if (has_decoder) std::fputs(valid_utf8(decoder.decode(ids.data(), ids.size())).c_str(), stdout);
    std::fflush(stdout);
    const size_t prompt_len = ids.size();
    uint64_t rng = gc.seed;
    // Each token's bytes as they come (a character may span two tokens; the terminal joins them).
    auto show = [&](int id) {
        const std::string piece = has_decoder ? decoder.decode(&id, 1) : std::to_string(id) + " ";
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    };
    const bool ok = gpt2_generate(ctx, &model, &io, &ids, gc.max_tokens, opts, &rng, &why, show);
    std::printf("\n---\n");
    if (gc.print_ids) {
        std::printf("ids:");
        for (size_t i = prompt_len; i < ids.size(); i++) std::printf(" %d", ids[i]);
        std::printf("\n");
    }
    LLMC_CHECK(ok, "generation stopped after %zu tokens: %s.", ids.size() - prompt_len,
               why.c_str());
    return 0;
}
