/* lumen.h - the whole public C API of the core. */
#ifndef LUMEN_H
#define LUMEN_H
#include "error.h"
#include "dtype.h"
#include "op.h"
#include "array.h"
#include "device.h"
#include "ops.h"
#include "random.h"
#include "ops_nn.h"
#include "compile.h"
#include "quant.h"
#endif
