/* term_image.c - images inline in the terminal: the protocol the terminal
 * speaks and the escape sequences of an image.  The encodings (kitty
 * graphics, iTerm2, sixel, symbols) are libchafa's; what is ours is the
 * choice of protocol, asked of the terminal with a bounded wait. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <chafa.h>
#include "term_image.h"

static const char *const NAMES[] = {"off", "blocks", "sixel", "kitty", "iterm"};

const char *lm_term_proto_name(lm_term_proto p)
{
    return (unsigned)p < sizeof NAMES / sizeof *NAMES ? NAMES[p] : "?";
}

bool lm_term_proto_parse(const char *name, lm_term_proto *p)
{
    for (unsigned i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (!strcmp(name, NAMES[i])) { *p = (lm_term_proto)i; return true; }
    return false;
}

/* ---- detection ---- */

static bool env_is(const char *var, const char *value)
{
    const char *v = getenv(var);
    return v && !strcmp(v, value);
}

static bool env_starts(const char *var, const char *prefix)
{
    const char *v = getenv(var);
    return v && !strncmp(v, prefix, strlen(prefix));
}

/* From the environment alone; *decided = false when it does not
 * say (then the terminal is asked). */
static lm_term_proto from_env(const char **why, bool *decided)
{
    *decided = true;
    if (env_is("TERM", "dumb")) { *why = "TERM=dumb"; return LM_TERM_OFF; }
    /* a multiplexer draws its own screen: pixels would not survive it */
    if (getenv("TMUX") || getenv("STY") || env_starts("TERM", "screen") || env_starts("TERM", "tmux")) {
        *why = "inside tmux or screen";
        return LM_TERM_BLOCKS;
    }
    if (getenv("KITTY_WINDOW_ID") || env_is("TERM", "xterm-kitty")) {
        *why = "kitty (KITTY_WINDOW_ID or TERM=xterm-kitty)";
        return LM_TERM_KITTY;
    }
    if (env_is("TERM", "xterm-ghostty") || env_is("TERM_PROGRAM", "ghostty")) {
        *why = "ghostty (TERM or TERM_PROGRAM)";
        return LM_TERM_KITTY;
    }
    if (env_is("TERM_PROGRAM", "iTerm.app") || env_is("LC_TERMINAL", "iTerm2") ||
        env_is("TERM_PROGRAM", "WezTerm")) {
        *why = "iTerm2 or WezTerm (TERM_PROGRAM or LC_TERMINAL)";
        return LM_TERM_ITERM;
    }
    *decided = false;
    return LM_TERM_OFF;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Whether the answers so far hold the DA1 reply "ESC [ ? Ps ; ... c"; then
 * *sixel says whether one of its attributes is 4. */
static bool da1_done(const char *buf, bool *sixel)
{
    for (const char *p = strstr(buf, "\033[?"); p; p = strstr(p + 1, "\033[?")) {
        const char *q = p + 3;
        while ((*q >= '0' && *q <= '9') || *q == ';') q++;
        if (*q != 'c') continue;
        *sixel = false;
        for (const char *a = p + 3; a < q;) {
            if (strtol(a, NULL, 10) == 4) *sixel = true;
            a = strchr(a, ';');
            if (!a || a > q) break;
            a++;
        }
        return true;
    }
    return false;
}

/* Asks the terminal on fd: kitty's graphics query (a 1x1 RGB image it
 * only checks, id 31) then DA1, which every terminal that answers at all
 * answers last.  Raw mode (no echo, no line buffering) for at most
 * LM_TERM_QUERY_MS, restored on every path. */
static lm_term_proto ask(int fd, const char **why)
{
    static const char q[] = "\033_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\033\\\033[c";
    struct termios old, raw;
    if (tcgetattr(fd, &old) != 0) { *why = "the terminal's modes could not be read"; return LM_TERM_BLOCKS; }
    raw = old;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(fd, TCSANOW, &raw) != 0) { *why = "raw mode refused"; return LM_TERM_BLOCKS; }
    char buf[512];
    size_t n = 0;
    bool sixel = false, answered = false;
    ssize_t wr;
    do wr = write(fd, q, sizeof q - 1); while (wr < 0 && errno == EINTR);
    double end = now_ms() + LM_TERM_QUERY_MS;
    while (wr == (ssize_t)(sizeof q - 1) && n < sizeof buf - 1) {
        double left = end - now_ms();
        if (left <= 0) break;
        struct pollfd pf = {fd, POLLIN, 0};
        int r = poll(&pf, 1, (int)left + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        if (da1_done(buf, &sixel)) { answered = true; break; }
    }
    tcsetattr(fd, TCSANOW, &old);
    buf[n] = 0;
    if (strstr(buf, "\033_Gi=31;OK")) { *why = "the terminal answered kitty's graphics query"; return LM_TERM_KITTY; }
    if (!answered) { *why = "no answer to the device-attributes query within 200 ms"; return LM_TERM_BLOCKS; }
    if (sixel) { *why = "the terminal's device attributes include sixel (4)"; return LM_TERM_SIXEL; }
    *why = "the terminal answered without sixel or kitty graphics";
    return LM_TERM_BLOCKS;
}

lm_status lm_term_detect(lm_term_proto *p, const char **why)
{
    static bool done;
    static lm_term_proto found;
    static const char *found_why;
    const char *w = NULL, *forced = getenv("LUMEN_IMAGES");
    if (!isatty(STDOUT_FILENO)) {
        *p = LM_TERM_OFF;
        if (why) *why = "stdout is not a terminal";
        return LM_OK;
    }
    if (forced && *forced) {
        if (!lm_term_proto_parse(forced, p))
            return lm_error_set(LM_ERR_ARG, "LUMEN_IMAGES=%s: expected kitty, iterm, sixel, blocks "
                                "or off", forced);
        if (why) *why = "LUMEN_IMAGES";
        return LM_OK;
    }
    if (!done) {
        bool decided;
        found = from_env(&w, &decided);
        if (!decided) {
            int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
            if (fd < 0) { found = LM_TERM_BLOCKS; w = "no controlling terminal to ask"; }
            /* a background job changing the modes would be stopped (SIGTTOU) */
            else if (tcgetpgrp(fd) != getpgrp()) { found = LM_TERM_BLOCKS; w = "a background job does not ask the terminal"; }
            else found = ask(fd, &w);
            if (fd >= 0) close(fd);
        }
        found_why = w;
        done = true;
    }
    *p = found;
    if (why) *why = found_why;
    return LM_OK;
}

/* ---- encoding ---- */

/* The terminal's size in cells and, where it says, in pixels. */
static void term_geometry(int *cols, int *rows, int *cell_w, int *cell_h)
{
    struct winsize ws = {0};
    *cols = 80; *rows = 24; *cell_w = 10; *cell_h = 20;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 || ws.ws_row == 0) return;
    *cols = ws.ws_col;
    *rows = ws.ws_row;
    if (ws.ws_xpixel >= ws.ws_col && ws.ws_ypixel >= ws.ws_row) {
        *cell_w = ws.ws_xpixel / ws.ws_col;
        *cell_h = ws.ws_ypixel / ws.ws_row;
    }
}

