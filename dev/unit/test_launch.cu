// Unit test of the launch without MPI (llmc/comm.cuh: comm_launch, comm_launch_verdict): host code,
// so it runs on a machine without a GPU (built by nvcc for the header; no CUDA call is made). The
// environment launch reads torchrun's variables before Slurm's, and a rank that fails before the
// ranks are linked says why itself: nobody else can.
#include <cstdlib>
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

int main() {
    test_torchrun_under_slurm();
    test_verdict_without_mpi();
    return check_finish();
}
