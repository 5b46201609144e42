// The NCCL id's way from rank 0 to the other ranks when no MPI carries it (the environment-variable
// launch, llmc/comm.cuh): over TCP or through a file. The id is opaque bytes here, so this header
// is host-only and unit-tested on the CPU (dev/unit/test_rendezvous.cpp). Every wait has a
// deadline: a rendezvous that cannot happen ends in one error line, never a hang. The launch's
// environment variables are read here too (env_int: RANK, WORLD_SIZE, MASTER_PORT, ...).
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

// An environment variable of the launch as a whole number: false + one line in *err when it is
// set but not one (atoi would read "abc" as 0, and WORLD_SIZE=0 would then divide by zero).
inline bool env_int(const char* name, int fallback, int* out, std::string* err) {
    const char* v = getenv(name);
    if (!v || !*v) { *out = fallback; return true; }
    char* end = nullptr;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (*end != '\0' || errno == ERANGE || isspace((unsigned char)*v) || x < INT_MIN || x > INT_MAX) {
        *err = std::string("environment variable ") + name + "='" + v + "' is not a whole number";
        return false;
    }
    *out = (int)x;
    return true;
}

// The TCP port: MASTER_PORT (default 29500), or the one above it under torchrun, whose own store
// already listens on MASTER_PORT (torchrun sets TORCHELASTIC_RUN_ID in its workers' environment).
// false + one line in *err when MASTER_PORT is not a port number (atoi would make "abc" port 0: rank
// 0 would listen on a random port, and the others wait 120 s for nothing).
inline bool rendezvous_port(int* port, std::string* err) {
    const bool torchrun = getenv("TORCHELASTIC_RUN_ID") != nullptr;
    int v;
    std::string why;
    if (!env_int("MASTER_PORT", 29500, &v, &why) || v < 1 || v > (torchrun ? 65534 : 65535)) {
        *err = std::string("environment variable MASTER_PORT='") + getenv("MASTER_PORT") + "' is not a TCP port (1.." +
               (torchrun ? "65534; under torchrun the id goes over the port above it)" : "65535)");
        return false;
    }
    *port = v + (torchrun ? 1 : 0);
    return true;
}

// Rank 0's listening socket on `port`, IPv6 and IPv4 (IPv4 alone where IPv6 is off); -1 with *err
// set if it cannot listen.
inline int rendezvous_listen(int port, std::string* err) {
    int one = 1, zero = 0, s = socket(AF_INET6, SOCK_STREAM, 0);
    int bound = -1;
    if (s >= 0) {
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        sockaddr_in6 a6{};
        a6.sin6_family = AF_INET6; a6.sin6_addr = in6addr_any; a6.sin6_port = htons(port);
        bound = bind(s, (sockaddr*)&a6, sizeof a6);
    } else {
        s = socket(AF_INET, SOCK_STREAM, 0);
        if (s >= 0) {
            setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            sockaddr_in a4{};
            a4.sin_family = AF_INET; a4.sin_addr.s_addr = htonl(INADDR_ANY); a4.sin_port = htons(port);
            bound = bind(s, (sockaddr*)&a4, sizeof a4);
        }
    }
    if (s < 0 || bound != 0 || listen(s, 1024) != 0) {
        *err = "rendezvous: cannot listen on port " + std::to_string(port) + ": " + strerror(errno) +
               (errno == EADDRINUSE ? " (another program holds it: set MASTER_PORT to a free port)" : "");
        if (s >= 0) close(s);
        return -1;
    }
    return s;
}

// Marks the rendezvous' own messages (the peer's hello, rank 0's answer, the id file's header): a
// port probe or another program is not taken for a rank, nor its bytes for a world size.
constexpr int32_t RENDEZVOUS_MAGIC = 0x636d6c6c;   // "llmc"
// Rank 0's answer in place of its world size: "this rank has its id already" (another process has it)
constexpr int32_t RENDEZVOUS_SERVED = -1;