lm_status lm_term_encode(const unsigned char *rgba, int w, int h, lm_term_proto p,
                         const lm_term_size *size, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (w < 1 || h < 1 || (int64_t)w * h > ((int64_t)1 << 28))
        return lm_error_set(LM_ERR_ARG, "show: image size %dx%d is not valid (at most 2^28 pixels)",
                            w, h);
    if (p == LM_TERM_OFF) {
        *out = calloc(1, 1);
        return *out ? LM_OK : lm_error_set(LM_ERR_NOMEM, "show: out of memory");
    }
    int cols, rows, cw, ch;
    term_geometry(&cols, &rows, &cw, &ch);
    if (cols > 1000) cols = 1000;
    if (rows > 1000) rows = 1000;
    /* fit the terminal less the prompt's line unless told */
    int max_w = size && size->cols > 0 ? size->cols : cols;
    int max_h = size && size->rows > 0 ? size->rows : (rows > 3 ? rows - 2 : rows);
    if (max_w > 1000 || max_h > 1000)
        return lm_error_set(LM_ERR_ARG, "show: size %dx%d cells is too large (at most 1000x1000)",
                            max_w, max_h);
    int gw = max_w, gh = max_h;
    bool pixels = p != LM_TERM_BLOCKS;
    /* half blocks: two pixels a cell; else the cell's shape in pixels */
    float ratio = pixels ? (float)cw / (float)ch : 0.5f;
    /* an image is not enlarged past its pixels (a pixel per half cell
     * with half blocks) unless a size was asked for */
    bool zoom = size && (size->cols > 0 || size->rows > 0);
    if (pixels && !zoom) {
        /* its own size in cells, at most the bounds */
        int nw = (w + cw - 1) / cw, nh = (h + ch - 1) / ch;
        if (nw < gw) gw = nw;
        if (nh < gh) gh = nh;
    }
    chafa_calc_canvas_geometry(w, h, &gw, &gh, ratio, zoom || pixels, FALSE);
    if (gw < 1) gw = 1;
    if (gh < 1) gh = 1;

    ChafaCanvasConfig *cfg = chafa_canvas_config_new();
    ChafaSymbolMap *map = chafa_symbol_map_new();
    chafa_canvas_config_set_geometry(cfg, gw, gh);
    chafa_canvas_config_set_canvas_mode(cfg, CHAFA_CANVAS_MODE_TRUECOLOR);
    /* the image's own colours: no contrast stretch, no dithering */
    chafa_canvas_config_set_preprocessing_enabled(cfg, FALSE);
    chafa_canvas_config_set_dither_mode(cfg, CHAFA_DITHER_MODE_NONE);
    chafa_canvas_config_set_color_extractor(cfg, CHAFA_COLOR_EXTRACTOR_AVERAGE);
    chafa_canvas_config_set_cell_geometry(cfg, cw, ch);
    /* no REP (CSI n b): not every terminal repeats cells */
    chafa_canvas_config_set_optimizations(cfg, CHAFA_OPTIMIZATION_REUSE_ATTRIBUTES);
    static const ChafaPixelMode MODES[] = {CHAFA_PIXEL_MODE_SYMBOLS, CHAFA_PIXEL_MODE_SYMBOLS,
                                           CHAFA_PIXEL_MODE_SIXELS, CHAFA_PIXEL_MODE_KITTY,
                                           CHAFA_PIXEL_MODE_ITERM2};
    chafa_canvas_config_set_pixel_mode(cfg, MODES[p]);
    chafa_symbol_map_add_by_tags(map, CHAFA_SYMBOL_TAG_VHALF | CHAFA_SYMBOL_TAG_SPACE |
                                      CHAFA_SYMBOL_TAG_SOLID);
    chafa_canvas_config_set_symbol_map(cfg, map);
    ChafaCanvas *canvas = chafa_canvas_new(cfg);
    chafa_canvas_draw_all_pixels(canvas, CHAFA_PIXEL_RGBA8_UNASSOCIATED, rgba, w, h, w * 4);
    /* every protocol's sequences, whatever TERM says: the choice was made */
    ChafaTermDb *db = chafa_term_db_get_default();
    ChafaTermInfo *ti = chafa_term_db_get_fallback_info(db);
    GString *s = chafa_canvas_print(canvas, ti);
    chafa_term_info_unref(ti);
    chafa_canvas_unref(canvas);
    chafa_symbol_map_unref(map);
    chafa_canvas_config_unref(cfg);
    size_t n = s->len;
    char *buf = malloc(n + 2);
    if (buf) {
        memcpy(buf, s->str, n);
        /* the cursor below the image; a reset first (half blocks leave
         * colours set) */
        if (p == LM_TERM_BLOCKS) {
            char *b2 = realloc(buf, n + 6);
            if (b2) { buf = b2; memcpy(buf + n, "\033[0m", 4); n += 4; }
        }
        buf[n++] = '\n';
        buf[n] = 0;
    }
    g_string_free(s, TRUE);
    if (!buf) return lm_error_set(LM_ERR_NOMEM, "show: out of memory (%zu bytes)", n);
    *out = buf;
    *len = n;
    return LM_OK;
}

