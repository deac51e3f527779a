#version 450
#define BM 128
#define BN 128
#define TM 8
#define TN 8
#include "matmul.glsl"
