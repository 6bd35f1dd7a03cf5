/* SPDX-License-Identifier: MIT
 * ibpshim: runs a program as a child and exits through exit() with its status, as timeout(1) and
 * other launchers do: a process that inherits LD_PRELOAD and makes no CUDA call itself. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: launcher PROGRAM [ARG...]\n");
        return 2;
    }
    const pid_t pid = fork();
    if (pid < 0) {
        perror("launcher: fork");
        return 1;
    }
    if (pid == 0) {
        execv(argv[1], argv + 1);
        perror("launcher: exec");
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) {
        perror("launcher: waitpid");
        return 1;
    }
    exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
