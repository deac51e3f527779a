#version 450
#include "nn_elem.glsl"
