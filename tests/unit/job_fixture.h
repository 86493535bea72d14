/* job_fixture.h — what the job pipeline's tests (test_job*.c) share: the pipeline over a world of
 * one, a mesh of two host-memory devices and a store, made and destroyed around each test (fx),
 * two callers, an amplitude request, and checks that nothing stays stored or reserved
 * (job_fixture.c); and the function of each part that adds its tests to a tcase of test_job.c's
 * suite.
 */
#ifndef QDP_TESTS_JOB_FIXTURE_H
#define QDP_TESTS_JOB_FIXTURE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "job/job.h"

#define MIB (UINT64_C(1) << 20)

/* The pipeline a test drives and what it runs on. */
struct fixture {
  struct runtime_mesh *mesh;
  struct world *world;
  struct state_store *store;
  struct job_pipeline *jp;
};

extern struct fixture fx;

/* Checked fixtures that make fx: no client budget, or 4096 bytes a client; and the teardown that
 * destroys it. */
void setup(void);
void setup_small_budget(void);
void teardown(void);

/* Two callers, each its own owner. */
extern const struct job_caller alice;
extern const struct job_caller bob;

/* An amplitude encode of n float64 values on 2^qubits amplitudes. */
struct job_encode_request amplitude_of(const double *v, size_t n, uint32_t qubits);

/* The store holds no bytes and no states. */
void assert_store_empty(void);

/* Reads the whole state (handle, token) back: complex128 as re, im pairs. */
void fetch_all(const char *handle, const char *token, double *out, uint64_t amps);

/* Every device of the mesh holds 0 bytes. */
void assert_devices_empty(void);

/* Each adds tests of the tcase its name begins with to tc. */
void job_add_pipeline_encode(TCase *tc);   /* test_job_encode.c */
void job_add_pipeline_leases(TCase *tc);   /* test_job_leases.c */
void job_add_pipeline_regions(TCase *tc);  /* test_job_regions.c */
void job_add_pipeline_requests(TCase *tc); /* test_job_requests.c */
void job_add_budget(TCase *tc);            /* test_job_encode.c */
void job_add_faults(TCase *tc);

#endif
