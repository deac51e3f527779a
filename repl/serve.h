/* serve.h - what the files of `lumen serve` share (repl/serve*.c).
 *
 *   serve.c         the command line, the HTTP daemon (libmicrohttpd, one
 *                   thread per connection), signals, the slow-client reaper
 *   serve_http.c    routing, bodies, the bearer key, JSON errors, waiting on
 *                   a job while watching its client
 *   serve_req.c     requests read into jobs (OpenAI's and A1111's shapes),
 *                   the models folder, the listings
 *   serve_worker.c  the queue and its one worker thread: the resident
 *                   pipeline, generations, PNGs, base64
 *
 * Ownership: a job is made by serve_req.c, handed to the queue, run by the
 * worker, and freed by the connection thread that waits for it (the worker
 * never frees one; a job whose client left is still waited for). */
#ifndef LM_SERVE_H
#define LM_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>

/* the server's settings (lumen serve's options) */
typedef struct serve_cfg {
    const char *host, *models, *api_key, *default_model, *device_name;
    char models_real[4096];       /* realpath of models */
    const char *lora_dir;         /* --lora-dir: <lora:NAME:W> tags' files, or NULL */
    char lora_real[4096];         /* realpath of lora_dir */
    int port;
    size_t max_body;              /* bytes of a request body */
    int64_t max_side;             /* pixels, each of width and height */
    int64_t max_steps, max_images;/* images: n, or batch_size * n_iter */
    int queue;                    /* jobs waiting beyond the running one */
    unsigned idle_timeout;        /* seconds without a byte */
    unsigned read_timeout;        /* seconds to receive a whole request */
    int connections;              /* at most this many open at once */
    int dtype;                    /* lm_dtype; LM_DTYPE_COUNT = lumen generate's default */
    bool quiet;
} serve_cfg;

extern serve_cfg serve_config;

/* One image a job made. */
typedef struct serve_image {
    char *b64;       /* the PNG, base64 */
    char *infotext;  /* its `parameters` chunk */
    uint64_t seed;
} serve_image;

typedef enum serve_api { SERVE_OPENAI, SERVE_A1111 } serve_api;

typedef struct serve_job {
    serve_api api;
    char model[256];             /* a name inside --models */
    char *prompt, *negative;     /* negative NULL: none given */
    char sampler[64];            /* a lm_sampler_find name, "" = the family's */
    int64_t steps, width, height, batch, iters, clip_skip;   /* 0: the family's / defaults */
    double cfg, strength;        /* < 0: the family's */
    uint64_t seed;
    unsigned char *init_png;     /* img2img: the init image's bytes */
    size_t init_size;
    unsigned char *mask_png;     /* img2img: inpainting's mask (A1111's mask), or NULL */
    size_t mask_size;
    int64_t mask_blur;           /* A1111's mask_blur (default 4) */
    bool mask_invert;            /* A1111's inpainting_mask_invert 1 */
    bool full_res;               /* A1111's inpaint_full_res ("Only masked") */
    int64_t full_res_padding;    /* A1111's inpaint_full_res_padding */
    cJSON *echo;                 /* A1111's "parameters": the request as read */
    /* the outcome, set by the worker under the queue's lock */
    int status;                  /* 0 while pending; the HTTP status once done */
    char error[1024];
    serve_image *images;
    int nimages;
    volatile int cancel;         /* 1: the client left, 2: interrupted */
    pthread_cond_t done;
    struct serve_job *next;
} serve_job;

/* ---- serve_req.c ---- */
/* The job of a request body, or NULL with *status and why (a 4xx). */
serve_job *serve_job_openai(const char *body, size_t n, int *status, char *why, size_t wn);
serve_job *serve_job_a1111(const char *body, size_t n, bool img2img, int *status, char *why,
                           size_t wn);
void serve_job_free(serve_job *j);
/* A model name's path inside --models (malloc'd), or NULL with why: no
 * such model, or a name that leaves the folder. */
char *serve_model_path(const char *name, int *status, char *why, size_t wn);
/* The names of the models in --models (sorted), a cJSON array of strings. */
cJSON *serve_model_names(void);
/* The model a request without one gets: --model, else the first name. */
bool serve_default_model(char *out, size_t n);
/* the listings' JSON */
char *serve_list_openai_models(void);
char *serve_list_a1111_models(void);
char *serve_list_samplers(void);
char *serve_list_schedulers(void);
/* GET /sdapi/v1/options: the model of requests that name none; POST sets
 * it from sd_model_checkpoint (other options are left alone): 200, or the
 * error status with why */
char *serve_options_json(void);
int serve_options_set(const char *body, size_t n, char *why, size_t wn);
/* An A1111 response body for a finished job (malloc'd). */
char *serve_reply_a1111(const serve_job *j);
char *serve_reply_openai(const serve_job *j);
/* {"error": {"message": MSG, "type": ..., "code": status}} (malloc'd) */
char *serve_error_json(int status, const char *msg);

/* ---- serve_worker.c ---- */
int serve_worker_start(void);             /* 0, or -1 with the reason printed */
void serve_worker_stop(void);             /* fails the waiting jobs, joins the worker */
/* Queues j: 0, or 429 when the queue is full, 503 when stopping. */
int serve_enqueue(serve_job *j);
/* Waits until j is done, calling alive() every tick; a client that left
 * cancels the job (the worker stops it at its next step). */
void serve_wait(serve_job *j, bool (*alive)(void *), void *ctx);
/* A1111's /progress body (malloc'd) */
char *serve_progress_json(void);
/* POST /sdapi/v1/interrupt: stops the running job at its next step */
void serve_interrupt(void);
/* ---- serve_b64.c: base64 (RFC 4648; decoding: NULL for anything else, whitespace skipped, padding optional, the URL-safe alphabet too) ---- */
char *serve_b64_encode(const unsigned char *p, size_t n);
unsigned char *serve_b64_decode(const char *s, size_t n, size_t *out);

/* ---- serve_http.c: libmicrohttpd's callbacks ---- */
enum MHD_Result serve_http_handle(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls);
void serve_http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe);
void serve_http_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe);
/* Shuts the sockets of requests not received within --read-timeout (a
 * client sending a byte a second never trips the idle timeout). */
void serve_reaper_tick(void);

#endif
