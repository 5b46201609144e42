// Model files (llmc/checkpoint.h): the input is written as a model file and read by
// model_file_read_header; when the header is accepted and its model is small (< 1e6 parameters,
// so the harness's own buffer stays small), model_file_read_params reads the parameters too.
// Seeds: model files of two tiny configs (model_file_write).
#include "llmc/checkpoint.h"
#include "dev/fuzz/fuzz_common.h"

static GPT2Config tiny(int L, int C, int NH, int maxT, int V) {
    GPT2Config c;
    c.num_layers = L; c.channels = C; c.num_heads = NH; c.max_seq_len = maxT; c.vocab_size = V; c.padded_vocab_size = (V + 127) / 128 * 128;
    return c;
}

FUZZ_SEEDS(dir) {
    int i = 0;
    for (const GPT2Config& c : {tiny(1, 8, 1, 4, 1), tiny(2, 8, 2, 8, 100)}) {
        std::vector<float> w(param_layout(c).total);
        for (size_t k = 0; k < w.size(); k++) w[k] = (float)k * 0.25f;
        std::string err;
        if (!model_file_write(dir + "/model_" + std::to_string(i++) + ".bin", c, w.data(), &err)) seed_fail(err);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/model.bin";
    write_file(path, data, size);
    GPT2Config cfg;
    std::string err;
    if (!model_file_read_header(path, &cfg, &err)) {
        fuzz_check_error(err, path + ": ");
        return 0;
    }
    const size_t n = param_layout(cfg).total;
    if (n >= 1000000) return 0;
    std::vector<float> params(n);
    if (!model_file_read_params(path, cfg, params.data(), &err)) abort();   // the header was fine, the file unchanged
    return 0;
}
