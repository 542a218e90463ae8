/* The parallel map machinery, shared by `map` and by the stages that are a
 * map with options of their own (random_crop, flip). */
#ifndef EF_STAGES_FLOW_MAP_H
#define EF_STAGES_FLOW_MAP_H

#include "stage.h"

/* Sets s->state up to run `fn` on `threads` threads. `user` is handed to
 * fn through its context; it stays the caller's (see ef__map_user). */
int ef__map_setup(ef__stage *s, ef_map_fn fn, void *user, int threads,
                  int ordered, ef__err *err);
void *ef__map_user(const ef__stage *s);

int ef__map_open(ef__stage *s, ef__err *err);
int ef__map_next(ef__stage *s, ef_sample **out, ef__err *err);
int ef__map_reset(ef__stage *s, int64_t epoch, ef__err *err);
void ef__map_cancel(ef__stage *s);
void ef__map_destroy(ef__stage *s);

#endif
