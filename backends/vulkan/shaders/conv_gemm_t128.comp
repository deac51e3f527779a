#version 450
#define MM_CONV
#define NT 128
#define TM 16
#define BK 8
#define WT 1
#include "matmul_f32.glsl"
