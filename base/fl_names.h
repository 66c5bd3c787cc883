/* fl_names.h - finding a name in a table of names.
 *
 * Every choice a user names (a mode, an optimizer, an activation, an
 * attribute's value) is a row of a table, and every layer finds the name
 * the same way: here, in base/, so that kernels/ uses it as common/ does. */
#ifndef FL_NAMES_H
#define FL_NAMES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The index of name in the NULL-terminated table names (an enum's names),
 * or -1 when it is not there (or name is NULL).  Nothing is owned. */
int fl_names_find(const char *const *names, const char *name);

/* The index of the row whose first member, a const char *, is name, in
 * the n rows of size bytes each at rows; -1 when none is (or name is NULL).
 * For tables of {name, value...} structs; FL_ROWS_FIND takes an array.
 * Nothing is owned. */
int fl_rows_find(const void *rows, size_t n, size_t size, const char *name);
#define FL_ROWS_FIND(rows, name) \
  fl_rows_find((rows), sizeof(rows) / sizeof((rows)[0]), sizeof((rows)[0]), (name))

#ifdef __cplusplus
}
#endif

#endif
