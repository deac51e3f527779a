/* shaders.h - the SPIR-V modules embedded at build time (generated
 * $(BUILD)/gen/vk_shaders.c, written by tools/embed.c from shaders/ *.comp). */
#ifndef LM_VK_SHADERS_H
#define LM_VK_SHADERS_H

#include <stdint.h>

typedef struct lm_vk_shader {
    const char *name;          /* file name without .comp */
    const uint32_t *code;
    int words;
} lm_vk_shader;

extern const lm_vk_shader lm_vk_shaders[];   /* ends with a NULL name */
const lm_vk_shader *lm_vk_shader_find(const char *name);

#endif
