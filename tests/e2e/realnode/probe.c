/* The real node's test image: a static program with no libc or shell beside it in the image.
 *   probe status     prints its identity as the kernel sees it (/proc/1/status: Uid, Gid,
 *                    NoNewPrivs, Seccomp, CapEff, CapBnd), then waits to be stopped;
 *   probe eat MIB    touches MIB mebibytes, one at a time, then waits (a memory limit below
 *                    MIB ends it with the kernel's OOM kill);
 *   probe serve PORT answers each TCP connection on PORT with "probe <uid>\n" (how the API server
 *                    reaches a webhook at its pod's IP).
 * Each mode says "probe: SIGTERM" when it is stopped with SIGTERM. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void stopped(int signal_number) {
    (void)signal_number;
    static const char said[] = "probe: SIGTERM\n";
    write(1, said, sizeof said - 1);
    _exit(0);
}

/* As a container's process 1 it would ignore SIGTERM without a handler of its own. */
static void wait_stopped(void) {
    signal(SIGTERM, stopped);
    for (;;) pause();
}

static int status(void) {
    static const char *wanted[] = {"Uid:", "Gid:", "NoNewPrivs:", "Seccomp:", "CapEff:", "CapBnd:", NULL};
    char line[512];
    FILE *f = fopen("/proc/1/status", "r");
    if (!f) { perror("/proc/1/status"); return 1; }
    while (fgets(line, sizeof line, f))
        for (int i = 0; wanted[i]; i++)
            if (strncmp(line, wanted[i], strlen(wanted[i])) == 0) fputs(line, stdout);
    fclose(f);
    puts("probe: done");
    fflush(stdout);
    wait_stopped();
    return 0;
}

static int eat(long mib) {
    for (long i = 0; i < mib; i++) {
        char *chunk = malloc(1 << 20);
        if (!chunk) { printf("probe: malloc failed at %ld MiB\n", i); return 2; }
        memset(chunk, 1, 1 << 20);
        if (i % 64 == 0) { printf("probe: %ld MiB\n", i); fflush(stdout); }
    }
    printf("probe: ate %ld MiB\n", mib);
    fflush(stdout);
    wait_stopped();
    return 0;
}

static int serve(int port) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    int one = 1, server = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(server, (struct sockaddr *)&address, sizeof address) || listen(server, 8)) { perror("listen"); return 1; }
    printf("probe: listening on %d\n", port);
    fflush(stdout);
    signal(SIGTERM, stopped);
    for (;;) {
        int client = accept(server, NULL, NULL);
        if (client < 0) continue;
        dprintf(client, "probe %d\n", (int)getuid());
        close(client);
    }
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "status") == 0) return status();
    if (argc >= 3 && strcmp(argv[1], "eat") == 0) return eat(atol(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "serve") == 0) return serve(atoi(argv[2]));
    fprintf(stderr, "usage: probe status | probe eat MIB | probe serve PORT\n");
    return 64;
}
