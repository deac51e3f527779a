#version 450
#define NT 128
#define BM 64
#define BK 8
#define WT 1
#include "matmul_f32.glsl"
