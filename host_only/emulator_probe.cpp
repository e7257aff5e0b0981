// emulator_probe.cpp: what the machine that runs the tests can do, for host_only/ to leave out the
// cases it cannot run (CMake runs it at configure time, through the emulator when cross-compiling).
// Exits 0 where the feature named by its argument works:
//   subreaper  prctl(PR_SET_CHILD_SUBREAPER); qemu-user 7.2 (Debian 12) does not emulate it (EINVAL).
//   fork       a fork()ed child runs and exits. Under qemu-user 7.2 on Linux 6.18 the child of
//              glibc's fork() spins before its first system call, forever; vfork() and exec work.
//              The child gets 5 s (it needs milliseconds), then is killed: the probe never hangs.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace {

bool fork_works() {
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) _exit(0);
  for (int waited_ms = 0; waited_ms < 5000; waited_ms += 10) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    usleep(10000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (std::strcmp(argv[1], "subreaper") == 0) return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : 1;
  if (std::strcmp(argv[1], "fork") == 0) return fork_works() ? 0 : 1;
  return 2;
}