// The one line for ranks started with different world sizes: NCCL's bootstrap would wait forever
// on a rank count that does not match (until --nccl-timeout, which would blame a dead peer).
inline std::string rendezvous_world_mismatch(const std::string& them, int their_world, int rank, int world) {
    return "rendezvous: " + them + " was started with a world size of " + std::to_string(their_world) + ", this rank " +
           std::to_string(rank) + " with " + std::to_string(world) +
           ": every rank needs the same world size (WORLD_SIZE, SLURM_NTASKS), and each run its own MASTER_PORT or id file";
}

// One accepted connection, on rank 0: the peer's hello (magic, rank, world size; 2 s to send it),
// rank 0's answer (magic, world size), the id, and the peer's byte back (until the deadline, at
// least a second). Returns the rank served, -2 with *err set for a rank started with another
// world size or a rank in `done` (served already: it acknowledged the id, so it never connects
// again; another process has its rank), or -1 for anything else (a port probe, a peer gone).
inline int rendezvous_serve_peer(int peer, int world, const std::vector<bool>& done, const void* id, size_t bytes,
                                 std::chrono::steady_clock::time_point deadline, std::string* err) {
    timeval tv{2, 0};
    setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int32_t hello[3] = {0, -1, 0};
    // MSG_WAITALL: the hello whole even if it comes in pieces; MSG_NOSIGNAL: a peer gone meanwhile
    // is an error return, not SIGPIPE
    if (recv(peer, hello, sizeof hello, MSG_WAITALL) != (ssize_t)sizeof hello || hello[0] != RENDEZVOUS_MAGIC) return -1;
    const int32_t who = hello[1];
    const bool twice = who > 0 && who < world && done[who];
    // the answer's world size is RENDEZVOUS_SERVED for a rank served already: the second process
    // with that rank is told so, rather than retrying a closed port until its deadline
    const int32_t answer[2] = {RENDEZVOUS_MAGIC, twice ? RENDEZVOUS_SERVED : world};
    if (send(peer, answer, sizeof answer, MSG_NOSIGNAL) != (ssize_t)sizeof answer) return -1;
    if (hello[2] != world) {
        *err = rendezvous_world_mismatch("rank " + std::to_string(who), hello[2], 0, world);
        return -2;
    }
    if (twice) {
        *err = "rendezvous: rank " + std::to_string(who) + " connected twice: two processes have the same rank (RANK, SLURM_PROCID)";
        return -2;
    }
    char ack = 0;
    bool acked = who > 0 && who < world && send(peer, id, bytes, MSG_NOSIGNAL) == (ssize_t)bytes;
    if (acked) {
        const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - std::chrono::steady_clock::now());
        timeval wait{std::max<long>(1, (long)left.count()), 0};
        setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
        acked = read(peer, &ack, 1) == 1;
    }
    return acked ? who : -1;
}

// Rank 0: serves connections one at a time until every other rank has acknowledged the id once.
inline bool rendezvous_tcp_serve(int world, const void* id, size_t bytes, int port, int timeout_s,
                                 std::chrono::steady_clock::time_point deadline, std::string* err) {
    const int s = rendezvous_listen(port, err);
    if (s < 0) return false;
    std::vector<bool> done(world, false);
    for (int served = 0; served < world - 1;) {
        pollfd p{s, POLLIN, 0};
        if (poll(&p, 1, 1000) > 0) {
            const int peer = accept(s, nullptr, nullptr);
            if (peer >= 0) {
                const int who = rendezvous_serve_peer(peer, world, done, id, bytes, deadline, err);
                if (who == -2) {   // this run cannot succeed: say so now, not at the deadline
                    close(peer);
                    close(s);
                    return false;
                }
                if (who > 0 && !done[who]) {
                    done[who] = true;
                    served++;
                }
                close(peer);
            }
        }
        if (served < world - 1 && std::chrono::steady_clock::now() > deadline) {   // (the last one may be served just after it)
            *err = "rendezvous: only " + std::to_string(served) + " of " + std::to_string(world - 1) + " ranks connected to port " +
                   std::to_string(port) + " within " + std::to_string(timeout_s) + " s";
            close(s);
            return false;
        }
    }
    close(s);
    return true;
}

