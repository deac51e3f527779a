#version 450
#include "matmul_coop.glsl"
