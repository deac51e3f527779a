/* vkops.h - codes shared by the C side and the shaders (#included by both,
 * so it holds only #defines).  Dtype codes equal lm_dtype's values. */
#ifndef LM_VKOPS_H
#define LM_VKOPS_H

#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_F64 3
#define DT_I8 4
#define DT_U8 5
#define DT_I16 6
#define DT_I32 7
#define DT_I64 8
#define DT_BOOL 9

/* the arithmetic a kernel computes in */
#define KIND_F 0   /* float (f32, f16, bf16 storage) */
#define KIND_D 1   /* double */
#define KIND_I 2   /* int64 (integers and bool) */

/* elementwise modes */
#define EW_UNARY 0
#define EW_BINARY 1
#define EW_WHERE 2

/* unary */
#define U_COPY 0
#define U_NEG 1
#define U_ABS 2
#define U_SIGN 3
#define U_EXP 4
#define U_LOG 5
#define U_LOG1P 6
#define U_EXPM1 7
#define U_SQRT 8
#define U_RSQRT 9
#define U_SQUARE 10
#define U_RECIP 11
#define U_SIN 12
#define U_COS 13
#define U_TAN 14
#define U_TANH 15
#define U_SIGMOID 16
#define U_RELU 17
#define U_GELU 18
#define U_GELU_TANH 19
#define U_SILU 20
#define U_SOFTPLUS 21
#define U_ERF 22
#define U_FLOOR 23
#define U_CEIL 24
#define U_ROUND 25
#define U_ISNAN 26
#define U_ISINF 27
#define U_NOT 28
#define U_CLAMP 29
#define U_ERFC 30

/* binary */
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_POW 4
#define B_MOD 5
#define B_MAX 6
#define B_MIN 7
#define B_ATAN2 8
#define B_EQ 9
#define B_NE 10
#define B_LT 11
#define B_LE 12
#define B_GT 13
#define B_GE 14
#define B_AND 15
#define B_OR 16
#define B_XOR 17
#define B_LOGADDEXP 18
#define B_FLOORDIV 19
#define B_HYPOT 20

/* reductions */
#define R_SUM 0
#define R_MEAN 1
#define R_PROD 2
#define R_MAX 3
#define R_MIN 4
#define R_VAR 5
#define R_STD 6
#define R_LSE 7
#define R_ALL 8
#define R_ANY 9
#define R_ARGMAX 10
#define R_ARGMIN 11

/* creation */
#define C_FULL 0
#define C_ARANGE 1
#define C_LINSPACE 2
#define C_EYE 3
#define C_UNIFORM 4
#define C_NORMAL 5

#define EW_MAXDIM 6
#define RED_MAXDIM 4

/* fused programs (fused.comp): a uint array, all offsets in words.
 * Header: FZ_NIN, FZ_NSTEPS, FZ_SHAPE (EW_MAXDIM collapsed dims).
 * Input k at FZ_IN + k * FZ_IN_WORDS: dtype, slot, element offset, strides.
 * Step s at FZ_STEP + s * FZ_STEP_WORDS: the fields FS_*. */
#define FZ_MAXIN 16
#define FZ_MAXSTEP 32
#define FZ_NIN 0
#define FZ_NSTEPS 1
#define FZ_SHAPE 2
#define FZ_IN 8
#define FZ_IN_WORDS 9
#define FI_DT 0
#define FI_SLOT 1
#define FI_OFF 2
#define FI_ST 3
#define FZ_STEP (FZ_IN + FZ_MAXIN * FZ_IN_WORDS)
#define FZ_STEP_WORDS 18
#define FS_MODE 0     /* EW_UNARY, EW_BINARY, EW_WHERE */
#define FS_CODE 1     /* U_* or B_* */
#define FS_KIND 2     /* KIND_F or KIND_I */
#define FS_DTO 3
#define FS_DT 4       /* 3 input dtypes */
#define FS_SLOT 7     /* 3 input slots */
#define FS_OSLOT 10   /* the result's slot (unused by the last step) */
#define FS_FLAGS 11   /* clamp: bit0 has lo, bit1 has hi */
#define FS_LOF 12
#define FS_HIF 13
#define FS_LOI 14     /* int64 bounds, low word first */
#define FS_HII 16
#define FZ_MAXWORDS (FZ_STEP + FZ_MAXSTEP * FZ_STEP_WORDS)

/* sort.comp / sort_merge.comp modes (nn_index.c) */
#define SORT_VALUES 0    /* write the sorted values (x's dtype) */
#define SORT_INDICES 1   /* write the sorted indices (i64) */
#define SORT_RUNS 2      /* write sorted (key, index) runs for merging */
#define SORT_MERGE 3     /* merge pairs of runs (sort_merge.comp) */

/* scatter.comp modes (nn_index.c) */
#define SC_DIRECT 0      /* one invocation walks each fiber */
#define SC_NORM 1        /* normalise indices into rows [fiber, T] */
#define SC_APPLY 2       /* apply runs of one destination, rows sorted */

#endif
