// The NCCL id exchange without MPI (llmc/rendezvous.h), ranks as threads of one process: over TCP
// and through a file every rank gets rank 0's bytes; a port another program holds, a server that
// accepts and never sends, and a file that never appears each end in one error line within the
// deadline instead of a hang.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <array>
#include <chrono>
#include <thread>
#include <vector>
#include "llmc/rendezvous.h"
#include "dev/unit/check.h"

using Id = std::array<char, 128>;   // the size of an ncclUniqueId

// A port nobody listens on now (the kernel's pick for an ephemeral bind).
static int free_port() {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = 0;
    socklen_t len = sizeof a;
    bind(s, (sockaddr*)&a, sizeof a);
    getsockname(s, (sockaddr*)&a, &len);
    close(s);
    return ntohs(a.sin_port);
}
// A listening socket on `port` that accepts nothing and sends nothing (the kernel completes the
// connections): what a torchrun store or any other program on MASTER_PORT looks like to a peer.
static int silent_listener(int port) {
    const int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_ANY); a.sin_port = htons(port);
    if (bind(s, (sockaddr*)&a, sizeof a) != 0 || listen(s, 16) != 0) { close(s); return -1; }
    return s;
}
static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static const int world = 4;   // ranks in the multi-rank tests

// Checks over TCP that peers that start before rank 0 retry until it listens, and all get its id.
static void test_tcp_peers_before_rank0(const Id& id0) {
    const int port = free_port();
    std::vector<Id> got(world);
    std::vector<int> ok(world, 0);
    std::vector<std::string> errs(world);
    std::vector<std::thread> ranks;
    for (int r = 1; r < world; r++)
        ranks.emplace_back([&, r] { ok[r] = rendezvous_tcp(r, world, got[r].data(), got[r].size(), "127.0.0.1", port, 20, &errs[r]); });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    got[0] = id0;
    ok[0] = rendezvous_tcp(0, world, got[0].data(), got[0].size(), "127.0.0.1", port, 20, &errs[0]);
    for (auto& t : ranks) t.join();
    bool all = true;
    for (int r = 0; r < world; r++) all &= ok[r] && got[r] == id0;
    CHECK(all, "tcp: 3 peers started before rank 0 all get its id");
}

