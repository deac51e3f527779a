// math.glsl - float functions GLSL lacks or leaves undefined at the edges
// (erf, log1p, expm1, pow of negative bases, tanh overflow), written to
// agree with the CPU backend's libm results within float rounding.

#define M_NAN uintBitsToFloat(0x7fc00000u)

float erf_f(float x)
{
    float z = abs(x);
    if (isnan(x)) return x;
    if (z < 0.5) {      // Taylor series: no cancellation near 0
        float s = x * x;
        float p = 1.0 / 75600.0;
        p = p * -s + 1.0 / 9360.0;
        p = p * s - 1.0 / 1320.0;
        p = p * s + 1.0 / 216.0;
        p = p * s - 1.0 / 42.0;
        p = p * s + 1.0 / 10.0;
        p = p * s - 1.0 / 3.0;
        p = p * s + 1.0;
        return 1.1283791670955126 * x * p;
    }
    // erfc by the Numerical Recipes Chebyshev fit (fractional error < 1.2e-7)
    float t = 1.0 / (1.0 + 0.5 * z);
    float e = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 +
              t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 +
              t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    float r = 1.0 - e;
    return x < 0.0 ? -r : r;
}

// 1 - erf(x) without the cancellation: the same Chebyshev fit, whose
// fractional error bound holds for erfc itself
float erfc_f(float x)
{
    float z = abs(x);
    if (isnan(x)) return x;
    if (z < 0.5) return 1.0 - erf_f(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float e = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 +
              t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 +
              t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return x < 0.0 ? 2.0 - e : e;
}

float log1p_f(float x)
{
    float u = 1.0 + x;
    if (u == 1.0) return x;
    if (isinf(u) || u <= 0.0) return log(u);
    return log(u) * x / (u - 1.0);
}

float expm1_f(float x)
{
    if (abs(x) < 1e-5) return x + 0.5 * x * x;
    if (x > 88.7) return uintBitsToFloat(0x7f800000u);
    float u = exp(x);
    if (u == 1.0) return x;
    float um1 = u - 1.0;
    if (um1 == -1.0) return -1.0;
    return um1 * x / log(u);
}

float tanh_f(float x)
{
    if (isnan(x)) return x;
    if (abs(x) < 0.0004) return x;
    float e = exp(2.0 * clamp(x, -15.0, 15.0));
    return (e - 1.0) / (e + 1.0);
}

float sigmoid_f(float x) { return 1.0 / (1.0 + exp(-x)); }

bool is_odd_int(float b) { return b == floor(b) && mod(b, 2.0) == 1.0; }

#define M_INF uintBitsToFloat(0x7f800000u)

// C99 Annex F pow: the special cases first, then |a|^b with the sign of an
// odd integer power.
float pow_f(float a, float b)
{
    if (b == 0.0 || a == 1.0) return 1.0;
    if (isnan(a) || isnan(b)) return M_NAN;
    bool bint = b == floor(b), bodd = is_odd_int(b);
    bool aneg = (floatBitsToUint(a) & 0x80000000u) != 0u;
    if (isinf(b)) {
        float m = abs(a);
        if (m == 1.0) return 1.0;
        return (m > 1.0) == (b > 0.0) ? M_INF : 0.0;
    }
    if (a == 0.0 || isinf(a)) {
        // zero and infinite bases: magnitude 0 or inf, sign kept for odd powers
        bool big = (a == 0.0) == (b < 0.0);
        float r = big ? M_INF : 0.0;
        return aneg && bodd ? -r : r;
    }
    if (bint && abs(b) <= 8.0) {  // small integer powers exactly as products
        float r = 1.0;
        for (int k = 0; k < int(abs(b)); k++) r *= a;
        return b < 0.0 ? 1.0 / r : r;
    }
    if (a < 0.0 && !bint) return M_NAN;
    float r = exp2(b * log2(abs(a)));
    return a < 0.0 && bodd ? -r : r;
}

float atan2_f(float y, float x)
{
    if (isnan(x) || isnan(y)) return M_NAN;
    if (x == 0.0 && y == 0.0) {
        bool xneg = floatBitsToUint(x) != 0u;
        float r = xneg ? 3.14159265358979 : 0.0;
        return floatBitsToUint(y) != 0u ? -r : r;
    }
    return atan(y, x);
}

float sign_f(float x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }

// Python's modulo: the result takes the sign of the divisor.
float mod_f(float a, float b)
{
    if (b == 0.0 || isinf(a) || isnan(a) || isnan(b)) return M_NAN;
    if (isinf(b)) return (a == 0.0 || (a < 0.0) == (b < 0.0)) ? a : b;
    float r = a - b * trunc(a / b);
    if (abs(r) >= abs(b)) r = 0.0;       // a / b rounded across an integer
    if (r != 0.0 && ((r < 0.0) != (b < 0.0))) r += b;
    return r;
}

float max_f(float a, float b) { return isnan(a) || isnan(b) ? M_NAN : max(a, b); }
float min_f(float a, float b) { return isnan(a) || isnan(b) ? M_NAN : min(a, b); }

int64_t mod_i(int64_t a, int64_t b)
{
    if (b == 0l || b == -1l) return 0l;
    // glslang turns % into OpSMod (sign of the divisor) and drivers differ
    // on it for negative operands: take the C remainder from the division
    int64_t r = a - (a / b) * b;
    if (r != 0l && ((r < 0l) != (b < 0l))) r += b;
    return r;
}

int64_t pow_i(int64_t a, int64_t b)
{
    if (b < 0l) return a == 1l ? 1l : (a == -1l ? ((b & 1l) != 0l ? -1l : 1l) : 0l);
    int64_t r = 1l;
    while (b > 0l) {
        if ((b & 1l) != 0l) r *= a;
        a *= a;
        b >>= 1;
    }
    return r;
}

// log(e^a + e^b): equal infinities stay that infinity, NaN stays NaN
// (as the CPU's vmath and torch.logaddexp)
float logaddexp_f(float a, float b)
{
    if (a == b) return a + 0.6931471805599453;
    if (isnan(a) || isnan(b)) return M_NAN;
    return max(a, b) + log1p_f(exp(-abs(a - b)));
}

// sqrt(a^2 + b^2) scaled by the larger magnitude, so neither squares
// overflow nor underflow; an infinite operand gives +inf even beside a NaN
// (C's hypot, torch.hypot)
float hypot_f(float a, float b)
{
    float x = abs(a), y = abs(b);
    if (isinf(x) || isinf(y)) return M_INF;
    if (isnan(x) || isnan(y)) return M_NAN;
    float m = max(x, y), n = min(x, y);
    if (m == 0.0) return 0.0;
    float r = n / m;
    return m * sqrt(1.0 + r * r);
}

// floor(a / b) as the CPU's floordiv (PyTorch's div_floor)
float floordiv_f(float a, float b)
{
    if (b == 0.0) return a / b;
    float m = a - b * trunc(a / b);
    if (abs(m) >= abs(b)) m = 0.0;
    float q = (a - m) / b;
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) q -= 1.0;
    if (q == 0.0) return (a / b) < 0.0 ? -0.0 : 0.0;
    float f = floor(q);
    return q - f > 0.5 ? f + 1.0 : f;
}
