/* glibc's include/array_length.h. Written for this project. */
#ifndef _ARRAY_LENGTH_H
#define _ARRAY_LENGTH_H

#define array_length(var) (sizeof(var) / sizeof((var)[0]))
#define array_end(var) (&(var)[array_length(var)])

#endif
