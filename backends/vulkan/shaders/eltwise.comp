#version 450
#include "eltwise.glsl"
