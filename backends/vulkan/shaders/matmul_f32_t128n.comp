#version 450
#define NT 128
#define TN 16
#define BK 8
#define WT 1
#include "matmul_f32.glsl"
