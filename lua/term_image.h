/* term_image.h - images shown inline in the terminal (lua/term_image.c):
 * which protocol the terminal speaks (kitty graphics, iTerm2 inline
 * images, sixel, or truecolor half blocks) and the escape sequences of an
 * image, encoded by libchafa.  lm.show, the REPL's :show and the CLI's
 * --show all come here.  Nothing is written when stdout is not a
 * terminal. */
#ifndef LM_TERM_IMAGE_H
#define LM_TERM_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include "core/lumen.h"
#include "core/io/io.h"

typedef enum lm_term_proto {
    LM_TERM_OFF = 0,     /* show nothing */
    LM_TERM_BLOCKS,      /* truecolor upper/lower half blocks (any terminal) */
    LM_TERM_SIXEL,
    LM_TERM_KITTY,
    LM_TERM_ITERM,
} lm_term_proto;

/* "off", "blocks", "sixel", "kitty", "iterm". */
const char *lm_term_proto_name(lm_term_proto p);
/* The protocol of a name (as LUMEN_IMAGES takes it); false if unknown. */
bool lm_term_proto_parse(const char *name, lm_term_proto *p);

/* The protocol for stdout: LM_TERM_OFF when stdout is not a terminal;
 * else LUMEN_IMAGES when set; else from the environment (KITTY_WINDOW_ID,
 * TERM, TERM_PROGRAM, LC_TERMINAL, TMUX); else from the terminal's answer
 * to kitty's graphics query and the device-attributes query (DA1: sixel is
 * attribute 4), read in raw mode for at most LM_TERM_QUERY_MS (the mode is
 * restored on every path; a terminal that never answers, or a background
 * job, gets half blocks).  Decided once per process; *why (may be NULL) receives a
 * static sentence saying how.  Fails only on a LUMEN_IMAGES value it does
 * not know (the error names it). */
#define LM_TERM_QUERY_MS 200
lm_status lm_term_detect(lm_term_proto *p, const char **why);

typedef struct lm_term_size {
    int cols, rows;      /* the largest size in cells; 0: fit the terminal */
} lm_term_size;

/* The escape sequences that draw w x h pixels (RGBA, 8 bits, rows of 4*w
 * bytes) with protocol p in at most size's cells (keeping the aspect),
 * followed by a newline; *out is malloc'd (caller frees), *len its length
 * (not counting the terminating NUL). */
lm_status lm_term_encode(const unsigned char *rgba, int w, int h, lm_term_proto p,
                         const lm_term_size *size, char **out, size_t *len);

/* RGBA pixels of an 8-bit image of 1-4 channels (gray, gray+alpha, RGB,
 * RGBA), malloc'd (caller frees); NULL + error when out of memory. */
unsigned char *lm_term_rgba(const lm_png_u8 *img);

/* Shows a PNG file on stdout with the detected protocol (path names it in
 * errors); *shown (may be NULL) says whether anything was written.  Used
 * by the CLI's --show. */
lm_status lm_term_show_file(const char *path, const lm_term_size *size, bool *shown);

#endif
