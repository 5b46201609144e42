// Model shape, parameter layout and model files (llmc/model.h, llmc/checkpoint.h).
#include <cstdio>
#include <algorithm>
#include <numeric>
#include <csignal>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include "llmc/checkpoint.h"
#include "dev/unit/check.h"

static std::string tmpdir() { char t[] = "/tmp/test_model_XXXXXX"; return mkdtemp(t); }

int main() {
    GPT2Config c;
    CHECK(config_from_descriptor("d12", &c) && c.num_layers == 12 && c.channels == 768, "d12 descriptor");
    CHECK(config_from_descriptor("d48", &c) && c.num_heads == 25 && c.channels == 1600, "d48 descriptor");
    CHECK(!config_from_descriptor("d13", &c), "unknown descriptor rejected");
    config_from_descriptor("d12", &c);
    ParamLayout p = param_layout(c);
    CHECK_EQ(p.total, (size_t)124475904, "d12 parameter count (padded vocab, as llm.c counts)");
    // every element of the flat buffer belongs to exactly one tensor instance, in both orders
    std::vector<int> mem(p.total, 0), file(p.total, 0);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (size_t l = 0; l < param_tensor_count(c, t); l++)
            for (size_t i = 0; i < param_tensor_elems(c, t); i++) {
                mem[param_offset(c, p, t, (int)l) + i]++;
                file[model_file_offset(c, t, (int)l) + i]++;
            }
    CHECK(std::all_of(mem.begin(), mem.end(), [](int v) { return v == 1; }), "memory layout tiles the buffer");
    CHECK(std::all_of(file.begin(), file.end(), [](int v) { return v == 1; }), "file layout tiles the buffer");
    // block ranges are contiguous and adjacent: head | block 0 | ... | block L-1 | tail
    ElemRange h = head_range(p), t = tail_range(p);
    bool adjacent = h.offset == 0 && block_range(p, 0).offset == h.count && t.offset + t.count == p.total;
    for (int l = 0; l + 1 < c.num_layers; l++) adjacent &= block_range(p, l).offset + p.block_elems == block_range(p, l + 1).offset;
    CHECK(adjacent, "gradient ranges are adjacent and cover the buffer");
    CHECK(param_offset(c, p, P_FCW, 3) >= block_range(p, 3).offset &&
          param_offset(c, p, P_FCW, 3) < block_range(p, 4).offset, "block 3's fcw lies in block 3's range");
    // MFU convention: 6N + 6LCT
    CHECK(std::abs(flops_per_token(c, 1024) - (6.0 * 124475904 + 6.0 * 12 * 768 * 1024)) < 1, "flops per token");

    // GPT-2's initialization rule (param_init; gpt2_init_random carries it out): random exactly
    // where weight decay applies (the 2-D tensors), the residual projections at 0.02/sqrt(2L),
    // LayerNorm weights 1, every other tensor (the biases and LayerNorm shifts) 0
    for (const char* d : {"d12", "d48"}) {
        GPT2Config m; config_from_descriptor(d, &m);
        bool rule = true;
        std::string bad;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            const ParamInit in = param_init(m, t);
            const bool ln_weight = t == P_LN1W || t == P_LN2W || t == P_LNFW;
            const bool residual = t == P_ATTPROJW || t == P_FCPROJW;
            const float want = residual ? 0.02f / std::sqrt(2.0f * m.num_layers) : in.normal ? 0.02f : ln_weight ? 1.0f : 0.0f;
            if (in.normal != param_tensor_decays(t) || std::fabs(in.value - want) > 1e-7f * std::fabs(want)) {
                rule = false;
                bad += std::string(" ") + param_tensor_name(t);
            }
        }
        check_report(rule, std::string(d) + ": init rule per tensor (normal where decayed, 0.02, 0.02/sqrt(2L), 1, 0)", "wrong for" + bad);
    }
    CHECK(std::fabs(param_init(c, P_FCPROJW).value - 0.02f / std::sqrt(24.0f)) < 1e-9f, "d12 residual projection std 0.02/sqrt(24)");
    // every tensor instance draws from its own random stream, up to the 1024 layers a model file allows
    {
        std::vector<uint64_t> ids;
        GPT2Config m = c; m.num_layers = 1024;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++)
            for (size_t l = 0; l < param_tensor_count(m, t); l++) ids.push_back(param_init_stream(t, l));
        std::sort(ids.begin(), ids.end());
        CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end(), "init stream ids distinct for L = 1024");
    }

    // model file roundtrip on a small config
    GPT2Config s; s.max_seq_len = 16; s.vocab_size = 100; s.padded_vocab_size = 128; s.num_layers = 2; s.num_heads = 2; s.channels = 8;
    const size_t n = param_layout(s).total;
    std::vector<float> w(n), r(n);
    std::iota(w.begin(), w.end(), 0.5f);
    const std::string dir = tmpdir(), path = dir + "/m.bin";
    std::string err;
    CHECK(model_file_write(path, s, w.data(), &err), "model file write");
    CHECK(access((path + ".tmp").c_str(), F_OK) != 0, "no .tmp left behind");
    GPT2Config got;
    CHECK(model_file_read_header(path, &got, &err) && got.num_layers == 2 && got.channels == 8, "model header read back");
    CHECK(model_file_read_params(path, s, r.data(), &err) && r == w, "model params read back identical");
    // the file really is tensor-major: its second tensor (wpe) starts right after wte
    FILE* f = fopen(path.c_str(), "rb"); float first_wpe = 0;
    fseek(f, 1024 + sizeof(float) * param_tensor_elems(s, P_WTE), SEEK_SET);
    CHECK(fread(&first_wpe, 4, 1, f) == 1 && first_wpe == w[param_offset(s, param_layout(s), P_WPE, 0)], "file order is llm.c's");
    fclose(f);

    // bad files: one line naming the file and the problem
    auto bad = [&](const char* name, const std::string& expect, auto mutate) {
        const std::string b = dir + "/" + name;
        std::vector<char> bytes;
        FILE* in = fopen(path.c_str(), "rb"); int ch; while ((ch = fgetc(in)) != EOF) bytes.push_back((char)ch); fclose(in);
        mutate(bytes);
        FILE* out = fopen(b.c_str(), "wb"); fwrite(bytes.data(), 1, bytes.size(), out); fclose(out);
        std::string e;
        GPT2Config x;
        bool ok = model_file_read_header(b, &x, &e);
        check_report(!ok && e.find(b) == 0 && e.find(expect) != std::string::npos && e.find('\n') == std::string::npos,
                     std::string("rejects ") + name, "got '" + e + "'");
    };
    bad("truncated.bin", "truncated", [](std::vector<char>& v) { v.resize(v.size() - 4); });
    bad("trailing.bin", "trailing", [](std::vector<char>& v) { v.push_back(0); });
    bad("magic.bin", "bad magic", [](std::vector<char>& v) { v[0] ^= 1; });
    bad("version.bin", "version", [](std::vector<char>& v) { v[4] = 5; });
    bad("config.bin", "impossible config", [](std::vector<char>& v) { v[6 * 4] = 7; });   // C=7
    bad("tiny.bin", "too small", [](std::vector<char>& v) { v.resize(100); });
    std::string e;
    CHECK(!model_file_read_header(dir + "/missing.bin", &got, &e) && e.find("cannot open") != std::string::npos, "missing file");
    // a named pipe with no writer (e.g. -e FIFO): fopen would wait for a writer forever; it is refused
    // before it is opened, as shards and the tokenizer's files are (the alarm ends a hang as a failure)
    const std::string fifo = dir + "/fifo.bin";
    CHECK(mkfifo(fifo.c_str(), 0600) == 0, "create a named pipe");
    alarm(10);
    const bool fifo_refused = !model_file_read_header(fifo, &got, &e);
    alarm(0);
    CHECK(fifo_refused && e.find(fifo) == 0 && e.find("not a regular file") != std::string::npos && e.find('\n') == std::string::npos,
          "a named pipe as the model file: one line, refused, not waited on");
    CHECK(!model_file_read_header(dir, &got, &e) && e == dir + ": is a directory, not a model file", "a directory as the model file");
    GPT2Config other = s; other.num_layers = 3;
    CHECK(!model_file_read_params(path, other, r.data(), &e) && e.find("differs") != std::string::npos, "config mismatch rejected");
    system(("rm -rf " + dir).c_str());
    return check_finish();
}
