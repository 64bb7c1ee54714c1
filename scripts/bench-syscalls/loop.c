/* Syscall-heavy loops for scripts/bench-syscalls.sh: prints nanoseconds per operation.
 * usage: loop getppid|stat|openclose N PATH
 *        loop run N CMD [ARGS...]   (µs per run; runs CMD once untimed, then N times; stdout to $LOOP_OUT,
 *                                    default /dev/null) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int run_cmd(char **cmd) {
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return -1; }
    if (pid == 0) {
        /* LOOP_OUT: a file to send the command's stdout to (the floor cannot write /dev/null) */
        const char *out = getenv("LOOP_OUT");
        int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { perror(out ? out : "/dev/null"); _exit(126); }
        dup2(fd, 1);
        execvp(cmd[0], cmd);
        perror(cmd[0]);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) { perror("waitpid"); return -1; }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "run") == 0) {
        long n = atol(argv[2]);
        if (run_cmd(&argv[3]) != 0) { fprintf(stderr, "%s failed\n", argv[3]); return 1; }
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            if (run_cmd(&argv[3]) != 0) { fprintf(stderr, "%s failed\n", argv[3]); return 1; }
        printf("%.1f\n", (now_ns() - t0) / (double)n / 1000.0); /* microseconds per run */
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s getppid|stat|openclose N PATH\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    long n = atol(argv[2]);
    const char *path = argv[3];
    struct stat st;
    volatile long sink = 0;
    double t0 = now_ns();
    if (strcmp(mode, "getppid") == 0) {
        /* the raw syscall: glibc does not cache getppid, but be explicit */
        for (long i = 0; i < n; i++) sink += syscall(SYS_getppid);
    } else if (strcmp(mode, "stat") == 0) {
        for (long i = 0; i < n; i++) {
            if (stat(path, &st) != 0) { perror(path); return 1; }
            sink += st.st_size;
        }
    } else if (strcmp(mode, "openclose") == 0) {
        for (long i = 0; i < n; i++) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) { perror(path); return 1; }
            close(fd);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    double t1 = now_ns();
    printf("%.1f\n", (t1 - t0) / (double)n);
    return sink == -1;
}
