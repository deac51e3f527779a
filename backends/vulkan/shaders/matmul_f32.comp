#version 450
#include "matmul_f32.glsl"
