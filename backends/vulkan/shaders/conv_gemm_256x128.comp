#version 450
#define MM_CONV
#define BM 256
#define BK 8
#define TM 16
#define WT 1
#include "matmul_f32.glsl"
