// The tokenizer's decoder file (llmc/tokenizer.h): the input is written as the file and loaded by
// TokenizerDecoder::load; when it loads, every id (and a few outside the vocabulary) is decoded.
// Seeds: small decoder tables (tokenizer_write).
#include "llmc/tokenizer.h"
#include "dev/fuzz/fuzz_common.h"

FUZZ_SEEDS(dir) {
    std::string err;
    const std::vector<std::string> a = {"a", "b", "<|endoftext|>"}, b = {"hello", " world", std::string(255, 'x'), std::string("\0\xff", 2)};
    if (!tokenizer_write(dir + "/decoder_0.bin", a, 2, &err) || !tokenizer_write(dir + "/decoder_1.bin", b, 0, &err)) seed_fail(err);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/decoder.bin";
    write_file(path, data, size);
    TokenizerDecoder dec;
    std::string err;
    if (!dec.load(path, &err)) {
        fuzz_check_error(err, path + ": ");
        return 0;
    }
    if (dec.vocab_size() < 1 || dec.eot() < 0 || dec.eot() >= dec.vocab_size()) abort();
    std::vector<int> ids;
    for (int id = -2; id < dec.vocab_size() + 2; id++) ids.push_back(id);
    size_t bytes = 0;
    for (int id = 0; id < dec.vocab_size(); id++) bytes += dec.decode(id).size();
    if (decode_tokens(dec, ids.data(), ids.size()).size() != bytes) abort();
    return 0;
}