// connect() on a socket, given up after ms milliseconds: a plain connect to an address that drops
// the packets (a firewall, a wrong MASTER_ADDR, a full accept queue) waits for the kernel's own
// retries, minutes, whatever the rendezvous' deadline. The socket is left blocking again.
inline bool connect_within(int s, const sockaddr* addr, socklen_t len, int ms) {
    const int flags = fcntl(s, F_GETFL, 0);
    if (flags < 0 || fcntl(s, F_SETFL, flags | O_NONBLOCK) != 0) return false;
    bool ok = connect(s, addr, len) == 0;
    if (!ok && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        int so_error = 0;
        socklen_t n = sizeof so_error;
        ok = poll(&p, 1, ms) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &so_error, &n) == 0 && so_error == 0;
    }
    return fcntl(s, F_SETFL, flags) == 0 && ok;
}

// Any other rank: connects to host:port (each of its addresses in turn, 2 s each at most; again
// every 200 ms while rank 0 starts), sends its hello, reads rank 0's answer and the id (reads time
// out after 2 s) and sends one byte back. A rank 0 started with another world size ends it at once.
inline bool rendezvous_tcp_fetch(int rank, int world, void* id, size_t bytes, const std::string& host, int port, int timeout_s,
                                 std::chrono::steady_clock::time_point deadline, std::string* err) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
        *err = "rendezvous: cannot resolve MASTER_ADDR '" + host + "'";
        return false;
    }
    bool ok = false;
    while (!ok && std::chrono::steady_clock::now() < deadline) {
        for (const addrinfo* a = res; a && !ok; a = a->ai_next) {
            const long long left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
            if (left_ms <= 0) break;
            const int s = socket(a->ai_family, SOCK_STREAM, 0);
            if (s < 0) continue;
            timeval tv{2, 0};
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            const int32_t hello[3] = {RENDEZVOUS_MAGIC, rank, world};
            int32_t answer[2] = {0, 0};   // rank 0's magic and world size
            if (connect_within(s, a->ai_addr, a->ai_addrlen, (int)std::min(2000LL, left_ms)) &&
                send(s, hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello &&
                recv(s, answer, sizeof answer, MSG_WAITALL) == (ssize_t)sizeof answer && answer[0] == RENDEZVOUS_MAGIC) {
                if (answer[1] != world) {
                    close(s);
                    freeaddrinfo(res);
                    const std::string rank0 = "rank 0 at " + host + ":" + std::to_string(port);
                    *err = answer[1] == RENDEZVOUS_SERVED
                               ? "rendezvous: " + rank0 + " gave rank " + std::to_string(rank) +
                                     "'s id to another process already: two processes have the same rank (RANK, SLURM_PROCID)"
                               : rendezvous_world_mismatch(rank0, answer[1], rank, world);
                    return false;
                }
                size_t got = 0;
                while (got < bytes) {
                    const ssize_t n = read(s, (char*)id + got, bytes - got);
                    if (n <= 0) break;
                    got += (size_t)n;
                }
                const char ack = 1;
                ok = got == bytes && send(s, &ack, 1, MSG_NOSIGNAL) == 1;
            }
            close(s);
        }
        if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    freeaddrinfo(res);
    if (!ok) *err = "rendezvous: no NCCL id from " + host + ":" + std::to_string(port) + " within " + std::to_string(timeout_s) +
                    " s (rank 0 not started, or it stopped on an error before the rendezvous: see its output)";
    return ok;
}

// Rank 0 listens on `port` and serves one connection at a time; each other rank connects to
// host:port (retrying while rank 0 starts), sends its hello (RENDEZVOUS_MAGIC, its rank and world
// size as 4 bytes each), reads rank 0's answer (the magic, rank 0's world size) and the `bytes` of
// `id`, and sends back one byte. Ranks whose world sizes differ both stop at once, in one line. Rank 0 counts a rank as served only on that byte, once per rank: a port
// probe, a peer that reconnects, or a peer that gave up before its turn is never mistaken for a
// served rank; a served rank that connects again is a second process with that rank: rank 0
// answers it RENDEZVOUS_SERVED and stops at once, and that process stops too, both in one line. Rank 0 waits 2 s for a connection's hello (so a probe that never sends holds it 2 s
// at most, and a peer queued behind it retries), then, once it has sent the id, for the byte until
// the deadline: a live peer is never dropped for being slow, and a dead one closes its socket,
// which ends the wait at once. A peer's reads time out after 2 s, so a server that never sends
// (another program on the port) stalls no peer; everyone gives up with one error line when
// `timeout_s` is over.
inline bool rendezvous_tcp(int rank, int world, void* id, size_t bytes, const std::string& host, int port, int timeout_s,
                           std::string* err) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    if (rank == 0) return rendezvous_tcp_serve(world, id, bytes, port, timeout_s, deadline, err);
    return rendezvous_tcp_fetch(rank, world, id, bytes, host, port, timeout_s, deadline, err);
}