// Checks over TCP that connections which send nothing are not counted as served ranks.
static void test_tcp_silent_probes(const Id& id0) {
    // Two probes that connect first and send nothing hold rank 0 for two read timeouts (4 s);
    // the peers queued behind them time out after 2 s, and rank 0 later finds their connections
    // dead: none of that counts as a served rank, the peers retry, and every one gets the id
    const int port = free_port();
    std::vector<Id> got(world);
    std::vector<int> ok(world, 0);
    std::vector<std::string> errs(world);
    got[0] = id0;
    std::thread server([&] { ok[0] = rendezvous_tcp(0, world, got[0].data(), got[0].size(), "127.0.0.1", port, 20, &errs[0]); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sockaddr_in a{};
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = htons(port);
    const int probe = socket(AF_INET, SOCK_STREAM, 0), probe2 = socket(AF_INET, SOCK_STREAM, 0), probe3 = socket(AF_INET, SOCK_STREAM, 0);
    const char* http = "GET / HTTP/1.0\r\n\r\n";   // and one that sends another protocol's bytes: not a rank, nor a world size
    const bool probed = connect(probe, (sockaddr*)&a, sizeof a) == 0 && connect(probe2, (sockaddr*)&a, sizeof a) == 0 &&
                        connect(probe3, (sockaddr*)&a, sizeof a) == 0 && send(probe3, http, strlen(http), 0) == (ssize_t)strlen(http);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::vector<std::thread> ranks;
    for (int r = 1; r < world; r++)
        ranks.emplace_back([&, r] { ok[r] = rendezvous_tcp(r, world, got[r].data(), got[r].size(), "127.0.0.1", port, 20, &errs[r]); });
    for (auto& t : ranks) t.join();
    server.join();
    close(probe);
    close(probe2);
    close(probe3);
    bool all = probed;
    for (int r = 0; r < world; r++) all &= ok[r] && got[r] == id0;
    CHECK(all, "tcp: two silent probes and an HTTP request ahead of the peers are not counted, and every peer still gets the id");
}

// Checks over TCP that a peer slow to acknowledge (2.5 s, longer than a read timeout) is still counted.
static void test_tcp_slow_ack(const Id& id0) {
    const int port = free_port();
    Id id = id0, got{};
    std::string err;
    bool ok0 = false, ok1 = false;
    std::thread server([&] { ok0 = rendezvous_tcp(0, 2, id.data(), id.size(), "127.0.0.1", port, 15, &err); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int s1 = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = htons(port);
    const int32_t hello[3] = {RENDEZVOUS_MAGIC, 1, 2};   // rank 1 of 2
    int32_t answer[2] = {0, 0};
    if (connect(s1, (sockaddr*)&a, sizeof a) == 0 && send(s1, hello, sizeof hello, 0) == (ssize_t)sizeof hello &&
        recv(s1, answer, sizeof answer, MSG_WAITALL) == (ssize_t)sizeof answer && answer[0] == RENDEZVOUS_MAGIC && answer[1] == 2) {
        size_t n = 0;
        while (n < got.size()) { const ssize_t k = read(s1, got.data() + n, got.size() - n); if (k <= 0) break; n += (size_t)k; }
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        const char ack = 1;
        ok1 = n == got.size() && got == id0 && send(s1, &ack, 1, MSG_NOSIGNAL) == 1;
    }
    server.join();
    close(s1);
    CHECK(ok0 && ok1, "tcp: a peer that acknowledges after 2.5 s is counted (rank 0 and the peer agree)");
}

// Checks over TCP that ranks started with different world sizes (WORLD_SIZE differs between the
// processes, or a rank of another run on this port) are refused in one line each, at once: the id
// alone would let them on to ncclCommInitRank, whose bootstrap waits forever on a rank count that
// does not match (until --nccl-timeout, which blames a dead peer).
static void test_tcp_world_mismatch(const Id& id0) {
    const int port = free_port();
    Id id = id0, got{};
    std::string err0, err1;
    bool ok0 = true, ok1 = true;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread server([&] { ok0 = rendezvous_tcp(0, 2, id.data(), id.size(), "127.0.0.1", port, 10, &err0); });
    ok1 = rendezvous_tcp(1, 3, got.data(), got.size(), "127.0.0.1", port, 10, &err1);
    server.join();
    const double s = seconds_since(t0);
    check_report(!ok0 && !ok1 && s < 5 && err0.find("world size of 3") != std::string::npos && err0.find("2") != std::string::npos &&
                     err1.find("world size of 2") != std::string::npos && err0.find('\n') == std::string::npos &&
                     err1.find('\n') == std::string::npos,
                 "tcp: a rank with another world size than rank 0's: both refuse at once, in one line",
                 "after " + std::to_string(s) + " s: rank 0 " + (ok0 ? "ok" : "'" + err0 + "'") + ", rank 1 " + (ok1 ? "ok" : "'" + err1 + "'"));
}

// Checks over TCP that two processes with the same rank (RANK alike on two of them) stop rank 0 at
// once with one line naming the rank: a rank counted as served has acknowledged the id, so it never
// connects again. Before, the second one got the id too, and NCCL's bootstrap, which refuses a rank
// that checked in twice, left every rank waiting until --nccl-timeout.
static void test_tcp_duplicate_rank(const Id& id0) {
    const int port = free_port();
    Id id = id0, got1{}, got2{};
    std::string err0, err1, err2;
    bool ok0 = true, ok1 = false;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread server([&] { ok0 = rendezvous_tcp(0, 3, id.data(), id.size(), "127.0.0.1", port, 10, &err0); });
    ok1 = rendezvous_tcp(1, 3, got1.data(), got1.size(), "127.0.0.1", port, 10, &err1);
    const bool ok2 = rendezvous_tcp(1, 3, got2.data(), got2.size(), "127.0.0.1", port, 3, &err2);
    server.join();
    const double s = seconds_since(t0);
    check_report(ok1 && !ok2 && !ok0 && s < 8 && err0.find("rank 1 connected twice") != std::string::npos && err0.find('\n') == std::string::npos &&
                     err2.find("gave rank 1's id to another process already") != std::string::npos && err2.find('\n') == std::string::npos,
                 "tcp: two processes with rank 1: rank 0 stops at once, in one line naming the rank; the second gets no id and is told why",
                 "after " + std::to_string(s) + " s: rank 0 " + (ok0 ? "ok" : "'" + err0 + "'") + ", second rank 1 " + (ok2 ? "ok" : "'" + err2 + "'"));
}

// Checks over TCP that a program already on the port makes rank 0 say so in one line.
static void test_tcp_port_in_use(const Id& id0) {
    const int port = free_port(), holder = silent_listener(port);
    Id id = id0;
    std::string err;
    const bool ok = rendezvous_tcp(0, 2, id.data(), id.size(), "127.0.0.1", port, 5, &err);
    check_report(!ok && err.find("cannot listen on port " + std::to_string(port)) != std::string::npos &&
                 err.find("MASTER_PORT") != std::string::npos && err.find('\n') == std::string::npos,
                 "tcp: a port in use is one error line naming it", "got '" + err + "'");
    close(holder);
}

// Checks over TCP that a peer connected to a server that never sends gives up at the deadline (no hang).
static void test_tcp_silent_server() {
    const int port = free_port(), holder = silent_listener(port);
    Id id{};
    std::string err;
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = rendezvous_tcp(1, 2, id.data(), id.size(), "127.0.0.1", port, 3, &err);
    const double s = seconds_since(t0);
    check_report(!ok && s < 8 && err.find("no NCCL id from 127.0.0.1:" + std::to_string(port) + " within 3 s") != std::string::npos,
                 "tcp: a silent server ends in an error at the deadline", "after " + std::to_string(s) + " s: '" + err + "'");
    close(holder);
}

// A listener whose accept queue is full: the kernel drops further connection requests, as a
// firewall or a wrong MASTER_ADDR would. A plain connect() waits minutes for the kernel's retries;
// the rendezvous still ends at its deadline.
static void test_tcp_dropped_connects() {
    const int port = free_port(), s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); a.sin_port = htons(port);
    CHECK(bind(s, (sockaddr*)&a, sizeof a) == 0 && listen(s, 0) == 0, "a listener with an accept queue of one");
    std::vector<int> fillers;   // connections never accepted: the queue full
    for (int i = 0; i < 3; i++) {
        fillers.push_back(socket(AF_INET, SOCK_STREAM, 0));
        connect_within(fillers.back(), (sockaddr*)&a, sizeof a, 300);
    }
    Id id{};
    std::string err;
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = rendezvous_tcp(1, 2, id.data(), id.size(), "127.0.0.1", port, 2, &err);
    const double secs = seconds_since(t0);
    check_report(!ok && secs < 5 && err.find("within 2 s") != std::string::npos,
                 "tcp: connection requests dropped: an error at the deadline, not after the kernel's retries",
                 "after " + std::to_string(secs) + " s: '" + err + "'");
    for (int f : fillers) close(f);
    close(s);
}

// Checks the rendezvous port: torchrun's store holds MASTER_PORT, so the id goes over the port above it.
static void test_rendezvous_port() {
    setenv("MASTER_PORT", "31000", 1);
    unsetenv("TORCHELASTIC_RUN_ID");
    int plain = 0, port = 0;
    std::string err;
    CHECK(rendezvous_port(&plain, &err), "MASTER_PORT=31000 read");
    setenv("TORCHELASTIC_RUN_ID", "job", 1);
    CHECK(plain == 31000 && rendezvous_port(&port, &err) && port == 31001, "MASTER_PORT, and MASTER_PORT+1 under torchrun");
    setenv("MASTER_PORT", "65535", 1);
    CHECK(!rendezvous_port(&port, &err) && err.find("not a TCP port (1..65534; under torchrun") != std::string::npos,
          "under torchrun MASTER_PORT=65535 leaves no port above it");
    unsetenv("TORCHELASTIC_RUN_ID");
    for (const char* bad : {"abc", "0", "65536", "80x", "-1"}) {
        setenv("MASTER_PORT", bad, 1);
        CHECK(!rendezvous_port(&port, &err) && err == std::string("environment variable MASTER_PORT='") + bad + "' is not a TCP port (1..65535)",
              (std::string("MASTER_PORT=") + bad + ": one line").c_str());
    }
    unsetenv("MASTER_PORT");
    CHECK(rendezvous_port(&port, &err) && port == 29500, "29500 without MASTER_PORT");
}

// Checks the file rendezvous: peers wait for it; rank 0 removes it when done, so a rerun on the
// path waits for a new one.
static void test_file(const Id& id0) {
    const std::string path = "/tmp/llmc_test_rendezvous_" + std::to_string(getpid()) + ".id";
    unlink(path.c_str());
    std::vector<Id> got(world);
    std::vector<int> ok(world, 0);
    std::vector<std::string> errs(world);
    std::vector<std::thread> ranks;
    for (int r = 1; r < world; r++)
        ranks.emplace_back([&, r] { ok[r] = rendezvous_file(r, world, got[r].data(), got[r].size(), path, 20, &errs[r]); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    got[0] = id0;
    ok[0] = rendezvous_file(0, world, got[0].data(), got[0].size(), path, 20, &errs[0]);
    for (auto& t : ranks) t.join();
    bool all = true;
    for (int r = 0; r < world; r++) all &= ok[r] && got[r] == id0;
    CHECK(all, "file: 3 peers started before rank 0 all get its id");
    rendezvous_file_done(1, path);
    CHECK(access(path.c_str(), F_OK) == 0, "file: only rank 0 removes it");
    rendezvous_file_done(0, path);
    CHECK(access(path.c_str(), F_OK) != 0 && access((path + ".tmp").c_str(), F_OK) != 0, "file: removed once the communicator exists");
    Id id{};
    std::string err;
    const bool late = rendezvous_file(1, world, id.data(), id.size(), path, 1, &err);
    CHECK(!late && err == "rendezvous: " + path + " did not appear within 1 s (rank 0 not started, or it stopped on an error before the rendezvous: see its output)", "file: a missing file ends in one error line");
}

// Checks the file rendezvous with world sizes that differ (a typo in one process's WORLD_SIZE, or a
// file a run of another size left on the path): the rank stops at once with one line naming the
// file, not later in ncclCommInitRank's endless bootstrap; and a file rank 0 could not put in
// place leaves no temporary file behind.
static void test_file_world_mismatch(const Id& id0) {
    const std::string path = "/tmp/llmc_test_rendezvous_world_" + std::to_string(getpid()) + ".id";
    unlink(path.c_str());
    Id id = id0, got{};
    std::string err0, err1;
    const bool ok0 = rendezvous_file(0, 2, id.data(), id.size(), path, 5, &err0);
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok1 = rendezvous_file(1, 3, got.data(), got.size(), path, 5, &err1);
    const double s = seconds_since(t0);
    check_report(ok0 && !ok1 && s < 2 && err1.find(path) != std::string::npos && err1.find("world size of 2") != std::string::npos &&
                     err1.find("this rank 1 with 3") != std::string::npos && err1.find('\n') == std::string::npos,
                 "file: a rank with another world size than the file's stops at once, in one line naming the file",
                 "after " + std::to_string(s) + " s: '" + err1 + "'");
    rendezvous_file_done(0, path);
    // the path is a directory: the rename fails, and the temporary file is removed
    const std::string dir = "/tmp/llmc_test_rendezvous_dir_" + std::to_string(getpid());
    mkdir(dir.c_str(), 0700);
    std::string err;
    const bool ok = rendezvous_file(0, 2, id.data(), id.size(), dir, 5, &err);
    check_report(!ok && err.find("cannot write " + dir) != std::string::npos && access((dir + ".tmp").c_str(), F_OK) != 0,
                 "file: rank 0 unable to put the file in place says so and leaves no temporary file", "'" + err + "'");
    unlink((dir + ".tmp").c_str());
    rmdir(dir.c_str());
}

int main() {
    Id id0;   // rank 0's id: bytes that differ from each other and from zero
    for (size_t i = 0; i < id0.size(); i++) id0[i] = (char)(i * 37 + 11);
    test_tcp_peers_before_rank0(id0);
    test_tcp_silent_probes(id0);
    test_tcp_slow_ack(id0);
    test_tcp_world_mismatch(id0);
    test_tcp_duplicate_rank(id0);
    test_tcp_port_in_use(id0);
    test_tcp_silent_server();
    test_tcp_dropped_connects();
    test_rendezvous_port();
    test_file(id0);
    test_file_world_mismatch(id0);
    return check_finish();
}
