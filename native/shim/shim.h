/*
 * Start-up (shim.c): what an entry point calls when it finds the shim not
 * yet initialised. shim.c includes every feature it sets up, so only the
 * entry points include this header.
 */
#ifndef UR_SHIM_H
#define UR_SHIM_H

/* First call from any thread: set up the registry (idempotent). */
void ur_init(void);

#endif
