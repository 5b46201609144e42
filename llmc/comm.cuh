// Several GPUs: who am I (launch), the NCCL communicator, the watchdog that ends a rank whose peers
// died or hang, and the small collectives (sums of per-rank values, ZeRO-1's weight all-gather).
// The gradient reduction that runs under backward builds on it: llmc/grad_reducer.cuh.
//
// Launch, one process per GPU, three ways:
//   mpirun -np N ./train_gpt2cu            MPI gives rank/size; the node-local rank picks the GPU
//                                          (MPI_Comm_split_type SHARED); the NCCL id goes out by MPI_Bcast
//   RANK/WORLD_SIZE/LOCAL_RANK (torchrun)  or SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun): no MPI
//                                          needed; the NCCL id is exchanged over TCP with rank 0
//                                          (MASTER_ADDR:MASTER_PORT, +1 under torchrun) or through a
//                                          file (--rendezvous file:PATH): llmc/rendezvous.h
//   nothing                                one GPU, no NCCL
//
// Faults (a dead or hung peer): NCCL collectives wait for every rank, forever. A watchdog thread
// per rank (when world > 1) polls ncclCommGetAsyncError every 100 ms and watches a deadline the
// main thread arms around everything that may wait on a peer (a step, an evaluation, a checkpoint):
// past --nccl-timeout seconds, or on an asynchronous NCCL error, it prints rank, step, phase and
// which collective had not finished, and exits the process with code 3 (_exit: the driver ends
// the NCCL kernels still spinning on the dead peer). Under mpirun that exit ends the job; with
// the env-var launch every rank's own watchdog fires. The deadline must exceed the longest
// legitimate wait, e.g. rank 0 writing a checkpoint while the others wait in the next step.
#pragma once
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>
#include <chrono>
#include <thread>
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#endif
#include "common.cuh"
#include "rendezvous.h"

struct Watchdog;

struct Comm {
    int rank = 0, world = 1, local_rank = 0;
    std::string launcher = "single";  // "mpi", "env" or "single"
    const char* world_var = nullptr;  // env: the variable that gave the world size
    const char* local_unset = nullptr; // env: the local-rank variable, when it was not set (local rank 0)
    cudaStream_t stream = nullptr;    // the communication stream
#ifdef USE_NCCL
    ncclComm_t nccl = nullptr;
#endif
    Watchdog* watchdog = nullptr;     // world > 1 only
    // Rank 0 with the file rendezvous: the id file (set before the watchdog starts), and whether it
    // is written and not yet removed: the watchdog's exit removes it then (a dead id for a rerun).
    std::string id_file;
    std::atomic<bool> id_file_left{false};
    // Run by comm_fail and by the watchdog before they end the process on a failure: any thread may
    // call it (train_gpt2.cu: waits for rank 0's background checkpoint write, so the checkpoint
    // taken before the failure is kept). Set once; null: nothing to do.
    std::atomic<void (*)()> before_exit{nullptr};
};

// Reads a launcher's rank, world size and local rank from the environment; false + one line in
// *err unless 1 <= world, 0 <= rank < world and 0 <= local rank.
inline bool env_launch(Comm* c, const char* rank, const char* world, const char* local, std::string* err) {
    if (!env_int(rank, 0, &c->rank, err) || !env_int(world, 1, &c->world, err) || !env_int(local, 0, &c->local_rank, err))
        return false;
    if (c->world < 1) { *err = std::string("environment variable ") + world + "=" + std::to_string(c->world) + ": must be at least 1"; return false; }
    if (c->world > 1 && !(getenv(rank) && *getenv(rank))) {   // two ranks taking 0 would wait for each other
        *err = std::string("environment variable ") + rank + " is not set, and " + world + "=" + std::to_string(c->world) +
               " asks for several ranks: set it for each process";
        return false;
    }
    if (c->rank < 0 || c->rank >= c->world) {
        *err = std::string("environment variable ") + rank + "=" + std::to_string(c->rank) + ": must be in [0, " + world + "-1 = " +
               std::to_string(c->world - 1) + "]";
        return false;
    }
    if (c->local_rank < 0) { *err = std::string("environment variable ") + local + "=" + std::to_string(c->local_rank) + ": must be at least 0"; return false; }
    c->launcher = c->world > 1 ? "env" : "single";
    c->world_var = world;
    if (!(getenv(local) && *getenv(local))) c->local_unset = local;
    return true;
}

