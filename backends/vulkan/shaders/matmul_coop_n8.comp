#version 450
#define FM 16
#define FN 8
#define FK 16
#include "matmul_coop.glsl"
