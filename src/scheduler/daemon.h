/* vgpu-scheduler's daemon: the scheduler core (sched.h) put on a libevent loop.
 *
 * It serves the extender verbs (/filter, /prioritize, /bind), /healthz, /readyz,
 * /metrics and, when asked, /debug/state[-bound] on the extender's address (plain HTTP on
 * loopback, or HTTPS with client certificates or a bearer token), and the admission
 * webhook (/webhook, /mutate) only on its own HTTPS address; it keeps the state fed from
 * node and pod watches, writes each bind as one pods/binding call, and expires
 * assumptions once a second. docs/scheduler.md lists the paths and metrics.
 *
 * Ownership: the caller owns the event_base and the kube client and runs the loop;
 * sched_daemon_free before kube_client_free (the daemon's watches are the client's). */
#ifndef VGPU_SCHEDULER_DAEMON_H
#define VGPU_SCHEDULER_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "scheduler/dra_templates.h"
#include "scheduler/sched.h"

struct event_base;
struct kube_client;

struct sched_daemon_options {
    const char *listen;            /* extender "ADDR:PORT"; empty ADDR = 0.0.0.0, port 0 picks
                                      a free one. An address other than loopback needs TLS
                                      and client authentication (client_ca or token_file). */
    const char *port_file;         /* or NULL: the extender's port is written here */
    const char *webhook_port_file; /* or NULL: the webhook's port is written here */
    const char *webhook_listen;    /* or NULL: no HTTPS webhook server */
    const char *tls_cert;          /* PEM certificate chain and key: the webhook's, and the */
    const char *tls_key;           /* extender's when client_ca or token_file is set */
    const char *client_ca;         /* or NULL: PEM CA bundle; the extender serves TLS and
                                      answers only clients presenting a certificate it signed */
    const char *token_file;        /* or NULL: file holding a bearer token; the extender serves
                                      TLS and answers only "Authorization: Bearer <token>" */
    const char *webhook_client_ca; /* or NULL: PEM CA bundle; the webhook asks clients for a
                                      certificate and answers reviews only from one it
                                      signed (kube-apiserver's). Required with webhook_dra. */
    const char *record_namespace;  /* where the decision records go (records.h); NULL:
                                      SCHED_RECORD_NAMESPACE_DEFAULT */
    const struct sched_dra_template_options *dra; /* or NULL: the defaults */
    bool debug_state;                             /* serve /debug/state[-bound] (404 otherwise) */
    bool hami_legacy_metrics; /* /metrics adds HAMi's older camel-case names too */
};

struct sched_daemon;

/* Creates the state (with require_pending on: /filter promises capacity only to pods the
 * pod watch shows waiting), starts the node and pod watches on client, and listens.
 * Every failure has a message naming what failed (address, certificate files, the
 * flags a non-loopback address needs). */
int sched_daemon_new(struct event_base *base, struct kube_client *client,
                     const struct sched_options *sched, const struct sched_daemon_options *o,
                     struct sched_daemon **out, struct vg_err *err);
/* Stops listening and watching. Binds still waiting for the API are dropped. NULL is a
 * no-op. */
void sched_daemon_free(struct sched_daemon *d);

/* The extender's port, as bound (the one picked when o->listen asked for port 0). */
uint16_t sched_daemon_port(const struct sched_daemon *d);
/* The scheduler state the daemon drives (read-only: for tests and checks). */
const struct sched_state *sched_daemon_state(const struct sched_daemon *d);

#endif
