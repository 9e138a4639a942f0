/* vgpu-scheduler's own record of each bound pod's decision, kept where a pod author cannot
 * write: one immutable ConfigMap per bound pod, vgpu-decision-<pod uid>, in the
 * scheduler's namespace (--record-namespace), labelled vgpu.io/record=decision, holding
 * the pod's namespace/name, uid and decision text. The pod's vgpu.io/decision annotation
 * is its author's to edit (past the webhook); the record decides after a restart
 * (sched.h, "decision records"; docs/scheduler.md, "State, and restarts").
 *
 * The daemon loads every record before it lists pods, writes one when a pod is bound
 * (at the bind, and for any bound pod the watch shows charged without one) and deletes it
 * when the pod is gone or finished. A write or delete that fails is logged and counted;
 * a failed write leaves no record in the state, so the next watch event of the pod tries
 * again.
 *
 * Ownership: sched_records_new/sched_records_free; the state and the client are borrowed
 * and outlive it. Free it before the client, with no loop turn between (as the daemon is):
 * the calls in flight are freed with it, and the client cancels their requests. */
#ifndef VGPU_SCHEDULER_RECORDS_H
#define VGPU_SCHEDULER_RECORDS_H

#include <stdint.h>

#include "base/err.h"
#include "scheduler/sched.h"

struct event_base;
struct kube_client;
struct sched_records;

#define SCHED_RECORD_NAMESPACE_DEFAULT "vgpu-system"

int sched_records_new(struct event_base *base, struct kube_client *client,
                      struct sched_state *state, const char *ns, struct sched_records **out,
                      struct vg_err *err);
void sched_records_free(struct sched_records *r);
/* Lists the records into the state, then calls loaded(arg) once. A failed list is retried
 * every second (logged): the pods must not be charged from their annotations alone. */
void sched_records_load(struct sched_records *r, void (*loaded)(void *arg), void *arg);
/* Records decision for pod key ("ns/name") of uid, in the state at once and in the API. */
void sched_records_write(struct sched_records *r, const char *uid, const char *key,
                         const char *decision);
/* Deletes uid's records from the API (the state's is dropped by the caller). */
void sched_records_delete(struct sched_records *r, const char *uid);

/* ---- live resize (resize.h; docs/scheduler.md "Live resize") ----
 * A resize records the pod's new decision under a new name, vgpu-decision-<uid>-g<gen>,
 * immutable like the bind's, with the generation, the request id and the memory the
 * resizes raised the container by (raisedMiB, for namespace quotas); the load keeps the
 * highest generation of each pod and deletes the others. */
/* Writes the resize's record and calls done(arg, err) with its outcome (err->code 0:
 * written, or written already by this scheduler before a restart). */
void sched_records_write_resize(struct sched_records *r, const char *uid, const char *key,
                                const char *decision, uint64_t gen, const char *request,
                                int64_t raised, void (*done)(void *arg, const struct vg_err *err),
                                void *arg);
/* Deletes uid's record of generation gen (an older one, once a newer is in place). */
void sched_records_delete_generation(struct sched_records *r, const char *uid, uint64_t gen);
/* The request id of uid's newest record (NULL: none, or the bind's). */
const char *sched_records_resize_id(const struct sched_records *r, const char *uid);
/* MiB by which resizes raised uid's container (negative: lowered), and the sum of that over
 * namespace ns's pods. */
int64_t sched_records_raised(const struct sched_records *r, const char *uid);
int64_t sched_records_raised_in(const struct sched_records *r, const char *ns);
/* API calls that failed (for the api error counter). */
uint64_t sched_records_errors(const struct sched_records *r);

#endif
