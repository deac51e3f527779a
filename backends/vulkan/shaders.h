/* shaders.h - the SPIR-V modules.  The build compiles shaders/ into one
 * file, $(BUILD)/lumen-spirv.bin (tools/spvpack.c; installed as
 * $(PREFIX)/share/lumen/lumen-spirv.bin), and spirv.c finds and maps it
 * once per process: the executables stay small and share one copy. */
#ifndef LM_VK_SHADERS_H
#define LM_VK_SHADERS_H

#include <stdint.h>
#include "core/lumen.h"

#define LM_VK_SPIRV_FILE "lumen-spirv.bin"

typedef struct lm_vk_shader {
    const char *name;          /* variant name (module.mk's table or NAME.comp) */
    const uint32_t *code;      /* points into the mapped file, kept until exit */
    int words;
    int index;                 /* 0..count-1, for per-device module slots */
} lm_vk_shader;

/* Finds and maps the file once (LUMEN_SPIRV, else beside the program or the
 * library, its parent, ../share/lumen, then the install prefix).  The
 * error names every place it looked and why a file found there was refused. */
lm_status lm_vk_spirv_load(void);
/* where the file was found (after a successful load), or "" */
const char *lm_vk_spirv_path(void);
/* NULL when the name is unknown or no file could be loaded */
const lm_vk_shader *lm_vk_shader_find(const char *name);

#endif
