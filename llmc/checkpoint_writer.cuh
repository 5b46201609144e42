// Checkpoints written in the background (rank 0), while the training goes on.
//
// Why: a checkpoint is 12 bytes per parameter (fp32 master weights, Adam m and v) and writing it
// waits on the disk: d48's 18.7 GB took 14-25 s on an H200 machine's, during which every GPU of
// the run would stand still (the other ranks in the next step's all-reduce). The state only has
// to be CAPTURED at the step; it can be written later. So the state is copied into a snapshot on
// rank 0's GPU (device to device: milliseconds; ZeRO-1 all-gathers the shards straight into it,
// a collective),
// and a writer thread streams the snapshot into the files through one pinned buffer, on a CUDA
// stream of its own, while the compute stream runs the next steps. The files, their crash safety
// (llmc/checkpoint.h) and --resume are unchanged: a process killed during a background write
// leaves that checkpoint a .tmp, and --resume takes the one before.
//
// The snapshot costs GPU memory (the state's 12 bytes per parameter, kept for the run), so it is
// made only where the GPU has that much free at the first checkpoint, with a margin for the
// libraries; otherwise the run writes in the foreground (GpuState streaming, the run waits).
// One write at a time: the next checkpoint first waits for the previous write, and the run
// waits for the last one before it ends, also when it ends on a failure: an error of its own
// (comm_fail, and any exit(): the trainer's exit handler joins the writer, so CUDA and stdio are
// torn down only after it is done with them) or a peer that died or hangs (the watchdog, before
// its _exit); the watchdog and comm_fail wait at most 300 s (train_gpt2.cu,
// CHECKPOINT_EXIT_WAIT_S). So the checkpoint taken before the failure is kept. Not when the process is killed:
// a SIGKILL, or mpirun ending the job because another rank failed (MPI_Abort); that write is left
// a .tmp, and --resume takes the one before. A failed write (a full disk) ends the run at the next
// step with its line, as a foreground write would.
#pragma once
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include "common.cuh"
#include "checkpoint.h"
#include "gpt2.cuh"   // copy_to_host

// The snapshot's arrays as the checkpoint writer reads them (StateIO): device memory, copied a
// piece at a time into one pinned buffer on the writer's own stream. A CUDA error here fails the
// write (kept in `error`) instead of ending the process as cudaCheck would: this runs on the
// writer's thread, and the main thread may be ending the process itself (an error of its own), so
// a second exit() from here would race with it.
struct SnapshotState : StateIO {
    const float* arrays[3] = {};
    float* pinned = nullptr;
    cudaStream_t stream = nullptr;
    const float* get(int which, size_t offset, size_t count) override {
        const cudaError_t e = copy_to_host(pinned, arrays[which] + offset, count, stream);
        if (e == cudaSuccess) return pinned;
        error = std::string("checkpoint: copying the snapshot from the GPU: ") + cudaGetErrorString(e);
        return nullptr;
    }
    float* buffer(int, size_t, size_t) override { return nullptr; }   // written, never read
};

struct CheckpointWriter {
    bool decided = false;            // the first checkpoint decided whether a snapshot fits
    float* snapshot = nullptr;       // (3, padded) fp32 on rank 0's GPU; null: writes in the foreground
    float* pinned = nullptr;         // (chunk) the host side of the writer's copies
    cudaStream_t stream = nullptr;   // the writer's copies; non-blocking: it never waits on the compute stream
    std::thread thread;
    std::atomic<bool> in_flight{false};   // from checkpoint_writer_start until the write has ended (any thread may read it)
    std::string error;               // a failed write's line (read once the thread has ended)
};

constexpr size_t CHECKPOINT_SNAPSHOT_MARGIN = (size_t)2 << 30;   // left free for the libraries (NCCL, cuBLASLt)

// At the first checkpoint (rank 0): a snapshot of `bytes` if the GPU has that much free beyond the
// margin. Returns the line that says which way checkpoints are written.
inline std::string checkpoint_writer_setup(CheckpointWriter* w, size_t bytes, size_t chunk_floats) {
    w->decided = true;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    char line[256];
    if (free_b < bytes + CHECKPOINT_SNAPSHOT_MARGIN) {
        snprintf(line, sizeof line, "note: checkpoints are written in the foreground (the run waits): a snapshot needs %.2f GB, "
                 "the GPU has %.2f GB free (%.2f GB kept for the libraries)", bytes / 1e9, free_b / 1e9, CHECKPOINT_SNAPSHOT_MARGIN / 1e9);
        return line;
    }
    cudaCheck(cudaMalloc(&w->snapshot, bytes));
    cudaCheck(cudaMallocHost(&w->pinned, chunk_floats * sizeof(float)));
    cudaCheck(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
    snprintf(line, sizeof line, "checkpoints: written in the background from a %.2f GB snapshot on the GPU (--checkpoint-async 0: in the foreground)",
             bytes / 1e9);
    return line;
}

// Waits for the write in progress, if any. Returns false with its line in *err if it failed.
inline bool checkpoint_writer_wait(CheckpointWriter* w, std::string* err) {
    if (!w->thread.joinable()) return true;
    w->thread.join();
    if (w->error.empty()) return true;
    *err = w->error;
    w->error.clear();
    return false;
}

// Polled after each step: false with the line of a background write that has ended in failure.
inline bool checkpoint_writer_poll(CheckpointWriter* w, std::string* err) {
    return w->in_flight || checkpoint_writer_wait(w, err);
}

// Starts writing the snapshot (already taken; its arrays `stride` floats apart) in the background:
// `write` is given the snapshot's StateIO and returns false with its line on failure; `done` is
// called after a good write, on the writer's thread (rank 0's line). The previous write must have
// been waited for.
template <class Write, class Done>
void checkpoint_writer_start(CheckpointWriter* w, int device, size_t stride, size_t chunk_floats, Write write, Done done) {
    w->in_flight = true;
    w->thread = std::thread([w, device, stride, chunk_floats, write, done]() {
        SnapshotState io;
        io.chunk = chunk_floats;
        for (int which = 0; which < 3; which++) io.arrays[which] = w->snapshot + which * stride;
        io.pinned = w->pinned;
        io.stream = w->stream;
        std::string err;
        const cudaError_t e = cudaSetDevice(device);   // the current device is per thread
        if (e != cudaSuccess) w->error = std::string("checkpoint: selecting the GPU for the writer: ") + cudaGetErrorString(e);
        else if (write(io, &err)) done();
        else w->error = err;
        w->in_flight = false;
    });
}

// Any thread: waits until the write in progress, if any, has ended, for at most max_s seconds;
// false if it had not ended by then. It only watches the flag: joining is the main thread's, which
// may be doing so at the same time (a failure seen by the watchdog while the main thread waits).
inline bool checkpoint_writer_drain(const CheckpointWriter* w, double max_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_s);
    while (w->in_flight) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

// After the last wait.
inline void checkpoint_writer_free(CheckpointWriter* w) {
    if (w->snapshot) cudaCheck(cudaFree(w->snapshot));
    if (w->pinned) cudaCheck(cudaFreeHost(w->pinned));
    if (w->stream) cudaCheck(cudaStreamDestroy(w->stream));
    w->snapshot = nullptr; w->pinned = nullptr; w->stream = nullptr;
}
