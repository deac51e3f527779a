#version 450
#define NT 128
#define TM 16
#define WT 1
#include "matmul_f32.glsl"
