#version 450
#define BM 128
#define BN 256
#define BK 16
#define WM 64
#define WN 64
#include "matmul_coop.glsl"
