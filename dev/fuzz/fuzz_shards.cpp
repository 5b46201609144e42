// Token shards (llmc/shards.h) and the data loader (llmc/dataloader.h): bytes 0-7 pick B, T, GPUs, rank, accumulation,
// vocabulary, shuffle, a token range and a position; the rest is the shard, read by shard_read_header/_tokens,
// validation_open/_read, dataloader_open, dataloader_restore and dataloader_next. Seeds: shards of 0, 40 and
// 300 tokens (shard_write).
#include "llmc/dataloader.h"
#include "dev/fuzz/fuzz_common.h"

static const size_t PREFIX = 8;

FUZZ_SEEDS(dir) {
    const std::string tmp = dir + "/shard.tmpbin";
    int i = 0;
    for (size_t n : {0, 40, 300}) {
        std::vector<uint16_t> t(n);
        for (size_t k = 0; k < n; k++) t[k] = (uint16_t)(k * 7 % 50);
        std::string err;
        if (!shard_write(tmp, t.data(), n, &err)) seed_fail(err);
        const std::string body = read_all(tmp);
        for (const char* prefix : {"\x01\x03\x40\x00\x07\x00\x10\x80", "\x13\x87\x32\x00\xff\x12\x34\x01"}) {
            write_file(dir + "/shard_" + std::to_string(i++), std::string(prefix, PREFIX) + body);
        }
    }
    remove(tmp.c_str());
}

static void one_line(const std::string& err, const std::string& path) {
    fuzz_note(err);
    if (!fuzz_readable_line(err) || err.find(path) == std::string::npos) abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/shard.bin";
    if (size < PREFIX) return 0;
    const uint8_t* c = data;
    write_file(path, data + PREFIX, size - PREFIX);
    std::string err;
    size_t n = 0;
    if (!shard_read_header(path, &n, &err)) { one_line(err, path); return 0; }
    if (n != (size - PREFIX - SHARD_HEADER_BYTES) / 2) abort();
    // a range that fits, then one that runs past the end
    const size_t count = std::min<size_t>(n, c[6] * 16u), start = (n - count) * c[7] / 255;
    std::vector<uint16_t> out(count + 1);
    if (!shard_read_tokens(path, start, count, out.data(), &err)) abort();
    if (shard_read_tokens(path, n - count, count + 1, out.data(), &err)) abort();
    one_line(err, path);

    const int B = 1 + c[0] % 4, T = 1 + (c[0] >> 2) % 8, world = 1 + (c[1] & 1), rank = (c[1] >> 1) % world,
              accum = 1 + (c[1] >> 2) % 3, vocab = 1 + (c[2] | c[3] << 8);
    const bool shuffle = c[1] & 0x80;
    ValidationSet v;
    if (validation_open(&v, path, T, vocab, &err)) {   // every row, one batch of B at a time: tokens in range, or one line
        if (v.rows != (n - 1) / T) abort();
        for (size_t first = 0; first < v.rows; first += B) {
            const size_t rows = std::min<size_t>(B, v.rows - first);
            if (!validation_read(&v, first, rows, &err)) { one_line(err, path); break; }
            for (size_t k = 0; k < v.inputs.size(); k++)
                if (v.inputs[k] < 0 || v.inputs[k] >= vocab || v.targets[k] < 0 || v.targets[k] >= vocab) abort();
        }
    } else {
        one_line(err, path);
    }
    DataLoader dl;
    if (!dataloader_open(&dl, path, B, T, rank, world, accum, vocab, shuffle, c[4], &err)) { one_line(err, path); return 0; }
    // a position to restore: in range or not (c[5] picks the fields)
    DataLoaderState s{};
    s.epoch = c[5] & 3; s.shard_pos = (c[5] >> 2) & 1; s.block_pos = (c[5] >> 3) % 8; s.micro = (int8_t)c[4] % 4;
    const bool restored = dataloader_restore(&dl, s, &err);
    if (!restored) fuzz_note(err);
    if (!restored && !fuzz_readable_line(err)) abort();
    for (int i = 0; i < 6; i++) {
        if (!dataloader_next(&dl, &err)) { one_line(err, path); break; }
        for (size_t k = 0; k < dl.inputs.size(); k++)
            if (dl.inputs[k] < 0 || dl.inputs[k] >= vocab || dl.targets[k] < 0 || dl.targets[k] >= vocab) abort();
    }
    return 0;
}
