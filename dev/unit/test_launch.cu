// Unit test of the launch without MPI (llmc/comm.cuh: comm_launch, comm_launch_verdict): host code,
// so it runs on a machine without a GPU (built by nvcc for the header; no CUDA call is made). The
// environment launch reads torchrun's variables before Slurm's; a rank that fails before the ranks
// are linked says why itself (nobody else can); the watchdog's exit removes rank 0's id file.
#include <cstdlib>
#include <sys/wait.h>
#include "dev/unit/check.h"
#include "llmc/comm.cuh"

static void clear_launch_env() {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_SIZE", "PMIX_RANK"})
        unsetenv(v);
}

static bool launch(Comm* c, std::string* err) {
    int argc = 1;
    char arg0[] = "train_gpt2cu";
    char* args[] = {arg0, nullptr};
    char** argv = args;
    return comm_launch(c, &argc, &argv, err);
}

// torchrun inside a Slurm job (srun starting one torchrun per node): torchrun's variables give the
// rank of the process, Slurm's that of its torchrun
static void test_torchrun_under_slurm() {
    clear_launch_env();
    setenv("RANK", "5", 1); setenv("WORLD_SIZE", "16", 1); setenv("LOCAL_RANK", "5", 1);
    setenv("SLURM_PROCID", "0", 1); setenv("SLURM_NTASKS", "2", 1); setenv("SLURM_LOCALID", "0", 1);
    Comm c;
    std::string err;
    CHECK(launch(&c, &err) && c.rank == 5 && c.world == 16 && c.local_rank == 5 && c.launcher == "env" &&
              std::string(c.world_var) == "WORLD_SIZE",
          "torchrun's RANK/WORLD_SIZE/LOCAL_RANK win over Slurm's variables");
    clear_launch_env();
    setenv("SLURM_PROCID", "3", 1); setenv("SLURM_NTASKS", "4", 1); setenv("SLURM_LOCALID", "1", 1);
    Comm s;
    CHECK(launch(&s, &err) && s.rank == 3 && s.world == 4 && s.local_rank == 1 && std::string(s.world_var) == "SLURM_NTASKS",
          "srun: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID");
}

// An empty WORLD_SIZE (`export WORLD_SIZE=` in a job script) is no torchrun launch: under srun,
// Slurm's variables must still give each process its rank, not a world of 1 on GPU 0 for all.
static void test_empty_world_size() {
    clear_launch_env();
    setenv("WORLD_SIZE", "", 1);
    setenv("SLURM_PROCID", "2", 1); setenv("SLURM_NTASKS", "4", 1); setenv("SLURM_LOCALID", "2", 1);
    Comm c;
    std::string err;
    CHECK(launch(&c, &err) && c.rank == 2 && c.world == 4 && c.local_rank == 2 && std::string(c.world_var) == "SLURM_NTASKS",
          "WORLD_SIZE set but empty: Slurm's variables give the rank");
    clear_launch_env();
}

// A rank other than 0 that fails before the ranks are linked (its options, --resume's files: e.g.
// a node whose view of --out differs) must say why: without MPI nobody else can. Before, only rank
// 0 spoke, so rank 1 exited 1 without a word and rank 0 waited 120 s at the id exchange (TCP) or
// --nccl-timeout in ncclCommInitRank (file), and neither line named the cause.
static void test_verdict_without_mpi() {
    clear_launch_env();
    setenv("RANK", "1", 1); setenv("WORLD_SIZE", "2", 1); setenv("LOCAL_RANK", "1", 1);
    Comm c;
    std::string err;
    CHECK(launch(&c, &err) && c.launcher == "env" && c.rank == 1, "RANK=1 WORLD_SIZE=2: the environment launch");
    const LaunchVerdict failed = comm_launch_verdict(&c, true), fine = comm_launch_verdict(&c, false);
    CHECK(failed.any_failed && failed.say_why, "env launch: rank 1 that failed says why");
    CHECK(!fine.any_failed && !fine.say_why, "env launch: rank 1 that did not fail says nothing");
    c.rank = 0;
    const LaunchVerdict failed0 = comm_launch_verdict(&c, true);
    CHECK(failed0.any_failed && failed0.say_why, "env launch: rank 0 that failed says why");
    clear_launch_env();
}

// The file rendezvous' id file when the watchdog ends rank 0 inside ncclCommInitRank (a peer that
// never came: the usual way that creation fails): the file is removed before the exit, as when the
// creation returns an error, so a rerun on the same path reads no dead id. (The watchdog is made by
// hand: watchdog_start needs a GPU; watchdog_fire makes no CUDA call without a pending bucket.)
static void test_watchdog_removes_id_file() {
    const std::string path = "/tmp/llmc_test_launch_" + std::to_string(getpid()) + ".id";
    FILE* f = fopen(path.c_str(), "wb");
    CHECK(f && fputs("id", f) >= 0 && fclose(f) == 0, "an id file, as rank 0 writes it");
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
        Comm c;   // rank 0 of 2, as comm_init leaves it once the file is written
        c.world = 2;
        c.id_file = path;
        c.id_file_left = true;
        Watchdog w;
        w.comm = &c;
        w.phase = "creating the NCCL communicator";
        c.watchdog = &w;
        watchdog_fire(&w, "no progress for 1 s (--nccl-timeout): a peer rank died or hangs");
    }
    int status = 0;
    waitpid(child, &status, 0);
    check_report(WIFEXITED(status) && WEXITSTATUS(status) == WATCHDOG_EXIT_CODE && access(path.c_str(), F_OK) != 0,
                 "the watchdog's exit during the communicator's creation removes rank 0's id file",
                 "exit status " + std::to_string(status) + ", file " + (access(path.c_str(), F_OK) == 0 ? "left" : "removed"));
    unlink(path.c_str());
}

int main() {
    test_torchrun_under_slurm();
    test_empty_world_size();
    test_verdict_without_mpi();
    test_watchdog_removes_id_file();
    return check_finish();
}
