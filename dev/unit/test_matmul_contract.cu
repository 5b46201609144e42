// Unit test of matmul_forward's one refusal (llmc/matmul.cuh): pre_gelu and residual together
// would have cuBLASLt apply the GELU to the residual sum, so the launcher exits with one line
// before it touches the GPU. Host code only: runs on a machine without a GPU (the call is made in
// a child process, with a context that was never created and pointers that are never read).
#include <sys/wait.h>
#include <unistd.h>
#include "dev/unit/check.h"
#include "llmc/matmul.cuh"

int main() {
    int p[2];
    if (pipe(p) != 0) { perror("pipe"); return 1; }
    const pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], STDERR_FILENO);
        Context ctx;
        floatX* fake = reinterpret_cast<floatX*>(0x1000);   // never dereferenced: the refusal comes first
        matmul_forward(&ctx, fake, fake, fake, nullptr, 64, 64, 64, /*pre_gelu=*/fake, /*residual=*/fake);
        _exit(0);   // not refused: the parent reports it
    }
    close(p[1]);
    std::string err;
    char buf[256];
    for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) err.append(buf, (size_t)n);
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "pre_gelu with residual: a non-zero exit");
    CHECK(err == "matmul_forward: pre_gelu and residual cannot be used together\n", "pre_gelu with residual: one line saying why");
    return check_finish();
}
