// subreaper_probe.cpp: exits 0 where prctl(PR_SET_CHILD_SUBREAPER) works. host_only/ runs it
// (through the emulator, when cross-compiling) to learn whether the watchdog test that needs it
// can run: qemu-user 7.2 (Debian 12) does not emulate it and answers EINVAL.
#include <sys/prctl.h>

int main() { return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : 1; }
