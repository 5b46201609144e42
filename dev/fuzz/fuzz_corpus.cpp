// data/tokenize's JSON Lines input (data/corpus.h): the input is a .jsonl file read by DocumentReader (batches of
// <= 256 bytes, field "text"), each line through document_text, each batch encoded by encode_documents with the
// GPT-2 vocabulary ($GPT2_VOCAB_DIR, else ../shared/data/gpt2; without it JSON only). Seeds: small .jsonl files.
#include "data/corpus.h"
#include "dev/fuzz/fuzz_common.h"

FUZZ_SEEDS(dir) {
    write_file(dir + "/plain.jsonl", "{\"text\": \"Hello world\"}\n{\"text\": \"second line\", \"id\": 2}\n");
    write_file(dir + "/mixed.jsonl", "\n  \n{\"text\": \"caf\\u00e9 \\\"quoted\\\" \\ud83d\\ude00 tab\\t\"}\r\n"
                                     "{\"meta\": {\"a\": [1, 2.5, null, true]}, \"text\": \"  spaces   and 123 numbers's\"}\n"
                                     "{\"text\": \"\xe4\xb8\xad\xe6\x96\x87 no newline at the end\"}");
    write_file(dir + "/bad.jsonl", "{\"text\": 5}\n[1, 2]\n{\"text\": \"x\"\n");
}

static Gpt2Encoder* encoder() {
    static Gpt2Encoder* enc = [] {
        auto* e = new Gpt2Encoder();
        std::string err;
        if (e->load(fuzz_vocab_dir(), &err)) return e;
        fprintf(stderr, "fuzz_corpus: no vocabulary (%s): JSON parsing only, no encoding\n", err.c_str());
        delete e;
        return (Gpt2Encoder*)nullptr;
    }();
    return enc;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/input.jsonl";
    static std::vector<std::unique_ptr<Gpt2Encoder>> encoders;
    if (encoders.empty() && encoder()) encoders.emplace_back(encoder());
    write_file(path, data, size);
    DocumentReader reader({path}, true, "text");
    std::vector<Document> docs;
    std::string err;
    while (reader.next_batch(&docs, 256, &err)) {
        for (const Document& d : docs) {
            std::string text;
            if (!document_text(d, &text, &err)) fuzz_check_error(err, path + ":");
        }
        if (encoders.empty()) continue;
        std::vector<uint16_t> ids;
        if (!encode_documents(encoders, docs, &ids, &err)) { fuzz_check_error(err, path + ":"); break; }
    }
    if (!err.empty()) fuzz_check_error(err, path + ":");
    return 0;
}
