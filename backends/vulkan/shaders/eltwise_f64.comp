#version 450
#define LM_F64 1
#include "eltwise.glsl"
