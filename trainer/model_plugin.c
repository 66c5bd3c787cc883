/* model_plugin.c - loading a model from a shared library (plugin ABI v1).
 *
 * The plugin exports one table, FL_MODEL_PLUGIN_SYMBOL (fl_model_ops in
 * fl_model.h).  This file opens the library and checks the table before
 * anyone calls through it, so a wrong file, a missing symbol or a plugin
 * built for another ABI gives one clear error naming the path instead of a
 * crash. */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fl_log.h"
#include "model_internal.h"

fl_status fl_model_plugin_open(const char *path, const fl_model_ops **ops, void **dl) {
  *ops = NULL;
  *dl = NULL;
  /* dlopen looks a bare name up in the library path; a plugin is a file. */
  char buf[sizeof ((fl_model_spec *)0)->plugin_path + 2];
  if (!strchr(path, '/')) {
    snprintf(buf, sizeof buf, "./%s", path);
    path = buf;
  }
  if (access(path, R_OK) != 0)
    return FL_ERR(FL_ENOTFOUND, "model plugin %s: cannot read the file: %s", path,
                  strerror(errno));
  dlerror();
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    return FL_ERR(FL_EINVAL, "model plugin %s: cannot load it: %s", path, e ? e : "unknown");
  }
  dlerror();
  const fl_model_ops *t = dlsym(h, FL_MODEL_PLUGIN_SYMBOL);
  if (!t) {
    const char *e = dlerror();
    fl_status st = FL_ERR(FL_ENOTFOUND, "model plugin %s: no symbol %s (%s)", path,
                          FL_MODEL_PLUGIN_SYMBOL, e ? e : "NULL");
    dlclose(h);
    return st;
  }
  if (t->abi_version != FL_MODEL_PLUGIN_ABI) {
    fl_status st = FL_ERR(FL_EINVAL, "model plugin %s: ABI version %u, this trainer needs %u",
                          path, (unsigned)t->abi_version, (unsigned)FL_MODEL_PLUGIN_ABI);
    dlclose(h);
    return st;
  }
  const char *missing = !t->create ? "create"
                        : !t->destroy ? "destroy"
                        : !t->num_params ? "num_params"
                        : !t->param ? "param"
                        : !t->input_size ? "input_size"
                        : !t->train_step ? "train_step"
                        : !t->eval ? "eval"
                        : !t->activation_bytes ? "activation_bytes"
                        : NULL;
  if (missing) {
    fl_status st = FL_ERR(FL_EINVAL, "model plugin %s: %s.%s is NULL", path,
                          FL_MODEL_PLUGIN_SYMBOL, missing);
    dlclose(h);
    return st;
  }
  *ops = t;
  *dl = h;
  return FL_OK;
}
