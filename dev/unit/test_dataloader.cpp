// The data loader (llmc/dataloader.h): rank slicing, shard order and wrap-around, bad tokens,
// seeded shuffling of shards and step blocks, the resumable position (state/restore), and the
// validation set's rows.
#include <unistd.h>
#include <cstring>
#include <set>
#include <vector>
#include "llmc/dataloader.h"
#include "dev/unit/check.h"

static std::string dir;
static const int B = 2, T = 8, V = 5000;

static DataLoader open_loader(const char* glob, int rank, int world, int accum, bool shuffle, uint64_t seed) {
    DataLoader d;
    std::string err;
    if (!dataloader_open(&d, dir + "/" + glob, B, T, rank, world, accum, V, shuffle, seed, &err)) {
        printf("FAIL open %s: %s\n", glob, err.c_str());
        exit(1);
    }
    return d;
}
// The next n micro-batches (inputs and targets of each, one after the other).
static std::vector<std::vector<int>> read(DataLoader* d, int n) {
    std::vector<std::vector<int>> out;
    std::string err;
    for (int i = 0; i < n; i++) {
        if (!dataloader_next(d, &err)) { printf("FAIL read: %s\n", err.c_str()); exit(1); }
        out.push_back(d->inputs);
        out.push_back(d->targets);
    }
    return out;
}
// The first input token of each of the next n micro-batches: identifies the window (tokens are s*1000+i).
static std::vector<int> firsts(DataLoader* d, int n) {
    std::vector<int> out;
    const auto r = read(d, n);
    for (size_t i = 0; i < r.size(); i += 2) out.push_back(r[i][0]);
    return out;
}
static bool same(const DataLoaderState& a, const DataLoaderState& b) {
    return a.epoch == b.epoch && a.shard_pos == b.shard_pos && a.block_pos == b.block_pos && a.micro == b.micro;
}

// 1 rank with accumulation 6 and 2 ranks with 3 read the same windows: the single rank's
// micro-step 2j is rank 0's micro-step j, its 2j+1 is rank 1's j.
static bool ranks_equivalent(const char* glob, bool shuffle, int steps) {
    DataLoader one = open_loader(glob, 0, 1, 6, shuffle, 42), r0 = open_loader(glob, 0, 2, 3, shuffle, 42), r1 = open_loader(glob, 1, 2, 3, shuffle, 42);
    bool ok = true;
    for (int s = 0; s < steps; s++) {
        auto a = read(&one, 6), b0 = read(&r0, 3), b1 = read(&r1, 3);
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++)   // inputs, targets
                ok &= a[2 * (2 * j) + k] == b0[2 * j + k] && a[2 * (2 * j + 1) + k] == b1[2 * j + k];
    }
    return ok;
}

// Writes the shards every test reads into a fresh temporary directory (`dir`).
static void write_shards() {
    char t[] = "/tmp/test_dataloader_XXXXXX";
    dir = mkdtemp(t);
    std::string err;
    // d_*: two shards with tokens 0..999 and 1000..1999
    for (int s = 0; s < 2; s++) {
        std::vector<uint16_t> tok(1000);
        for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(s * 1000 + i);
        shard_write(dir + "/d_train_0" + std::to_string(s) + ".bin", tok.data(), tok.size(), &err);
    }
    // e_*: five shards of different sizes (400 + 97 s tokens: s*1000 + i), so 24, 31, 37, 43, 49 blocks of 16
    // and 4, 5, 6, 7, 8 blocks of 96
    for (int s = 0; s < 5; s++) {
        std::vector<uint16_t> tok(400 + 97 * s);
        for (size_t i = 0; i < tok.size(); i++) tok[i] = (uint16_t)(s * 1000 + i);
        shard_write(dir + "/e_" + std::to_string(s) + ".bin", tok.data(), tok.size(), &err);
    }
}

// Checks that 1 rank with accumulation 6 reads what 2 ranks with accumulation 3 read together.
static void test_rank_equivalence() {
    // 1000 tokens hold 10 steps of 96, with a tail the step skips
    CHECK(ranks_equivalent("d_train_*.bin", false, 50), "1 rank x 6 micro-steps == 2 ranks x 3 (50 steps, across shards and epochs)");
    CHECK(ranks_equivalent("e_*.bin", true, 75), "with shuffle: 1 rank x 6 == 2 ranks x 3 (75 steps, 2.5 epochs)");
}

