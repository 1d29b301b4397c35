/* glibc's support/temp_file.h subset. Written for this project. */
#ifndef SUPPORT_TEMP_FILE_H
#define SUPPORT_TEMP_FILE_H

/* A file in $TMPDIR (default /tmp) named after base, removed at exit.
 * Returns its descriptor; *filename (if given) gets a malloc'ed copy of the
 * name. Exits the test on failure. */
int create_temp_file(const char *base, char **filename);
void add_temp_file(const char *name);

#endif
