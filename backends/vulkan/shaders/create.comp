#version 450
#include "create.glsl"
