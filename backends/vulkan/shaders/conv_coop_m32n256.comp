#version 450
#define MM_CONV
#define MM_COOP
#define BM 32
#define BN 256
#define BK 32
#define WM 32
#define WN 64
#include "matmul_coop.glsl"
