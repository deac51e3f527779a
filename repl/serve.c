/* serve.c - `lumen serve`: the OpenAI images API and AUTOMATIC1111's API
 * over HTTP, generating with pipelines kept resident (docs/SERVE.md).
 *
 *   lumen serve --models DIR [--host 127.0.0.1] [--port 7860] [options]
 *
 * This file reads the command line, refuses unsafe settings (an address
 * beyond loopback without a bearer key), starts the worker
 * (serve_worker.c) and libmicrohttpd's daemon (callbacks in serve_http.c),
 * then waits for SIGINT / SIGTERM, ticking the slow-client reaper once a
 * second.  At the signal it stops accepting, fails the waiting jobs (503),
 * stops the running one at its next step, lets every connection answer and
 * exits 0; a second signal stops it at once.  Exit 2 on a usage error or a refused setting, 1 when the server
 * cannot start. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/io/io.h"
#include "core/lumen.h"
#include "repl.h"
#include "serve.h"

serve_cfg serve_config;

static int usage(const char *msg)
{
    if (msg) fprintf(stderr, "lumen serve: %s\n", msg);
    fprintf(msg ? stderr : stdout,
            "usage: lumen serve --models DIR [options]\n"
            "  --models DIR        the models served: each diffusers folder (model_index.json)\n"
            "                      or .safetensors / .gguf file in DIR, named by its entry name\n"
            "  --model NAME        the model of requests that name none (default: the first)\n"
            "  --lora-dir DIR      where a prompt's <lora:NAME:W> tags are found (NAME.safetensors\n"
            "                      in DIR; without it a tag is refused)\n"
            "  --host ADDR         the address to listen on (default 127.0.0.1); beyond loopback\n"
            "                      a bearer key is required\n"
            "  --port N            the port (default 7860; 0 = any free one, printed)\n"
            "  --api-key KEY       require \"Authorization: Bearer KEY\" (or $LUMEN_API_KEY)\n"
            "  --device D          cpu, vulkan, vulkan:N (default: $LUMEN_DEVICE or the best)\n"
            "  --dtype T           f32, f16 or bf16 (default f16 on a GPU, f32 on the CPU)\n"
            "  --queue N           requests waiting beyond the running one; more get 429 (default 16)\n"
            "  --max-body BYTES    a request body's size, K/M suffixes (default 32M)\n"
            "  --max-size N        pixels a side (default 2048)\n"
            "  --max-steps N       sampler steps (default 150)\n"
            "  --max-images N      images a request: n, batch_size x n_iter (default 16)\n"
            "  --idle-timeout S    close a connection idle this long (default 30)\n"
            "  --read-timeout S    close a connection whose request takes longer to arrive\n"
            "                      (default 60)\n"
            "  --connections N     open connections at most (default 128)\n"
            "  -q, --quiet         no log line per request\n"
            "docs/SERVE.md lists the endpoints.\n");
    return 2;
}

static int bad_value(const char *opt, const char *v, const char *want)
{
    fprintf(stderr, "lumen serve: %s %s: expected %s\n", opt, v, want);
    return 2;
}

static bool parse_u64(const char *s, uint64_t lo, uint64_t hi, bool suffix, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (suffix && (*end == 'K' || *end == 'k')) v *= 1024, end++;
    else if (suffix && (*end == 'M' || *end == 'm')) v *= 1024 * 1024, end++;
    if (*end || errno || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, serve_cfg *c)
{
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(NULL);
            return -1;
        }
        if (!strcmp(s, "-q") || !strcmp(s, "--quiet")) {
            c->quiet = true;
            continue;
        }
        if (s[0] != '-') {
            fprintf(stderr, "lumen serve: unexpected argument %s (lumen serve --help)\n", s);
            return 2;
        }
        static const char *const valued[] = {
            "--host", "--models", "--model", "--api-key", "--device", "--dtype", "--port", "--max-body",
            "--max-size", "--max-steps", "--max-images", "--queue", "--idle-timeout", "--read-timeout",
            "--connections", "--lora-dir", NULL};
        bool known = false;
        for (int k = 0; valued[k]; k++) known |= !strcmp(s, valued[k]);
        if (!known) {
            fprintf(stderr, "lumen serve: unknown option %s (lumen serve --help lists the options)\n", s);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "lumen serve: %s needs a value (lumen serve --help lists the options)\n", s);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t n;
        if (!strcmp(s, "--host")) c->host = v;
        else if (!strcmp(s, "--models")) c->models = v;
        else if (!strcmp(s, "--model")) c->default_model = v;
        else if (!strcmp(s, "--lora-dir")) c->lora_dir = v;
        else if (!strcmp(s, "--api-key")) c->api_key = v;
        else if (!strcmp(s, "--device")) c->device_name = v;
        else if (!strcmp(s, "--dtype")) {
            lm_dtype dt;
            if (!lm_dtype_from_name(v, &dt) || (dt != LM_F32 && dt != LM_F16 && dt != LM_BF16))
                return bad_value(s, v, "f32, f16 or bf16");
            c->dtype = (int)dt;
        }
        else if (!strcmp(s, "--port")) {
            if (!parse_u64(v, 0, 65535, false, &n)) return bad_value(s, v, "a port from 0 to 65535");
            c->port = (int)n;
        } else if (!strcmp(s, "--max-body")) {
            if (!parse_u64(v, 1024, (uint64_t)1 << 34, true, &n))
                return bad_value(s, v, "bytes from 1K to 16384M (K and M suffixes)");
            c->max_body = (size_t)n;
        } else if (!strcmp(s, "--max-size")) {
            if (!parse_u64(v, 8, 65536, false, &n)) return bad_value(s, v, "a whole number from 8 to 65536");
            c->max_side = (int64_t)n;
        } else if (!strcmp(s, "--max-steps")) {
            if (!parse_u64(v, 1, 10000, false, &n)) return bad_value(s, v, "a whole number from 1 to 10000");
            c->max_steps = (int64_t)n;
        } else if (!strcmp(s, "--max-images")) {
            if (!parse_u64(v, 1, 4096, false, &n)) return bad_value(s, v, "a whole number from 1 to 4096");
            c->max_images = (int64_t)n;
        } else if (!strcmp(s, "--queue")) {
            if (!parse_u64(v, 0, 100000, false, &n)) return bad_value(s, v, "a whole number from 0 to 100000");
            c->queue = (int)n;
        } else if (!strcmp(s, "--idle-timeout")) {
            if (!parse_u64(v, 1, 86400, false, &n)) return bad_value(s, v, "seconds from 1 to 86400");
            c->idle_timeout = (unsigned)n;
        } else if (!strcmp(s, "--read-timeout")) {
            if (!parse_u64(v, 1, 86400, false, &n)) return bad_value(s, v, "seconds from 1 to 86400");
            c->read_timeout = (unsigned)n;
        } else if (!strcmp(s, "--connections")) {
            if (!parse_u64(v, 2, 65536, false, &n)) return bad_value(s, v, "a whole number from 2 to 65536");
            c->connections = (int)n;
        } else {
            fprintf(stderr, "lumen serve: unknown option %s (lumen serve --help lists the options)\n", s);
            return 2;
        }
    }
    if (!c->models) return usage("no models folder given (--models DIR)");
    if (!c->api_key) {
        const char *k = getenv("LUMEN_API_KEY");
        if (k && *k) c->api_key = k;
    }
    if (c->api_key && !*c->api_key) return usage("--api-key: an empty key");
    struct stat sb;
    if (stat(c->models, &sb) != 0 || !S_ISDIR(sb.st_mode) || !realpath(c->models, c->models_real)) {
        fprintf(stderr, "lumen serve: --models %s: not a folder%s%s\n", c->models,
                errno ? ": " : "", errno ? strerror(errno) : "");
        return 2;
    }
    if (c->lora_dir && (stat(c->lora_dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
                        !realpath(c->lora_dir, c->lora_real))) {
        fprintf(stderr, "lumen serve: --lora-dir %s: not a folder%s%s\n", c->lora_dir,
                errno ? ": " : "", errno ? strerror(errno) : "");
        return 2;
    }
    return 0;
}

/* the address to bind, and whether it is a loopback one */
static int resolve(const serve_cfg *c, struct sockaddr_storage *ss, socklen_t *len, bool *loopback)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    int e = getaddrinfo(c->host, port, &hints, &res);
    if (e || !res) {
        fprintf(stderr, "lumen serve: --host %s: %s\n", c->host, gai_strerror(e));
        return 2;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (ss->ss_family == AF_INET) {
        uint32_t a = ntohl(((struct sockaddr_in *)ss)->sin_addr.s_addr);
        *loopback = (a >> 24) == 127;
    } else {
        const struct in6_addr *a = &((struct sockaddr_in6 *)ss)->sin6_addr;
        *loopback = IN6_IS_ADDR_LOOPBACK(a) ||
                    (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

static int sigpipe[2] = {-1, -1};

static void on_signal(int sig)
{
    lm_cancel();   /* the running generation stops at once */
    unsigned char b = (unsigned char)sig;
    if (write(sigpipe[1], &b, 1) < 0) { /* the pipe is full: a signal is pending already */ }
}

/* a second signal while stopping: stop at once, as the other subcommands
 * do, unlinking the temporaries of the writes in progress */
static void on_second_signal(int sig)
{
    lm_io_unlink_temporaries();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void logger(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (serve_config.quiet) return;
    fputs("lumen serve: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static int run(serve_cfg *c)
{
    struct sockaddr_storage ss;
    socklen_t slen;
    bool loopback;
    int rc = resolve(c, &ss, &slen, &loopback);
    if (rc) return rc;
    if (!loopback && !c->api_key) {
        fprintf(stderr, "lumen serve: --host %s is beyond loopback: give --api-key KEY (or "
                "$LUMEN_API_KEY) so that only clients with the key are served; refusing to start\n",
                c->host);
        return 2;
    }
    if (c->default_model) {
        int status;
        char why[1024];
        char *p = serve_model_path(c->default_model, &status, why, sizeof why);
        if (!p) {
            fprintf(stderr, "lumen serve: --model: %s\n", why);
            return 2;
        }
        free(p);
    }
    if (pipe2(sigpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "lumen serve: pipe: %s\n", strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (serve_worker_start() != 0) return 1;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)c->port, NULL, NULL, serve_http_handle, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, logger, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_TIMEOUT, c->idle_timeout,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->connections,
        MHD_OPTION_NOTIFY_COMPLETED, serve_http_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, serve_http_connection, NULL,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "lumen serve: cannot listen on %s port %d (in use, or not an address of "
                "this machine?)\n", c->host, c->port);
        serve_worker_stop();
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : c->port;
    bool v6 = ss.ss_family == AF_INET6;
    printf("lumen serve: listening on http://%s%s%s:%d (models %s%s)\n", v6 ? "[" : "", c->host,
           v6 ? "]" : "", port, c->models, c->api_key ? ", bearer key required" : "");
    fflush(stdout);
    int sig = 0;
    while (!sig) {
        struct pollfd p = {sigpipe[0], POLLIN, 0};
        if (poll(&p, 1, 1000) > 0) {
            unsigned char b;
            if (read(sigpipe[0], &b, 1) == 1) sig = b;
        }
        serve_reaper_tick();
    }
    sa.sa_handler = on_second_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "lumen serve: %s: stopping (again: at once)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_socket ls = MHD_quiesce_daemon(d);
    serve_worker_stop();
    MHD_stop_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    close(sigpipe[0]);
    close(sigpipe[1]);
    fprintf(stderr, "lumen serve: stopped\n");
    return 0;
}

int lm_cli_serve(int argc, char **argv)
{
    if (argc < 2 || !argv[1] || strcmp(argv[1], "serve")) return -1;
    serve_cfg *c = &serve_config;
    *c = (serve_cfg){.host = "127.0.0.1", .port = 7860, .max_body = 32u << 20, .max_side = 2048,
                     .max_steps = 150, .max_images = 16, .queue = 16, .idle_timeout = 30,
                     .read_timeout = 60, .connections = 128, .dtype = LM_DTYPE_COUNT};
    int rc = parse_args(argc, argv, c);
    if (rc) return rc < 0 ? 0 : rc;
    if (lm_init() != LM_OK) {
        fprintf(stderr, "lumen: %s\n", lm_error_message());
        return 1;
    }
    return run(c);
}
