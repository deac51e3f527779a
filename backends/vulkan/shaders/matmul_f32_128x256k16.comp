#version 450
#define BN 256
#define TN 16
#define WT 1
#define PAD 0
#include "matmul_f32.glsl"
