#include "pthread_team.h"

#include <errno.h>
#include <stdlib.h>

struct job {
  void (*fn)(void *);
  void *arg;
};

static void *job_main(void *arg) {
  struct job job = *(struct job *)arg;
  free(arg);
  job.fn(job.arg);
  return NULL;
}

int ur_pthread_team_start(void *ctx, void (*fn)(void *), void *arg) {
  struct ur_pthread_team *team = ctx;
  struct job *job = malloc(sizeof(*job));
  if (!job || team->n == UR_PTHREAD_TEAM_MAX) {
    free(job);
    return -ENOMEM;
  }
  *job = (struct job){fn, arg};
  int rc = pthread_create(&team->t[team->n], NULL, job_main, job);
  if (rc != 0) {
    free(job);
    return -rc;
  }
  team->n++;
  return 0;
}

void ur_pthread_team_join(void *ctx) {
  struct ur_pthread_team *team = ctx;
  for (unsigned i = 0; i < team->n; i++) pthread_join(team->t[i], NULL);
  team->n = 0;
}