// Finds rank, world size and local rank. Call first thing in main (MPI_Init may look at argv).
// false + one line in *err on a malformed launch environment (RANK=5 with WORLD_SIZE=2, ...);
// nothing has been initialised then, so the caller prints it and exits.
inline bool comm_launch(Comm* c, int* argc, char*** argv, std::string* err) {
    (void)argc; (void)argv;
    const bool under_mpirun = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
#ifdef USE_MPI
    if (under_mpirun) {
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->world);
        MPI_Comm local;  // the ranks that share this node: our index among them picks the GPU
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &c->local_rank);
        MPI_Comm_free(&local);
        c->launcher = "mpi";
        return true;
    }
#else
    // a build without MPI under mpirun: use mpirun's environment like the env-var launch
    if (under_mpirun && getenv("OMPI_COMM_WORLD_SIZE"))
        return env_launch(c, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", err);
#endif
    // a variable set but empty counts as unset: `WORLD_SIZE=` in a job script under srun must not
    // hide SLURM_NTASKS and run every process alone on GPU 0
    auto given = [](const char* v) { return getenv(v) && *getenv(v); };
    if (given("WORLD_SIZE")) return env_launch(c, "RANK", "WORLD_SIZE", "LOCAL_RANK", err);
    if (given("SLURM_NTASKS")) return env_launch(c, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", err);
#ifndef USE_MPI
    // another MPI's launcher (MPICH's or Intel MPI's mpiexec set PMI_SIZE) and none of the above:
    // each process would otherwise run alone, all on GPU 0, all writing the same --out
    int pmi_size = 1;
    if (!env_int("PMI_SIZE", 1, &pmi_size, err)) return false;
    if (pmi_size > 1) {
        *err = "PMI_SIZE=" + std::to_string(pmi_size) + ": started by an MPI launcher this build cannot read (it has no MPI): build with "
               "MPI, or give each process RANK, WORLD_SIZE and LOCAL_RANK (README, \"Several GPUs\")";
        return false;
    }
#endif
    return true;
}

// Before anything collective (the options, --resume's files): which ranks failed. Under mpirun
// the ranks tell each other (MPI): every rank learns whether any failed, so all exit together
// rather than some waiting for the others at the NCCL id, and who should say why: rank 0 when it
// failed itself (every rank's options are the same, so one line is enough), else each rank that
// failed (its own files, e.g. a node whose copy of --out differs). Without MPI nothing links the
// ranks yet: each knows only itself, so each rank that failed says why (an error in the options
// comes once per rank then): rank 0 notices a peer that failed alone only as a rank missing at the
// id exchange (TCP) or in ncclCommInitRank (file), and cannot say why.
struct LaunchVerdict { bool any_failed, say_why; };
inline LaunchVerdict comm_launch_verdict(const Comm* c, bool failed) {
    LaunchVerdict v{failed, failed};
#ifdef USE_MPI
    if (c->launcher == "mpi") {
        int mine[2] = {failed ? 1 : 0, failed && c->rank == 0 ? 1 : 0}, all[2] = {0, 0};
        MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        v.any_failed = all[0] != 0;
        v.say_why = failed && (c->rank == 0 || all[1] == 0);
    }
#endif
    return v;
}

// A failing rank exits through this. Under mpirun it aborts the whole job (MPI ranks must not
// outlive a failed one: mpirun would wait); with the env-var launch it ends this process, and the
// other ranks end through their own watchdog (a closed connection, or --nccl-timeout).
[[noreturn]] inline void comm_fail(const Comm* c, const std::string& msg) {
    fprintf(stderr, "rank %d: error: %s\n", c->rank, msg.c_str());
    if (void (*f)() = c->before_exit.load()) f();   // before MPI_Abort, which ends the job without exit handlers
#ifdef USE_MPI
    if (c->launcher == "mpi") MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    exit(EXIT_FAILURE);
}


// ---------------------------------------------------------------------------------------------
// The watchdog (see the top of this file).
struct Watchdog {
    const Comm* comm = nullptr;
    double timeout_s = 0;                          // 0: no deadline (async errors are still caught)
    std::atomic<bool> stop{false};
    std::atomic<long long> deadline_ms{0};         // steady clock; 0: nothing armed
    std::atomic<int> step{0};
    std::atomic<const char*> phase{"startup"};
    std::atomic<bool> fired{false};                // set first thing when it decides to end the process
    int device = 0;                                // the rank's GPU, for `pending`'s event queries
    std::mutex pending_mu;                         // the thread is running when the main thread sets `pending`
    std::function<std::string()> pending;          // names the unfinished collective (comm_set_pending)
#ifdef USE_NCCL
    std::atomic<ncclComm_t> nccl{nullptr};         // polled once the communicator exists
    std::mutex nccl_mu;                            // held while polling it: comm_free clears it under this before destroying it
#endif
    std::thread thread;
};

inline long long steady_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Arms the deadline for a phase that may wait on peers (`phase`: a string literal); cheap.
inline void comm_watch(const Comm* c, int step, const char* phase) {
    if (!c->watchdog) return;
    c->watchdog->step = step;
    c->watchdog->phase = phase;
    c->watchdog->deadline_ms = c->watchdog->timeout_s > 0 ? steady_ms() + (long long)(c->watchdog->timeout_s * 1000) : 0;
}
inline void comm_unwatch(const Comm* c) { if (c->watchdog) c->watchdog->deadline_ms = 0; }

// The watchdog's exit. It does not call ncclCommAbort first: that frees the communicator while
// the main thread may still be inside NCCL or about to call it (issuing the next bucket, or back
// from a wait the abort ended), and faults.sh saw exactly that use after free as a SIGSEGV of the
// survivor, 10 times in 10, whenever a peer's death showed at once as a closed socket. _exit ends
// every thread at once; the driver then tears the GPU context down, NCCL kernels still spinning
// included, as it does for a process SIGKILLed in the middle of a collective.
constexpr int WATCHDOG_EXIT_CODE = 3;
[[noreturn]] inline void watchdog_fire(Watchdog* w, const std::string& why) {
    w->fired = true;
    std::string where;
    {
        std::lock_guard<std::mutex> lock(w->pending_mu);
        if (w->pending) where = w->pending();
    }
    fprintf(stderr, "rank %d: error: step %d, %s: %s%s%s; exiting\n", w->comm->rank, w->step.load(),
            w->phase.load(), why.c_str(), where.empty() ? "" : "; unfinished: ", where.c_str());
    fflush(stderr);
    // the usual way the communicator's creation fails is a peer that never comes: this exit, not
    // an error return, so the id file goes here too
    if (w->comm->id_file_left) unlink(w->comm->id_file.c_str());
    if (void (*f)() = w->comm->before_exit.load()) f();   // _exit runs no exit handler
    _exit(WATCHDOG_EXIT_CODE);
}

inline void watchdog_loop(Watchdog* w) {
    // The current GPU is per thread and a new thread's is GPU 0: without this, rank 1's `pending`
    // (cudaEventQuery on its own GPU's events) would open a context on GPU 0, another rank's.
    (void)cudaSetDevice(w->device);   // a failure here only costs the message its pending bucket
    while (!w->stop) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
#ifdef USE_NCCL
        {
            std::lock_guard<std::mutex> lock(w->nccl_mu);
            if (ncclComm_t n = w->nccl.load()) {
                ncclResult_t async = ncclSuccess;
                if (ncclCommGetAsyncError(n, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
                    watchdog_fire(w, std::string("NCCL error: ") + ncclGetErrorString(async) + " (" + ncclGetLastError(n) + ")");
            }
        }
#endif
        const long long d = w->deadline_ms;
        if (d && steady_ms() > d)
            watchdog_fire(w, "no progress for " + std::to_string((int)w->timeout_s) + " s (--nccl-timeout): a peer rank died or hangs");
    }
}

inline void watchdog_start(Comm* c, double timeout_s) {
    if (c->world == 1) return;
    c->watchdog = new Watchdog;
    c->watchdog->comm = c;
    c->watchdog->timeout_s = timeout_s;
    cudaCheck(cudaGetDevice(&c->watchdog->device));   // comm_init: the GPU is selected already
    c->watchdog->thread = std::thread(watchdog_loop, c->watchdog);
}
// What the watchdog's message names as unfinished when it fires (e.g. the gradient reducer's
// pending bucket); the function runs on the watchdog's thread.
inline void comm_set_pending(Comm* c, std::function<std::string()> pending) {
    if (!c->watchdog) return;
    std::lock_guard<std::mutex> lock(c->watchdog->pending_mu);
    c->watchdog->pending = std::move(pending);
}
inline void watchdog_stop(Comm* c) {
    if (!c->watchdog) return;
    c->watchdog->stop = true;
    c->watchdog->thread.join();
    delete c->watchdog;
    c->watchdog = nullptr;
}

#ifdef USE_NCCL
// The training loop's NCCL calls: a failure (a peer's closed connection shows here when NCCL
// notices it while a collective is issued) is one line naming the rank, what was issued and
// NCCL's own reason, and ends this process (comm_fail: under mpirun the whole job). If the
// watchdog is already ending the process, this thread only waits for it: one error line, and the
// watchdog's exit code.
inline void comm_nccl_check(const Comm* c, ncclResult_t s, const char* what) {
    if (s == ncclSuccess) return;
    if (c->watchdog && c->watchdog->fired)
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the watchdog is printing its line and exiting
    comm_fail(c, std::string(what) + ": NCCL error: " + ncclGetErrorString(s) + " (" + ncclGetLastError(c->nccl) + ")");
}
#endif

// Creates the communication stream and, with several ranks, the NCCL communicator. The GPU must
// be selected already. rendezvous: "tcp" (MASTER_ADDR/MASTER_PORT) or "file:PATH" (env launch).
// cta_policy: NCCL's CTA policy (NCCL >= 2.27), set through NCCL_CTA_POLICY for this process
// before NCCL reads it (the form that was measured): 0 NCCL's default, 1 "efficiency" (the fewest
// CTAs that still give decent bandwidth), 2 "zero"; -1 leaves the environment as it is.
inline bool comm_init(Comm* c, const std::string& rendezvous, double timeout_s, int cta_policy, std::string* err) {
    // The highest priority: a reduction's kernels are scheduled as soon as SMs free up, ahead of
    // compute blocks still waiting to run; otherwise they queue behind backward's kernels and the
    // last buckets finish late (exposed communication).
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&c->stream, cudaStreamDefault, greatest));
    if (c->world == 1) return true;
#ifdef USE_NCCL
    if (cta_policy >= 0) setenv("NCCL_CTA_POLICY", std::to_string(cta_policy).c_str(), 1);
    // the file rendezvous' id file ("" for mpirun and TCP); rank 0's is removed by the watchdog too
    const std::string id_path = c->launcher != "mpi" && rendezvous.rfind("file:", 0) == 0 ? rendezvous.substr(5) : "";
    if (c->rank == 0) c->id_file = id_path;
    watchdog_start(c, timeout_s);
    ncclUniqueId id;
    if (c->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    if (c->launcher == "mpi") {
#ifdef USE_MPI
        comm_watch(c, 0, "receiving the NCCL id from rank 0 (MPI_Bcast)");   // a rank 0 that never gets here: a deadline
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        comm_unwatch(c);
#endif
    } else if (rendezvous.rfind("file:", 0) == 0 || rendezvous == "tcp") {
        const char* host = getenv("MASTER_ADDR");
        int port;
        const bool got = rendezvous == "tcp"
                             ? rendezvous_port(&port, err) && rendezvous_tcp(c->rank, c->world, &id, sizeof id, host && *host ? host : "127.0.0.1", port, 120, err)
                             : rendezvous_file(c->rank, c->world, &id, sizeof id, id_path, 120, err);
        if (!got && rendezvous == "tcp" && c->rank > 0 && !(host && *host))   // right on one node, the likely cause on several
            *err += " (MASTER_ADDR is not set, so 127.0.0.1 was used: on several nodes set it to rank 0's host)";
        if (!got && c->world_var && std::string(c->world_var) == "SLURM_NTASKS")   // also set in an sbatch script, srun or not
            *err += " (the " + std::to_string(c->world) + " ranks come from SLURM_NTASKS: in an sbatch script, start them with srun)";
        if (!got) return false;
        c->id_file_left = !c->id_file.empty();
    } else {
        *err = "option --rendezvous: '" + rendezvous + "' is not tcp or file:PATH";
        return false;
    }
    comm_watch(c, 0, "creating the NCCL communicator");
    const ncclResult_t made = ncclCommInitRank(&c->nccl, c->world, id, c->rank);
    comm_unwatch(c);
    // the id file has served (or this id failed): removed either way, so a retry reads no dead id
    // (and by the watchdog when it ends the process inside ncclCommInitRank)
    if (!id_path.empty()) {
        c->id_file_left = false;
        rendezvous_file_done(c->rank, id_path);
    }
    if (made != ncclSuccess) {  // NCCL's own words say why (its return code alone is "invalid usage")
        std::string why = ncclGetLastError(nullptr);
        while (!why.empty() && isspace((unsigned char)why.back())) why.pop_back();
        *err = std::string("creating the NCCL communicator: ") + ncclGetErrorString(made) + (why.empty() ? "" : ": " + why);
        if (why.find("Duplicate GPU") != std::string::npos) {  // ranks > GPUs, CUDA_VISIBLE_DEVICES alike on every rank, or no local rank
            if (c->local_unset)
                *err += std::string(" (") + c->local_unset + " is not set, so this rank took the first GPU it sees: give each process " +
                        "its index on its node, or a CUDA_VISIBLE_DEVICES of its own)";
            else
                *err += " (NCCL takes one rank per GPU of a host: start at most as many ranks per node as it has GPUs)";
        }
        return false;
    }
    c->watchdog->nccl = c->nccl;
    return true;
#else
    (void)cta_policy;
    *err = "this build has no NCCL, so it runs on one GPU only (world size " + std::to_string(c->world) + ")";
    return false;
#endif
}

// The end. ncclCommDestroy waits for the other ranks, so a peer that died meanwhile would hold it
// forever: the watchdog stays armed across it (no longer polling the communicator being freed)
// and ends a stuck teardown with its exit code after --nccl-timeout.
inline void comm_free(Comm* c) {
#ifdef USE_NCCL
    if (c->nccl) {
        if (c->watchdog) {
            std::lock_guard<std::mutex> lock(c->watchdog->nccl_mu);   // a poll in progress finishes first
            c->watchdog->nccl = nullptr;
        }
        comm_watch(c, c->watchdog ? c->watchdog->step.load() : 0, "destroying the NCCL communicator (the end)");
        ncclCheck(ncclCommDestroy(c->nccl));
        c->nccl = nullptr;
    }
#endif
    watchdog_stop(c);
    if (c->stream) cudaCheck(cudaStreamDestroy(c->stream));
#ifdef USE_MPI
    if (c->launcher == "mpi") MPI_Finalize();
#endif
}

#ifdef USE_NCCL
#if defined(ENABLE_FP32)
constexpr ncclDataType_t NCCL_FLOATX = ncclFloat;
#elif defined(ENABLE_BF16)
constexpr ncclDataType_t NCCL_FLOATX = ncclBfloat16;
#else
constexpr ncclDataType_t NCCL_FLOATX = ncclHalf;
#endif
#endif

// x (n floats, device) = sum over ranks, on `stream`. No-op on one rank.
inline void comm_sum_floats(const Comm* c, float* x, size_t n, cudaStream_t stream) {
#ifdef USE_NCCL
    if (c->world > 1) comm_nccl_check(c, ncclAllReduce(x, x, n, ncclFloat, ncclSum, c->nccl, stream), "all-reduce of per-rank values");
#else
    (void)c; (void)x; (void)n; (void)stream;
#endif
}
// The same for a host vector: through a temporary device buffer, synchronizing `stream` (setup,
// evaluations and end-of-run exchanges, not the training step). A rank contributes its slots and
// zeros elsewhere to gather one value per rank.
inline void comm_sum_host_floats(const Comm* c, std::vector<float>* h, cudaStream_t stream) {
    float* d = nullptr;
    cudaCheck(cudaMalloc(&d, h->size() * sizeof(float)));
    cudaCheck(cudaMemcpy(d, h->data(), h->size() * sizeof(float), cudaMemcpyHostToDevice));
    comm_sum_floats(c, d, h->size(), stream);
    cudaCheck(cudaMemcpyAsync(h->data(), d, h->size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaFree(d));
}

// ZeRO-1, after the update: every rank's shard of the weights to every rank (in place).
inline void comm_allgather_params(const Comm* c, floatX* params, size_t shard, cudaStream_t stream) {
#ifdef USE_NCCL
    if (c->world > 1)
        comm_nccl_check(c, ncclAllGather(params + (size_t)c->rank * shard, params, shard, NCCL_FLOATX, c->nccl, stream),
                        "issuing the all-gather of the updated weights (ZeRO-1)");
#else
    (void)c; (void)params; (void)shard; (void)stream;
#endif
}
