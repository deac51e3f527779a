#version 450
#define BM 256
#define TM 16
#define WT 1
#define PAD 0
#include "matmul_f32.glsl"
