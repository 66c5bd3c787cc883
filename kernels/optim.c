/* optim.c - placeholder until the kernels land. */
#include <config.h>
#include "fl_optim.h"
