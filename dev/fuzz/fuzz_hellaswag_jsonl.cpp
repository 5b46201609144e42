// data/tokenize --hellaswag's input (data/hellaswag.h): the input is a .jsonl file read by DocumentReader (field
// "ctx"), each line through choice_example (one K for the file, as write_choices does) with the GPT-2 vocabulary
// ($GPT2_VOCAB_DIR, else ../shared/data/gpt2; without it a byte-level one: the 256 bytes and <|endoftext|>).
// Errors must be one line naming FILE:LINE; an accepted example must pass choice_example_problem. Seeds: small
// HellaSwag-format files.
#include "data/hellaswag.h"
#include "dev/fuzz/fuzz_common.h"

FUZZ_SEEDS(dir) {
    write_file(dir + "/plain.jsonl", "{\"ctx\": \"A man sits down.\", \"endings\": [\"He stands.\", \"He eats.\", \"He sleeps.\", \"He sings.\"], \"label\": 0}\n"
                                     "{\"ctx\": \"She opens the door\", \"endings\": [\"and walks in.\", \"x\", \"y\", \"z\"], \"label\": \"3\"}\n");
    write_file(dir + "/full.jsonl", "{\"ind\": 24, \"activity_label\": \"Roof shingle removal\", \"ctx_a\": \"A man is sitting on a roof.\", "
                                    "\"ctx_b\": \"he\", \"ctx\": \"A man is sitting on a roof. he\", \"split\": \"val\", \"split_type\": \"indomain\", "
                                    "\"endings\": [\"is using wrap to wrap a pair of skis.\", \"is ripping level tiles off.\", "
                                    "\"is holding a rubik's cube.\", \"starts pulling up roofing on a roof.\"], \"source_id\": \"activitynet~v_-JhWjGDPHMY\", \"label\": 3}\n");
    write_file(dir + "/k2.jsonl", "\n  \r\n{\"ctx\": \"caf\\u00e9 \\ud83d\\udc4b \\\"q\\\"\\t\", \"endings\": [\"1 2 3\", \"\xe4\xb8\xad\xe6\x96\x87\"], \"label\": 1}\r\n"
                                  "{\"label\": 0, \"endings\": [\"it's\", \"  spaces  \"], \"ctx\": \"<|endoftext|>\"}");
    write_file(dir + "/bad.jsonl", "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"], \"label\": 2}\n{\"ctx\": \"\", \"endings\": [\"a\"], \"label\": 0}\n");
}

// The GPT-2 vocabulary, else a byte-level one written into the scratch directory.
static Gpt2Encoder& encoder() {
    static Gpt2Encoder* enc = [] {
        auto* e = new Gpt2Encoder();
        std::string err;
        if (e->load(fuzz_vocab_dir(), &err)) return e;
        fprintf(stderr, "fuzz_hellaswag_jsonl: no vocabulary (%s): a byte-level one instead\n", err.c_str());
        nlohmann::json j = nlohmann::json::object();
        const std::array<uint32_t, 256> cp = bytes_to_unicode();
        for (int b = 0; b < 256; b++) {
            const uint32_t c = cp[b];
            j[c < 0x80 ? std::string(1, (char)c) : std::string{(char)(0xC0 | c >> 6), (char)(0x80 | (c & 0x3F))}] = b;
        }
        j["<|endoftext|>"] = 256;
        write_file(fuzz_dir() + "/encoder.json", j.dump());
        write_file(fuzz_dir() + "/vocab.bpe", "");
        if (!e->load(fuzz_dir(), &err)) { fprintf(stderr, "fuzz_hellaswag_jsonl: %s\n", err.c_str()); abort(); }
        return e;
    }();
    return *enc;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/input.jsonl";
    Gpt2Encoder& enc = encoder();
    write_file(path, data, size);
    DocumentReader reader({path}, true, "ctx");
    std::vector<Document> docs;
    std::string err;
    int K = 0;
    while (err.empty() && reader.next_batch(&docs, 256, &err)) {
        for (const Document& d : docs) {
            ChoiceExample x;
            if (!choice_example(d, enc, &K, &x, &err)) break;
            if (K < 2 || K > CHOICES_MAX_K || !choice_example_problem(x, K).empty()) abort();
            for (uint16_t t : x.context) if (t >= enc.vocab_size()) abort();
        }
    }
    if (!err.empty()) fuzz_check_error(err, path + ":");   // naming the file (and the line)
    return 0;
}
