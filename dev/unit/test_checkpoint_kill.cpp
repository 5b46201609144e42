// Kill during checkpoint writing (issue #9): a child process writes checkpoints step after step
// (the trainer's own checkpoint_write, 54 MB each, keep 2) and is SIGKILLed at a random moment,
// 20 times; after each kill the parent, like --resume, must find the newest COMPLETE checkpoint,
// read it without error, find exactly the contents written for that step (bit for bit), and find
// it no older than the last step the child reported as written. The next child resumes from there.
// A child killed before it completed a first checkpoint (a short sleep on a loaded machine) leaves
// nothing to resume, which is correct too: --resume then starts from scratch, and so does the test,
// with twice the sleeps from then on (up to 16x), so that a slow machine still gets to the kills
// the test is about; at least one trial must load a checkpoint.
#include <algorithm>
#include <csignal>
#include <cstring>
#include <random>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/checkpoint.h"
#include "dev/unit/check.h"

static GPT2Config config() {  // 4.5 M parameters: a write takes long enough to be hit mid-way
    GPT2Config c;
    c.num_layers = 4; c.channels = 256; c.num_heads = 4; c.max_seq_len = 128; c.vocab_size = 5000; c.padded_vocab_size = 5120;
    return c;
}
static TrainState state_at(int step) {
    TrainState s{};
    s.step = step; s.adam_t = step; s.loss_scale = 1.0f; s.world = 1; s.precision = 2; s.config = config();
    s.loader = DataLoaderState{0, 0, (uint64_t)step * 7, 0, 0};
    return s;
}
// What step `step` writes: every buffer a function of the step, so a mix of two steps shows.
static void fill(std::vector<float>* v, int step, int which) {
    for (size_t i = 0; i < v->size(); i++) (*v)[i] = (float)step * 1000.0f + (float)which + (float)(i % 977) * 1e-3f;
}

// The child: checkpoints from `from` on, forever; reports each finished step through `fd`.
[[noreturn]] static void writer(const std::string& dir, int from, int fd) {
    const size_t n = param_layout(config()).total;
    std::vector<float> master(n), m(n), v(n);
    std::string err;
    for (int step = from;; step++) {
        fill(&master, step, 0); fill(&m, step, 1); fill(&v, step, 2);
        if (!checkpoint_write(dir, state_at(step), master.data(), m.data(), v.data(), 2, &err)) {
            fprintf(stderr, "writer: %s\n", err.c_str());
            _exit(1);
        }
        if (write(fd, &step, sizeof step) != sizeof step) _exit(1);
    }
}

int main() {
    char tmpl[] = "/tmp/ckpt_kill_XXXXXX";
    const std::string dir = std::string(mkdtemp(tmpl)) + "/run";
    const size_t n = param_layout(config()).total;
    std::mt19937 rng(12345);
    int resume_from = 1, last_reported = 0, kills = 0, good = 0, mid_write = 0, loaded = 0, slow = 1;
    for (int trial = 0; trial < 20; trial++) {
        int p[2];
        if (pipe(p) != 0) { perror("pipe"); return 1; }
        const pid_t pid = fork();
        if (pid == 0) { close(p[0]); writer(dir, resume_from, p[1]); }
        close(p[1]);
        usleep(slow * std::uniform_int_distribution<int>(20000, 400000)(rng));   // 20-400 ms: several writes, then die anywhere
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        int s;
        while (read(p[0], &s, sizeof s) == sizeof s) last_reported = s;
        close(p[0]);
        // what --resume does: the newest complete checkpoint, read and checked
        std::string latest, err;
        bool ok = checkpoint_find_latest(dir, &latest, &err);
        if (!ok && last_reported == 0) {  // no checkpoint was ever completed: nothing to resume
            good++;
            slow = std::min(2 * slow, 16);
            continue;
        }
        loaded += ok;
        TrainState st{};
        std::vector<float> master(n), m(n), v(n), e0(n), e1(n), e2(n);
        ok = ok && checkpoint_read(latest, state_at(0), &st, master.data(), m.data(), v.data(), &err);
        if (ok) {
            fill(&e0, st.step, 0); fill(&e1, st.step, 1); fill(&e2, st.step, 2);
            ok = master == e0 && m == e1 && v == e2 && st.loader.block_pos == (uint64_t)st.step * 7;
            if (!ok) err = latest + ": contents differ from what step " + std::to_string(st.step) + " wrote";
        }
        // the kill may land after a checkpoint is complete but before the child reported it
        ok = ok && (st.step == last_reported || st.step == last_reported + 1);
        if (!ok && err.empty()) err = "loaded step " + std::to_string(st.step) + ", last reported " + std::to_string(last_reported);
        mid_write += access((dir + "/step_" + std::string(8 - std::to_string(st.step + 1).size(), '0') + std::to_string(st.step + 1) + ".tmp").c_str(), F_OK) == 0;
        if (!ok) printf("FAIL trial %d: %s\n", trial + 1, err.c_str());
        good += ok;
        resume_from = ok ? st.step + 1 : resume_from;
        last_reported = resume_from - 1;
    }
    check_report(kills == 20, "20 writer processes killed with SIGKILL at random moments");
    check_report(good == 20 && loaded > 0, "after every kill the newest complete checkpoint loads and holds exactly its step's data (" +
                             std::to_string(good) + "/20; " + std::to_string(loaded) + " loaded one, the others came before any was complete; " +
                             std::to_string(mid_write) + " kills left a half-written .tmp behind)");
    std::string rm = "rm -rf " + dir.substr(0, dir.size() - 4);
    if (system(rm.c_str()) != 0) printf("note: could not remove %s\n", dir.c_str());
    return check_finish();
}
