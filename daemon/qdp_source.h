/* qdp_source.h — where an encode job's input comes from: the one list of sources job/ resolves an
 * input by (job_input.source) and metrics/ counts its bytes by (the label source="NAME"). Plain C,
 * no dependencies.
 */
#ifndef QDP_SOURCE_H
#define QDP_SOURCE_H

enum qdp_source {
  QDP_SOURCE_NONE,     /* no values, only a declared shape: a Plan of data still to be uploaded */
  QDP_SOURCE_VALUES,   /* values inline in the request */
  QDP_SOURCE_UPLOAD,   /* values streamed (EncodeUpload) */
  QDP_SOURCE_SHM,      /* shared memory the caller handed over */
  QDP_SOURCE_REGION,   /* a registered region */
  QDP_SOURCE_FILE,     /* a .npy file the caller handed over (or one beneath input_dir) */
  QDP_SOURCE_CUDA_IPC, /* a same-node client's CUDA allocation, by IPC handle */
  QDP_SOURCE_COUNT
};

/* "none", "values", "upload", "shm", "region", "file", "cuda_ipc"; NULL past the list. */
static inline const char *qdp_source_name(enum qdp_source s) {
  static const char *const names[QDP_SOURCE_COUNT] = {
      [QDP_SOURCE_NONE] = "none",         [QDP_SOURCE_VALUES] = "values",
      [QDP_SOURCE_UPLOAD] = "upload",     [QDP_SOURCE_SHM] = "shm",
      [QDP_SOURCE_REGION] = "region",     [QDP_SOURCE_FILE] = "file",
      [QDP_SOURCE_CUDA_IPC] = "cuda_ipc",
  };
  return (unsigned)s < QDP_SOURCE_COUNT ? names[s] : NULL;
}

#endif /* QDP_SOURCE_H */
