#version 450
#define FM 16
#define FN 8
#define FK 16
#define BM 128
#define BN 256
#define BK 16
#define WM 64
#define WN 64
#include "matmul_coop.glsl"
