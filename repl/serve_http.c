/* serve_http.c - lumen serve's HTTP side: libmicrohttpd's callbacks.
 *
 * libmicrohttpd runs one thread per connection, so a request waiting for
 * its images blocks only its own thread.  A request is routed on its
 * headers (unknown paths, wrong methods, a missing or wrong bearer key and a
 * Content-Length past --max-body are answered before any body is read),
 * its body gathered up to --max-body (a chunked body past it is read and
 * dropped, then refused), then read into a job (serve_req.c) and queued.
 * While it waits, the connection's socket is watched: a client that hangs
 * up cancels its job.  Every error is JSON: {"error": {"message": ...}}.
 *
 * Slow clients: libmicrohttpd's connection timeout closes a connection
 * idle for --idle-timeout; a client trickling a byte a second never idles,
 * so each connection's state is kept here (libmicrohttpd's connection
 * notifications) and serve_reaper_tick shuts the socket of a request not
 * received within --read-timeout. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "serve.h"

/* ---- connections (the reaper's list) ---- */

typedef struct conn {
    int fd;
    double since;        /* when the request being received began */
    bool reading;        /* a request not yet fully received */
    struct conn *prev, *next;
} conn;

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static conn *conns;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void serve_http_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    pthread_mutex_lock(&conns_lock);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn *k = calloc(1, sizeof *k);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (k) {
            k->fd = ci ? ci->connect_fd : -1;
            k->since = now_s();
            k->reading = true;
            k->next = conns;
            if (conns) conns->prev = k;
            conns = k;
        }
        *socket_context = k;
    } else if (*socket_context) {
        /* called before the socket closes: the reaper never shuts a reused fd */
        conn *k = *socket_context;
        if (k->prev) k->prev->next = k->next;
        else conns = k->next;
        if (k->next) k->next->prev = k->prev;
        free(k);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&conns_lock);
}

static conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_reading(struct MHD_Connection *c, bool reading)
{
    pthread_mutex_lock(&conns_lock);
    conn *k = conn_of(c);
    if (k) {
        k->reading = reading;
        k->since = now_s();
    }
    pthread_mutex_unlock(&conns_lock);
}

void serve_reaper_tick(void)
{
    double t = now_s();
    pthread_mutex_lock(&conns_lock);
    for (conn *k = conns; k; k = k->next)
        if (k->reading && k->fd >= 0 && t - k->since > serve_config.read_timeout) {
            if (!serve_config.quiet)
                fprintf(stderr, "lumen serve: a request not received within %u s (--read-timeout); "
                        "its connection is closed\n", serve_config.read_timeout);
            shutdown(k->fd, SHUT_RDWR);
            k->reading = false;
        }
    pthread_mutex_unlock(&conns_lock);
}

/* ---- requests ---- */

typedef enum route {
    R_NONE, R_MODELS, R_GENERATE, R_SD_MODELS, R_SAMPLERS, R_PROGRESS, R_INTERRUPT, R_TXT2IMG, R_IMG2IMG,
    R_SCHEDULERS, R_OPTIONS, R_SET_OPTIONS
} route;

static const struct {
    const char *path, *method;
    route r;
} routes[] = {
    {"/v1/models", "GET", R_MODELS},
    {"/v1/images/generations", "POST", R_GENERATE},
    {"/sdapi/v1/sd-models", "GET", R_SD_MODELS},
    {"/sdapi/v1/samplers", "GET", R_SAMPLERS},
    {"/sdapi/v1/progress", "GET", R_PROGRESS},
    {"/sdapi/v1/interrupt", "POST", R_INTERRUPT},
    {"/sdapi/v1/txt2img", "POST", R_TXT2IMG},
    {"/sdapi/v1/img2img", "POST", R_IMG2IMG},
    {"/sdapi/v1/schedulers", "GET", R_SCHEDULERS},
    {"/sdapi/v1/options", "GET", R_OPTIONS},
    {"/sdapi/v1/options", "POST", R_SET_OPTIONS},
};

typedef struct req {
    route r;
    char *body;
    size_t len, cap;
    bool too_big;
} req;

/* s as sent, cut to n bytes, control characters as '?': a client's bytes
 * never reach the terminal as escapes */
