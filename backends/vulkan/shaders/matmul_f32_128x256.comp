#version 450
#define BN 256
#define BK 8
#define TN 16
#define WT 1
#include "matmul_f32.glsl"