unsigned char *lm_term_rgba(const lm_png_u8 *img)
{
    size_t np = (size_t)(img->h * img->w), c = (size_t)img->c;
    unsigned char *o = malloc(np * 4);
    if (!o) { lm_error_set(LM_ERR_NOMEM, "show: out of memory (%zu pixels)", np); return NULL; }
    const unsigned char *s = img->data;
    for (size_t i = 0; i < np; i++, s += c) {
        unsigned char *d = o + 4 * i;
        if (c <= 2) d[0] = d[1] = d[2] = s[0];
        else { d[0] = s[0]; d[1] = s[1]; d[2] = s[2]; }
        d[3] = c == 2 ? s[1] : c == 4 ? s[3] : 255;
    }
    return o;
}

/* RGBA pixels of an f32 [C,H,W] image in 0..1 (lm_png_read_f32's) */
static unsigned char *rgba_of_f32(const lm_png_f32 *img)
{
    size_t np = (size_t)(img->h * img->w);
    unsigned char *o = malloc(np * 4);
    if (!o) { lm_error_set(LM_ERR_NOMEM, "show: out of memory (%zu pixels)", np); return NULL; }
    for (size_t i = 0; i < np; i++)
        for (int k = 0; k < 4; k++) {
            int64_t c = img->c <= 2 ? (k < 3 ? 0 : 1) : k;
            float v = k == 3 && (img->c == 1 || img->c == 3) ? 1.0f : img->data[(size_t)c * np + i];
            o[4 * i + (size_t)k] = (unsigned char)(v > 0 ? (v < 1 ? v * 255 + 0.5f : 255) : 0);
        }
    return o;
}

lm_status lm_term_show_file(const char *path, const lm_term_size *size, bool *shown)
{
    if (shown) *shown = false;
    lm_term_proto p;
    if (lm_term_detect(&p, NULL) != LM_OK) return lm_error_status();
    if (p == LM_TERM_OFF) return LM_OK;
    /* no lm_array: lumen upscale shows its images from its writer thread */
    lm_png_f32 img;
    if (lm_png_read_f32(path, &img) != LM_OK) return lm_error_status();
    unsigned char *rgba = rgba_of_f32(&img);
    free(img.data);
    if (!rgba) return lm_error_status();
    char *s;
    size_t n;
    lm_status st = lm_term_encode(rgba, (int)img.w, (int)img.h, p, size, &s, &n);
    free(rgba);
    if (st != LM_OK) return lm_error_prefix("show %s", path);
    fflush(stdout);
    bool ok = fwrite(s, 1, n, stdout) == n && fflush(stdout) == 0;
    free(s);
    if (!ok) return lm_error_set(LM_ERR_IO, "show %s: writing to the terminal failed", path);
    if (shown) *shown = true;
    return LM_OK;
}
