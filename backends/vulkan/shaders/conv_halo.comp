#version 450
#include "conv_halo.glsl"
