// fuzz_corpus.cpp: libFuzzer harness of prepare_data's corpus reader (dev/tools/prepare_data_io.cpp
// CorpusReader, dev/tools/prepare_data_json.cpp json_text_field): a JSONL file (one object per
// line, its "text" string the document) and a text file cut at a --doc-sep separator. Input: the
// JSONL file, the separator, the text file. Every document read is then cut into segments
// (cut_segments, 16-byte target so the cutting rule runs often), which must tile the document
// exactly. Seeds: JSONL with escapes, surrogate pairs and raw UTF-8, and a text of 3 documents.
#include "fuzz_util.h"
#include "tools/prepare_data_io.h"

namespace {

const char kDocSep[] = "\n<doc>\n";

void parse(const std::vector<std::string>& paths) {
    std::vector<prep::InputFile> files;
    for (const std::string& p : paths) {
        std::FILE* f = std::fopen(p.c_str(), "rb");
        if (f == nullptr) continue;  // a part the input did not have; the reader needs files
        std::fclose(f);
        prep::InputFile in;
        in.path = p;
        in.jsonl = p.size() > 6 && p.compare(p.size() - 6, 6, ".jsonl") == 0;
        in.bytes = (uint64_t)llmc::fuzz::read_file(p).size();
        files.push_back(in);
    }
    prep::CorpusReader reader(files, kDocSep);
    prep::Document doc;
    std::string why;
    long long last_index = -1;
    while (reader.next(&doc, &why)) {
        LLMC_FUZZ_ASSERT(!doc.text.empty() && doc.index > last_index);
        last_index = doc.index;
        std::vector<prep::Segment> segs;
        prep::cut_segments(doc, 0, 16, &segs);
        size_t at = 0;
        for (const prep::Segment& s : segs) {
            LLMC_FUZZ_ASSERT(s.begin == at && s.end > s.begin);
            at = s.end;
        }
        LLMC_FUZZ_ASSERT(at == doc.text.size());
    }
    if (!why.empty()) throw llmc::FatalError(why);
}

void write_seeds(const std::string& dir) {
    const std::string jsonl =
        "{\"text\": \"Hello, world.\\nSecond line\\t\\\"quoted\\\" \\u00e9\\ud83d\\ude00\"}\n"
        "\n"
        "{\"id\": 7, \"meta\": {\"a\": [1, 2.5e-3, true, null]}, \"text\": \"caf\xc3\xa9 "
        "\xe4\xb8\xad\xe6\x96\x87 and more text so that it is cut into a few segments.\"}\n"
        "{\"text\": \"\"}\n";
    const std::string text = std::string("First document.\nIt has two lines.") + kDocSep +
                             "Second: numbers 123 456, and a\ttab." + kDocSep + "Third.";
    llmc::fuzz::write_seed(dir, "jsonl_and_text", {jsonl, text});
    llmc::fuzz::write_seed(dir, "jsonl_only", {jsonl});
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"corpus.jsonl", "corpus.txt"}, parse, write_seeds, {}};
    return t;
}
