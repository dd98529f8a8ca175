// fuzz_token_table.cpp: libFuzzer harness of TokenTable::load (llmc/sampler.cpp), the reader of
// llm.c's tokenizer file that decodes text samples. Input: one tokenizer file. Seeds: a few
// tokens by hand, versions 1 and 2. On success every id must decode to at least one byte.
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "sampler.h"

namespace {

void parse(const std::vector<std::string>& paths) {
    llmc::TokenTable table;
    std::string why;
    if (!table.load(paths[0], &why)) LLMC_FAIL("%s", why.c_str());
    LLMC_FUZZ_ASSERT(table.vocab_size() >= 1);
    for (int id = 0; id < table.vocab_size(); id++) LLMC_FUZZ_ASSERT(!table.decode(&id, 1).empty());
}

void write_seeds(const std::string& dir) {
    for (int version : {1, 2}) {
        int32_t header[256] = {};
        header[0] = 20240328;
        header[1] = version;
        header[2] = 4;
        header[3] = 3;
        std::string file(reinterpret_cast<const char*>(header), sizeof(header));
        for (const char* token : {"a", " b", "\xC3\xA9", "<|endoftext|>"}) {
            file += (char)std::strlen(token);
            file += token;
        }
        llmc::fuzz::write_seed(dir, "tokenizer_v" + std::to_string(version), {file});
    }
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"tokenizer.bin"}, parse, write_seeds, {}};
    return t;
}
