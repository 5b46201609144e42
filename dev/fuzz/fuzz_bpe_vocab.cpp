// The GPT-2 vocabulary files (data/bpe.h): byte 0 picks which file the rest is, 0 encoder.json, 1 vocab.bpe
// (the other one a tiny valid file), 2 both (encoder.json up to the first NUL, vocab.bpe after it); loaded by
// Gpt2Encoder::load. Errors must be one readable line naming the file; a vocabulary it accepts then encodes a few
// short texts and the input's last bytes, which must decode back to the text. Seeds: tiny vocabularies (the 256
// byte tokens, a few merges, <|endoftext|>).
#include "data/bpe.h"
#include "dev/fuzz/fuzz_common.h"

#include <utility>

using Merges = std::vector<std::pair<std::string, std::string>>;   // raw bytes, in rank order

// Raw bytes as vocabulary text: each byte as its stand-in character (bytes_to_unicode), in UTF-8.
static std::string standin(const std::string& bytes) {
    static const std::array<uint32_t, 256> cp = bytes_to_unicode();
    std::string s;
    for (unsigned char b : bytes) {
        const uint32_t c = cp[b];
        if (c < 0x80) s += (char)c;
        else s += (char)(0xC0 | c >> 6), s += (char)(0x80 | (c & 0x3F));
    }
    return s;
}

// A vocabulary's encoder.json and vocab.bpe: ids 0..255 the bytes, 256+n merge n, <|endoftext|> last.
static std::pair<std::string, std::string> vocab_files(const Merges& merges, bool version_line) {
    nlohmann::json j = nlohmann::json::object();
    for (int b = 0; b < 256; b++) j[standin(std::string(1, (char)b))] = b;
    std::string bpe = version_line ? "#version: 0.2\n" : "";
    for (size_t n = 0; n < merges.size(); n++) {
        j[standin(merges[n].first + merges[n].second)] = 256 + n;
        bpe += standin(merges[n].first) + " " + standin(merges[n].second) + "\n";
    }
    j["<|endoftext|>"] = 256 + merges.size();
    return {j.dump(), bpe};
}

static const Merges kDefault = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {" ", "a"}, {"e", "r"}};

FUZZ_SEEDS(dir) {
    const auto [json, bpe] = vocab_files(kDefault, true);
    write_file(dir + "/json_0", std::string(1, '\0') + json);   // (a "\x00" literal would be empty)
    write_file(dir + "/bpe_0", "\x01" + bpe);
    const auto [json1, bpe1] = vocab_files({{"\xc3", "\xa9"}, {"\n", "\n"}, {"1", "2"}, {"12", "3"}, {"c", "af"}, {"a", "f"},
                                            {" ", "\n"}, {"'", "s"}}, false);
    write_file(dir + "/both_0", "\x02" + json1 + std::string(1, '\0') + bpe1);
    const auto [json2, bpe2] = vocab_files({}, false);
    write_file(dir + "/both_1", "\x02" + json2 + std::string(1, '\0') + bpe2);
}

// A load or encode error: one line, no control bytes, not longer than a line can be read, starting
// with one of the names.
static void check_error(const std::string& err, const std::vector<std::string>& names) {
    fuzz_note(err);
    bool named = false;
    for (const std::string& n : names) named |= err.rfind(n + ": ", 0) == 0;
    if (!named || !fuzz_readable_line(err)) abort();
}

static void encode_back(Gpt2Encoder& enc, const std::string& text) {
    std::vector<int> ids = {-1}, again;
    std::string err;
    if (!enc.encode(text, &ids, &err)) {
        check_error(err, {"<text>"});
        if (ids.size() != 1) abort();   // left as it was
        return;
    }
    std::string back;
    for (size_t i = 1; i < ids.size(); i++) {
        if (ids[i] < 0 || ids[i] >= enc.vocab_size() || ids[i] == enc.eot()) abort();
        back += enc.decoder()[ids[i]];
    }
    if (back != text) abort();
    if (!enc.encode(text, &again, &err) || again != std::vector<int>(ids.begin() + 1, ids.end())) abort();  // the cache agrees
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string json_path = fuzz_dir() + "/encoder.json", bpe_path = fuzz_dir() + "/vocab.bpe";
    static const std::pair<std::string, std::string> tiny = vocab_files(kDefault, true);
    if (size < 1) return 0;
    const std::string rest((const char*)data + 1, size - 1);
    std::string json = tiny.first, bpe = tiny.second;
    switch (data[0] % 3) {
        case 0: json = rest; break;
        case 1: bpe = rest; break;
        default: {
            const size_t nul = rest.find('\0');
            json = rest.substr(0, nul);
            bpe = nul == std::string::npos ? "" : rest.substr(nul + 1);
        }
    }
    write_file(json_path, json);
    write_file(bpe_path, bpe);
    Gpt2Encoder enc;
    std::string err;
    if (!enc.load(fuzz_dir(), &err)) { check_error(err, {json_path, bpe_path}); return 0; }
    if (enc.vocab_size() < 257 || enc.eot() < 0 || enc.eot() >= enc.vocab_size() ||
        (int)enc.decoder().size() != enc.vocab_size()) abort();
    for (const char* text : {"hello there, the thin man", " the the  the\n\n\tin  ", "<|endoftext|> it's 12345 caf\xc3\xa9 \xf0\x9f\x91\x8b", ""})
        encode_back(enc, text);
    encode_back(enc, rest.substr(rest.size() - std::min<size_t>(rest.size(), 64)));
    return 0;
}
