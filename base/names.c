/* names.c - the one name lookup every table of choices goes through
 * (fl_names.h). */
#include <config.h>

#include <string.h>

#include "fl_names.h"

int fl_names_find(const char *const *names, const char *name) {
  for (int i = 0; name && names[i]; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

int fl_rows_find(const void *rows, size_t n, size_t size, const char *name) {
  for (size_t i = 0; name && i < n; i++) {
    const char *const *row = (const char *const *)(const void *)((const char *)rows + i * size);
    if (*row && !strcmp(name, *row)) return (int)i;
  }
  return -1;
}