// Checks that without shuffle the loader reads blocks in order, shards in order, and wraps around.
static void test_in_order() {
    std::string err;
    DataLoader d = open_loader("d_train_*.bin", 0, 1, 1, false, 0);
    CHECK_EQ(dataloader_steps_per_epoch(&d), (size_t)124, "steps per epoch (2 x 62)");
    dataloader_next(&d, &err);
    CHECK(d.inputs[0] == 0 && d.targets[0] == 1 && d.inputs[15] == 15 && d.targets[15] == 16, "targets are inputs shifted by one");
    for (int i = 0; i < 61; i++) dataloader_next(&d, &err);   // 62 windows of 16+1 tokens fit in 1000
    CHECK(d.inputs[0] == 976, "last full batch of shard 0");
    CHECK(dataloader_file(&d) == 1, "position moved to shard 1 after its last block");
    dataloader_next(&d, &err);
    CHECK(d.inputs[0] == 1000, "moves to shard 1");
    for (int i = 0; i < 61; i++) dataloader_next(&d, &err);
    DataLoaderState s1 = dataloader_state(&d);
    CHECK(s1.epoch == 1 && s1.shard_pos == 0 && s1.block_pos == 0 && s1.micro == 0, "state after one epoch is (1, 0, 0, 0)");
    dataloader_next(&d, &err);
    CHECK(d.inputs[0] == 0 && dataloader_file(&d) == 0, "wraps around to shard 0");
}

// Checks that shuffle reads every block exactly once per epoch, a shard at a time, in an order
// that changes per epoch and per seed (and not at all without shuffle).
static void test_shuffle() {
    const int e_blocks[5] = {24, 31, 37, 43, 49};   // blocks of 16 in e_0..e_4 (write_shards)
    DataLoader sh = open_loader("e_*.bin", 0, 1, 1, true, 1234);
    const int epoch_steps = 24 + 31 + 37 + 43 + 49;
    CHECK_EQ(dataloader_steps_per_epoch(&sh), (size_t)epoch_steps, "steps per epoch, five uneven shards");
    bool covers = true, aligned = true, whole_shards = true, identity = true;
    std::vector<std::vector<int>> epochs;
    for (int e = 0; e < 3; e++) {
        std::vector<int> f = firsts(&sh, epoch_steps);
        std::set<int> blocks(f.begin(), f.end());
        covers &= blocks.size() == (size_t)epoch_steps;
        int switches = 0;
        for (int i = 0; i < epoch_steps; i++) {
            const int s = f[i] / 1000, off = f[i] % 1000;
            aligned &= off % 16 == 0 && off / 16 < e_blocks[s];
            if (i > 0) switches += f[i] / 1000 != f[i - 1] / 1000;
            if (i > 0) identity &= f[i] > f[i - 1];
        }
        whole_shards &= switches == 4;
        epochs.push_back(f);
        covers &= same(dataloader_state(&sh), DataLoaderState{(uint64_t)e + 1, 0, 0, 0, 0});
    }
    CHECK(covers && aligned, "shuffle: each epoch reads every step block exactly once");
    CHECK(whole_shards, "shuffle: an epoch reads each shard's blocks together (a shard at a time)");
    CHECK(!identity, "shuffle changes the order");
    CHECK(epochs[0] != epochs[1] && epochs[1] != epochs[2], "each epoch has its own order");
    DataLoader plain = open_loader("e_*.bin", 0, 1, 1, false, 1234);
    std::vector<int> pf = firsts(&plain, epoch_steps);
    bool in_order = true;
    for (int i = 1; i < epoch_steps; i++) in_order &= pf[i] > pf[i - 1];
    CHECK(in_order, "no shuffle: identity order, whatever the seed");
    DataLoader same_seed = open_loader("e_*.bin", 0, 1, 1, true, 1234), other_seed = open_loader("e_*.bin", 0, 1, 1, true, 1235);
    std::vector<int> a = firsts(&same_seed, 2 * epoch_steps), b = firsts(&other_seed, 2 * epoch_steps);
    std::vector<int> first_two(epochs[0]);
    first_two.insert(first_two.end(), epochs[1].begin(), epochs[1].end());
    CHECK(a == first_two, "same seed, same order");
    CHECK(a != b, "different seeds, different orders");
}

