/* zimage_keys.c - Z-Image transformer weights in the original layout
 * (Alibaba's Z-Image repository: the single files ComfyUI and
 * stable-diffusion.cpp load, the GGUF files ComfyUI-GGUF writes) renamed to
 * diffusers' names, as diffusers' convert_z_image_transformer_checkpoint_
 * to_diffusers does (see zimage.h), except that attention.qkv.weight stays
 * fused: the loader takes it as it is, since a quantized matrix is not split
 * by rows here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zimage.h"
#include "lumen.h"

#define ZK_PREFIX "model.diffusion_model."

/* the diffusers name of original key k (malloc'd), "" for a key diffusers
 * drops, NULL when out of memory */
static char *rename_key(const char *k)
{
    static const struct { const char *from, *to; bool prefix; } rules[] = {
        {"final_layer.", "all_final_layer.2-1.", true},
        {"x_embedder.", "all_x_embedder.2-1.", true},
        {".attention.out.", ".attention.to_out.0.", false},
        {".attention.k_norm.weight", ".attention.norm_k.weight", false},
        {".attention.q_norm.weight", ".attention.norm_q.weight", false},
    };
    if (!strncmp(k, ZK_PREFIX, strlen(ZK_PREFIX))) k += strlen(ZK_PREFIX);
    if (!strcmp(k, "norm_final.weight")) return strdup("");
    size_t n = strlen(k) + 32;
    char *out = malloc(n);
    if (!out) return NULL;
    snprintf(out, n, "%s", k);
    for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
        char *at = strstr(out, rules[r].from);
        if (!at || (rules[r].prefix && at != out)) continue;
        char tail[256];
        snprintf(tail, sizeof tail, "%s", at + strlen(rules[r].from));
        snprintf(at, n - (size_t)(at - out), "%s%s", rules[r].to, tail);
    }
    return out;
}

bool lm_zimage_is_original(const lm_tensor_set *set)
{
    return lm_tensor_set_find(set, "x_embedder.weight") >= 0 ||
           lm_tensor_set_find(set, ZK_PREFIX "x_embedder.weight") >= 0;
}

lm_status lm_zimage_rename_original(lm_tensor_set *set, const char *file)
{
    for (int i = 0; i < set->count; i++) {
        if (strlen(set->names[i]) > 200)
            return lm_error_set(LM_ERR_FORMAT, "%s: key %.40s... is too long for a Z-Image weight", file,
                                set->names[i]);
        char *to = rename_key(set->names[i]);
        if (!to) return lm_error_set(LM_ERR_NOMEM, "out of memory");
        if (!*to) {
            /* dropped: the last entry takes its place */
            free(to);
            lm_array_release(set->arrays[i]);
            free(set->names[i]);
            set->count--;
            set->arrays[i] = set->arrays[set->count];
            set->names[i] = set->names[set->count];
            i--;
            continue;
        }
        int j = lm_tensor_set_find(set, to);
        if (j >= 0 && j != i) {
            lm_status st = lm_error_set(LM_ERR_FORMAT, "%s: %s and %s both name the weight %s", file,
                                        set->names[j], set->names[i], to);
            free(to);
            return st;
        }
        free(set->names[i]);
        set->names[i] = to;
    }
    return LM_OK;
}
