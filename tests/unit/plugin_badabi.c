/* plugin_badabi.c - a model plugin built for another ABI version, which the
 * loader must refuse with a clear error (test_plugin.c). */
#include <config.h>

#include "fl_model.h"

const fl_model_ops fl_model_plugin_v1 = {.abi_version = FL_MODEL_PLUGIN_ABI + 98u};
