// Unit test of the memory check (llmc/gpt2.cuh, gpt2_memory_check): host code, so it runs on a
// machine without a GPU (built by nvcc only for the header's kernels; no CUDA call is made). What
// the one line says when a run does not fit and what it suggests: the largest -b (one an explicit
// -d divides into whole micro-steps), --recompute 2, --zero 1; on several GPUs the 1 GiB kept for
// NCCL's buffers, which NCCL allocates only at its first collective, after the check.
#include "dev/unit/check.h"
#include "llmc/gpt2.cuh"

static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int main() {
    GPT2Config cfg;
    config_from_descriptor("d12", &cfg);
    const size_t none[2] = {0, 0}, total = (size_t)150 << 30;
    const int T = 128;
    auto need = [&](int B, int world, int zero = 0, int recompute = 0) {
        return gpt2_memory(cfg, B, T, world, zero, recompute).total() + LIBRARY_RESERVE + (world > 1 ? NCCL_RESERVE : 0);
    };
    auto check = [&](int B, int world, size_t free_b, std::string* err, int zero = 0, long long total_batch = 0) {
        err->clear();
        return gpt2_memory_check(cfg, B, T, world, zero, 0, free_b, total, "GPU 0 (test)", err, none, total_batch);
    };
    std::string err;

    // one GPU: exactly what it needs fits, a byte less does not, in one line naming the parts
    CHECK(check(8, 1, need(8, 1), &err) && err.empty(), "1 GPU: fits with exactly its need free");
    CHECK(!check(8, 1, need(8, 1) - 1, &err) && has(err, "the run needs ") && has(err, "on GPU 0 (test)") &&
          has(err, "libraries 0.27") && !has(err, "NCCL") && err.find('\n') == std::string::npos,
          "1 GPU: a byte short: one line, the libraries' 256 MiB, no NCCL");
    CHECK(!check(8, 1, need(6, 1), &err) && has(err, "; -b 6 fits"), "1 GPU: the largest -b that fits is named");
    // -d 2048 (16 rows of 128): -b 6 and 5 fit but do not divide it; -b 4 does
    CHECK(!check(8, 1, need(6, 1), &err, 0, 2048) && has(err, "; -b 4 fits"), "1 GPU, -d 2048: the largest -b that divides -d");

    // several GPUs: 1 GiB more for NCCL's buffers, said in the line
    CHECK(need(8, 2) - gpt2_memory(cfg, 8, T, 2).total() == LIBRARY_RESERVE + ((size_t)1 << 30), "2 GPUs: the reserve is 1 GiB more");
    CHECK(check(8, 2, need(8, 2), &err), "2 GPUs: fits with the reserve free");
    CHECK(!check(8, 2, need(8, 2) - 1, &err) && has(err, "libraries (NCCL's included) 1.34"),
          "2 GPUs: a byte short: the line counts NCCL's 1 GiB among the libraries");
    CHECK(!check(8, 2, gpt2_memory(cfg, 8, T, 1).total() + LIBRARY_RESERVE, &err),
          "2 GPUs: what fits one GPU does not fit a rank without NCCL's reserve");
    // --zero 1 shards the optimizer state: named when it is what would fit
    CHECK(!check(8, 2, need(8, 2, 1), &err) && has(err, "--zero 1 fits"), "2 GPUs: --zero 1 named when it fits");
    return check_finish();
}