// Checks that state and restore resume exactly where a run stopped, and that reset goes back to the start.
static void test_state_and_restore() {
    // Stopping after k micro-batches and restoring in a fresh loader reads exactly what an
    // uninterrupted run reads, for every k over two epochs (mid-step, at shard and epoch
    // boundaries). Rank 1 of 2 with accumulation 3: 30 steps = 90 micro-batches an epoch.
    std::string err;
    DataLoader full = open_loader("e_*.bin", 1, 2, 3, true, 7);
    std::vector<DataLoaderState> states;
    std::vector<std::vector<int>> all;
    for (int i = 0; i < 300; i++) {
        states.push_back(dataloader_state(&full));
        auto r = read(&full, 1);
        all.push_back(r[0]); all.push_back(r[1]);
    }
    bool resumes = true, state_kept = true;
    for (int k = 0; k < 200; k++) {
        DataLoader again = open_loader("e_*.bin", 1, 2, 3, true, 7);
        read(&again, k % 7);   // somewhere else first: restore must not depend on it
        resumes &= dataloader_restore(&again, states[k], &err);
        state_kept &= same(dataloader_state(&again), states[k]);
        auto r = read(&again, 100);
        resumes &= std::equal(r.begin(), r.end(), all.begin() + 2 * k);
    }
    CHECK(states[90].epoch == 1 && states[89].epoch == 0 && states[89].micro == 2, "epoch boundary after 90 micro-batches");
    CHECK(resumes, "restore after k micro-batches continues identically (k = 0..199, across epochs)");
    CHECK(state_kept, "dataloader_state returns what was restored");
    DataLoader rs = open_loader("e_*.bin", 1, 2, 3, true, 7);
    read(&rs, 123);
    dataloader_reset(&rs);
    auto r = read(&rs, 150);
    CHECK(same(states[0], DataLoaderState{0, 0, 0, 0, 0}) && std::equal(r.begin(), r.end(), all.begin()), "reset goes back to epoch 0, start");
}

// One check: restoring `st` fails with one line containing `expect` and leaves the loader at the start.
static void check_restore_rejects(DataLoaderState st, const char* expect, const char* name) {
    DataLoader x = open_loader("e_*.bin", 1, 2, 3, true, 7);
    std::string e;
    const bool ok = dataloader_restore(&x, st, &e);
    check_report(!ok && e.find("data loader state") == 0 && e.find(expect) != std::string::npos && e.find('\n') == std::string::npos &&
                 same(dataloader_state(&x), DataLoaderState{}), name, "got '" + e + "'");
}

// Checks that restore rejects positions that do not exist here, with one line.
static void test_restore_rejects() {
    check_restore_rejects({0, 5, 0, 0, 0}, "shard out of range", "restore rejects shard 5 of 5");
    check_restore_rejects({0, 0, 0, 3, 0}, "micro-step out of range", "restore rejects micro-step 3 with accumulation 3");
    check_restore_rejects({0, 0, 0, -1, 0}, "micro-step out of range", "restore rejects a negative micro-step");
    check_restore_rejects({3, 1, 8, 0, 0}, "block out of range", "restore rejects block 8 (no shard has more than 8 blocks of 96)");
}

// Checks that opening fails with a clear error for an empty glob and for shards smaller than a step.
static void test_open_errors() {
    std::string err;
    DataLoader e;
    CHECK(!dataloader_open(&e, dir + "/nothing_*.bin", B, T, 0, 1, 1, V, false, 0, &err) && err.find("no file matches") != std::string::npos, "empty glob");
    CHECK(!dataloader_open(&e, dir + "/d_train_*.bin", 64, 16, 0, 1, 1, V, false, 0, &err) && err.find("fewer than one step reads: B*T*GPUs*accumulation + 1 = 64*16*1*1 + 1 = 1025 (") != std::string::npos, "shard smaller than a step");
}

