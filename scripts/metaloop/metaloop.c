/* One process's loop of metadata requests through a mount, timed
 * (scripts/bench-metaloop.sh builds and runs it): over the files DIR/f.0
 * .. DIR/f.(N-1), one operation OP each, in order:
 *   create     create, write 3,901 bytes (mdtest-hard's file), close
 *   stat       statx with AT_STATX_FORCE_SYNC (the kernel asks the mount)
 *   openclose  open O_RDWR, close
 *   read       open O_RDWR, read 3,901 bytes, close
 *   rename     rename to DIR/f.I.tmp and back (two renames, counted as two)
 *   unlink     unlink
 * Prints "OP OPS_PER_SECOND". Exit status 1 on a failed call. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES 3901

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int fail(const char *what, const char *path) {
    perror(path);
    fprintf(stderr, "metaloop: %s failed\n", what);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: metaloop DIR N create|stat|openclose|read|rename|unlink\n");
        return 2;
    }
    const char *dir = argv[1], *op = argv[3];
    int n = atoi(argv[2]);
    char path[4096], moved[4200], buf[FILE_BYTES];
    int per_file = 1;
    memset(buf, 'x', sizeof buf);
    double start = now();
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/f.%d", dir, i);
        if (!strcmp(op, "create")) {
            int fd = open(path, O_CREAT | O_RDWR, 0644);
            if (fd < 0 || write(fd, buf, FILE_BYTES) != FILE_BYTES || close(fd))
                return fail(op, path);
        } else if (!strcmp(op, "stat")) {
            struct statx sx;
            if (statx(AT_FDCWD, path, AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &sx))
                return fail(op, path);
        } else if (!strcmp(op, "openclose")) {
            int fd = open(path, O_RDWR);
            if (fd < 0 || close(fd))
                return fail(op, path);
        } else if (!strcmp(op, "read")) {
            int fd = open(path, O_RDWR);
            if (fd < 0 || read(fd, buf, FILE_BYTES) != FILE_BYTES || close(fd))
                return fail(op, path);
        } else if (!strcmp(op, "rename")) {
            snprintf(moved, sizeof moved, "%s.tmp", path);
            if (rename(path, moved) || rename(moved, path))
                return fail(op, path);
            per_file = 2;
        } else if (!strcmp(op, "unlink")) {
            if (unlink(path))
                return fail(op, path);
        } else {
            fprintf(stderr, "metaloop: unknown operation '%s'\n", op);
            return 2;
        }
    }
    printf("%s %.0f\n", op, (double)n * per_file / (now() - start));
    return 0;
}
