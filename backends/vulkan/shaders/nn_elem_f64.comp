#version 450
#define LM_F64 1
#include "nn_elem.glsl"
