#version 450
#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 64
#include "matmul_coop.glsl"