static const char *printable(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    for (; *s && k + 1 < n; s++) buf[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    buf[k] = 0;
    return buf;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, char *json, const char *method,
                                 const char *url)
{
    if (!json) {
        status = 500;
        json = strdup("{\"error\":{\"message\":\"out of memory\",\"code\":500}}");
        if (!json) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    if (!serve_config.quiet) {
        char m[24], u[128];
        fprintf(stderr, "lumen serve: %s %s %d\n", printable(method, m, sizeof m),
                printable(url, u, sizeof u), status);
    }
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *msg,
                                  const char *method, const char *url)
{
    return send_json(c, status, serve_error_json(status, msg), method, url);
}

/* a constant-time comparison: the key's bytes are not found by timing */
static bool key_ok(struct MHD_Connection *c)
{
    const char *key = serve_config.api_key;
    if (!key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t n = strlen(key), m = strlen(h);
    unsigned char d = n != m;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(key[i] ^ (i < m ? h[i] : 0));
    return d == 0;
}

/* whether the client is still there: no hang-up, no EOF waiting */
static bool client_alive(void *ctx)
{
    int fd = *(int *)ctx;
    if (fd < 0) return true;
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0;   /* 0: EOF */
}

static enum MHD_Result generate(struct MHD_Connection *c, req *q, const char *method, const char *url)
{
    int status = 400;
    char why[2048];
    serve_job *j = q->r == R_GENERATE ? serve_job_openai(q->body, q->len, &status, why, sizeof why)
                                      : serve_job_a1111(q->body, q->len, q->r == R_IMG2IMG, &status,
                                                        why, sizeof why);
    if (!j) return send_error(c, status, why, method, url);
    int st = serve_enqueue(j);
    if (st) {
        serve_job_free(j);
        snprintf(why, sizeof why, st == 429 ? "the queue is full (%d requests waiting, --queue); "
                 "try again later" : "the server is stopping", serve_config.queue);
        return send_error(c, st, why, method, url);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    serve_wait(j, client_alive, &fd);
    enum MHD_Result r;
    if (j->status != 200) r = send_error(c, j->status, j->error, method, url);
    else r = send_json(c, 200, j->api == SERVE_OPENAI ? serve_reply_openai(j) : serve_reply_a1111(j),
                       method, url);
    serve_job_free(j);
    return r;
}

static enum MHD_Result first_call(struct MHD_Connection *c, const char *url, const char *method,
                                  void **con_cls)
{
    route r = R_NONE;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) {
            path_known = true;
            if (!strcmp(method, routes[i].method)) r = routes[i].r;
        }
    char why[512];
    if (!key_ok(c))
        return send_error(c, 401, "a bearer key is required (Authorization: Bearer KEY; the server's "
                          "--api-key)", method, url);
    if (!path_known) {
        snprintf(why, sizeof why, "%.200s: no such endpoint (docs/SERVE.md lists them)", url);
        return send_error(c, 404, why, method, url);
    }
    if (r == R_NONE) {
        snprintf(why, sizeof why, "%.200s: method %.20s not allowed", url, method);
        return send_error(c, 405, why, method, url);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > serve_config.max_body) {
        snprintf(why, sizeof why, "the body is %.30s bytes: at most %zu (--max-body)", cl,
                 serve_config.max_body);
        return send_error(c, 413, why, method, url);
    }
    req *q = calloc(1, sizeof *q);
    if (!q) return MHD_NO;
    q->r = r;
    *con_cls = q;
    return MHD_YES;
}

enum MHD_Result serve_http_handle(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    if (!*con_cls) return first_call(c, url, method, con_cls);
    req *q = *con_cls;
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->too_big || q->len + n > serve_config.max_body) {
            q->too_big = true;   /* read and dropped: refused once it ends */
            free(q->body);
            q->body = NULL;
            q->len = q->cap = 0;
            return MHD_YES;
        }
        if (q->len + n + 1 > q->cap) {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap < q->len + n + 1) cap *= 2;
            char *b = realloc(q->body, cap);
            if (!b) return MHD_NO;
            q->body = b;
            q->cap = cap;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        q->body[q->len] = 0;
        return MHD_YES;
    }
    set_reading(c, false);
    char why[256];
    if (q->too_big) {
        snprintf(why, sizeof why, "the body is over %zu bytes (--max-body)", serve_config.max_body);
        return send_error(c, 413, why, method, url);
    }
    switch (q->r) {
    case R_MODELS: return send_json(c, 200, serve_list_openai_models(), method, url);
    case R_SD_MODELS: return send_json(c, 200, serve_list_a1111_models(), method, url);
    case R_SAMPLERS: return send_json(c, 200, serve_list_samplers(), method, url);
    case R_PROGRESS: return send_json(c, 200, serve_progress_json(), method, url);
    case R_SCHEDULERS: return send_json(c, 200, serve_list_schedulers(), method, url);
    case R_OPTIONS: return send_json(c, 200, serve_options_json(), method, url);
    case R_SET_OPTIONS: {
        char msg[1024];
        int st = serve_options_set(q->body ? q->body : "", q->len, msg, sizeof msg);
        return st == 200 ? send_json(c, 200, strdup("{}"), method, url) : send_error(c, st, msg, method, url);
    }
    case R_INTERRUPT:
        serve_interrupt();
        return send_json(c, 200, strdup("{}"), method, url);
    default:
        if (!q->len) return send_error(c, 400, "the body is empty: a JSON object is expected", method, url);
        return generate(c, q, method, url);
    }
}

void serve_http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    req *q = *con_cls;
    if (q) {
        free(q->body);
        free(q);
        *con_cls = NULL;
    }
    set_reading(c, true);   /* the next request on this connection, if any */
}
