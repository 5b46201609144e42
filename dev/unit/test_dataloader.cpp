// The data loader (llmc/dataloader.h): rank slicing, shard order and wrap-around, bad tokens.
#include <unistd.h>
#include <set>
#include <vector>
#include "llmc/dataloader.h"
#include "dev/unit/check.h"

int main() {
    char t[] = "/tmp/test_dataloader_XXXXXX";
    const std::string dir = mkdtemp(t);
    std::string err;
    // two shards with tokens 0..999 and 1000..1999 (mod vocab 5000)
    for (int s = 0; s < 2; s++) {
        std::vector<uint16_t> tok(1000);
        for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(s * 1000 + i);
        shard_write(dir + "/d_train_0" + std::to_string(s) + ".bin", tok.data(), tok.size(), &err);
    }
    const int B = 2, T = 8;
    // one rank with accumulation 6 and two ranks with 3 see the same tokens in every step, also
    // where a shard ends (1000 tokens hold 10 steps of 96, with a tail the step skips)
    DataLoader one, r0, r1;
    CHECK(dataloader_open(&one, dir + "/d_train_*.bin", B, T, 0, 1, 6, 5000, &err), "open, one rank");
    CHECK(dataloader_open(&r0, dir + "/d_train_*.bin", B, T, 0, 2, 3, 5000, &err) &&
          dataloader_open(&r1, dir + "/d_train_*.bin", B, T, 1, 2, 3, 5000, &err), "open, two ranks");
    bool same = true;
    for (int step = 0; step < 50; step++) {
        std::multiset<int> a, b;
        for (int i = 0; i < 6; i++) { dataloader_next(&one, &err); a.insert(one.inputs.begin(), one.inputs.end()); }
        for (int i = 0; i < 3; i++) {
            dataloader_next(&r0, &err); b.insert(r0.inputs.begin(), r0.inputs.end());
            dataloader_next(&r1, &err); b.insert(r1.inputs.begin(), r1.inputs.end());
        }
        same &= a == b;
    }
    CHECK(same, "1 rank x 6 micro-steps == 2 ranks x 3 (50 steps, across shards and epochs)");
    DataLoader d;
    dataloader_open(&d, dir + "/d_train_*.bin", B, T, 0, 1, 1, 5000, &err);
    dataloader_next(&d, &err);
    CHECK(d.inputs[0] == 0 && d.targets[0] == 1 && d.inputs[15] == 15 && d.targets[15] == 16, "targets are inputs shifted by one");
    for (int i = 0; i < 61; i++) dataloader_next(&d, &err);   // 62 windows of 16+1 tokens fit in 1000
    CHECK(d.inputs[0] == 976 && d.shard == 0, "last full batch of shard 0");
    dataloader_next(&d, &err);
    CHECK(d.inputs[0] == 1000 && d.shard == 1, "moves to shard 1");
    for (int i = 0; i < 61; i++) dataloader_next(&d, &err);
    dataloader_next(&d, &err);
    CHECK(d.inputs[0] == 0 && d.shard == 0, "wraps around to shard 0");
    // errors
    DataLoader e;
    CHECK(!dataloader_open(&e, dir + "/nothing_*.bin", B, T, 0, 1, 1, 5000, &err) && err.find("no file matches") != std::string::npos, "empty glob");
    CHECK(!dataloader_open(&e, dir + "/d_train_*.bin", 64, 16, 0, 1, 1, 5000, &err) && err.find("fewer than one optimizer step") != std::string::npos, "shard smaller than a step");
    DataLoader v;
    dataloader_open(&v, dir + "/d_train_*.bin", B, T, 0, 1, 1, 5000 / 10, &err);
    bool failed_ok = false;
    for (int i = 0; i < 40 && !failed_ok; i++) failed_ok = !dataloader_next(&v, &err);
    CHECK(failed_ok && err.find("d_train_00.bin: token 500 at position 500 is not below the vocabulary size 500") != std::string::npos,
          "token id >= vocab names file and position");
    system(("rm -rf " + dir).c_str());
    return check_finish();
}
