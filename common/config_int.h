/* config_int.h - names shared by config.c and strategy.c (never installed). */
#ifndef FL_CONFIG_INT_H
#define FL_CONFIG_INT_H

#include "fl_config.h"

/* Static names of enum values as the job file spells them ("?" if unknown). */
const char *fl_cfg_optim_name(fl_optim_kind k);
const char *fl_cfg_compress_name(fl_grad_compression c);
const char *fl_cfg_amp_dtype_name(fl_amp_dtype d);

#endif
