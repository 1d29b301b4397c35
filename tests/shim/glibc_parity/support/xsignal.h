/* glibc's support/xsignal.h subset. Written for this project. */
#ifndef SUPPORT_XSIGNAL_H
#define SUPPORT_XSIGNAL_H

#include <signal.h>

sighandler_t xsignal(int sig, sighandler_t handler);

#endif