// The rows the evaluation loop of llmc/evaluate.cuh reads on rank `rank` of `world` with batches of
// `b` rows over the first `batches` batches (0: one pass), each as its first input token (tokens
// are s*1000 + i: it names the shard and the position); false if any row's tokens are not the
// T consecutive tokens there and their successors. The loop is validation_rank_sums', as there.
static bool validation_rows_read(ValidationSet* v, int rank, int world, size_t b, size_t batches, std::vector<int>* firsts) {
    std::string err;
    const size_t rows = std::min((batches ? batches : validation_batches(v, (int)b)) * b, v->rows);
    bool ok = true;
    validation_rank_sums(rows, b, rank, world, [&](size_t first, size_t n) {
        if (!ok) return 0.0f;
        if (!validation_read(v, first, n, &err) || v->inputs.size() != n * T) { printf("FAIL validation_read: %s\n", err.c_str()); ok = false; return 0.0f; }
        for (size_t r = 0; r < n && ok; r++) {
            const int* in = &v->inputs[r * T];
            const int* tg = &v->targets[r * T];
            if ((in[0] % 1000) % T != 0) ok = false;   // rows start at multiples of T within their shard
            for (int t = 0; t < T; t++)
                if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) ok = false;
            firsts->push_back(in[0]);
        }
        return 0.0f;
    });
    return ok;
}

// The validation loss on N GPUs is the 1-GPU value bit for bit: each batch's fp32 sum reaches the
// mean unrounded (its own slot; the other ranks add 0 there, in fp32 as NCCL's sum does) and the
// batches are added in their order. The batch sums here are those of 37 batches of B=4 rows of
// T=1024 tokens (last batch 1 row) at a loss near 10.8, with varied last bits. The way before
// (each rank's batches added in double, rounded to fp32, the ranks' values added in fp32) is
// computed beside it: on these sums it moves the mean on some GPU counts, which is what this fixes.
static void test_validation_mean_any_gpu_count() {
    const size_t rows = 145, b = 4;
    const int t = 1024;
    std::vector<float> batch_loss;   // by batch index
    uint64_t x = 12345;
    for (size_t k = 0; k * b < rows; k++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const size_t n = std::min(b, rows - k * b);
        batch_loss.push_back((float)(n * t) * (10.8f + (float)((x >> 33) % 100000) * 1e-6f));
    }
    auto fake_loss = [&](size_t first, size_t n) { return first % b == 0 && n == std::min(b, rows - first) ? batch_loss[first / b] : -1.0f; };
    const std::vector<float> one = validation_rank_sums(rows, b, 0, 1, fake_loss);
    const float mean1 = (float)validation_mean_loss(one, rows, t);
    bool same = one == batch_loss, old_differs = false;
    for (int world = 2; world <= 8; world++) {
        std::vector<float> total(one.size(), 0.0f);   // the sum over the ranks, in fp32, rank by rank
        float old_total = 0.0f;
        for (int rank = 0; rank < world; rank++) {
            const std::vector<float> mine = validation_rank_sums(rows, b, rank, world, fake_loss);
            double old_sum = 0;
            for (size_t k = 0; k < mine.size(); k++) { total[k] += mine[k]; old_sum += mine[k]; }
            old_total += (float)old_sum;
        }
        const float mean = (float)validation_mean_loss(total, rows, t);
        same &= total == one && memcmp(&mean, &mean1, sizeof mean) == 0;
        old_differs |= (float)(old_total / ((double)rows * t)) != mean1;
    }
    CHECK(same, "validation loss: the same bits on 1 to 8 GPUs (every batch's sum in its own slot, added in batch order)");
    CHECK(old_differs, "(the test's sums are ones where fp32 per-rank partials moved the mean with the GPU count)");
}

