/* nn.c - dispatch of the neural-network ops on the CPU (kernels in
 * backends/cpu/nn_*.c) and the f32 output staging they share. */
#include <dlfcn.h>
#include <stdlib.h>
#include "nn.h"
#include "quant_cpu.h"
#include "core/quant.h"

bool lm_cpu_supports_nn(const lm_array *node)
{
    switch (node->op) {
    case LM_OP_CONV: case LM_OP_CONV_TRANSPOSE: case LM_OP_MAX_POOL: case LM_OP_AVG_POOL:
    case LM_OP_ADAPTIVE_AVG_POOL: case LM_OP_UPSAMPLE: case LM_OP_SOFTMAX: case LM_OP_LOG_SOFTMAX:
    case LM_OP_LAYER_NORM: case LM_OP_RMS_NORM: case LM_OP_GROUP_NORM: case LM_OP_ATTENTION:
    case LM_OP_ROPE: case LM_OP_TOPK: case LM_OP_SORT: case LM_OP_ARGSORT: case LM_OP_SCATTER:
    case LM_OP_SCATTER_ADD: case LM_OP_ONE_HOT: case LM_OP_TRIL: case LM_OP_TRIU: case LM_OP_QLINEAR:
    case LM_OP_DEQUANTIZE:
        return true;
    default:
        return false;   /* the rest are compositions built in core/ops_nn.c */
    }
}

lm_status lm_cpu_run_nn(lm_device *d, lm_array *node)
{
    (void)d;
    if (node->size == 0) return LM_OK;
    switch (node->op) {
    case LM_OP_CONV: return lm_nn_conv(node);
    case LM_OP_CONV_TRANSPOSE: return lm_nn_conv_transpose(node);
    case LM_OP_MAX_POOL: case LM_OP_AVG_POOL: case LM_OP_ADAPTIVE_AVG_POOL: return lm_nn_pool(node);
    case LM_OP_UPSAMPLE: return lm_nn_upsample(node);
    case LM_OP_SOFTMAX: case LM_OP_LOG_SOFTMAX: return lm_nn_softmax(node);
    case LM_OP_LAYER_NORM: case LM_OP_RMS_NORM: case LM_OP_GROUP_NORM: return lm_nn_norm(node);
    case LM_OP_ATTENTION: return lm_nn_attention(node);
    case LM_OP_ROPE: return lm_nn_rope(node);
    case LM_OP_TOPK: case LM_OP_SORT: case LM_OP_ARGSORT: return lm_nn_sort(node);
    case LM_OP_SCATTER: case LM_OP_SCATTER_ADD: return lm_nn_scatter(node);
    case LM_OP_ONE_HOT: return lm_nn_one_hot(node);
    case LM_OP_TRIL: case LM_OP_TRIU: return lm_nn_tri(node);
    case LM_OP_QLINEAR: return lm_nn_qlinear(node);
    case LM_OP_DEQUANTIZE: {   /* a quantized tensor's blocks (never a view) as f32 */
        const lm_array *q = node->inputs[0];
        return lm_dequantize_row(q->dtype, (const unsigned char *)q->buf->host + lm_dtype_nbytes(q->dtype, q->offset),
                                 node->buf->host, node->size);
    }
    default:
        return lm_error_set(LM_ERR_UNSUPPORTED, "cpu: %s is not implemented", lm_op_name(node->op));
    }
}

float *nn_out_begin(lm_array *node, float **stage)
{
    *stage = NULL;
    if (node->dtype == LM_F32) return lm_cpu_ptr(node);
    *stage = malloc(sizeof(float) * (size_t)node->size);
    if (!*stage) lm_error_set(LM_ERR_NOMEM, "%s: out of host memory", lm_op_name(node->op));
    return *stage;
}

void nn_out_end(lm_array *node, float *stage)
{
    if (!stage) return;
    lm_cpu_convert(lm_cpu_ptr(node), node->dtype, stage, LM_F32, (size_t)node->size);
    free(stage);
}

