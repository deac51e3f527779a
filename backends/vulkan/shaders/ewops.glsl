// ewops.glsl - the elementwise op semantics shared by eltwise.glsl (op fixed
// by a specialization constant, so the switch folds away) and fused.comp
// (op read from the program at run time): one definition, so a fused chain
// computes exactly what the unfused kernels do.  Needs common.glsl and
// math.glsl.  Clamp takes its bounds from the caller.
//
// The host sends only codes the op table (core/op.h, column vk) names, so
// the defaults below are unreachable; they return NaN (or EW_NO_CASE for
// integers), never the input, so a code missing here shows in the parity
// tests instead of passing as the identity.
#define EW_NO_CASE (-9223372036854775807l - 1l)

float ew_un_f(uint op, float x)
{
    switch (op) {
    case U_COPY: return x;
    case U_NEG: return -x;
    case U_ABS: return abs(x);
    case U_SIGN: return sign_f(x);
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_LOG1P: return log1p_f(x);
    case U_EXPM1: return expm1_f(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0 / sqrt(x);
    case U_SQUARE: return x * x;
    case U_RECIP: return 1.0 / x;
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_TAN: return tan(x);
    case U_TANH: return tanh_f(x);
    case U_SIGMOID: return sigmoid_f(x);
    case U_RELU: return x > 0.0 ? x : (isnan(x) ? x : 0.0);
    case U_GELU: return 0.5 * x * (1.0 + erf_f(x * 0.70710678118654752));
    case U_GELU_TANH:
        return 0.5 * x * (1.0 + tanh_f(0.79788456080286536 * (x + 0.044715 * x * x * x)));
    case U_SILU: return x * sigmoid_f(x);
    case U_SOFTPLUS: return x > 20.0 ? x : log1p_f(exp(x));
    case U_ERF: return erf_f(x);
    case U_ERFC: return erfc_f(x);
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return roundEven(x);
    case U_ISNAN: return isnan(x) ? 1.0 : 0.0;
    case U_ISINF: return isinf(x) ? 1.0 : 0.0;
    case U_NOT: return x == 0.0 ? 1.0 : 0.0;
    }
    return M_NAN;
}

float ew_bin_f(uint op, float a, float b)
{
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pow_f(a, b);
    case B_MOD: return mod_f(a, b);
    case B_MAX: return max_f(a, b);
    case B_MIN: return min_f(a, b);
    case B_ATAN2: return atan2_f(a, b);
    case B_LOGADDEXP: return logaddexp_f(a, b);
    case B_FLOORDIV: return floordiv_f(a, b);
    case B_HYPOT: return hypot_f(a, b);
    case B_EQ: return a == b ? 1.0 : 0.0;
    case B_NE: return a != b ? 1.0 : 0.0;
    case B_LT: return a < b ? 1.0 : 0.0;
    case B_LE: return a <= b ? 1.0 : 0.0;
    case B_GT: return a > b ? 1.0 : 0.0;
    case B_GE: return a >= b ? 1.0 : 0.0;
    case B_AND: return (a != 0.0 && b != 0.0) ? 1.0 : 0.0;
    case B_OR: return (a != 0.0 || b != 0.0) ? 1.0 : 0.0;
    case B_XOR: return ((a != 0.0) != (b != 0.0)) ? 1.0 : 0.0;
    }
    return M_NAN;
}

int64_t ew_un_i(uint op, int64_t x)
{
    switch (op) {
    case U_NEG: return -x;
    case U_ABS: return x < 0l ? -x : x;
    case U_SIGN: return x > 0l ? 1l : (x < 0l ? -1l : 0l);
    case U_SQUARE: return x * x;
    case U_ISNAN: return 0l;
    case U_ISINF: return 0l;
    case U_NOT: return x == 0l ? 1l : 0l;
    case U_RELU: return x > 0l ? x : 0l;
    case U_COPY: case U_FLOOR: case U_CEIL: case U_ROUND: return x;   // an integer is its own rounding
    }
    return EW_NO_CASE;
}

int64_t ew_bin_i(uint op, int64_t a, int64_t b)
{
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return b == 0l ? 0l : a / b;
    case B_POW: return pow_i(a, b);
    case B_MOD: return mod_i(a, b);
    case B_MAX: return max(a, b);
    case B_MIN: return min(a, b);
    case B_EQ: return a == b ? 1l : 0l;
    case B_NE: return a != b ? 1l : 0l;
    case B_LT: return a < b ? 1l : 0l;
    case B_LE: return a <= b ? 1l : 0l;
    case B_GT: return a > b ? 1l : 0l;
    case B_GE: return a >= b ? 1l : 0l;
    case B_AND: return (a != 0l && b != 0l) ? 1l : 0l;
    case B_OR: return (a != 0l || b != 0l) ? 1l : 0l;
    case B_XOR: return ((a != 0l) != (b != 0l)) ? 1l : 0l;
    }
    return EW_NO_CASE;
}

float ew_clamp_f(float x, uint flags, float lo, float hi)
{
    float r = x;
    if ((flags & 1u) != 0u && r < lo) r = lo;
    if ((flags & 2u) != 0u && r > hi) r = hi;
    return r;
}

int64_t ew_clamp_i(int64_t x, uint flags, int64_t lo, int64_t hi)
{
    int64_t r = x;
    if ((flags & 1u) != 0u && r < lo) r = lo;
    if ((flags & 2u) != 0u && r > hi) r = hi;
    return r;
}