// The validation set: every row of T+1 tokens of every shard, exactly once, whatever the GPU count
// and the batch (unlike the training stream's step blocks, whose skipped tail depends on both).
static void test_validation_set() {
    std::string err;
    ValidationSet v;
    CHECK(validation_open(&v, dir + "/e_*.bin", T, V, &err) && v.rows == 49 + 62 + 74 + 86 + 98 && v.file_rows[4] == 98,
          "rows: (400 + 97 s - 1) / 8 per shard = 49, 62, 74, 86, 98");
    std::set<int> all;   // every row, by its first token
    for (int s = 0; s < 5; s++)
        for (size_t k = 0; k < v.file_rows[s]; k++) all.insert(s * 1000 + (int)k * T);
    bool same_everywhere = true;
    for (int world : {1, 2, 3, 4, 7})
        for (size_t b : {1, 5, 64, 400}) {
            std::vector<int> got;
            for (int rank = 0; rank < world; rank++) same_everywhere &= validation_rows_read(&v, rank, world, b, 0, &got);
            same_everywhere &= got.size() == all.size() && std::set<int>(got.begin(), got.end()) == all;
        }
    CHECK(same_everywhere, "one pass reads every row once, on 1, 2, 3, 4 and 7 GPUs, at batches of 1, 5, 64 and 400 rows");
    // --val-batches 3 at 5 rows a batch: rows 0-14 on any GPU count
    bool first_rows = true;
    for (int world : {1, 2, 4}) {
        std::vector<int> got;
        for (int rank = 0; rank < world; rank++) first_rows &= validation_rows_read(&v, rank, world, 5, 3, &got);
        std::sort(got.begin(), got.end());
        first_rows &= got.size() == 15 && got.front() == 0 && got.back() == 14 * T;
    }
    CHECK(first_rows, "--val-batches 3 at B=5: the first 15 rows, on 1, 2 and 4 GPUs");
    CHECK(validation_read(&v, 45, 10, &err) && v.inputs[3 * T] == 48 * T && v.inputs[4 * T] == 1000 && v.targets[4 * T - 1] == 48 * T + T,
          "a batch that spans two shards: rows 45-48 of the first, then the second's from its start");
    CHECK(!validation_read(&v, v.rows - 2, 3, &err) && err.find("beyond the 369 rows") != std::string::npos, "reading past the last row: refused");
    ValidationSet small;
    CHECK(!validation_open(&small, dir + "/e_0.bin", 500, V, &err) &&
          err.find("e_0.bin: no shard holds one row of T + 1 = 501 tokens (the largest holds 400)") != std::string::npos,
          "a row longer than every shard: one line naming the set and the sizes");
    CHECK(!validation_open(&small, dir + "/none_*.bin", T, V, &err) && err.find("no file matches") != std::string::npos, "an empty glob");
    ValidationSet low;   // a vocabulary of 1500: shard 2 (tokens 2000+) holds ids beyond it
    CHECK(validation_open(&low, dir + "/e_*.bin", T, 1500, &err) && validation_read(&low, 0, 49, &err) && !validation_read(&low, 40, 200, &err) &&
          err.find("e_2.bin: token 2000 at position 0 is not below the vocabulary size 1500") != std::string::npos,
          "a token id past the vocabulary: the file and position named");
}

// Checks that a token id past the vocabulary and a shard with a bad header each give one error naming the file.
static void test_bad_data() {
    std::string err;
    DataLoader v;
    dataloader_open(&v, dir + "/d_train_*.bin", B, T, 0, 1, 1, V / 10, false, 0, &err);
    bool failed_ok = false;
    for (int i = 0; i < 40 && !failed_ok; i++) failed_ok = !dataloader_next(&v, &err);
    CHECK(failed_ok && err.find("d_train_00.bin: token 500 at position 500 is not below the vocabulary size 500") != std::string::npos,
          "token id >= vocab names file and position");
    std::vector<char> junk(100, 'x');
    FILE* f = fopen((dir + "/bad_0.bin").c_str(), "wb"); fwrite(junk.data(), 1, junk.size(), f); fclose(f);
    DataLoader e;
    CHECK(!dataloader_open(&e, dir + "/bad_*.bin", B, T, 0, 1, 1, V, true, 0, &err) && err.find("bad_0.bin: ") != std::string::npos &&
          err.find('\n') == std::string::npos, "bad shard: one line naming the file");
}

// Checks that random_tokens draws input and target in turn (the order --bench and GEMM tuning always used).
static void test_random_tokens() {
    std::mt19937 a(123), b(123);
    std::vector<int> in(1000), tg(1000);
    random_tokens(&a, 50257, &in, &tg);
    bool same = true, in_range = true;
    for (size_t k = 0; k < in.size(); k++) {
        const int x = (int)(b() % 50257), y = (int)(b() % 50257);
        same &= in[k] == x && tg[k] == y;
        in_range &= in[k] >= 0 && in[k] < 50257 && tg[k] >= 0 && tg[k] < 50257;
    }
    CHECK(same && in_range, "random_tokens: inputs and targets drawn in turn, in [0, vocab)");
}

int main() {
    write_shards();
    test_rank_equivalence();
    test_in_order();
    test_shuffle();
    test_state_and_restore();
    test_restore_rejects();
    test_open_errors();
    test_validation_set();
    test_validation_mean_any_gpu_count();
    test_bad_data();
    if (system(("rm -rf " + dir).c_str()) != 0) printf("note: could not remove %s\n", dir.c_str());
    test_random_tokens();   // needs no files
    return check_finish();
}
