#version 450
#define NT 64
#define BM 64
#define TM 16
#define BK 8
#define WT 1
#include "matmul_f32.glsl"
