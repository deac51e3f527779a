#version 450
#define MM_SCALED
#define BM 128
#define BN 256
#define BK 32
#define WM 64
#define WN 64
#define STAGES 1
#include "matmul_coop.glsl"
