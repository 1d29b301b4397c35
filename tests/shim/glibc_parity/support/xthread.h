/* glibc's support/xthread.h subset: pthread calls that exit the test with
 * a message on failure. Written for this project. */
#ifndef SUPPORT_XTHREAD_H
#define SUPPORT_XTHREAD_H

#include <pthread.h>
#include <signal.h>

pthread_t xpthread_create(pthread_attr_t *attr, void *(*fn)(void *), void *arg);
void *xpthread_join(pthread_t thr);
void xpthread_barrier_init(pthread_barrier_t *b, pthread_barrierattr_t *attr, unsigned count);
int xpthread_barrier_wait(pthread_barrier_t *b);
void xpthread_barrier_destroy(pthread_barrier_t *b);
void xpthread_barrierattr_init(pthread_barrierattr_t *attr);
void xpthread_barrierattr_destroy(pthread_barrierattr_t *attr);
void xpthread_barrierattr_setpshared(pthread_barrierattr_t *attr, int pshared);
void xpthread_kill(pthread_t thr, int sig);

#endif