// Rank 0 writes its world size and the id to `path` (after RENDEZVOUS_MAGIC; via a temporary name,
// so nobody reads half of it); the others wait for the file, and stop at once on a world size that
// differs from theirs. Rank 0 removes it once every rank has the communicator
// (rendezvous_file_done; also when creating it failed, and llmc/comm.cuh's watchdog when it ends
// rank 0 inside the creation), so a requeued job that reuses the path does not read a dead id. A file left by a run whose rank 0 died before that would still be read: a path unique to each attempt
// is safest (the README's Slurm example adds SLURM_RESTART_COUNT).
inline bool rendezvous_file(int rank, int world, void* id, size_t bytes, const std::string& path, int timeout_s, std::string* err) {
    const size_t head = 2 * sizeof(int32_t);   // the magic and rank 0's world size, then the id
    std::vector<char> text(head + bytes);
    if (rank == 0) {
        const int32_t header[2] = {RENDEZVOUS_MAGIC, world};
        memcpy(text.data(), header, head);
        memcpy(text.data() + head, id, bytes);
        const std::string tmp = path + ".tmp";
        FILE* f = fopen(tmp.c_str(), "wb");
        bool ok = f && fwrite(text.data(), 1, text.size(), f) == text.size();
        if (f) ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
            *err = "rendezvous: cannot write " + path + ": " + strerror(errno);
            unlink(tmp.c_str());   // (after strerror: unlink may change errno)
            return false;
        }
        return true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
        if (FILE* f = fopen(path.c_str(), "rb")) {
            const bool ok = fread(text.data(), 1, text.size(), f) == text.size();
            fclose(f);
            int32_t header[2];
            memcpy(header, text.data(), head);
            if (ok && header[0] == RENDEZVOUS_MAGIC && header[1] != world) {
                *err = rendezvous_world_mismatch("the rank 0 that wrote " + path, header[1], rank, world);
                return false;
            }
            if (ok && header[0] == RENDEZVOUS_MAGIC) {
                memcpy(id, text.data() + head, bytes);
                return true;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    *err = "rendezvous: " + path + " did not appear within " + std::to_string(timeout_s) +
           " s (rank 0 not started, or it stopped on an error before the rendezvous: see its output)";
    return false;
}
// Rank 0, after the communicator exists (its creation returns only once every rank has joined,
// so every rank has read the file by then), or after its creation failed (a retry must not read
// the dead id).
inline void rendezvous_file_done(int rank, const std::string& path) {
    if (rank == 0) unlink(path.c_str());
}
