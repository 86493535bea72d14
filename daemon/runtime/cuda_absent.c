/* Built where nvcc is absent: the mesh can only be the CPU backend, and says so when GPUs are
 * asked for. */
#include "runtime/mesh.h"

int runtime_cuda_device_count(void) {
  return 0;
}

qdp_status runtime_cuda_mesh_create(const struct runtime_mesh_config *cfg, const char *spec,
                                    double fraction, struct runtime_mesh **ret_mesh,
                                    struct qdp_error *reterr) {
  (void)cfg;
  (void)fraction;
  (void)ret_mesh;
  return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "devices",
                       "devices '%s' asks for GPUs, but this qdpd was built without CUDA; use "
                       "cpu:N",
                       spec ? spec : "auto");
}
