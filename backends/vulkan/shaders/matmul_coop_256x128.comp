#version 450
#define BM 256
#define BN 128
#define BK 16
#define WM 64
#define WN 64
#include "matmul_coop.glsl"
